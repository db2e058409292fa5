#!/bin/bash
# Download into ./.whl of the current git checkout every wheel a lent GPU machine (Python 3.12,
# glibc 2.39, no network, no Transformer Engine) lacks for real Megatron-Core and Megatron Bridge GPT
# pretraining, and keep that folder out of git. Install them there with tools/megatron-gpu-setup.sh.
#
# Bridge declares ~30 heavy dependencies (wandb, mlflow, flashinfer, ...). With --no-deps, GPT
# pretraining from a recipe with dotted overrides needs only the set below (measured on the lent
# GPU, see docs/gpu-results.md); the machine's own torch, transformers, tokenizers, protobuf, grpcio,
# pyarrow, pandas, numpy, triton and tensorboard serve. Versions are pinned so that a re-run
# fetches what was tested; antlr4-python3-runtime 4.9.3 (Hydra's parser runtime) and fusepy 3.0.1 exist
# only as pure-Python sdists and are built into wheels here. The harness's own packages the image lacks
# come too: faker, hypothesis (chaos explore) and fusepy, with libfuse 2 (Debian's libfuse2 package, its
# one library, which fusepy loads for storage_stall's FUSE server: the image has /dev/fuse but no libfuse).
# About 21 MiB, within one device call's carry.
set -euo pipefail
top=$(git rev-parse --show-toplevel)
cd "$top"
exclude=$(git rev-parse --git-path info/exclude)
grep -qx '/.whl/' "$exclude" 2>/dev/null || echo '/.whl/' >> "$exclude"
mkdir -p .whl

wheels=(
  megatron-core==0.19.2 megatron-bridge==0.6.2
  nvidia-resiliency-ext==0.7.0 defusedxml==0.7.1
  pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5
  typing-extensions==4.16.0
  omegaconf==2.3.0 hydra-core==1.3.8
  datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19
  nvidia-modelopt==0.47.0 megatron-energon==7.4.1 braceexpand==0.1.7 filetype==1.2.0
  webdataset==1.0.2 rapidyaml==0.15.2 deprecation==2.1.0 diffusers==0.42.1
  faker==40.63.0 tzdata==2026.6 hypothesis==6.170.27 sortedcontainers==2.4.0
)
plat=()
for n in 39 35 34 31 28 27 24 17; do plat+=(--platform "manylinux_2_${n}_x86_64"); done
plat+=(--platform manylinux2014_x86_64 --platform any)

python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${plat[@]}" -d .whl "${wheels[@]}"
python3 -m pip wheel -q --no-deps -w .whl antlr4-python3-runtime==4.9.3 fusepy==3.0.1
(cd .whl && rm -f libfuse2_*.deb && apt-get download -q libfuse2)

# Two versions of one package stop the whole install on the device: refuse them here.
dups=$(ls .whl/*.whl | xargs -n1 basename | cut -d- -f1 | tr 'A-Z-' 'a-z_' | sort | uniq -d)
if [[ -n $dups ]]; then
  echo "megatron-wheels: more than one version in .whl of: $dups (remove the stale ones)" >&2
  exit 1
fi
ls -la .whl
du -sh .whl
