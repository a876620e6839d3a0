#!/usr/bin/env bash
# The GPU part of the suite, as run on the device machine (see README "GPU machine"):
# prebuild every CUDA solution in parallel, run tests/test_gpu.py serially, then (VERDICTS=1) the CPU
# verdict fixtures on the same machine (GPU_TESTS=0 skips the first two), and lint the whole library at full size on the GPU (LINT=1).
# Logs go to $OUT (or bench/out).
set -u
OUT=${OUT:-bench/out}; mkdir -p "$OUT"
if [ -d .wheels ] && ! python3 -c "import pydantic" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/pyd .wheels/*.whl 2>&1 | tail -3
  export PYTHONPATH=/tmp/pyd:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD:${PYTHONPATH:-}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" | tee -a "$OUT/gpu.txt"
t0=$(date +%s)
if [ "${GPU_TESTS:-1}" = 1 ]; then
# PREBUILD narrows what is built ahead (the shipped solutions are only needed by their own tests)
python3 bench/prebuild.py --cache-dir .cache/test-harness ${PREBUILD:-tests/fixtures/gpu/*.py tests/adversarial/gpu/*.py solutions/*/*.py} > "$OUT/prebuild.txt" 2>&1
tail -1 "$OUT/prebuild.txt"
# GPU_K narrows the tests (pytest -k) when one command's time limit cannot hold them all (~400 s on an H200)
HARNESS_FAILURE_LOG="$OUT/gpu_failures.txt" python3 -m pytest tests/test_gpu.py -q -rA -p no:cacheprovider -s ${GPU_K:+-k "$GPU_K"} > "$OUT/gpu_tests.txt" 2>&1
echo "gpu tests: $(tail -1 "$OUT/gpu_tests.txt")  ($(( $(date +%s) - t0 ))s)"
grep -E "^(PASSED|FAILED|ERROR)|speedup=" "$OUT/gpu_tests.txt" | cut -c1-200
fi
if [ "${VERDICTS:-1}" = 1 ]; then
  # xdist when its wheel came along (.wheels): the CPU fixtures are independent processes
  XD=$(python3 -c "import xdist" 2>/dev/null && echo "-n 8")
  python3 -m pytest tests/test_verdicts.py -q -rf -p no:cacheprovider $XD > "$OUT/verdicts.txt" 2>&1
  echo "cpu verdict fixtures on this machine: $(tail -1 "$OUT/verdicts.txt")"
  grep -E "^FAILED" "$OUT/verdicts.txt" | cut -c1-200
fi
if [ "${LINT:-1}" = 1 ]; then
  python3 -m harness.cli problems check --device cuda --size full --jobs 4 --json > "$OUT/lint.json" 2> "$OUT/lint.txt"
  echo "library lint exit=$? : $(tail -1 "$OUT/lint.txt")"
  grep -v ": ok" "$OUT/lint.txt" | grep -v "checked" | head -20
fi
