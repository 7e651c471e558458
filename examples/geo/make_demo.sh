#!/usr/bin/env bash
# Makes the geo demo's folder (what examples/pipelines/geo.textproto runs
# in): its input data, a signing key, and the signed bundle of its own
# kernel. Run by the build: make_demo.sh COHORT WEIGH_SO STAMP PYTHON.
set -euo pipefail
cohort=$1 so=$2 stamp=$3 python=$4
src=$(cd "$(dirname "$0")" && pwd)
out=$(dirname "$stamp")/geo
rm -rf "$out"
mkdir -p "$out/bundle/cpu"
cp "$so" "$out/bundle/cpu/libweigh.so"
digest=$(sha256sum "$out/bundle/cpu/libweigh.so" | cut -d' ' -f1)
size=$(stat -c %s "$out/bundle/cpu/libweigh.so")
sed -e "s/@SHA256@/$digest/" -e "s/@SIZE@/$size/" \
  "$src/bundle/manifest.textproto.in" >"$out/bundle/manifest.textproto"
"$cohort" kernel keygen "$out/signer" >/dev/null
"$cohort" kernel sign "$out/bundle" --key "$out/signer.key" >/dev/null
"$python" "$src/make_data.py" "$out"
cp "$src/../pipelines/geo.textproto" "$src/check.py" "$out/"
touch "$stamp"
