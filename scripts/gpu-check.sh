#!/usr/bin/env bash
# ./dev.sh gpu-check [REPORT]: validates Cohort on the real GPUs of this
# machine in one command. Builds with the CUDA backend required (and HIP when
# hipcc finds a device), runs the conformance suite, the GPU tests and
# `bench kernels` / `bench pool` on the real device, and writes one Markdown
# report with every figure (default gpu-report.md) to paste into
# docs/gpu-validation.md.
#
# Exit status: 0 when a real GPU was found and every step passed; 1 when a
# step failed; 2 when no real GPU is present (nothing was validated, and the
# report says so: a machine without a GPU never passes this check).
set -uo pipefail
cd "$(dirname "$(readlink -f "$0")")/.."
report=${1:-gpu-report.md}
build_dir=${COHORT_GPU_BUILD_DIR:-build-gpu}
log_dir=$(mktemp -d)
failed=0

section() { printf '\n## %s\n\n' "$1" >>"$report"; }
fence() { printf '```\n' >>"$report"; cat "$1" >>"$report"; printf '```\n' >>"$report"; }

# step NAME LOGFILE COMMAND...: runs it, records its status and output.
step() {
  local name=$1 log=$2
  shift 2
  echo "gpu-check: $name"
  local start=$SECONDS
  if [ -n "${COHORT_GPU_STEP_TIMEOUT:-}" ]; then
    timeout --kill-after=10 "$COHORT_GPU_STEP_TIMEOUT" "$@" >"$log" 2>&1
  else
    "$@" >"$log" 2>&1
  fi
  local rc=$?
  [ $rc -eq 124 ] && echo "(stopped after COHORT_GPU_STEP_TIMEOUT=${COHORT_GPU_STEP_TIMEOUT} s)" >>"$log"
  section "$name (exit $rc, $((SECONDS - start)) s)"
  printf '`%s`\n\n' "$*" >>"$report"
  fence "$log"
  if [ $rc -ne 0 ]; then
    echo "gpu-check: $name FAILED (exit $rc), see $report"
    failed=1
  fi
  return $rc
}

