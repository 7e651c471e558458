#!/usr/bin/env bash
# The project's two commands:
#   ./dev.sh run    install dependencies, build, run the example pipeline (CPU + 4 simulated GPUs)
#   ./dev.sh test   install dependencies, build, run the test suite
# Other verbs: setup, build, chaos, bench [dispatch|fleet|kernels|pool|placement],
#   sanitize [meson test options]   the tests (chaos scenarios included) under ASan + UBSan (build-asan/)
#   fuzz [SECONDS] [TARGET...]      libFuzzer targets (build-asan/), SECONDS (60) each
#   gpu-check [REPORT]              on a machine with an NVIDIA GPU: CUDA build, conformance,
#                                   GPU tests and GPU benchmarks, one report (gpu-report.md)
#   install-check                   install into a scratch prefix; build an outside program
#                                   against it with pkg-config, meson and CMake, run it
#   debs [OUTDIR]                   Debian packages from the build (build/debs/)
#   debs-check                      build them, install with dpkg, use, remove, purge (root)
#   gpu-bundle [BUNDLE]             pack a CUDA build for a GPU machine that cannot build
#                                   (COHORT_GPU_PREBUILT=1 ./dev.sh gpu-check runs it there)
set -euo pipefail
cd "$(dirname "$(readlink -f "$0")")"
build_dir=${COHORT_BUILD_DIR:-build}

sudo_if_needed() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi
}

setup() {
  # Package lists to install: deps/apt.txt, or the files given.
  [ $# -gt 0 ] || set -- deps/apt.txt
  mapfile -t pkgs < <(cat "$@" | grep -vE '^\s*(#|$)')
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

# build [TARGET...]: configures build/ once and builds the targets given,
# by default the library, the programs, the plugins, the Python module and
# the examples. The tests and the benchmarks are not built by default:
# `meson test` builds what the tests it runs need, `ninja test-programs` and
# `ninja bench-programs` build them all; `demo` is what `run` runs.
build() {
  if [ ! -f "$build_dir/build.ninja" ]; then
    meson setup "$build_dir" --buildtype=release
  fi
  ninja -C "$build_dir" ${COHORT_JOBS:+-j "$COHORT_JOBS"} "$@"
}

# Any sanitizer report ends the process with an error (UBSan only warns by
# default); leaks are reported at exit. sanitize/lsan.supp names the few
# leaks inside third-party libraries, each with its reason.
# intercept_tls_get_addr=0: clang 15's runtime misreads the size of a
# dlopened module's thread-local block that glibc 2.36 allocated with
# (ASan's) malloc ("glibc >=2.19 suspected; tls={0x1dbf 0x400001102}" at
# verbosity 2), and LeakSanitizer's tracer then crashes scanning that range
# at exit ("Tracer caught signal 11", every time in a `cohort run` with GPUs
# in host processes). Without the interception those blocks are not
# scanned as roots; static TLS and every heap block still are.
sanitizer_env() {
  export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1:check_initialization_order=1:intercept_tls_get_addr=0}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1:report_error_type=1}
  export LSAN_OPTIONS=${LSAN_OPTIONS:-suppressions=$PWD/sanitize/lsan.supp:print_suppressions=1}
}

# The sanitizer build, shared by `sanitize` and `fuzz`: clang with
# AddressSanitizer and UndefinedBehaviorSanitizer, the libFuzzer targets of
# fuzz/ (everything carries the fuzzer's coverage counters, only the targets
# link its main), no GPU backends (their vendor runtimes are not
# instrumented), no benchmarks. One build for both keeps CI shorter, and so
# do two choices:
# - line tables for debug information (-gline-tables-only), which is what a
#   sanitizer's stack trace reads, rather than full debug information;
# - UBSan without its checks of null pointers (a null dereference is a
#   SIGSEGV that ASan reports with its stack), of object sizes and pointer
#   overflow (ASan's bounds checks cover the accesses), of dynamic types
#   (vptr: given up) and of function types. They took a third of the
#   compile time of the largest sources; the whole sanitize step went from
#   1,874 s to 1,738 s in CI.
asan_dir=${COHORT_ASAN_DIR:-build-asan}
asan_flags="-gline-tables-only -fno-sanitize=null,vptr,object-size,pointer-overflow,function"
asan_build() {
  setup deps/apt.txt deps/clang.txt
  if [ ! -f "$asan_dir/build.ninja" ]; then
    CC=clang-15 CXX=clang++-15 meson setup "$asan_dir" --buildtype=plain \
      -Doptimization=2 -Ddebug=false -Dc_args="$asan_flags" \
      -Dcpp_args="$asan_flags" \
      -Db_sanitize=address,undefined -Db_lundef=false -Dfuzz=enabled \
      -Dcuda=disabled -Dhip=disabled -Dbench=disabled
  fi
  # The build runs the instrumented `cohort` (the geo example's bundle is
  # signed by it): with the tests' sanitizer settings.
  (sanitizer_env && ninja -C "$asan_dir" ${COHORT_JOBS:+-j "$COHORT_JOBS"} "$@")
}

