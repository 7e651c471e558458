#!/usr/bin/env bash
# bench/profile.sh BENCH [ARGS...]: instructions and heap allocations per task
# of a benchmark that takes --tasks N, counted by valgrind (callgrind for
# instructions, DHAT for allocations, malloc of jemalloc too). Each tool runs
# the benchmark at N and 2N tasks; the difference divided by N leaves out
# start-up and shutdown. Counts, not seconds: repeatable on a loaded machine.
# COHORT_PROFILE_TASKS sets N (default 10000).
#   bench/profile.sh build/bench/bench_dispatch --policies ""
#   bench/profile.sh build/bench/bench_fleet --devices 64
set -euo pipefail
if [ $# -lt 1 ]; then
  echo "usage: bench/profile.sh BENCH [ARGS...]" >&2
  exit 2
fi
command -v valgrind >/dev/null || { echo "profile: valgrind is not installed" >&2; exit 2; }
bin=$1
shift
n=${COHORT_PROFILE_TASKS:-10000}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
count() { # tool tasks -> total
  local tool=$1 tasks=$2
  if [ "$tool" = callgrind ]; then
    valgrind --tool=callgrind --callgrind-out-file="$tmp/cg" "$bin" \
      --tasks "$tasks" "${args[@]}" >"$tmp/out" 2>&1 || { cat "$tmp/out" >&2; exit 1; }
    grep -E '^==[0-9]+== Collected' "$tmp/out" | awk '{print $4}'
  else
    valgrind --tool=dhat --soname-synonyms='somalloc=*jemalloc*' \
      --dhat-out-file=/dev/null "$bin" --tasks "$tasks" "${args[@]}" >"$tmp/out" 2>&1 ||
      { cat "$tmp/out" >&2; exit 1; }
    grep -E '^==[0-9]+== Total:' "$tmp/out" | awk '{gsub(",", "", $6); print $6}'
  fi
}
args=("$@")
i1=$(count callgrind "$n"); i2=$(count callgrind $((2 * n)))
a1=$(count dhat "$n"); a2=$(count dhat $((2 * n)))
awk -v i1="$i1" -v i2="$i2" -v a1="$a1" -v a2="$a2" -v n="$n" -v b="$bin ${args[*]}" 'BEGIN {
  printf "%s: %.0f instructions and %.1f heap allocations per task (valgrind, %d and %d tasks)\n",
    b, (i2 - i1) / n, (a2 - a1) / n, n, 2 * n }'
