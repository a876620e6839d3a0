"""Does a process's offset on a short forward depend on how many other CUDA contexts were alive when it
started? (#5, session 21)

In the fidelity sets of session 21 every process of a set's first evaluation read relu(x + y) on 4M
floats about 1% slower than the later evaluations' processes, and so did the reference session's
first process in every run, while the reference's further processes (started later, beside more
contexts) did not. Here each measuring process starts with k idle processes holding a CUDA context
(k = 0 to 8, in shuffled order, `--reps` times), and times that forward with the harness's loop
(timing.loop.time_calls: 300 us hold, read flush, fresh inputs, kernel spans), 200 calls. The table gives
each k's process medians: if they fall with k, the offset is the GPU's state at a context's start,
not a draw of each process.
Usage: python bench/diag/context_count.py [--reps 2]
"""
from __future__ import annotations

import json
import random
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "diag"))

KS = (0, 1, 2, 4, 6, 8)


def ballast() -> None:
    import torch
    torch.cuda.init()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    print("ready", flush=True)
    sys.stdin.read()  # until the parent closes it


def measure() -> None:
    from small_spread import relu_runner, span_child
    torch, loop, rec, rng = span_child()
    runner = relu_runner(torch, 1 << 22, 2)
    runner.span_recorder = lambda: rec
    rep = loop.time_calls(runner, [rng.getrandbits(62) for _ in range(200)], warmup=5, flush_l2=True, npos=0,
                          hold_us=300.0, spans=True)
    spans = [x for x in rep["span_ms"] if x > 0]
    print(json.dumps({"span_us": statistics.median(spans) * 1e3, "events_us": statistics.median(rep["times_ms"]) * 1e3}))


def main(reps: int) -> None:
    rows: dict[int, list] = {k: [] for k in KS}
    for _ in range(reps):
        order = list(KS)
        random.shuffle(order)
        for k in order:
            held = [subprocess.Popen([sys.executable, __file__, "--child", "ballast"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True) for _ in range(k)]
            try:
                for p in held:
                    assert p.stdout.readline().strip() == "ready"
                out = subprocess.run([sys.executable, __file__, "--child", "measure"], capture_output=True, text=True,
                                     timeout=300)
                if out.returncode:
                    print(out.stderr[-1500:])
                    continue
                rows[k].append(json.loads(out.stdout.strip().splitlines()[-1]))
                print(f"k={k}: {rows[k][-1]}", flush=True)
            finally:
                for p in held:
                    p.stdin.close()
                for p in held:
                    p.wait(timeout=60)
    print(f"{'contexts alive':>15} {'span us (each process)':<40} {'events us (each process)'}")
    for k in KS:
        spans = " ".join(format(r["span_us"], ".2f") for r in rows[k])
        print(f"{k:>15} {spans:<40} " + " ".join(format(r["events_us"], ".2f") for r in rows[k]))
    print(json.dumps({k: v for k, v in rows.items()}))


if __name__ == "__main__":
    if "--child" in sys.argv:
        {"ballast": ballast, "measure": measure}[sys.argv[sys.argv.index("--child") + 1]]()
    else:
        main(int(sys.argv[sys.argv.index("--reps") + 1]) if "--reps" in sys.argv else 2)
