"""Does GPU work a frozen candidate left queued slow the reference's timed round, and does a quiet
probe see it?

The candidate is frozen (cgroup freezer, SIGSTOP) while the reference is timed, but work its process
queued on the GPU before the freeze runs on: a kernel spinning on the GPU's timer, or copies on a copy
engine. Contexts time-slice the GPU's compute engine, so the reference's kernels would wait for the
other context's slices and its events grow: a speedup inflated from outside the candidate's interval.
This starts a reference-like process (times a memory-bound add and a matmul with events, after a run
of one-element probes, the quiet check's: `monitor.quiet_gpu`) and an attacker process that, told
to, queues work and is then stopped (SIGSTOP) as the candidate is, for each kind of work in turn.

    python bench/diag/gpu_beside.py [--modes spin1,spinall,d2d,h2d] [--ms 300] [--lock] [--jail]

`--lock`: before the stop, this process (root) locks the attacker through the driver's checkpoint
API (`cuCheckpointProcessLock`: further CUDA calls blocked; does it wait for the queued work?), and
unlocks it after; prints what a lock and unlock cost on an idle process. `--jail`: the attacker runs
as nobody in a PID namespace of its own, as a jailed candidate does.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time

_SPIN_PTX = """
.version 7.0
.target sm_75
.address_size 64
.visible .entry spin(.param .u64 ns)
{
    .reg .pred %p;
    .reg .b64 %rd<6>;
    ld.param.u64 %rd2, [ns];
    mov.u64 %rd3, %globaltimer;
$L_spin:
    mov.u64 %rd4, %globaltimer;
    sub.s64 %rd5, %rd4, %rd3;
    setp.lt.s64 %p, %rd5, %rd2;
    @%p bra $L_spin;
    ret;
}
"""


def attacker(ms: float) -> None:
    import ctypes

    import torch
    cu = ctypes.CDLL("libcuda.so.1")
    torch.zeros(1, device="cuda")
    module, fn = ctypes.c_void_p(), ctypes.c_void_p()
    assert cu.cuModuleLoadData(ctypes.byref(module), _SPIN_PTX.encode()) == 0
    assert cu.cuModuleGetFunction(ctypes.byref(fn), module, b"spin") == 0
    launch = cu.cuLaunchKernel
    launch.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    side = torch.cuda.Stream()
    big_a = torch.empty(1 << 29, device="cuda")  # 2 GB
    big_b = torch.empty_like(big_a)
    host = torch.empty(1 << 28, pin_memory=True)  # 1 GB pinned
    dev = torch.empty(1 << 28, device="cuda")
    torch.cuda.synchronize()
    # how long one of each takes alone, to size the queue to `ms`
    t = time.perf_counter()
    big_b.copy_(big_a)
    torch.cuda.synchronize()
    d2d_s = time.perf_counter() - t
    t = time.perf_counter()
    dev.copy_(host, non_blocking=True)
    torch.cuda.synchronize()
    h2d_s = time.perf_counter() - t
    print(json.dumps({"d2d_2gb_ms": d2d_s * 1e3, "h2d_1gb_ms": h2d_s * 1e3}), flush=True)
    for line in sys.stdin:
        mode = line.strip()
        with torch.cuda.stream(side):
            if mode.startswith("spin"):
                arg = ctypes.c_uint64(int(ms * 1e6))
                params = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.pointer(arg), ctypes.c_void_p))
                blocks = 1 if mode == "spin1" else sms
                assert launch(fn, blocks, 1, 1, 32, 1, 1, 0, ctypes.c_void_p(side.cuda_stream), params, None) == 0
            elif mode == "d2d":
                for _ in range(max(1, int(ms / 1e3 / d2d_s))):
                    big_b.copy_(big_a, non_blocking=True)
            elif mode == "h2d":
                for _ in range(max(1, int(ms / 1e3 / h2d_s))):
                    dev.copy_(host, non_blocking=True)
        print("queued", flush=True)
        sys.stdin.readline()  # continued: let it finish
        torch.cuda.synchronize()
        print("done", flush=True)


def reference(calls: int) -> None:
    import torch
    a = torch.randn(1 << 25, device="cuda")
    b = torch.randn(1 << 25, device="cuda")
    m = torch.randn(4096, 4096, device="cuda")
    x = torch.zeros(1, device="cuda")
    for _ in range(5):
        a + b
        m @ m
    torch.cuda.synchronize()
    print("ready", flush=True)
    for _ in sys.stdin:
        probes = []
        for _ in range(20):
            t = time.perf_counter()
            x.add_(1)
            torch.cuda.synchronize()
            probes.append((time.perf_counter() - t) * 1e6)
        out = {"probe_us_first": probes[0], "probe_us_median": statistics.median(probes), "probe_us_max": max(probes)}
        for name, f in (("add_us", lambda: a + b), ("matmul_us", lambda: m @ m)):
            ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(calls)]
            for s, e in ev:
                s.record()
                f()
                e.record()
            torch.cuda.synchronize()
            out[name] = statistics.median(s.elapsed_time(e) * 1e3 for s, e in ev)
        print(json.dumps(out), flush=True)


class _Locker:
    """The driver's checkpoint lock, called from outside the process it locks."""

    class _Args(__import__("ctypes").Structure):
        import ctypes as _c
        _fields_ = [("timeoutMs", _c.c_uint), ("reserved0", _c.c_uint), ("reserved1", _c.c_uint64 * 7)]

    def __init__(self):
        import ctypes
        self.cu = ctypes.CDLL("libcuda.so.1")
        print("cuInit:", self.cu.cuInit(0), flush=True)

    def lock(self, pid: int, timeout_ms: int = 5000):
        import ctypes
        a = self._Args(timeoutMs=timeout_ms)
        t = time.perf_counter()
        rc = self.cu.cuCheckpointProcessLock(ctypes.c_int(pid), ctypes.byref(a))
        return round((time.perf_counter() - t) * 1e3, 2), rc

    def unlock(self, pid: int):
        import ctypes
        t = time.perf_counter()
        rc = self.cu.cuCheckpointProcessUnlock(ctypes.c_int(pid), None)
        return round((time.perf_counter() - t) * 1e3, 2), rc

    def cycle(self, pid: int):
        (a, rc), (b, rc2) = self.lock(pid), self.unlock(pid)
        return a, b, (rc, rc2)


