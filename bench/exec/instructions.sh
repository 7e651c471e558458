#!/usr/bin/env bash
# bench/exec/instructions.sh: what cohort exec's shim costs in instructions
# per allocation and free (docs/exec.md), counted by valgrind's callgrind
# rather than timed: a count does not move with the load of a shared
# machine. Runs bench_exec twice (PAIRS and 2 x PAIRS pairs, one round)
# under callgrind, following its children, and takes each loop program's
# difference between the two, so that start-up is left out.
#
#   bench/exec/instructions.sh [BUILD_DIR] [PAIRS]
set -euo pipefail
build=${1:-build}
pairs=${2:-20000}
bench=$build/bench/bench_exec
if ! command -v valgrind > /dev/null; then
  echo "instructions.sh: valgrind is not installed (apt-get install valgrind)" >&2
  exit 2
fi
if [ ! -x "$bench" ]; then
  echo "instructions.sh: $bench is not built" >&2
  exit 2
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The loop programs' totals, in the order bench_exec runs them: runtime
# without and with the shim, then the driver without and with.
totals() {
  local dir=$work/$1
  mkdir -p "$dir"
  (cd "$dir" && valgrind --tool=callgrind --trace-children=yes \
    --callgrind-out-file=cg.%p "$OLDPWD/$bench" --rounds 1 --pairs "$1" \
    > out.txt 2> err.txt)
  for f in $(ls "$dir" | grep '^cg\.' | sort -t. -k2 -n); do
    if grep -q '^cmd:.*bench_alloc_loop \(rt\|drv\) ' "$dir/$f"; then
      grep -m1 '^summary:' "$dir/$f" | awk '{print $2}'
    fi
  done
}
mapfile -t one < <(totals "$pairs")
mapfile -t two < <(totals "$((pairs * 2))")
if [ "${#one[@]}" -ne 4 ] || [ "${#two[@]}" -ne 4 ]; then
  echo "instructions.sh: expected 4 loop programs per run, got ${#one[@]} and ${#two[@]}" >&2
  exit 1
fi
printf "%-28s %12s %12s %12s %8s\n" "instructions per pair" "without" "with" \
  "overhead" "ratio"
names=("cudaMalloc + cudaFree" "cuMemAlloc_v2 + cuMemFree_v2")
for k in 0 1; do
  a=$(((two[2 * k] - one[2 * k]) / pairs))
  b=$(((two[2 * k + 1] - one[2 * k + 1]) / pairs))
  printf "%-28s %12d %12d %12d %7s\n" "${names[k]}" "$a" "$b" "$((b - a))" \
    "$(awk -v a="$a" -v b="$b" 'BEGIN{printf "%.2fx", b / a}')"
done
