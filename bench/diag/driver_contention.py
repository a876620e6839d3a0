"""Which of a new process's CUDA start-up steps are paid machine-wide?

On two GPUs each evaluation of a batch runs about a fifth slower than on one, with the host's CPUs
nearly idle (bench/results/multigpu-NVIDIA_H200.md, session 46), and a CUDA context made beside four
more on the other GPU took twice as long as beside three on its own (session 37). This starts
`--procs` processes at once, all on GPU 0 or alternately on GPUs 0 and 1, each with torch imported
before the start, and times each step a harness process takes at its start: the context, a 1 GB
allocation filled with NaN (what every process does before a solution runs), allocations freed back
to the driver, first launches of a few library kernels (module loading), and pinned host memory.
A step that takes as long split over two GPUs as on one is paid in a lock of the whole machine.

    python bench/diag/driver_contention.py [--procs 4] [--rounds 3]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def one() -> None:
    import torch
    sys.stdin.readline()  # the start, for every process at once
    t = time.perf_counter
    out = {}
    t0 = t()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    out["context"] = t() - t0
    t0 = t()
    x = torch.empty(1 << 28, device="cuda")  # 1 GB of float32
    x.fill_(float("nan"))
    torch.cuda.synchronize()
    out["alloc_1gb_nan"] = t() - t0
    del x
    t0 = t()
    torch.cuda.empty_cache()
    for _ in range(8):
        y = torch.empty(1 << 26, device="cuda")
        del y
        torch.cuda.empty_cache()
    torch.cuda.synchronize()
    out["alloc_free_8x256mb"] = t() - t0
    t0 = t()
    a = torch.randn(64, 64, 32, 32, device="cuda")
    w = torch.randn(64, 64, 3, 3, device="cuda")
    torch.nn.functional.conv2d(a, w)
    torch.softmax(a, dim=1)
    torch.matmul(a.view(-1, 1024), a.view(1024, -1)[:, :64])
    torch.nn.functional.group_norm(a, 8)
    torch.cuda.synchronize()
    out["first_library_kernels"] = t() - t0
    t0 = t()
    h = torch.empty(1 << 24, pin_memory=True)
    del h
    out["pinned_64mb"] = t() - t0
    print(json.dumps(out), flush=True)


def round_(procs: int, gpus: list[int]) -> list[dict]:
    kids = []
    for i in range(procs):
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(gpus[i % len(gpus)])}
        kids.append(subprocess.Popen([sys.executable, __file__, "--one"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env=env))
    time.sleep(8)  # every one has imported torch
    for k in kids:
        k.stdin.write("go\n")
        k.stdin.flush()
    return [json.loads(k.communicate(timeout=120)[0].strip().splitlines()[-1]) for k in kids]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if args.one:
        one()
        return 0
    layouts = [("1 process, GPU 0", 1, [0]), (f"{args.procs} on GPU 0", args.procs, [0]),
               (f"{args.procs} over GPUs 0,1", args.procs, [0, 1]), (f"{2 * args.procs} over GPUs 0,1", 2 * args.procs, [0, 1])]
    rows = []
    for name, procs, gpus in layouts:
        steps: dict[str, list[float]] = {}
        for _ in range(args.rounds):
            for r in round_(procs, gpus):
                for k, v in r.items():
                    steps.setdefault(k, []).append(v)
        rows.append((name, {k: statistics.median(v) * 1e3 for k, v in steps.items()}))
    keys = list(rows[0][1])
    print("| started at once | " + " | ".join(f"{k} ms" for k in keys) + " |")
    print("|---|" + "---:|" * len(keys))
    for name, med in rows:
        print(f"| {name} | " + " | ".join(f"{med[k]:.0f}" for k in keys) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
