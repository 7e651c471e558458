#!/usr/bin/env bash
# Runs the geo demo in the folder the build made and checks its outputs:
# run.sh COHORT PYTHON FOLDER [cohort run options]. ./dev.sh run and the
# examples-geo test run it.
set -euo pipefail
cohort=$(realpath "$1") python=$2 folder=$3
shift 3
cd "$folder"
rm -f locations.npy weighted.npy totals.npy geo.audit.log
"$cohort" run geo.textproto "$@"
"$python" check.py
