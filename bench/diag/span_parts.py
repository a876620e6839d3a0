"""Which part of relu_add_4m's kernel span carries its per-process offset? (#5)

placement_pools.py (H100, 6 fresh processes) found the process medians of relu(x + y) in two groups
about 0.2 us apart at 1M, 4M and 16M floats alike, the same processes slow at every size, and
rotating the memory of the inputs and intermediates over 8 pools changed nothing. A constant offset
suggests the launch path between the two kernels rather than their memory traffic.

Each of N fresh processes times the forward by kernel spans with the harness's loop and splits every
call's span into the add kernel's duration, the gap to the relu kernel, and the relu's duration
(CUPTI's records); then, in 4 more blocks, it moves the L2 flush buffer (a 256 MB ballast held
before each block) to see whether the flush's placement moves the span inside one process.
Usage: python bench/diag/span_parts.py [--procs 8]
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "diag"))

N = 1 << 22


def child() -> None:
    from small_spread import relu_runner, span_child
    torch, loop, rec, rng = span_child()
    parts: list[tuple[float, float, float]] = []
    real = loop.call_work

    def spy(acts, windows, harness):  # each call's work as the harness finds it, split in three
        work = real(acts, windows, harness)
        for rest in work:
            if len(rest) == 2:
                (s1, e1, _), (s2, e2, _) = rest
                parts.append(((e1 - s1) / 1e3, (s2 - e1) / 1e3, (e2 - s2) / 1e3))
        return work

    loop.call_work = spy
    r = relu_runner(torch, N, 2)
    r.span_recorder = lambda: rec
    seeds = lambda: [rng.getrandbits(62) for _ in range(50)]  # noqa: E731
    base = []
    for b in range(4):
        base += loop.time_calls(r, seeds(), warmup=5 if b == 0 else 0, flush_l2=True, npos=0,
                                hold_us=300.0, spans=True)["span_ms"]
    base_parts = list(parts)
    ballast, moved = [], []
    for b in range(4):
        ballast.append(torch.empty(256 << 20, dtype=torch.uint8, device="cuda"))
        moved.append(statistics.median(loop.time_calls(r, seeds(), warmup=0, flush_l2=True, npos=0,
                                                       hold_us=300.0, spans=True)["span_ms"]) * 1e3)
    med = lambda i: statistics.median(p[i] for p in base_parts)  # noqa: E731
    print(json.dumps({"span": statistics.median(base) * 1e3, "add": med(0), "gap": med(1), "relu": med(2),
                      "n_parts": len(base_parts), "flush_moved": moved}))


def main(procs: int) -> None:
    from small_spread import child_runs
    runs = child_runs(__file__, procs)
    print(f"{len(runs)} processes, relu(x + y) on 4M floats, medians in us")
    print(f"{'proc':>4} {'span':>8} {'add':>8} {'gap':>7} {'relu':>8}   span with the flush buffer moved 4 times")
    for i, r in enumerate(runs):
        print(f"{i:>4} {r['span']:8.3f} {r['add']:8.3f} {r['gap']:7.3f} {r['relu']:8.3f}   "
              + " ".join(f"{x:.3f}" for x in r["flush_moved"]))
    summary = {k: max(r[k] for r in runs) - min(r[k] for r in runs) for k in ("span", "add", "gap", "relu")}
    summary["flush_moved_within_process_max"] = max(max(r["flush_moved"]) - min(r["flush_moved"]) for r in runs)
    print("range between processes (us):", " ".join(f"{k} {v:.3f}" for k, v in summary.items()))
    print(json.dumps(summary))


if __name__ == "__main__":
    from small_spread import entry
    entry(child, main, 8)
