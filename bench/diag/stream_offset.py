"""Does a short forward's per-process offset follow the process, or the stream it is launched on, or
the L2 flush before it? (#5, session 22)

relu(x + y) on 4M floats (two dependent launches) reads a constant offset per fresh process, about
0.15 us of sd (bench/results/fidelity-*.md, session 17: the gap before the second launch), which the
harness averages by timing a side in several processes. If the offset belonged to the hardware queue a
stream is given, one process could draw several offsets by timing on several streams; if it came from
what the flush evicts (launch metadata, page tables), it would vanish with the flush off.

Each of `--procs` fresh processes times the forward with the harness's loop (timing.loop.time_calls: 300 us
hold, fresh inputs, kernel spans), `--calls` calls per case: on its default stream, on each of 8 new
streams, on one high-priority stream, and the default stream again (two passes), and once with the
flush off. The table gives each process's medians; the summary splits the sd between processes and
between streams within one.
Usage: python bench/diag/stream_offset.py [--procs 6] [--calls 100]
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "diag"))

from small_spread import arg, child_runs, relu_add_4m_child  # noqa: E402

STREAMS = 8


def child() -> None:
    torch, loop, runner, rng, _ = relu_add_4m_child()
    calls = arg("--calls", 100)

    def med(stream=None, flush=True) -> float:
        seeds = [rng.getrandbits(62) for _ in range(calls)]
        ctx = torch.cuda.stream(stream) if stream is not None else torch.cuda.stream(torch.cuda.current_stream())
        with ctx:
            rep = loop.time_calls(runner, seeds, warmup=5, flush_l2=flush, npos=0, hold_us=300.0, spans=True)
        spans = [x for x in rep["span_ms"] if x > 0]
        return round(statistics.median(spans) * 1e3, 3)

    streams = [torch.cuda.Stream() for _ in range(STREAMS)]
    high = torch.cuda.Stream(priority=torch.cuda.Stream.priority_range()[1] if hasattr(torch.cuda.Stream, "priority_range")
                             else -1)
    out: dict = {"default": [], "streams": [[] for _ in streams], "high": [], "noflush": []}
    for _ in range(2):
        out["default"].append(med())
        for i, s in enumerate(streams):
            out["streams"][i].append(med(s))
        out["high"].append(med(high))
    out["noflush"].append(med(flush=False))
    print(json.dumps(out))


def sd(xs: list[float]) -> float:
    return statistics.stdev(xs) if len(xs) > 1 else 0.0


def main(procs: int) -> None:
    runs = child_runs(__file__, procs, ["--calls", str(arg("--calls", 100))])
    print("process  default (2 passes)   streams 1-8 (mean of 2 passes)                          high   no flush")
    for i, r in enumerate(runs):
        st = [statistics.mean(x) for x in r["streams"]]
        print(f"{i:7d}  {r['default'][0]:6.2f} {r['default'][1]:6.2f}   " + " ".join(f"{x:6.2f}" for x in st)
              + f"   {statistics.mean(r['high']):6.2f}   {r['noflush'][0]:6.2f}")
    if len(runs) < 2:
        return
    proc_means = [statistics.mean([statistics.mean(x) for x in r["streams"]]) for r in runs]
    within = [sd([statistics.mean(x) for x in r["streams"]]) for r in runs]
    repeat = [sd(x) for r in runs for x in r["streams"]]  # the same stream, pass 1 against pass 2
    print(f"sd between processes (default stream, pass 1): {sd([r['default'][0] for r in runs]):.3f} us")
    print(f"sd between processes (mean over its 8 streams): {sd(proc_means):.3f} us")
    print(f"sd between streams within a process (mean): {statistics.mean(within):.3f} us")
    print(f"sd of one stream's two passes (mean): {statistics.mean(repeat):.3f} us")
    print(f"sd between processes, flush off: {sd([r['noflush'][0] for r in runs]):.3f} us")
    print(json.dumps(runs))


if __name__ == "__main__":
    if "--child" in sys.argv:
        child()
    else:
        main(arg("--procs", 6))
