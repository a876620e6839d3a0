"""What a stopped neighbour's queued GPU work does to a timing, and whether timing.monitor.quiet_gpu sees it.

A batch's timing stops (SIGSTOP) the other evaluations' processes in the middle of their untimed
phases (sharing.DeviceGate.stoppable). GPU work such a process queued before it stopped still runs,
and contexts time-slice the GPU. This measures, in this process (the prober) against a neighbour
process running `torch.cuda._sleep` kernels of 1 ms:

1. the latency of quiet_gpu's probe (a one-element add, synchronised) with the GPU idle, and with
   the neighbour busy;
2. a 4 us relu timed with CUDA events, idle and beside the busy neighbour (what an unquiet timing
   would read);
3. a neighbour that queued `--queued-ms` of work and was stopped at once: how long quiet_gpu waits
   (about the queue's length is right), and the same with nothing queued (about 0 is right).

Usage: python bench/diag/neighbour_drain.py [--queued-ms 300]"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

NEIGHBOUR = r"""
import sys, time, torch
mode, ms = sys.argv[1], float(sys.argv[2])
torch.zeros(1, device="cuda"); torch.cuda.synchronize()
s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
s.record(); torch.cuda._sleep(1_000_000); e.record(); torch.cuda.synchronize()
per_ms = int(1_000_000 / s.elapsed_time(e))  # cycles per ms at this clock
if mode == "busy":
    print("ready", flush=True)
    while True:
        for _ in range(10):
            torch.cuda._sleep(per_ms)
        torch.cuda.synchronize()
else:  # queue: ms of 1 ms kernels, then idle on the host
    for _ in range(int(ms)):
        torch.cuda._sleep(per_ms)
    print("queued", flush=True)
    time.sleep(1000)
"""


def q(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queued-ms", type=float, default=300.0)
    args = ap.parse_args()
    import torch

    from harness.timing.monitor import quiet_gpu
    x = torch.zeros(1, device="cuda")
    a = torch.randn(1 << 16, device="cuda")
    torch.cuda.synchronize()

    def probes(n=200):
        out = []
        for _ in range(n):
            t = time.perf_counter()
            x.add_(1)
            torch.cuda.synchronize()
            out.append((time.perf_counter() - t) * 1e6)
        return out

    def relu_us(n=200):
        out = []
        for _ in range(n):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            torch.relu(a)
            e.record()
            e.synchronize()
            out.append(s.elapsed_time(e) * 1e3)
        return out

    def neighbour(mode, ms=0.0):
        p = subprocess.Popen([sys.executable, "-c", NEIGHBOUR, mode, str(ms)], stdout=subprocess.PIPE,
                             text=True, start_new_session=True)
        line = p.stdout.readline().strip()
        return p, line

    rows = {}
    probes(50), relu_us(50)
    rows["idle"] = {"probe_us": probes(), "relu_us": relu_us(), "quiet": quiet_gpu(torch, 200.0, 3, 2.0)}
    p, line = neighbour("busy")
    assert line == "ready", line
    time.sleep(0.5)
    rows["neighbour busy"] = {"probe_us": probes(), "relu_us": relu_us(), "quiet": quiet_gpu(torch, 200.0, 3, 2.0)}
    os.killpg(p.pid, signal.SIGKILL)
    p.wait()
    for label, ms in ((f"stopped, {args.queued_ms:g} ms queued", args.queued_ms), ("stopped, nothing queued", 0.0)):
        p, line = neighbour("queue", ms)
        os.killpg(p.pid, signal.SIGSTOP)
        t = time.perf_counter()
        res = quiet_gpu(torch, 200.0, 3, 10.0)
        res["wall_s"] = time.perf_counter() - t
        rows[label] = {"quiet": res, "relu_us": relu_us()}
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()

    print(json.dumps({k: {kk: (vv if kk == "quiet" else [round(v, 2) for v in vv]) for kk, vv in r.items()}
                      for k, r in rows.items()})[:4000], file=sys.stderr)
    print(f"{'case':<28} {'probe p50':>9} {'p90':>7} {'max':>8} {'relu p50 us':>11} {'relu p90':>8} "
          f"{'quiet':>5} {'quiet_s':>8} {'probes':>6}")
    for k, r in rows.items():
        pr, rl, qq = r.get("probe_us"), r["relu_us"], r["quiet"]
        pcols = (f"{q(pr, .5):>9.1f} {q(pr, .9):>7.1f} {max(pr):>8.1f}" if pr else f"{'-':>9} {'-':>7} {'-':>8}")
        print(f"{k:<28} {pcols} {statistics.median(rl):>11.2f} {q(rl, .9):>8.2f} "
              f"{str(qq['quiet']):>5} {qq['quiet_s']:>8.3f} {qq['quiet_probes']:>6}")


if __name__ == "__main__":
    main()
