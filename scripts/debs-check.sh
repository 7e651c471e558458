#!/usr/bin/env bash
# ./dev.sh debs-check: builds the Debian packages (scripts/debs.sh), installs
# them on this machine with dpkg, uses them as a user would (the program
# loads the installed GPU plugins, an outside program builds with
# pkg-config and runs, so does a CAF program through cohort-caf, the
# Python module runs an item from outside the tree), then removes and purges them and checks that nothing is left.
# Needs root or sudo, as `./dev.sh setup` does. Prints one line per step;
# exits 1 if any failed.
set -uo pipefail
cd "$(dirname "$(readlink -f "$0")")/.."
repo=$PWD
if [ "$(id -u)" -eq 0 ]; then
  dpkg() { command dpkg "$@"; }
elif command -v sudo >/dev/null 2>&1; then
  dpkg() { sudo dpkg "$@"; }
else
  echo "debs-check: installing packages needs root or sudo" >&2
  exit 1
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
core=(libcohort0 libcohort-dev cohort python3-cohort)
all=("${core[@]}" libcohort0-plugin-cuda libcohort0-plugin-hip)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
failed=0
check() { # check NAME COMMAND...: one line, the output only on failure
  local name=$1
  shift
  if "$@" >"$work/$name.log" 2>&1; then
    echo "debs-check: $name: ok${note:+ ($note)}"
  else
    cat "$work/$name.log"
    echo "debs-check: $name: FAILED"
    failed=1
  fi
  note=
}
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }

# A run stopped half-way leaves its packages behind: start clean.
for p in "${all[@]}"; do
  if dpkg-query -W "$p" >/dev/null 2>&1; then
    echo "debs-check: purging $p left by an earlier run"
    dpkg -P "$p" >/dev/null 2>&1 || true
  fi
done

bash scripts/debs.sh "$work/debs" || { echo "debs-check: building the packages FAILED"; exit 1; }
debs=()
for p in "${core[@]}"; do debs+=("$work/debs/${p}_"*.deb); done

install_core() { dpkg -i "${debs[@]}"; }
check install install_core
plugins=()
for p in libcohort0-plugin-cuda libcohort0-plugin-hip; do
  deb=$(ls "$work/debs/${p}_"*.deb 2>/dev/null) || continue
  if dpkg -i "$deb" >"$work/$p.log" 2>&1; then
    plugins+=("$p")
  else
    # Its vendor libraries are not installed here: that is the user's choice.
    echo "debs-check: $p not installed here: $(grep -m1 'depends on' "$work/$p.log" | sed 's/^ *//')"
    dpkg -r "$p" >/dev/null 2>&1 || true
  fi
done
for p in "${core[@]}" "${plugins[@]}"; do dpkg -L "$p" >>"$work/files"; done

plugins_load() {
  local out f
  out=$(cd / && cohort devices) || return 1
  echo "$out"
  for p in "${plugins[@]}"; do
    f=$(dpkg -L "$p" | grep '\.so$')
    echo "$out" | grep -qF "plugin loaded from $f" || { echo "$f not loaded"; return 1; }
  done
}
note="${#plugins[@]} plugin(s)"
check plugins plugins_load

consumer() {
  mkdir -p "$work/consumer" && cd "$work/consumer" &&
    # shellcheck disable=SC2046
    c++ -std=c++20 "$repo/tests/install/consumer.cpp" -o consumer $(pkg-config --cflags --libs cohort) &&
    ./consumer "$work/consumer/audit.log"
}
note="pkg-config $(pkg-config --modversion cohort 2>/dev/null)"
check consumer consumer

# The typed actor interface from libcohort-dev (<cohort/caf.hpp>).
caf_consumer() {
  mkdir -p "$work/caf" && cd "$work/caf" &&
    # shellcheck disable=SC2046
    c++ -std=c++20 "$repo/tests/install/caf_consumer.cpp" -o caf_consumer $(pkg-config --cflags --libs cohort-caf) &&
    ./caf_consumer "$work/caf/audit.log"
}
note="pkg-config cohort-caf"
check caf caf_consumer

python_module() {
  (cd / && env -u PYTHONPATH /usr/bin/python3 -c '
import numpy as np, cohort
assert cohort.__file__.startswith("/usr/lib/python3/dist-packages/"), cohort.__file__
with cohort.Runtime(cpu_workers=1, gpus=False, audit_path="'"$work"'/py-audit.log") as rt:
    r = rt.run("dot", [np.arange(4, dtype=np.float32), np.ones(4, np.float32)])
    assert float(r.values[0]) == 6.0, r.values
    print("dot =", float(r.values[0]), "on", r.device)
')
}
check python python_module

manual() { [ -f /usr/share/man/man1/cohort.1.gz ] && [ -f /usr/share/bash-completion/completions/cohort ]; }
check manual manual

remove_all() {
  dpkg -r "${plugins[@]}" "${core[@]}" &&
    dpkg -P "${plugins[@]}" "${core[@]}" &&
    for p in "${core[@]}" "${plugins[@]}"; do ! dpkg-query -W "$p" 2>/dev/null; done
}
check remove remove_all

nothing_left() {
  local left=0 f
  while read -r f; do
    # Folders the packages share with the system stay.
    [ -d "$f" ] && [ -n "$(ls -A "$f" 2>/dev/null)" ] && continue
    [ -e "$f" ] || [ -L "$f" ] || continue
    [ -d "$f" ] && case "$f" in */cohort*) ;; *) continue ;; esac
    echo "left behind: $f"
    left=1
  done <"$work/files"
  for d in /usr/lib/python3/dist-packages/cohort "/usr/lib/$multiarch/cohort" /usr/include/cohort; do
    [ -e "$d" ] && { echo "left behind: $d"; left=1; }
  done
  return $left
}
check nothing-left nothing_left

sizes=$(for d in "$work"/debs/*.deb; do
  printf '%s %s kB' "$(dpkg-deb -f "$d" Package)" "$(dpkg-deb -f "$d" Installed-Size)"; echo; done | paste -sd, - | sed 's/,/, /g')
echo "debs-check: installed sizes: $sizes"
exit $failed
