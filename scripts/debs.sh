#!/usr/bin/env bash
# ./dev.sh debs [OUTDIR]: Debian packages from the build (default OUTDIR
# build/debs): the files `meson install` puts in place, split into
#   libcohort0      the shared library
#   libcohort-dev   headers, libcohort.so, libcohort.a, cohort.pc, cohort-caf.pc, cohort-kernel.pc, CMake package
#   cohort          the program, its manual page, bash completion, the documents
#   python3-cohort  the Python module
#   libcohort0-plugin-cuda / libcohort0-plugin-hip   the GPU backends, when built
# laid out for /usr. Dependencies on Debian libraries come from
# dpkg-shlibdeps. Every installed file must land in exactly one package.
# Nothing the build installs names its prefix (cohort.pc and the CMake
# package are relocatable; plugins are found relative to the program or
# library), so a /usr/local build is packaged for /usr as it is.
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")/.."
build_dir=${COHORT_BUILD_DIR:-build}
out=$(readlink -f "${1:-$build_dir/debs}")
arch=$(dpkg --print-architecture)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)

read -r version prefix libdir < <(
  { meson introspect "$build_dir" --projectinfo; echo; meson introspect "$build_dir" --buildoptions; } |
  /usr/bin/python3 -c 'import json, sys
docs = [json.loads(l) for l in sys.stdin.read().split("\n") if l.strip()]
opts = {o["name"]: o["value"] for o in docs[1]}
print(docs[0]["version"], opts["prefix"], opts["libdir"])')
if [ "$libdir" != "lib/$multiarch" ]; then
  echo "debs: the build's libdir is $libdir, Debian's is lib/$multiarch" >&2
  exit 1
fi

work=$(mktemp -d)
trap '[ -n "${COHORT_DEBS_KEEP:-}" ] && echo "kept $work" || rm -rf "$work"' EXIT
meson install -C "$build_dir" --destdir "$work/stage" --no-rebuild >"$work/install.log" 2>&1 ||
  { cat "$work/install.log"; echo "debs: meson install failed" >&2; exit 1; }
root="$work/stage$prefix"

# package -> files and folders (relative to the prefix) it holds.
declare -A files=(
  [libcohort0]="$libdir/libcohort.so.0 $libdir/libcohort.so.$version $libdir/cohort/cohort-kernel-probe $libdir/cohort/cohort-kernel-host $libdir/cohort/cohort-gpu-scan"
  [libcohort-dev]="include/cohort $libdir/libcohort.so $libdir/libcohort.a $libdir/pkgconfig/cohort.pc $libdir/pkgconfig/cohort-caf.pc $libdir/pkgconfig/cohort-kernel.pc $libdir/cmake/cohort"
  [cohort]="bin/cohort share/man/man1/cohort.1 share/doc/cohort $libdir/cohort/libcohort-exec-shim.so"
  [python3-cohort]="lib/python3/dist-packages/cohort"
  [libcohort0-plugin-cuda]="$libdir/cohort/libcohort-cuda.so"
  [libcohort0-plugin-hip]="$libdir/cohort/libcohort-hip.so"
)
declare -A section=([libcohort0]=libs [libcohort-dev]=libdevel [cohort]=utils
  [python3-cohort]=python [libcohort0-plugin-cuda]=libs [libcohort0-plugin-hip]=libs)
declare -A summary=(
  [libcohort0]="actor runtime for fleets of GPUs - shared library"
  [libcohort-dev]="actor runtime for fleets of GPUs - development files"
  [cohort]="actor runtime for fleets of GPUs - command line and service"
  [python3-cohort]="actor runtime for fleets of GPUs - Python 3 module"
  [libcohort0-plugin-cuda]="actor runtime for fleets of GPUs - CUDA backend plugin"
  [libcohort0-plugin-hip]="actor runtime for fleets of GPUs - HIP backend plugin")
exact="(= $version)"
# The module is built for one Python (its file name says which: cpython-311).
pyver=$(/usr/bin/python3 -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
python_dep="python3 (>= $pyver), python3 (<< ${pyver%.*}.$(( ${pyver#*.} + 1 )))"
declare -A depends=(
  [libcohort-dev]="libcohort0 $exact, libcaf-dev, libprotobuf-dev, libhwloc-dev, libopenblas-dev, libssl-dev"
  [python3-cohort]="libcohort0 $exact, $python_dep, python3-numpy"
  [libcohort0-plugin-cuda]="libcohort0 $exact"
  [libcohort0-plugin-hip]="libcohort0 $exact")
declare -A extra=(
  [libcohort0-plugin-cuda]=" The CUDA toolkit's cuBLAS (libcublas.so.13) must be installed: it is not
 a Debian package, so it is not a dependency. Without it the plugin does not
 load and \`cohort devices\` says so."
  [cohort]=" Runs pipelines and chaos scenarios, serves the admin API and Prometheus
 metrics, queries the audit log; see cohort(1).")

mkdir -p "$work/pkg/debian"
# dpkg-shlibdeps wants a source package's control file.
printf 'Source: cohort\n\nPackage: cohort\nArchitecture: any\n' >"$work/pkg/debian/control"
built=()
for pkg in libcohort0 libcohort-dev cohort python3-cohort libcohort0-plugin-cuda libcohort0-plugin-hip; do
  dir="$work/pkg/debian/$pkg"
  have=0
  for f in ${files[$pkg]}; do
    [ -e "$root/$f" ] || [ -L "$root/$f" ] || continue
    mkdir -p "$dir/usr/$(dirname "$f")"
    cp -a "$root/$f" "$dir/usr/$f"
    rm -rf "${root:?}/$f"
    have=1
  done
  if [ $have -eq 0 ]; then
    case "$pkg" in
      libcohort0-plugin-*) continue ;; # that backend was not built
      *) echo "debs: nothing installed for $pkg" >&2; exit 1 ;;
    esac
  fi
  built+=("$pkg")
done
# Everything installed went into a package.
left=$(cd "$root" && find . -type f -o -type l)
if [ -n "$left" ]; then
  echo "debs: installed files in no package:" >&2
  echo "$left" >&2
  exit 1
fi

# What Debian expects of each: the manual page compressed, the completion
# generated by the program, a copyright file, the library's shlibs and
# ldconfig trigger, Python byte-code compiled on install and cleaned on removal.
gzip -9n "$work/pkg/debian/cohort/usr/share/man/man1/cohort.1"
mkdir -p "$work/pkg/debian/cohort/usr/share/bash-completion/completions"
"$work/pkg/debian/cohort/usr/bin/cohort" completion bash \
  >"$work/pkg/debian/cohort/usr/share/bash-completion/completions/cohort"
mkdir -p "$work/pkg/debian/libcohort0/DEBIAN"
echo "libcohort 0 libcohort0 (>= $version)" >"$work/pkg/debian/libcohort0/DEBIAN/shlibs"
echo "activate-noawait ldconfig" >"$work/pkg/debian/libcohort0/DEBIAN/triggers"
mkdir -p "$work/pkg/debian/python3-cohort/DEBIAN"
printf '#!/bin/sh\nset -e\nif [ "$1" = configure ] && command -v py3compile >/dev/null 2>&1; then\n  py3compile -p python3-cohort\nfi\n' \
  >"$work/pkg/debian/python3-cohort/DEBIAN/postinst"
printf '#!/bin/sh\nset -e\nif command -v py3clean >/dev/null 2>&1; then\n  py3clean -p python3-cohort\nelse\n  find /usr/lib/python3/dist-packages/cohort -name __pycache__ -type d -exec rm -rf {} +\nfi\n' \
  >"$work/pkg/debian/python3-cohort/DEBIAN/prerm"
chmod 755 "$work/pkg/debian/python3-cohort/DEBIAN/postinst" "$work/pkg/debian/python3-cohort/DEBIAN/prerm"

mkdir -p "$out"
rm -f "$out"/*.deb
for pkg in "${built[@]}"; do
  dir="$work/pkg/debian/$pkg"
  mkdir -p "$dir/DEBIAN" "$dir/usr/share/doc/$pkg"
  cat >"$dir/usr/share/doc/$pkg/copyright" <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: cohort
Source: https://github.com/cohort-runtime/cohort
Comment: Built from the source tree by scripts/debs.sh. The project has not
 chosen a license yet; until it does, no license is granted.

Files: *
Copyright: the Cohort developers
License: none-yet
 No license has been chosen yet.
EOF
  (cd "$work/pkg" && find "debian/$pkg" -type f \( -name '*.so*' -o -path '*/bin/*' \) \
    -exec sh -c '[ "$(head -c4 "$1" | od -An -c | tr -d " ")" = "177ELF" ]' _ {} \; -print) >"$work/elf-$pkg"
  deps=${depends[$pkg]:-}
  if [ -s "$work/elf-$pkg" ]; then
    # shellcheck disable=SC2046
    (cd "$work/pkg" && dpkg-shlibdeps --ignore-missing-info -T"debian/$pkg.substvars" \
      -e $(cat "$work/elf-$pkg") 2>"$work/shlibdeps-$pkg.log") ||
      { cat "$work/shlibdeps-$pkg.log"; echo "debs: dpkg-shlibdeps failed for $pkg" >&2; exit 1; }
    shdeps=$(sed -n 's/^shlibs:Depends=//p' "$work/pkg/debian/$pkg.substvars")
    # Nor on itself, nor twice on one package.
    shdeps=$(echo "$shdeps" | tr ',' '\n' | sed 's/^ *//' |
      while read -r dep; do
        name=${dep%% *}
        [ "$name" = "$pkg" ] && continue
        [[ ", $deps," == *", $name "* || ", $deps," == *", $name,"* ]] && continue
        echo "$dep"
      done | paste -sd, - | sed 's/,/, /g')
    [ -n "$shdeps" ] && deps=${deps:+$deps, }$shdeps
  fi
  size=$(du -sk --exclude=DEBIAN "$dir" | cut -f1)
  {
    echo "Package: $pkg"
    echo "Version: $version"
    echo "Architecture: $arch"
    echo "Maintainer: Cohort developers <cohort@localhost>"
    echo "Installed-Size: $size"
    [ -n "$deps" ] && echo "Depends: $deps"
    echo "Section: ${section[$pkg]}"
    echo "Priority: optional"
    echo "Homepage: https://github.com/cohort-runtime/cohort"
    echo "Description: ${summary[$pkg]}"
    echo " Cohort routes typed work to CPU workers and GPUs through actors (CAF),"
    echo " with a memory pool, quotas, supervision, an audit log and metrics."
    [ -n "${extra[$pkg]:-}" ] && echo "${extra[$pkg]}"
  } >"$dir/DEBIAN/control"
  (cd "$dir" && find usr -type f -exec md5sum {} + | sort -k2 >DEBIAN/md5sums)
  dpkg-deb --root-owner-group --build -Zxz "$dir" "$out/${pkg}_${version}_$arch.deb" >/dev/null
done
echo "debs: ${#built[@]} packages in $out"
for deb in "$out"/*.deb; do
  printf '  %-48s %6s kB file, %6s kB installed\n' "${deb##*/}" \
    "$(( $(stat -c %s "$deb") / 1024 ))" "$(dpkg-deb -f "$deb" Installed-Size)"
done
