#!/bin/bash
# The whole GPU suite in one command, on a machine without nox or network (a lent GPU): install the carried
# wheels, run every scenario of the catalogue on the GPUs (the Megatron ones where the Megatron packages are
# installed; each scenario the machine cannot run is skipped with its reason) and tests/gpu, and write the
# logs, journals, JUnit XML, summary.md and correlation.json to one folder. nox -s gpu runs the same pytest
# command (noxfile.py, GPU_PYTEST) where nox is installed.
#
#   bash tools/gpu-suite.sh OUT_DIR [WHEEL_DIR] [-- PYTEST_ARGS...]     (from the checkout's root)
#
# Transformer Engine: stage it first into the same site folder (tools/te-wheels.sh here, then
# tools/te-gpu-stage.sh on the device: `finish .te/small /tmp/chaos-gpu-site`); this script then points TE at
# torch's cuDNN (CUDNN_PATH). GPU_SUITE_DEVICE=cpu runs the catalogue alone on gloo (--chaos-device=cpu, one
# worker per core): the CPU scenarios under the machine's NVRx (0.7.0 on the lent GPUs; CI has 0.4.1).
#
# WHEEL_DIR (default .whl) holds tools/megatron-wheels.sh's wheels (Megatron's, and the harness's own:
# pydantic, faker, NVRx, hypothesis, fusepy); without it the machine's installed packages are used as they are.
# OUT_DIR ends with suite.log (this script's output), junit.xml, summary.md, correlation/ and one run folder
# per scenario; the table and the correlation results are printed at the end.
set -uo pipefail
out=${1:?usage: gpu-suite.sh OUT_DIR [WHEEL_DIR] [-- PYTEST_ARGS...]}
shift
wheels=.whl
if [[ $# -gt 0 && $1 != -- ]]; then wheels=$1; shift; fi
[[ ${1:-} == -- ]] && shift
mkdir -p "$out"
out=$(cd "$out" && pwd)
exec > >(tee -a "$out/suite.log") 2>&1
t0=$(date +%s)
log() { echo "[gpu-suite $(date '+%F %T') +$(( $(date +%s) - t0 ))s] $*"; }

site=/tmp/chaos-gpu-site
if compgen -G "$wheels/megatron_core-*.whl" > /dev/null; then
  log "installing the wheels of $wheels into $site, with Megatron's workarounds (each announced)"
  bash tools/megatron-gpu-setup.sh "$site" "$wheels" || { log "setup failed"; exit 3; }
elif compgen -G "$wheels/*.whl" > /dev/null; then
  log "installing the wheels of $wheels into $site (no Megatron among them)"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "$wheels"/*.whl \
    || { log "pip install failed"; exit 3; }
fi
[[ -d $site ]] && export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" PATH="$site/bin:$PATH"
fuse=$(find "$site/libfuse" -name 'libfuse.so.2' 2>/dev/null | head -1)
[[ -n $fuse ]] && export FUSE_LIBRARY_PATH=$fuse
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
if python3 -c 'import importlib.util, sys; sys.exit(importlib.util.find_spec("transformer_engine") is None)' 2>/dev/null; then
  # TE must load torch's cuDNN, not the system's (undefined symbol in libcudnn_heuristic otherwise).
  export CUDNN_PATH=${CUDNN_PATH:-$(python3 -c 'import pathlib, torch; print(pathlib.Path(torch.__file__).parents[1] / "nvidia/cudnn")')}
  log "Transformer Engine installed: CUDNN_PATH=$CUDNN_PATH; $(python3 -c 'import transformer_engine as t, transformer_engine.pytorch; print("transformer_engine", t.__version__, "imports")' 2>&1 | tail -1)"
fi
log "machine: $(hostname), $(nproc) cores; $(nvidia-smi -L 2>&1 | tr '\n' ';')"
python3 - <<'PY'
import importlib.metadata as md
import platform

names = ("torch", "nvidia-resiliency-ext", "megatron-core", "megatron-bridge", "transformer-engine", "transformer-engine-cu13",
         "transformer-engine-torch", "pydantic", "pytest-xdist", "tensorboard")
found = []
for name in names:
    try:
        found.append(f"{name} {md.version(name)}")
    except md.PackageNotFoundError:
        found.append(f"{name} absent")
print("versions: python", platform.python_version() + ";", "; ".join(found))
PY

# Scenarios share the GPUs, several at a time (straggler scenarios take the machine alone): 8 on a machine of
# several GPUs, whose two-rank runs each use two; 20 on one GPU, where only world-1 runs (ours and Megatron's,
# which mostly wait on imports and saves) can go. Work stealing keeps two long runs off one worker.
# The project's entry points (the pytest plugin, the trainer's `chaos` component) come from its metadata: an
# install (pip install -e ., as nox does) or the chaos_harness.egg-info that install leaves in the checkout.
plugin=$(python3 -c "from importlib.metadata import entry_points as e; print(' '.join(sorted(x.name for x in e(group='trainer.components'))), '|', ' '.join(x.value for x in e(group='pytest11')))")
case $plugin in
  *chaos*"|"*chaos.pytest_plugin*) ;;
  *) log "the project's entry points are missing ($plugin): pip install -e . first, or bring chaos_harness.egg-info"; exit 3 ;;
esac
gpus=$(python3 -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0)
device=${GPU_SUITE_DEVICE:-cuda}
tests=(tests/functional/test_scenarios.py tests/gpu)
if [[ $device == cpu ]]; then
  tests=(tests/functional/test_scenarios.py)
  workers=${GPU_SUITE_WORKERS:-$(nproc)}
  log "pytest: the catalogue on CPU/gloo, $workers at a time"
else
  workers=${GPU_SUITE_WORKERS:-$(( gpus == 1 ? 20 : 8 ))}
  log "pytest: the catalogue and tests/gpu on $gpus GPU(s), $workers at a time"
fi
# GPU_SUITE_TIMEOUT (seconds): interrupt pytest then (SIGINT), so that it still prints its failures and writes
# junit.xml and summary.md for what ran, inside a device call's limit (a killed pytest writes neither).
limit=()
[[ -n ${GPU_SUITE_TIMEOUT:-} ]] && limit=(timeout -s INT -k 60 "$GPU_SUITE_TIMEOUT")
"${limit[@]}" python3 -m pytest "${tests[@]}" -n "$workers" --dist worksteal -v -rA \
  --chaos-device="$device" --chaos-out="$out" --junitxml="$out/junit.xml" "$@"
code=$?
log "pytest exited $code"
echo "== summary.md"
cat "$out/summary.md" 2>/dev/null
echo "== correlation (chaos correlate --json)"
python3 - "$out/correlation/correlation.json" <<'PY'
import json, pathlib, sys

path = pathlib.Path(sys.argv[1])
for name, r in (json.loads(path.read_text()).items() if path.exists() else ()):
    print(f"{name}: {'agree' if r['passed'] else 'DIVERGE'}; {r['summary']}; max rel diff {r['max_rel_diff']}")
PY
log "done"
exit "$code"
