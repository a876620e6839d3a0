"""Host launch time of the launch-bound fixture's forward against its reference's, both in this one
process (no harness): is the candidate's slower launching (0.41 vs 0.35 ms per call, session 5) its
code, or something about the process it is timed in?"""
import importlib.util
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


prob = load(ROOT / "tests/problems/launch_chain.py", "prob")
sol = load(ROOT / "tests/fixtures/gpu/honest_launch_bound_ext.py", "sol")
models = {"reference": prob.Model().cuda(), "candidate": sol.ModelNew().cuda()}
x = torch.randn(prob.N, device="cuda")
rows = []
with torch.no_grad():
    for name, m in models.items():
        for _ in range(20):
            m(x)
        torch.cuda.synchronize()
    for rep in range(3):
        for name, m in models.items():
            enq = []
            for _ in range(200):
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                m(x)
                enq.append((time.perf_counter() - t0) * 1e3)
            torch.cuda.synchronize()
            rows.append((rep, name, statistics.median(enq), min(enq)))
print(f"{'rep':>3} {'side':>10} {'enqueue_ms_median':>17} {'enqueue_ms_min':>14}")
for r in rows:
    print(f"{r[0]:>3} {r[1]:>10} {r[2]:>17.4f} {r[3]:>14.4f}")
