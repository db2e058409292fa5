#!/bin/bash
# Install real Megatron-Core and Megatron Bridge on a lent GPU machine (no network, no Transformer
# Engine) from the wheels tools/megatron-wheels.sh downloaded, and apply the workarounds recorded in
# docs/gpu-results.md (Megatron on the lent GPU), each announced on stdout so the log says what was patched:
#   1. megatron/core/datasets: the wheel ships the prebuilt helpers but no Makefile, and
#      megatron.training and Bridge run `make -C` there at start-up: a no-op Makefile.
#   2. megatron/bridge/peft/lora_layers.py imports transformer_engine.pytorch unguarded (reached from
#      megatron/bridge/__init__.py): without TE it gets a namespace of placeholder classes, so the
#      module imports and its isinstance checks are all false. Only when TE does not import.
#   3. `pulp` and `multistorageclient` (imported by modelopt and energon, unused by GPT pretraining):
#      empty modules, only when they do not import.
# and, when the wheel folder has Debian's libfuse2 package and the machine has no libfuse 2, unpacks its
# library into SITE_DIR/libfuse for fusepy (storage_stall's FUSE server).
# Usage: bash tools/megatron-gpu-setup.sh SITE_DIR [WHEEL_DIR]; then export PYTHONPATH=SITE_DIR (and
# FUSE_LIBRARY_PATH as it says).
set -euo pipefail
site=${1:?usage: megatron-gpu-setup.sh SITE_DIR [WHEEL_DIR]}
wheels=${2:-.whl}
py=${PYTHON:-python3}
shopt -s nullglob
whl=("$wheels"/*.whl)
(( ${#whl[@]} )) || { echo "megatron-gpu-setup: no wheels in $wheels (run tools/megatron-wheels.sh first)" >&2; exit 2; }
echo "megatron-gpu-setup: installing ${#whl[@]} wheels from $wheels into $site"
"$py" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" "${whl[@]}"
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"

datasets="$site/megatron/core/datasets"
[[ -d $datasets ]] || { echo "megatron-gpu-setup: $datasets missing: is megatron-core among the wheels?" >&2; exit 2; }
if [[ ! -e $datasets/Makefile ]]; then
  printf 'default:\n\t@true\n' > "$datasets/Makefile"
  echo "megatron-gpu-setup: PATCH 1 wrote a no-op $datasets/Makefile (the wheel ships helpers_cpp prebuilt)"
fi

"$py" - "$site" <<'PY'
import importlib.util
import pathlib
import sys

site = pathlib.Path(sys.argv[1])


def importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


lora = site / "megatron/bridge/peft/lora_layers.py"
line = "import transformer_engine.pytorch as te\n"
stub = (
    "try:\n"
    "    import transformer_engine.pytorch as te\n"
    "except ImportError:  # chaos-harness megatron-gpu-setup.sh: no Transformer Engine on this machine\n"
    "    import types as _types\n"
    "\n"
    "    class _NoTE:\n"
    "        pass\n"
    "\n"
    "    te = _types.SimpleNamespace(\n"
    "        Linear=_NoTE, LayerNormLinear=_NoTE, ops=_types.SimpleNamespace(Sequential=_NoTE)\n"
    "    )\n"
)
if not importable("transformer_engine"):
    text = lora.read_text()
    if stub in text:
        print(f"megatron-gpu-setup: PATCH 2 already applied to {lora}")
    elif text.startswith(line) or f"\n{line}" in text:
        lora.write_text(text.replace(f"\n{line}", f"\n{stub}", 1) if not text.startswith(line) else stub + text[len(line):])
        print(f"megatron-gpu-setup: PATCH 2 guarded the transformer_engine import of {lora} (TE absent)")
    else:
        sys.exit(f"megatron-gpu-setup: {lora} no longer has the line to patch: read it and update this script")
placeholder = (
    "# chaos-harness megatron-gpu-setup.sh: stand-in for a package GPT pretraining imports but never uses.\n"
    "# Any public attribute, at any depth, is a placeholder class, so annotations such as\n"
    "# pulp.LpVariable or msc.types.ObjectMetadata evaluate; calling into the package is never done.\n"
    "class _Placeholder(type):\n"
    "    def __getattr__(cls, name):\n"
    "        if name.startswith('__'):\n"
    "            raise AttributeError(name)\n"
    "        return _Placeholder(name, (), {})\n"
    "\n"
    "\n"
    "def __getattr__(name):\n"
    "    if name.startswith('__'):\n"
    "        raise AttributeError(name)\n"
    "    return _Placeholder(name, (), {})\n"
)
for name in ("pulp", "multistorageclient"):
    if not importable(name):
        (site / f"{name}.py").write_text(placeholder)
        print(f"megatron-gpu-setup: PATCH 3 wrote a placeholder {site / (name + '.py')} ({name} absent)")
PY
deb=("$wheels"/libfuse2_*.deb)
if (( ${#deb[@]} )) && ! "$py" -c 'import ctypes.util, sys; sys.exit(not ctypes.util.find_library("fuse"))'; then
  mkdir -p "$site/libfuse"
  dpkg-deb -x "${deb[0]}" "$site/libfuse"
  lib=$(find "$site/libfuse" -name 'libfuse.so.2' | head -1)
  [[ -n $lib ]] || { echo "megatron-gpu-setup: no libfuse.so.2 in ${deb[0]}" >&2; exit 2; }
  echo "megatron-gpu-setup: unpacked $lib from ${deb[0]} (export FUSE_LIBRARY_PATH=$lib)"
fi
echo "megatron-gpu-setup: done; export PYTHONPATH=$site"