# ./dev.sh sanitize [meson test options]: the test suite and every chaos
# scenario under ASan and UBSan. Under ASan the simulated GPUs' pools poison
# the memory they have not handed out.
sanitize() {
  asan_build
  sanitizer_env
  local rc=0
  # The chaos suite runs the scenarios of sanitize/chaos_scenarios.txt
  # (tests/chaos/chaos_test.cpp, "every shipped scenario holds its
  # invariants"; the release run of `test` runs every one), unless
  # COHORT_CHAOS_SCENARIOS says otherwise ("all": every one).
  if [ -z "${COHORT_CHAOS_SCENARIOS+set}" ]; then
    COHORT_CHAOS_SCENARIOS=$(grep -v '^#' sanitize/chaos_scenarios.txt | tr '\n' ' ')
    export COHORT_CHAOS_SCENARIOS
  fi
  meson test -C "$asan_dir" --print-errorlogs -v --num-processes 1 \
    --timeout-multiplier 3 "$@" || rc=1
  if [ $rc -eq 0 ]; then
    echo "sanitize: no sanitizer report, every test and scenario passed"
  else
    echo "sanitize: FAILED (see the reports above)"
  fi
  return $rc
}

# ./dev.sh fuzz [SECONDS] [TARGET...]: runs each libFuzzer target for
# SECONDS (default 60), seeded from fuzz/seeds/, examples/ and
# chaos/scenarios/; the corpus grows in build-asan/corpus/, crashes go to
# build-asan/crashes/.
fuzz() {
  local secs=60
  if [ $# -gt 0 ] && [[ "$1" =~ ^[0-9]+$ ]]; then secs=$1; shift; fi
  local targets=(config pipeline scenario plan audit admin pool bundle npy secret)
  [ $# -eq 0 ] || targets=("$@")
  local dir=$asan_dir t bins=()
  for t in "${targets[@]}"; do bins+=("fuzz/${t}_fuzzer"); done
  asan_build "${bins[@]}"
  sanitizer_env
  mkdir -p "$dir/crashes"
  local failed=() summary=()
  for t in "${targets[@]}"; do
    local corpus="$dir/corpus/$t" seeds=() log="$dir/fuzz-$t.log"
    mkdir -p "$corpus"
    [ -d "fuzz/seeds/$t" ] && seeds+=("fuzz/seeds/$t")
    case "$t" in
      config|pipeline|scenario|plan) seeds+=(examples/pipelines examples/plans chaos/scenarios) ;;
      audit)
        COHORT_FUZZ_WRITE_SEED="$corpus/seed.log" "$dir/fuzz/audit_fuzzer" >/dev/null 2>&1 || true ;;
    esac
    echo "fuzz: $t for ${secs}s"
    local rc=0
    "$dir/fuzz/${t}_fuzzer" -max_total_time="$secs" -timeout=20 -rss_limit_mb=2560 \
      -max_len=8192 -print_final_stats=1 -close_fd_mask=1 \
      -artifact_prefix="$dir/crashes/$t-" "$corpus" "${seeds[@]}" >"$log" 2>&1 || rc=$?
    local execs
    execs=$(awk '/^stat::number_of_executed_units/ { print $2 }' "$log" | tail -1)
    if [ $rc -ne 0 ]; then
      failed+=("$t")
      grep -E "ERROR: |SUMMARY: |Test unit written|runtime error|pool fuzzer:" "$log" | head -20 || true
      summary+=("$(printf '%-9s %10s executions  CRASH (log: %s)' "$t" "${execs:-?}" "$log")")
    else
      summary+=("$(printf '%-9s %10s executions  ok' "$t" "${execs:-?}")")
    fi
  done
  echo "fuzz: ${secs}s per target"
  printf '  %s\n' "${summary[@]}"
  if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz: FAILED: ${failed[*]} (inputs under $dir/crashes/)"
    return 1
  fi
  echo "fuzz: no crash"
}

verb=${1:-run}
shift || true
case "$verb" in
  setup) setup ;;
  build) setup; build ;;
  run)
    setup; build demo
    "$build_dir/tools/cohort" devices --config examples/pipelines/demo.textproto
    "$build_dir/tools/cohort" run examples/pipelines/demo.textproto "$@"
    # The geo pipeline over .npy files with a kernel from a signed bundle,
    # in the folder the build made for it, its outputs checked with NumPy.
    echo
    examples/geo/run.sh "$build_dir/tools/cohort" /usr/bin/python3 \
      "$build_dir/examples/geo" "$@"
    ;;
  test)
    # meson test builds the test programs the tests it runs need.
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
    # ./dev.sh bench [dispatch|fleet|kernels|pool|placement|objects|geo|bundles] [options]
    setup; build all bench-programs
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
  debs)
    setup; build
    exec scripts/debs.sh "$@"
    ;;
  debs-check)
    setup; build
    exec scripts/debs-check.sh
    ;;
  gpu-bundle)
    exec scripts/gpu-bundle.sh "$@"
    ;;
  install-check)
    # Install into a scratch prefix; build and run an outside program
    # against it through pkg-config, meson and CMake.
    setup; build
    exec scripts/install-check.sh "$@"
    ;;
  config-doc)
    # docs/config.md again from messages/cohort.proto (the docs test
    # checks that it is up to date).
    setup; build tools/config_reference messages/cohort.desc
    "$build_dir/tools/config_reference" "$build_dir/messages/cohort.desc" >docs/config.md.new
    mv docs/config.md.new docs/config.md
    echo "docs/config.md written"
    ;;
  sanitize) sanitize "$@" ;;
  fuzz) fuzz "$@" ;;
  *) echo "usage: ./dev.sh [run|test|setup|build|bench|chaos|sanitize|fuzz|install-check|debs|debs-check|gpu-check|gpu-bundle|config-doc]" >&2; exit 2 ;;
esac
