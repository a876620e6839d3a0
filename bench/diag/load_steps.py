"""Where a candidate's load phase goes on a GPU (#3: 1.0-1.5 s per solution, under the slot's gate).

In fresh processes, after what a standby preloads (torch, torch.profiler, cpp_extension, harness
modules), the steps of runner.Runner's candidate set-up one by one: CUDA context, the launch hold
(timing.pin: Triton kernel and its check), the NaN poison, the environment fingerprint, and a
reference's trial-free start. Prints one line per process and the medians.
Usage: python bench/diag/load_steps.py [--procs 3]"""
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def child() -> None:
    sys.path.insert(0, str(ROOT))
    t = {}
    t0 = time.perf_counter()
    import torch
    import torch.profiler  # noqa: F401
    import torch.utils.cpp_extension  # noqa: F401

    from harness import problems, timing  # noqa: F401
    t["preload (standby)"] = time.perf_counter() - t0
    s = time.perf_counter()
    import triton  # noqa: F401
    import triton.language  # noqa: F401
    t["import triton"] = time.perf_counter() - s
    s = time.perf_counter()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    t["cuda context"] = time.perf_counter() - s
    s = time.perf_counter()
    timing.pin(torch)
    t["pin (hold kernel)"] = time.perf_counter() - s
    s = time.perf_counter()
    free, _ = torch.cuda.mem_get_info()
    n = max(min(int(free * 0.25), 8 << 30) // 4, 1)
    blk = torch.full((n,), float("nan"), device="cuda")
    torch.cuda.synchronize()
    del blk
    t["poison"] = time.perf_counter() - s
    s = time.perf_counter()
    from harness.process.child import fingerprint
    fingerprint("cuda")
    t["fingerprint"] = time.perf_counter() - s
    s = time.perf_counter()
    m = torch.nn.Linear(4096, 4096).cuda()
    torch.cuda.synchronize()
    t["a 4096x4096 Linear to cuda"] = time.perf_counter() - s
    del m
    print(json.dumps(t))


def main(procs: int) -> None:
    rows = []
    for _ in range(procs):
        s = time.perf_counter()
        p = subprocess.run([sys.executable, __file__, "--child"], capture_output=True, text=True, timeout=120)
        wall = time.perf_counter() - s
        row = json.loads(p.stdout.strip().splitlines()[-1])
        row["process wall"] = wall
        rows.append(row)
        print(json.dumps({k: round(v, 3) for k, v in row.items()}))
    print("medians (s):", {k: round(statistics.median(r[k] for r in rows), 3) for k in rows[0]})


if __name__ == "__main__":
    if "--child" in sys.argv:
        child()
    else:
        main(int(sys.argv[sys.argv.index("--procs") + 1]) if "--procs" in sys.argv else 3)
