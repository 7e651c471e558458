#!/usr/bin/env bash
# The project's two commands:
#   ./dev.sh run    install dependencies, build, run the example pipeline (CPU + 4 simulated GPUs)
#   ./dev.sh test   install dependencies, build, run the test suite
# Other verbs: setup, build, bench [dispatch|kernels|pool|placement], chaos,
# gpu-check (on a machine with an NVIDIA GPU).
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")"
build_dir=${COHORT_BUILD_DIR:-build}

sudo_if_needed() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

setup() {
  mapfile -t pkgs < <(grep -vE '^\s*(#|$)' deps/apt.txt)
  missing=()
  for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    echo "setup: all ${#pkgs[@]} Debian packages already installed"
    return
  fi
  echo "setup: installing ${missing[*]}"
  sudo_if_needed apt-get update -q
  sudo_if_needed env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
}

build() {
  if [ ! -f "$build_dir/build.ninja" ]; then
    meson setup "$build_dir" --buildtype=release
  fi
  ninja -C "$build_dir"
}

verb=${1:-run}
shift || true
case "$verb" in
  setup) setup ;;
  build) setup; build ;;
  run)
    setup; build
    "$build_dir/tools/cohort" devices --config examples/pipelines/demo.textproto
    "$build_dir/tools/cohort" run examples/pipelines/demo.textproto "$@"
    ;;
  test)
    setup; build
    meson test -C "$build_dir" --print-errorlogs -v --num-processes 1 "$@"
    ;;
  chaos)
    # Every shipped scenario; pass --soak for the long manual run, or
    # scenario files and options of `cohort chaos`.
    setup; build
    if [ $# -eq 0 ] || [ "${1#--}" != "$1" ]; then
      set -- chaos/scenarios "$@"
    fi
    "$build_dir/tools/cohort" chaos "$@"
    ;;
  bench)
    # ./dev.sh bench [dispatch|kernels|pool|placement] [options]
    setup; build
    which=dispatch
    if [ $# -gt 0 ] && [[ "$1" != -* ]]; then which=$1; shift; fi
    bin="$build_dir/bench/bench_$which"
    [ -x "$bin" ] || bin="$build_dir/bench/$which/bench_$which"
    "$bin" "$@"
    ;;
  gpu-check)
    # ./dev.sh gpu-check [REPORT]: CUDA build, conformance suite, GPU tests
    # and GPU benchmarks on the real device, one report (gpu-report.md).
    exec scripts/gpu-check.sh "$@"
    ;;
  *) echo "usage: ./dev.sh [run|test|setup|build|bench|chaos|gpu-check]" >&2; exit 2 ;;
esac
