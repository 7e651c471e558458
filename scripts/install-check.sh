#!/usr/bin/env bash
# ./dev.sh install-check: installs the build into a scratch prefix (meson
# install --destdir) and builds an outside program (tests/install/) against
# it three ways, pkg-config, meson dependency('cohort') and CMake
# find_package(cohort), then runs each; also linked with libcohort.a
# (pkg-config --static), and the docs' CAF program through
# `pkg-config cohort-caf`; checks that the installed program finds the
# installed GPU plugins, and signs and verifies a kernel bundle with it (its
# code loaded in isolation by the installed cohort-kernel-probe). Prints one
# line per check and exits 1 if any failed.
set -uo pipefail
cd "$(dirname "$(readlink -f "$0")")/.."
build_dir=${COHORT_BUILD_DIR:-build}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
dest="$work/root"
if ! meson install -C "$build_dir" --destdir "$dest" --no-rebuild >"$work/install.log" 2>&1; then
  cat "$work/install.log"
  echo "install-check: meson install FAILED"
  exit 1
fi
# The prefix and libdir the build installs to, from one introspection.
read -r prefix libdir < <(meson introspect "$build_dir" --buildoptions |
  python3 -c 'import json, sys
opts = {o["name"]: o["value"] for o in json.load(sys.stdin)}
print(opts["prefix"], opts["libdir"])')
root="$dest$prefix"
export PKG_CONFIG_PATH="$root/$libdir/pkgconfig"
export LD_LIBRARY_PATH="$root/$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
repo=$PWD
src=$repo/tests/install
failed=0
way() {
  local name=$1
  shift
  if "$@" >"$work/$name.log" 2>&1 && "$work/$name/consumer" "$work/$name.audit" >>"$work/$name.log" 2>&1; then
    echo "install-check: $name: ok ($(tail -1 "$work/$name.log"))"
  else
    cat "$work/$name.log"
    echo "install-check: $name: FAILED"
    failed=1
  fi
}
pkgconfig_build() {
  mkdir -p "$work/pkg-config"
  # shellcheck disable=SC2046
  c++ -std=c++20 "$src/consumer.cpp" -o "$work/pkg-config/consumer" \
    $(pkg-config --cflags --libs cohort)
}
# libcohort.a: `pkg-config --static` links the archive and, as shared
# libraries, what it needs.
static_build() {
  mkdir -p "$work/static"
  # shellcheck disable=SC2046
  # As docs/embedding.md writes it.
  c++ -std=c++20 "$src/consumer.cpp" -o "$work/static/consumer" \
    $(pkg-config --cflags cohort) "$(pkg-config --variable=libdir cohort)/libcohort.a" \
    $(pkg-config --static --libs cohort | sed 's/-lcohort //') &&
    ! ldd "$work/static/consumer" | grep -q libcohort
}
meson_build() {
  meson setup "$work/meson" "$src" && ninja -C "$work/meson"
}
# With cohort::caf too: tests/install/caf_consumer.cpp, run here.
cmake_build() {
  cmake -S "$src" -B "$work/cmake" -G Ninja -DCMAKE_PREFIX_PATH="$root" &&
    cmake --build "$work/cmake" &&
    (cd "$work" && "$work/cmake/caf_consumer" "$work/cmake-caf.audit")
}
# The first snippet of docs/embedding.md marked "snippet: program", as
# written there.
snippet_build() {
  mkdir -p "$work/snippet"
  awk '/<!-- snippet: program/ { on = 1; next }
       on && /^```cpp/ { inside = 1; next }
       inside && /^```/ { exit }
       inside { print }' "$repo/docs/embedding.md" >"$work/snippet/app.cpp"
  [ -s "$work/snippet/app.cpp" ] || { echo "no snippet in docs/embedding.md"; return 1; }
  # shellcheck disable=SC2046
  c++ -std=c++20 "$work/snippet/app.cpp" -o "$work/snippet/consumer" \
    $(pkg-config --cflags --libs cohort)
}
# The CAF program of docs/embedding.md (the first "snippet: caf-program"),
# as written there, against the installed <cohort/caf.hpp> through
# `pkg-config cohort-caf`; it runs in $work (its audit log goes there).
caf_build() {
  mkdir -p "$work/caf"
  awk '/<!-- snippet: caf-program/ { on = 1; next }
       on && /^```cpp/ { inside = 1; next }
       inside && /^```/ { exit }
       inside { print }' "$repo/docs/embedding.md" >"$work/caf/app.cpp"
  [ -s "$work/caf/app.cpp" ] || { echo "no caf-program snippet in docs/embedding.md"; return 1; }
  # shellcheck disable=SC2046
  c++ -std=c++20 "$work/caf/app.cpp" -o "$work/caf/consumer" \
    $(pkg-config --cflags --libs cohort-caf)
}
# The installed program finds the installed GPU plugins (libdir/cohort/) by
# itself, from wherever it is run.
plugins_check() {
  local out plugin
  out=$(cd / && "$root/bin/cohort" devices) || return 1
  echo "$out"
  for plugin in "$root/$libdir"/cohort/libcohort-*.so; do
    [ -e "$plugin" ] || continue
    # cohort exec's allocation shim is preloaded into programs, not loaded
    # as a GPU backend (exec/exec_shim.cpp).
    if [ "${plugin##*/}" = libcohort-exec-shim.so ]; then
      continue
    fi
    echo "$out" | grep -qF "plugin loaded from $plugin" ||
      { echo "$plugin was installed but not loaded"; return 1; }
    echo "loaded ${plugin##*/}"
  done
}
way pkg-config pkgconfig_build
way static static_build
way meson meson_build
way cmake cmake_build
# Without LD_LIBRARY_PATH: a pkg-config build with the rpath
# docs/embedding.md gives, and the Python module (its rpath is relative to
# itself), find the installed libcohort.
rpath_check() {
  # As docs/embedding.md builds one for a prefix install.
  mkdir -p "$work/rpath"
  # shellcheck disable=SC2046
  c++ -std=c++20 "$src/consumer.cpp" -o "$work/rpath/consumer" \
    $(pkg-config --cflags --libs cohort) \
    -Wl,-rpath,"$(realpath "$(pkg-config --variable=libdir cohort)")" || return 1
  env -u LD_LIBRARY_PATH "$work/rpath/consumer" "$work/rpath.audit" || return 1
  local module
  module=$(find "$root" -name '_cohort*.so' -print -quit)
  if [ -z "$module" ]; then
    echo "no Python module installed (skipped)"
    return 0
  fi
  (cd / && env -u LD_LIBRARY_PATH PYTHONPATH="$(dirname "$(dirname "$module")")" \
    AUDIT="$work/python.audit" /usr/bin/python3 -c 'import os, numpy, cohort
with cohort.Runtime(cpu_workers=1, gpus=False, audit_path=os.environ["AUDIT"]) as rt:
    assert rt.run("nrm2", [numpy.array([3, 4], dtype=numpy.float32)]).values[0] == 5.0
print("imported", cohort.__file__)')
}
if rpath_check >"$work/rpath.log" 2>&1; then
  echo "install-check: rpath: ok (a pkg-config build with the documented rpath and the Python module run without LD_LIBRARY_PATH; $(tail -1 "$work/rpath.log"))"
else
  cat "$work/rpath.log"
  echo "install-check: rpath: FAILED"
  failed=1
fi
(cd "$work" && way snippet snippet_build)
(cd "$work" && way caf caf_build)
if plugins_check >"$work/plugins.log" 2>&1; then
  echo "install-check: plugins: ok ($(grep '^loaded' "$work/plugins.log" | tr '\n' ' ')from $libdir/cohort)"
else
  cat "$work/plugins.log"
  echo "install-check: plugins: FAILED"
  failed=1
fi
# A signed bundle as its author makes one: a C kernel built against the
# installed <cohort/kernel_abi.h>, keys and a signature from the installed
# `cohort kernel`, verified as a node would, which loads it first in
# isolation through the installed cohort-kernel-probe.
bundle_check() {
  local b="$work/bundle" out digest size
  mkdir -p "$b/cpu"
  printf '%s\n' '#include <cohort/kernel_abi.h>' \
    'int twice(const cohort_kernel_call* c) {' \
    '  const double* x = (const double*)c->inputs[0].data;' \
    '  double* out = (double*)c->output;' \
    '  for (uint64_t i = 0; i < c->output_length; ++i) out[i] = 2 * x[i];' \
    '  return 0;' '}' >"$work/twice.c"
  # As docs/kernels.md builds one; with clang too, which refuses C++ flags
  # in a C compile.
  # shellcheck disable=SC2046
  cc -shared -fPIC $(pkg-config --cflags cohort-kernel) "$work/twice.c" -o "$b/cpu/libtwice.so" || return 1
  if command -v clang >/dev/null; then
    # shellcheck disable=SC2046
    clang -shared -fPIC $(pkg-config --cflags cohort-kernel) "$work/twice.c" -o "$work/twice-clang.so" || return 1
  fi
  digest=$(sha256sum "$b/cpu/libtwice.so" | cut -d' ' -f1)
  size=$(stat -c %s "$b/cpu/libtwice.so")
  cat >"$b/manifest.textproto" <<MANIFEST
name: "install_check" version: "1.0.0"
blob { path: "cpu/libtwice.so" sha256: "$digest" size: $size kind: CPU_SHARED_OBJECT }
kernel { name: "install_check.twice" input { name: "x" dtype: "f64" }
  output { dtype: "f64" } output_size: "x"
  cpu_blob: "cpu/libtwice.so" cpu_symbol: "twice" }
MANIFEST
  (cd / && "$root/bin/cohort" kernel keygen "$work/signer") || return 1
  (cd / && "$root/bin/cohort" kernel sign "$b" --key "$work/signer.key") || return 1
  out=$(cd / && "$root/bin/cohort" kernel verify "$b" --trusted "$work/signer.pub") || return 1
  echo "$out"
  echo "$out" | grep -qF "loads in isolation (cpu/libtwice.so on cpu)" ||
    { echo "verify did not load the bundle in isolation"; return 1; }
}
if bundle_check >"$work/bundle.log" 2>&1; then
  echo "install-check: bundle: ok (signed, verified, loaded in isolation by $libdir/cohort/cohort-kernel-probe)"
else
  cat "$work/bundle.log"
  echo "install-check: bundle: FAILED"
  failed=1
fi
echo "install-check: installed files:"
(cd "$root" && find . -type f | sort | grep -v "share/doc" | sed 's/^/  /')
exit $failed
