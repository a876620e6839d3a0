"""Where does a small kernel's per-process offset live: in the kernel, or in the launch around it? (#5)

Sessions 8-12 found that each fresh process times a 4 us relu with its own offset (process medians
spread 5-13%, blocks within one process under 1-2%), not explained by input placement, streams, code
copies, the flush buffer, the CPU or the address layout. Events measure from the start event's
timestamp to the end event's, so the interval also holds the GPU front end's work of starting the
kernel (ncu's kernel-only time is 2.3 us of the 4 us).

Each of N fresh processes times relu on 64K floats and relu(x + y) on 4M floats with the harness's
loop (timing.loop.time_calls: hold, read flush, events, fresh inputs) in three blocks of 200 calls:

  events    as the harness times
  cupti     the same with kernel spans on (timing.loop.time_calls(spans=True)): each call's forward's
            own first start to last end from CUPTI's records (GPU timestamps, as nsys), beside the
            events' interval of the same call
  graph     the forward replayed from a CUDA graph (timing.cuda_graph), events

The parent prints, per metric, the process medians and their spread (max/min - 1). If the kernels'
own durations spread far less than the events' intervals, the offset is in the launch path.

Usage: python bench/diag/offset_source.py [--procs 8]
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "diag"))

KERNELS = {"relu_64k": (1 << 16, 1), "relu_add_4m": (1 << 22, 2)}


def child() -> None:
    import random

    import torch

    from harness import cupti
    from harness.timing import loop
    from harness.timing.hold import pin
    from small_spread import relu_runner

    pin(torch)
    rng = random.Random()
    rec, why = cupti.KernelRecorder.open(torch)
    out: dict = {"cupti": why or rec.path}
    for name, (n, k) in KERNELS.items():
        r = relu_runner(torch, n, k)
        r.span_recorder = lambda: rec  # as the worker's Runner offers it
        seeds = lambda: [rng.getrandbits(62) for _ in range(200)]  # noqa: E731
        res = {}
        res["events"] = loop.time_calls(r, seeds(), warmup=5, flush_l2=True, npos=0, hold_us=300.0)["times_ms"]
        if rec is not None:
            rep = loop.time_calls(r, seeds(), warmup=0, flush_l2=True, npos=0, hold_us=300.0, spans=True)
            res["cupti_events"] = rep["times_ms"]
            res["kernel_span"] = [x for x in rep["span_ms"] if x > 0]
        res["graph"] = loop.time_calls(r, seeds(), warmup=5, flush_l2=True, npos=0, hold_us=300.0,
                                       graph=True)["times_ms"]
        out[name] = res
    print(json.dumps(out))


def main(procs: int) -> None:
    from small_spread import child_runs
    runs = child_runs(__file__, procs)
    print("cupti:", runs[0]["cupti"] if runs else "-")
    summary = {}
    for name in KERNELS:
        metrics = [m for m in ("events", "cupti_events", "kernel_span", "graph")
                   if all(m in r[name] and r[name][m] for r in runs)]
        print(f"\n{name}")
        print(f"{'metric':>16} {'spread':>8}   process medians (us)")
        meds = {}
        for m in metrics:
            meds[m] = [statistics.median(r[name][m]) * 1e3 for r in runs]
            spread = max(meds[m]) / min(meds[m]) - 1
            summary[f"{name}.{m}"] = spread
            print(f"{m:>16} {spread:8.2%}   " + " ".join(f"{v:.3f}" for v in meds[m]))
        if "cupti_events" in meds and "kernel_span" in meds and len(runs) > 2 and len(set(meds["kernel_span"])) > 1:
            r_ = statistics.correlation(meds["cupti_events"], meds["kernel_span"])
            print(f"  correlation of process medians, events with CUPTI on vs the kernels' own span: {r_:.2f}")
            summary[f"{name}.r_events_span"] = r_
    print(json.dumps(summary))


if __name__ == "__main__":
    from small_spread import entry
    entry(child, main, 8)
