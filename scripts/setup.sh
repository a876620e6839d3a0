#!/usr/bin/env bash
# Set up a virtual environment with the harness and its test tools. torch is pinned here (2.13.0, from
# the index pip is configured with; a torch already in .venv is kept, README says how to put the CPU
# build there first); the package itself asks only for torch>=2.4.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
.venv/bin/python -c "import torch" 2>/dev/null || .venv/bin/python -m pip install -q "torch==${TORCH_VERSION:-2.13.0}"
# the editable build's "same name as your package" notice is setuptools' generic advice for a flat
# layout (this folder's harness/ is the package itself): not shown
PYTHONWARNINGS=ignore .venv/bin/python -m pip install -q -e ".[test]"
.venv/bin/harness --version