def _leaf(pid: int) -> int:
    """The deepest first child under `pid` (unshare --fork, setpriv exec in place)."""
    for _ in range(50):
        try:
            with open(f"/proc/{pid}/task/{pid}/children") as f:
                kids = f.read().split()
        except OSError:
            return pid
        if not kids:
            return pid
        pid = int(kids[0])
    return pid


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--role", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--modes", default="spin1,spinall,d2d,h2d")
    ap.add_argument("--ms", type=float, default=300.0)
    ap.add_argument("--calls", type=int, default=50)
    ap.add_argument("--lock", action="store_true")
    ap.add_argument("--jail", action="store_true")
    args = ap.parse_args()
    if args.role == "attacker":
        attacker(args.ms)
        return 0
    if args.role == "reference":
        reference(args.calls)
        return 0
    def start(role, jail=False):
        pre = ["unshare", "--pid", "--fork", "--mount-proc", "setpriv", "--reuid=65534", "--regid=65534",
               "--clear-groups"] if jail else []
        return subprocess.Popen(pre + [sys.executable, os.path.abspath(__file__), "--role", role, "--ms", str(args.ms),
                                       "--calls", str(args.calls)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    att, ref = start("attacker", args.jail), start("reference")
    lock = _Locker() if args.lock else None
    try:
        print("attacker alone:", att.stdout.readline().strip())
        assert ref.stdout.readline().strip() == "ready"
        apid = _leaf(att.pid)  # the python under unshare's fork, under its machine pid
        if lock:
            costs = [lock.cycle(apid) for _ in range(20)]
            print(f"lock+unlock of an idle process (pid {apid}): rc {costs[0][2]}, lock ms median "
                  f"{statistics.median(c[0] for c in costs):.2f} max {max(c[0] for c in costs):.2f}, unlock ms median "
                  f"{statistics.median(c[1] for c in costs):.2f} max {max(c[1] for c in costs):.2f}")

        def timed() -> dict:
            ref.stdin.write("go\n")
            ref.stdin.flush()
            return json.loads(ref.stdout.readline())
        rows = [("alone", timed())]
        for mode in args.modes.split(","):
            att.stdin.write(mode + "\n")
            att.stdin.flush()
            assert att.stdout.readline().strip() == "queued"
            lock_ms = lock.lock(apid) if lock else None
            os.kill(apid, signal.SIGSTOP)  # frozen, as a candidate is while the reference is timed
            t = time.perf_counter()
            rows.append((mode, timed()))
            rows[-1][1]["round_ms"] = (time.perf_counter() - t) * 1e3
            rows[-1][1]["lock"] = lock_ms
            os.kill(apid, signal.SIGCONT)
            if lock:
                lock.unlock(apid)
            att.stdin.write("\n")
            att.stdin.flush()
            assert att.stdout.readline().strip() == "done"
            rows.append((mode + " (after)", timed()))
    finally:
        for p in (att, ref):
            p.kill()
    print(f"| attacker's queued work ({args.ms:.0f} ms) | probe us first / median / max | add us | matmul us | lock (ms, rc) |")
    print("|---|---|---:|---:|---|")
    for name, r in rows:
        print(f"| {name} | {r['probe_us_first']:.0f} / {r['probe_us_median']:.0f} / {r['probe_us_max']:.0f} | "
              f"{r['add_us']:.1f} | {r['matmul_us']:.1f} | {r.get('lock')} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
