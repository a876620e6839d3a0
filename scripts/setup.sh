#!/usr/bin/env bash
# Set up a virtual environment with the harness and its test tools. torch is pinned here (2.13.0; on a
# machine without a GPU the CPU build; a torch already in .venv is kept); the package itself asks only
# for torch>=2.4.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
TORCH="torch==${TORCH_VERSION:-2.13.0}"
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  # no GPU: the CPU build first (PyPI's Linux wheel is the CUDA one, several GB), then whatever the
  # configured index has (a machine whose pip reaches only a mirror)
  { ! command -v nvidia-smi >/dev/null && .venv/bin/python -m pip install -q --retries 0 --timeout 20 "$TORCH" \
      --index-url https://download.pytorch.org/whl/cpu 2>/dev/null; } || .venv/bin/python -m pip install -q "$TORCH"
fi
# the editable build's "same name as your package" notice is setuptools' generic advice for a flat
# layout (this folder's harness/ is the package itself): not shown
PYTHONWARNINGS=ignore .venv/bin/python -m pip install -q -e ".[test]"
.venv/bin/harness --version
