"""Is relu_add_4m's per-evaluation offset (#5: 20 us by kernel spans, 1.84% spread over 5 fresh
candidates, 0.95% over 5 evaluations of one reference process) where its memory lies?

Session 8 moved each call's inputs behind a random spacer and saw no change; the forward's own
intermediates (x + y, the relu's output) stayed where the caching allocator keeps giving them. Here
each of N fresh processes times the forward by kernel spans with the harness's loop
(timing.loop.time_calls(spans=True): hold, read flush, fresh inputs) in two modes, 8 blocks of 50 calls:

  one      as the harness does today: every allocation in the default pool
  rotate   call i makes its inputs and runs its forward inside memory pool i % 8
           (torch.cuda.MemPool), so the inputs and every intermediate land in 8 different places

Printed per kernel and mode: the spread of process medians (max/min - 1), the spread of block
medians inside a process, and, for `rotate`, the spread of the 8 pools' medians inside one process.
If the pools differ inside a process by about what processes differ by, placement is the cause, and
rotating pools averages it: the process medians of `rotate` should then spread less than `one`'s.
Usage: python bench/diag/placement_pools.py [--procs 6]
"""
from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "diag"))

KERNELS = {"relu_add_1m": (1 << 20, 2), "relu_add_4m": (1 << 22, 2), "relu_add_16m": (1 << 24, 2)}
POOLS, BLOCKS, CALLS = 8, 8, 50


def child() -> None:
    import contextlib

    from small_spread import relu_runner, span_child
    torch, loop, rec, rng = span_child()
    out: dict = {}
    for name, (n, k) in KERNELS.items():
        res = {}
        for mode in ("one", "rotate"):
            r = relu_runner(torch, n, k)
            r.span_recorder = lambda: rec
            pools = [torch.cuda.MemPool() for _ in range(POOLS)] if mode == "rotate" else None
            state = {"i": 0}
            inner_make, inner_fn = r.make_inputs, r.timed_callable("eager")

            def where():
                return torch.cuda.use_mem_pool(pools[state["i"] % POOLS]) if pools else contextlib.nullcontext()

            def make_inputs(seed, inner_make=inner_make):
                state["i"] += 1
                with where():
                    return inner_make(seed)

            def fn(*a, inner_fn=inner_fn):
                with where():
                    return inner_fn(*a)

            r.make_inputs, r.timed_callable = make_inputs, (lambda variant, fn=fn: fn)
            blocks, by_pool = [], [[] for _ in range(POOLS)]
            for b in range(BLOCKS):
                i0 = state["i"]
                rep = loop.time_calls(r, [rng.getrandbits(62) for _ in range(CALLS)],
                                      warmup=POOLS if b == 0 else 0, flush_l2=True, npos=0,
                                      hold_us=300.0, spans=True)
                spans = rep["span_ms"]
                if b == 0:
                    i0 = state["i"] - len(spans)
                blocks.append(spans)
                for j, s in enumerate(spans):
                    by_pool[(i0 + j + 1) % POOLS].append(s)
            res[mode] = {"blocks": blocks, "by_pool": by_pool}
        out[name] = res
    print(json.dumps(out))


def spread(xs):
    return max(xs) / min(xs) - 1


def main(procs: int) -> None:
    from small_spread import child_runs
    runs = child_runs(__file__, procs)
    summary = {}
    print(f"{len(runs)} processes; medians in us (kernel spans)")
    for name in KERNELS:
        for mode in ("one", "rotate"):
            meds, within, pools = [], [], []
            for r in runs:
                d = r[name][mode]
                xs = [x for blk in d["blocks"] for x in blk if x > 0]
                meds.append(statistics.median(xs) * 1e3)
                within.append(spread([statistics.median([x for x in blk if x > 0]) for blk in d["blocks"]]))
                if mode == "rotate":
                    pools.append(spread([statistics.median([x for x in p if x > 0]) for p in d["by_pool"]]))
            row = {"between_processes": spread(meds), "within_blocks_median": statistics.median(within),
                   "process_medians": [round(m, 3) for m in meds]}
            if pools:
                row["between_pools_in_process_median"] = statistics.median(pools)
            summary[f"{name}.{mode}"] = row
            print(f"{name:>13} {mode:>6}  between processes {row['between_processes']:6.2%}  "
                  f"blocks in one {row['within_blocks_median']:6.2%}  "
                  + (f"pools in one {row['between_pools_in_process_median']:6.2%}  " if pools else " " * 20)
                  + " ".join(f"{m:.3f}" for m in meds))
    print(json.dumps(summary))


if __name__ == "__main__":
    from small_spread import entry
    entry(child, main, 6)
