"""Whether CUPTI's recorder opens in every process (run on a GPU machine). #5: in a fidelity set on an
H100 (session 25, timing.processes=6) one run of five reported cuda_events where the others reported
kernel spans, 26.4 us against 23.7 us, an 11% spread. Either one of its processes could not have CUPTI
(`kernel_span_unavailable`, whose reason the record did not yet carry), or its first pair did not
choose spans.

Found on an H100 (session 25): every open succeeded, 8 alone, 48 six at once, 48 six at once beside a
matmul loop (0.02-0.06 s each). The run with events was the one with the shortest launch hold and the
most leaked launches, and spans were then chosen on one round's events median: they are now chosen on
the reference's warm-up kernel spans (timing.measure, `kernel_span_basis_ms`), and a record that falls
back says which process could not have CUPTI, and why.

Each child is a fresh process that brings CUDA up, runs a kernel, waits for a common start time, and
then opens harness.cupti.KernelRecorder (its canaries included) as a worker does for its first timing
request, `--width` children at once, as a candidate's further processes do. With `--load` one more
process keeps the GPU busy with matmuls throughout. Prints each failure's reason and a count per mode.

Usage: python bench/diag/cupti_open.py [--waves 8] [--width 6] [--modes alone together load]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import torch
from harness.cupti import KernelRecorder
x = torch.ones(1 << 20, device="cuda")
(x * 2).sum().item()
at = float(sys.argv[2])
time.sleep(max(0.0, at - time.time()))
t0 = time.perf_counter()
rec, why = KernelRecorder.open(torch)
print(json.dumps({"ok": rec is not None, "why": why, "open_s": round(time.perf_counter() - t0, 4)}))
"""

LOAD = r"""
import sys, time, torch
a = torch.randn(4096, 4096, device="cuda")
end = time.time() + float(sys.argv[1])
while time.time() < end:
    for _ in range(20):
        a = (a @ a).clamp_(-1, 1)
    torch.cuda.synchronize()
"""


def wave(width: int, lead_s: float) -> list[dict]:
    at = time.time() + lead_s  # after every child has CUDA up
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(ROOT), str(at)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(width)]
    out = []
    for p in procs:
        so, se = p.communicate(timeout=120)
        try:
            out.append(json.loads(so.strip().splitlines()[-1]))
        except (ValueError, IndexError):
            out.append({"ok": False, "why": f"child failed: {se.strip()[-300:]}", "open_s": None})
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--waves", type=int, default=8)
    ap.add_argument("--width", type=int, default=6)
    ap.add_argument("--lead", type=float, default=8.0, help="seconds for the children to bring CUDA up")
    ap.add_argument("--modes", nargs="*", default=["alone", "together", "load"])
    a = ap.parse_args()
    table = []
    for mode in a.modes:
        width = 1 if mode == "alone" else a.width
        load = None
        if mode == "load":
            load = subprocess.Popen([sys.executable, "-c", LOAD, str(a.waves * (a.lead + 10))])
        results = []
        for _ in range(a.waves):
            results += wave(width, a.lead if width > 1 or mode == "load" else 4.0)
        if load is not None:
            load.kill()
        fails = [r for r in results if not r["ok"]]
        reasons = Counter(r["why"][:160] for r in fails)
        for why, n in reasons.items():
            print(f"{mode}: {n} x {why}")
        opens = sorted(r["open_s"] for r in results if r["open_s"] is not None)
        table.append((mode, len(results), len(fails), opens[len(opens) // 2] if opens else None,
                      opens[-1] if opens else None))
    print("mode      opens  failed  open_s median  open_s max")
    for mode, n, f, med, mx in table:
        print(f"{mode:<9} {n:>5}  {f:>6}  {med!s:>13}  {mx!s:>10}")


if __name__ == "__main__":
    main()
