#!/bin/bash
# Transformer Engine for a lent GPU machine (Python 3.12, torch 2.11.0+cu130, no network), step 1 of 2:
# download here, into ./.te of the current git checkout (kept out of git), what the machine lacks:
#   transformer-engine-cu13 2.20.2   the core wheel, 276.5 MB: more than one device call carries, so it is
#                                    split into parts of PART_MIB (default 56) MiB, .te/part.00, .te/part.01, ...
#   transformer-engine 2.20.2        the meta wheel (1.2 MB)
#   nvdlfw-inspect                   TE's debug hooks, which transformer_engine.pytorch imports
#   transformer-engine-torch 2.20.2  the PyTorch extension, source only (0.5 MB; built on the device)
# The small ones and SHA256SUMS (the whole core wheel's too) go into .te/small/. Step 2, on the device, is
# tools/te-gpu-stage.sh: one call per part (carry .te/part.NN), back to back, since a machine goes back
# 30 s after a call; the last call assembles, checks the sha256, builds the extension and installs.
#   bash tools/te-wheels.sh            (from anywhere in the checkout; needs pip and network)
set -euo pipefail
top=$(git rev-parse --show-toplevel)
cd "$top"
exclude=$(git rev-parse --git-path info/exclude)
grep -qx '/.te/' "$exclude" 2>/dev/null || echo '/.te/' >> "$exclude"
part_mib=${PART_MIB:-56}
version=2.20.2
mkdir -p .te/small
dl=$(mktemp -d)
trap 'rm -rf "$dl"' EXIT

plat=()
for n in 39 35 34 31 28 27 24 17; do plat+=(--platform "manylinux_2_${n}_x86_64"); done
plat+=(--platform manylinux2014_x86_64 --platform any)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${plat[@]}" \
  -d "$dl" "transformer-engine-cu13==$version" "transformer-engine==$version" nvdlfw-inspect==0.2.2

# The extension exists only as an sdist, whose metadata pip cannot prepare without CUDA: fetch the file
# from PyPI's simple index and check it against the hash the index gives.
python3 - "$dl" "$version" <<'PY'
import hashlib
import json
import pathlib
import sys
import urllib.request

dest, version = pathlib.Path(sys.argv[1]), sys.argv[2]
req = urllib.request.Request("https://pypi.org/simple/transformer-engine-torch/",
                             headers={"Accept": "application/vnd.pypi.simple.v1+json"})
index = json.load(urllib.request.urlopen(req, timeout=60))
name = f"transformer_engine_torch-{version}.tar.gz"
entry = next((f for f in index["files"] if f["filename"] == name), None)
if entry is None:
    sys.exit(f"te-wheels: {name} is not on PyPI")
data = urllib.request.urlopen(entry["url"], timeout=120).read()
if hashlib.sha256(data).hexdigest() != entry["hashes"]["sha256"]:
    sys.exit(f"te-wheels: {name}: sha256 differs from the index's")
(dest / name).write_bytes(data)
PY

core=("$dl"/transformer_engine_cu13-"$version"-*.whl)
rm -f .te/part.* .te/small/*
mv "$dl"/transformer_engine-"$version"-*.whl "$dl"/nvdlfw_inspect-*.whl "$dl"/transformer_engine_torch-*.tar.gz .te/small/
(cd "$dl" && sha256sum "$(basename "${core[0]}")") > .te/small/SHA256SUMS
(cd .te/small && sha256sum transformer_engine-*.whl nvdlfw_inspect-*.whl transformer_engine_torch-*.tar.gz) >> .te/small/SHA256SUMS
split -b "${part_mib}M" -d -a 2 "${core[0]}" .te/part.
ls -la .te .te/small
echo "te-wheels: $(ls .te/part.* | wc -l) parts; on the device, one call each:"
for p in .te/part.*; do echo "  carry [\"$p\"]: bash tools/te-gpu-stage.sh append $p"; done
echo "  then carry [\".te/small\", ...]: bash tools/te-gpu-stage.sh finish .te/small SITE_DIR"
