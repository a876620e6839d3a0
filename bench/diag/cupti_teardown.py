"""Can a standby pay CUPTI's start-up before a candidate is timed? (#3: the kernel listing's first
profiler session costs 4-10 s of each passing extension solution, and a process that has run one
launches at ~27 us a call instead of ~7 us, profiler_launch_cost.py, so the harness starts the
profiler only after timing.)

Each fresh process, per kineto setting TEARDOWN_CUPTI (unset, "1", "0"): launch cost (2000
in-place adds, synchronised), an empty profiler session (the start-up), launch cost again, a second
session around one relu, launch cost again, and a 4 us relu timed with the harness's own loop
(timing.loop.time_calls) before and after the first session. If one setting gives back the launch cost
and the kernel's time after the session while the second session stays short, a standby can start
the profiler while it waits.
Usage: python bench/diag/cupti_teardown.py [--procs 2]"""
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def child() -> None:
    import random
    import time

    import torch
    from torch.profiler import ProfilerActivity, profile

    from small_spread import relu_runner  # this folder is on sys.path first
    from harness.timing import loop
    from harness.timing.hold import pin
    pin(torch)
    x = torch.randn(1 << 20, device="cuda")
    torch.cuda.synchronize()
    rng = random.Random()
    out = {}

    def launch_us(n=2000):
        x.add_(1.0)
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(n):
            x.add_(1.0)
        torch.cuda.synchronize()
        return (time.perf_counter() - t) / n * 1e6

    def relu_us():
        rep = loop.time_calls(relu_runner(torch, 1 << 16, 1), [rng.getrandbits(62) for _ in range(200)], warmup=3,
                              flush_l2=True, npos=0, hold_us=300.0)
        return statistics.median(rep["times_ms"]) * 1e3

    def session(work):
        t = time.perf_counter()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            if work:
                torch.relu(x)
                torch.cuda.synchronize()
        n = len({e.name for e in prof.events() if "CUDA" in str(getattr(e, "device_type", ""))})
        return time.perf_counter() - t, n

    out["launch_before_us"] = launch_us()
    out["relu_before_us"] = relu_us()
    out["start_s"], _ = session(False)
    out["launch_after_start_us"] = launch_us()
    out["relu_after_start_us"] = relu_us()
    out["listing_s"], out["listing_kernels"] = session(True)
    out["launch_after_listing_us"] = launch_us()
    print(json.dumps(out))


def main() -> None:
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--procs", type=int, default=2)
    args = ap.parse_args()
    rows = []
    for setting in (None, "1", "0"):
        for _ in range(args.procs):
            env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
            env.pop("TEARDOWN_CUPTI", None)
            if setting is not None:
                env["TEARDOWN_CUPTI"] = setting
            line = subprocess.run([sys.executable, __file__, "--child"], env=env, capture_output=True, text=True,
                                  timeout=300).stdout.strip().splitlines()
            if not line:
                print(f"TEARDOWN_CUPTI={setting}: child failed", file=sys.stderr)
                continue
            rows.append((setting or "unset", json.loads(line[-1])))
    keys = ["launch_before_us", "launch_after_start_us", "launch_after_listing_us", "relu_before_us",
            "relu_after_start_us", "start_s", "listing_s", "listing_kernels"]
    print(f"{'TEARDOWN_CUPTI':<15}" + "".join(f"{k:>24}" for k in keys))
    for setting, r in rows:
        print(f"{setting:<15}" + "".join(f"{r[k]:>24.3f}" if isinstance(r[k], float) else f"{r[k]:>24}" for k in keys))


if __name__ == "__main__":
    if "--child" in sys.argv:
        child()
    else:
        main()