{
  echo "# Cohort GPU check"
  echo
  echo "- commit: $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with local changes)')"
  echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "- host: $(uname -srm), $(nproc) cores"
  echo "- load: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$report"

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >"$log_dir/smi" 2>&1 ||
  ! grep -q '^GPU ' "$log_dir/smi"; then
  section "No NVIDIA GPU"
  echo "nvidia-smi found no GPU on this machine: nothing was validated." >>"$report"
  [ -f "$log_dir/smi" ] && fence "$log_dir/smi"
  echo "gpu-check: no NVIDIA GPU here (nvidia-smi -L found none); nothing validated" >&2
  exit 2
fi
step "GPUs" "$log_dir/gpus" nvidia-smi \
  --query-gpu=name,driver_version,memory.total,compute_cap,pci.bus_id --format=csv
nvcc_bin=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
step "CUDA toolkit" "$log_dir/nvcc" "$nvcc_bin" --version

if [ -n "${COHORT_GPU_PREBUILT:-}" ]; then
  # A bundle from `./dev.sh gpu-bundle`, unpacked here: no setup, no build.
  info="$build_dir/gpu-bundle/info"
  if [ ! -f "$info" ]; then
    echo "gpu-check: COHORT_GPU_PREBUILT is set but $info is missing (unpack the bundle at the tree's root)" >&2
    exit 1
  fi
  step "prebuilt bundle" "$log_dir/bundle-step" cat "$info"
  # The tests name the tree and their helper programs by the absolute path
  # they were built under; where that path is missing, it is linked here.
  source_dir=$(sed -n 's/^source_dir: //p' "$info")
  if [ "$source_dir" != "$PWD" ] && [ ! -e "$source_dir" ]; then
    mkdir -p "$(dirname "$source_dir")" && ln -s "$PWD" "$source_dir" ||
      echo "gpu-check: cannot link $source_dir to this tree; tests that run helper programs will fail" >&2
  fi
  cuda_libs=""
  for d in /usr/local/cuda/lib64 /usr/local/cuda-*/lib64 /usr/local/cuda/targets/x86_64-linux/lib; do
    [ -e "$d/libcublas.so.13" ] && cuda_libs="$cuda_libs:$d"
  done
  if [ -z "$cuda_libs" ]; then # a toolkit from pip (nvidia-cublas), say
    found=$(find / -xdev -name libcublas.so.13 -print -quit 2>/dev/null || true)
    [ -n "$found" ] && cuda_libs=":$(dirname "$found")"
  fi
  export LD_LIBRARY_PATH="$PWD/$build_dir/gpu-bundle/lib$cuda_libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # The bundle's build tree sits at another path here than where it was
  # built, so its programs are told where the GPU plugins are.
  export COHORT_PLUGIN_PATH="$PWD/$build_dir/devices${COHORT_PLUGIN_PATH:+:$COHORT_PLUGIN_PATH}"
  ldd "$build_dir/tests/cohort_tests" >"$log_dir/ldd" 2>&1
  ldd "$build_dir/devices/libcohort-cuda.so" >>"$log_dir/ldd" 2>&1
  step "shared libraries" "$log_dir/ldd-step" cat "$log_dir/ldd"
  if grep -q "not found" "$log_dir/ldd"; then
    echo "gpu-check: libraries missing for the bundle, see $report" >&2
    exit 1
  fi
else
  ./dev.sh setup >"$log_dir/setup" 2>&1 || { fence "$log_dir/setup"; exit 1; }
  if [ ! -f "$build_dir/build.ninja" ]; then
    step "configure (CUDA required)" "$log_dir/configure" \
      meson setup "$build_dir" --buildtype=release -Dcuda=enabled || exit 1
  fi
  step "build" "$log_dir/build" ninja -C "$build_dir" all test-programs bench-programs || exit 1
fi

step "devices" "$log_dir/devices" "$build_dir/tools/cohort" devices
# The conformance suite skips a backend without a device (with a warning):
# here CUDA must have run.
step "conformance suite" "$log_dir/conformance" \
  "$build_dir/tests/cohort_tests" "[conformance]" --durations yes
if grep -q "SKIPPED CUDA" "$log_dir/conformance"; then
  echo "gpu-check: the conformance suite skipped CUDA although nvidia-smi sees a GPU" >&2
  echo "**The conformance suite skipped CUDA: the GPU was not used.**" >>"$report"
  failed=1
fi
step "GPU tests" "$log_dir/gpu" "$build_dir/tests/cohort_tests" "[gpu]" --durations yes
step "bench kernels" "$log_dir/bench_kernels" "$build_dir/bench/bench_kernels"
step "bench pool" "$log_dir/bench_pool" "$build_dir/bench/pool/bench_pool"
step "bench geo" "$log_dir/bench_geo" "$build_dir/bench/bench_geo" 4000000 5
step "bench objects" "$log_dir/bench_objects" "$build_dir/bench/bench_objects" \
  --gpus --batches 64 --rounds 3
if [ -n "${COHORT_GPU_PREBUILT:-}" ]; then
  # No meson here: the test programs themselves, area by area as meson runs them.
  for area in kernels devices actors tools chaos api; do
    step "test suite: $area" "$log_dir/suite-$area" \
      "$build_dir/tests/cohort_tests" "[$area]"
  done
  step "examples" "$log_dir/examples" sh -c "cd '$build_dir/examples' && ./embed && ./quotas"
else
  step "full test suite" "$log_dir/suite" \
    meson test -C "$build_dir" --print-errorlogs --num-processes 1
fi

section "Verdict"
if [ $failed -eq 0 ]; then
  echo "Every step passed on the real GPU." >>"$report"
  echo "gpu-check: every step passed; report in $report"
else
  echo "At least one step failed: see the sections above." >>"$report"
fi
rm -rf "$log_dir"
exit $failed
