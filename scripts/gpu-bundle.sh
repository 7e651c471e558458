#!/usr/bin/env bash
# ./dev.sh gpu-bundle [BUNDLE]: packs a CUDA build for a GPU machine that
# cannot build Cohort itself (no network for `./dev.sh setup`, no Debian
# packages). The bundle (default gpu-bundle.tar.xz) holds the programs that
# `./dev.sh gpu-check` runs, at their paths under the build directory, and
# every shared library they need except the C library family, libstdc++ and
# the CUDA toolkit's own (cuBLAS comes from the GPU machine's toolkit, the
# driver from its driver). Unpacked at the root of the same tree on the GPU
# machine, `COHORT_GPU_PREBUILT=1 ./dev.sh gpu-check` runs it without
# building; see docs/gpu-validation.md.
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")/.."
bundle=${1:-gpu-bundle.tar.xz}
build_dir=${COHORT_GPU_BUILD_DIR:-build-gpu}

if [ ! -f "$build_dir/build.ninja" ]; then
  echo "gpu-bundle: no build in $build_dir; configure one with" >&2
  echo "  meson setup $build_dir --buildtype=release -Dcuda=enabled" >&2
  exit 1
fi
if ! grep -q "CUDA toolchain *: /" "$build_dir/meson-logs/meson-log.txt"; then
  echo "gpu-bundle: $build_dir was configured without the CUDA backend" >&2
  exit 1
fi
ninja -C "$build_dir" all test-programs bench-programs

programs=(
  tests/cohort_tests tests/libfake_nvml.so tests/audit_crash_writer
  tests/asan_overflow tests/libacme_kernels.so tests/acme_kernels.ptx
  tests/libunruly_crash.so tests/libunruly_hang.so tests/share_attacher
  tests/plugins/fake_cuda/libcohort-cuda.so tests/plugins/bad_abi/libcohort-cuda.so
  tools/cohort bench/bench_kernels bench/pool/bench_pool bench/bench_geo
  bench/bench_objects
  examples/embed examples/quotas devices/libcohort-cuda.so
  devices/cohort-kernel-probe devices/cohort-kernel-host devices/cohort-gpu-scan
)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
libdir="$build_dir/gpu-bundle/lib"
mkdir -p "$stage/$libdir"
files=()
for p in "${programs[@]}"; do
  [ -e "$build_dir/$p" ] || { echo "gpu-bundle: $build_dir/$p was not built" >&2; exit 1; }
  files+=("$build_dir/$p")
done

# Libraries every Linux with a CUDA driver has (the C library family, the
# C++ runtime: a newer one serves programs built against an older one) or
# that must come from the GPU machine itself (CUDA's).
skip='^(ld-linux|libc|libm|libdl|librt|libpthread|libresolv|libstdc\+\+|libgcc_s|libcuda|libcublas|libcublasLt|libcudart|libnvidia)\.'
declare -A seen=()
for f in "${files[@]}"; do
  [[ "$f" == *.ptx ]] && continue # data, not a program
  while read -r name path; do
    [[ "$name" =~ $skip ]] && continue
    [ -n "${seen[$name]:-}" ] && continue
    seen[$name]=1
    if [ ! -f "$path" ]; then
      echo "gpu-bundle: $f needs $name, which is not found here" >&2
      exit 1
    fi
    cp -L "$path" "$stage/$libdir/$name"
  done < <(ldd "$f" | awk '$2 == "=>" && $3 != "not" { print $1, $3 }')
done

{
  echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' (with local changes)')"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME"), $(ldd --version | head -1)"
  echo "source_dir: $PWD"
  echo "build_dir: $build_dir"
  echo "nvcc: $(grep -o 'CUDA toolchain *: .*' "$build_dir/meson-logs/meson-log.txt" | tail -1 | sed 's/.*: //')"
} >"$stage/$build_dir/gpu-bundle/info"

for f in "${files[@]}"; do
  mkdir -p "$stage/$(dirname "$f")"
  cp -p "$f" "$stage/$f"
done
tar -C "$stage" -cJf "$bundle" "$build_dir"
echo "gpu-bundle: $bundle ($(du -h "$bundle" | cut -f1)): ${#files[@]} programs, ${#seen[@]} libraries"
sed 's/^/  /' "$stage/$build_dir/gpu-bundle/info"
