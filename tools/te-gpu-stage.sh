#!/bin/bash
# Transformer Engine for a lent GPU machine, step 2 of 2 (step 1, here: tools/te-wheels.sh). On the device:
#
#   bash tools/te-gpu-stage.sh append .te/part.NN             one call per carried part, back to back (a
#                                                            machine is given back 30 s after a call, and
#                                                            /tmp with it): copies the part into /tmp/te-stage
#   bash tools/te-gpu-stage.sh finish .te/small SITE_DIR     (after the last part; may share its call)
#       joins the parts in order, checks the core wheel's sha256 and the small files' against SHA256SUMS,
#       builds transformer-engine-torch from its sdist (it carries TE's headers) against the machine's torch
#       (about 90 s on 16 cores, no nvcc) unless .te/small already holds that wheel, installs the four with
#       one `pip --target SITE_DIR`, imports transformer_engine.pytorch where pydantic is there (else
#       gpu-suite.sh does, after installing .whl), and copies a wheel it built into $OUT
#       (keep it in .te/small: it stays valid while the machine's torch stays 2.11.0+cu130).
#   bash tools/te-gpu-stage.sh status                        which parts /tmp/te-stage holds
#
# Then run with PYTHONPATH=SITE_DIR and CUDNN_PATH=<torch's site-packages>/nvidia/cudnn (tools/gpu-suite.sh
# sets it): a process that loaded torch's cuDNN must not let TE load the system's.
set -euo pipefail
stage=/tmp/te-stage
mkdir -p "$stage"
say() { echo "te-gpu-stage: $*"; }

append() {
  local part
  for part in "$@"; do
    [[ -f $part ]] || { say "no part $part here (carry it)" >&2; exit 2; }
    cp "$part" "$stage/$(basename "$part")"
    say "staged $(basename "$part") ($(stat -c %s "$part") bytes)"
  done
  status
}

status() {
  say "$stage holds: $(cd "$stage" && ls part.* 2>/dev/null | tr '\n' ' ')"
}

finish() {
  local small=${1:?usage: te-gpu-stage.sh finish SMALL_DIR SITE_DIR} site=${2:?usage: te-gpu-stage.sh finish SMALL_DIR SITE_DIR}
  small=$(cd "$small" && pwd) || { say "no folder $small (carry .te/small)" >&2; exit 2; }
  local sums="$small/SHA256SUMS" core sp built
  [[ -f $sums ]] || { say "no $sums (carry .te/small)" >&2; exit 2; }
  core=$(head -1 "$sums" | awk '{print $2}')
  compgen -G "$stage/part.*" > /dev/null || { say "no parts in $stage: run append first, in this machine's lease" >&2; exit 2; }
  cat $(ls "$stage"/part.* | sort) > "$stage/$core"
  (cd "$stage" && head -1 "$sums" | sha256sum -c --quiet -) \
    || { say "$core: sha256 differs (a part missing or twice?); $(status)" >&2; exit 3; }
  (cd "$small" && tail -n +2 SHA256SUMS | sha256sum -c --quiet -) || { say "a small file's sha256 differs" >&2; exit 3; }
  say "$core assembled, sha256 checked"
  sp=$(python3 -c 'import pathlib, torch; print(pathlib.Path(torch.__file__).parents[1])')
  built=$(ls "$small"/transformer_engine_torch-*.whl 2>/dev/null | head -1 || true)
  if [[ -z $built ]]; then
    rm -rf "$stage/src" "$stage/built" && mkdir -p "$stage/src" "$stage/built"
    tar xzf "$small"/transformer_engine_torch-*.tar.gz -C "$stage/src"
    say "building transformer-engine-torch against torch $(python3 -c 'import torch; print(torch.__version__)')"
    (cd "$stage"/src/transformer_engine_torch-* && \
      CPATH="$sp/nvidia/cudnn/include:$sp/nvidia/nccl/include" \
      NVTE_PYTORCH_FORCE_BUILD=TRUE NVTE_NO_LOCAL_VERSION=1 NVTE_WITH_NCCL_EP=0 NVTE_CUDA_ARCHS=90 \
      NVTE_FRAMEWORK=pytorch MAX_JOBS=$(nproc) \
      python3 -m pip wheel -q --no-build-isolation --no-deps --no-index -w "$stage/built" .)
    built=$(ls "$stage"/built/transformer_engine_torch-*.whl)
    [[ -n ${OUT:-} ]] && cp "$built" "$OUT/" && say "copied $(basename "$built") to \$OUT (keep it in .te/small)"
  fi
  # One pip call for all four: a second `pip --target` into the same folder skips what exists there.
  mkdir -p "$site"
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
    "$stage/$core" "$small"/transformer_engine-*.whl "$small"/nvdlfw_inspect-*.whl "$built"
  if PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" python3 -c 'import pydantic' 2> /dev/null; then
    CUDNN_PATH="$sp/nvidia/cudnn" PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" python3 -c \
      'import transformer_engine as t, transformer_engine.pytorch as te; print("te-gpu-stage: transformer_engine", t.__version__, "imports;", te.Linear.__name__)'
  else  # transformer_engine.pytorch imports pydantic, which the machine lacks until gpu-suite.sh installs .whl
    say "installed in $site; its import is checked by tools/gpu-suite.sh, once .whl has brought pydantic"
  fi
  rm -f "$stage/$core"
}

cmd=${1:-}
shift || true
case $cmd in
  append) append "$@" ;;
  finish) finish "$@" ;;
  status) status ;;
  *) echo "usage: te-gpu-stage.sh append PART... | finish SMALL_DIR SITE_DIR | status" >&2; exit 2 ;;
esac
