"""Can a process outside the candidate's time its GPU calls, to microseconds?

On a GPU each side times itself with CUDA events in its own process, and only the parent's wall clock
around a round is out of the candidate's reach; that wall carries the host's per-call work and its
noise (about 1 ms a call, +-30% between two processes), so work done outside the events, where the
inputs are made, passes under its floor (bench/results/clock-checks.md, session 46). A clock like
the CPU path's would time each call from outside: the side enqueues the whole call ahead, its stream
held by a stream memory wait (`cuStreamWaitValue32`) on a host-mapped word; the clock (this process,
no CUDA) writes the word, and the call's last operation writes another (`cuStreamWriteValue32`)
that the clock spins on. No host work of the side's lies between the two stamps.

    python bench/diag/gpu_clock.py [--procs 4] [--calls 200] [--floats 16777216] [--mode gated|host]
    python bench/diag/gpu_clock.py --overlap     # do two processes' kernels ever run at once?

Prints, per side process, the clock's interval less the side's own events around the forward
(what the clock adds: its spread is the floor such a clock could hold a candidate to), for `gated`
(the call enqueued ahead, released by the word) and `host` (the side's host waits for the word and
launches then, as the timing loop does now). `--overlap` launches a spinning kernel in two processes
at once, each stamping the GPU's global timer at its start and end: whether another context's kernel
can run while one of ours does (time-slicing says not) decides whether a trusted process's copy into
a candidate's inputs can be watched as it lands.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import mmap
import os
import statistics
import subprocess
import sys
import time

WORDS = 4096
FLAG, DONE, READY = 0, 64, 128  # byte offsets of the u32 words in the shared page

_STAMP_PTX = """
.version 7.0
.target sm_75
.address_size 64
.visible .entry stamp_spin(.param .u64 out, .param .u64 ns)
{
    .reg .pred %p;
    .reg .b32 %r<3>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [out];
    ld.param.u64 %rd2, [ns];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %ctaid.x;
    or.b32 %r1, %r1, %r2;
    setp.ne.u32 %p, %r1, 0;
    mov.u64 %rd3, %globaltimer;
    @%p bra $L_spin;
    st.volatile.global.u64 [%rd1], %rd3;
$L_spin:
    mov.u64 %rd4, %globaltimer;
    sub.s64 %rd5, %rd4, %rd3;
    setp.lt.s64 %p, %rd5, %rd2;
    @%p bra $L_spin;
    mov.u32 %r1, %tid.x;
    or.b32 %r1, %r1, %r2;
    setp.ne.u32 %p, %r1, 0;
    @%p bra $L_end;
    st.volatile.global.u64 [%rd1+8], %rd4;
$L_end:
    ret;
}
"""


def _page(path: str, create: bool) -> mmap.mmap:
    fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o600)
    try:
        if create:
            os.ftruncate(fd, WORDS)
        return mmap.mmap(fd, WORDS, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)


def _u32(mm, off):
    return ctypes.c_uint32.from_buffer(mm, off)


# -- a side: CUDA, torch ----------------------------------------------------------------------------

def side(path: str, calls: int, floats: int, mode: str, overlap: bool) -> None:
    import torch
    from ctypes import POINTER, c_uint, c_uint32, c_uint64, c_void_p
    cu = ctypes.CDLL("libcuda.so.1")

    def check(rc, what):
        if rc:
            raise RuntimeError(f"{what}: CUresult {rc}")
    torch.cuda.init()
    torch.zeros(1, device="cuda")
    mm = _page(path, False)
    host = ctypes.addressof(ctypes.c_char.from_buffer(mm))
    check(cu.cuMemHostRegister_v2(c_void_p(host), ctypes.c_size_t(WORDS), c_uint(1 | 2)), "cuMemHostRegister")
    dev = c_uint64()
    check(cu.cuMemHostGetDevicePointer_v2(ctypes.byref(dev), c_void_p(host), c_uint(0)), "cuMemHostGetDevicePointer")
    wait = cu.cuStreamWaitValue32_v2
    wait.argtypes = [c_void_p, c_uint64, c_uint32, c_uint]
    write = cu.cuStreamWriteValue32_v2
    write.argtypes = [c_void_p, c_uint64, c_uint32, c_uint]
    stream = c_void_p(torch.cuda.current_stream().cuda_stream)
    flag, done = _u32(mm, FLAG), _u32(mm, DONE)
    ready = _u32(mm, READY)
    out = {"pid": os.getpid(), "events_ms": [], "gpu": torch.cuda.get_device_name()}
    if overlap:
        module, fn = c_void_p(), c_void_p()
        check(cu.cuModuleLoadData(ctypes.byref(module), _STAMP_PTX.encode()), "cuModuleLoadData")
        check(cu.cuModuleGetFunction(ctypes.byref(fn), module, b"stamp_spin"), "cuModuleGetFunction")
        launch = cu.cuLaunchKernel
        launch.argtypes = [c_void_p] + [c_uint] * 7 + [c_void_p, POINTER(c_void_p), c_void_p]
        stamps = torch.zeros(2 * calls, dtype=torch.int64, device="cuda")
        sm = torch.cuda.get_device_properties(0).multi_processor_count
        for k in range(calls):
            check(wait(stream, dev.value + FLAG, k + 1, 0), "cuStreamWaitValue32")
            a1, a2 = c_uint64(stamps.data_ptr() + 16 * k), c_uint64(200_000)  # a 0.2 ms spin
            params = (c_void_p * 2)(ctypes.cast(ctypes.pointer(a1), c_void_p), ctypes.cast(ctypes.pointer(a2), c_void_p))
            check(launch(fn, sm, 1, 1, 256, 1, 1, 0, stream, params, None), "cuLaunchKernel")
            check(write(stream, dev.value + DONE, k + 1, 0), "cuStreamWriteValue32")
            ready.value = k + 1
        torch.cuda.synchronize()
        out["stamps_ns"] = stamps.view(calls, 2).tolist()
    else:
        a = torch.randn(floats, device="cuda")
        b = torch.randn(floats, device="cuda")
        for _ in range(5):
            torch.relu(a + b)
        torch.cuda.synchronize()
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(calls)]
        for k in range(calls):
            if mode == "gated":
                check(wait(stream, dev.value + FLAG, k + 1, 0), "cuStreamWaitValue32")
                ev[k][0].record()
                torch.relu(a + b)
                ev[k][1].record()
                check(write(stream, dev.value + DONE, k + 1, 0), "cuStreamWriteValue32")
                ready.value = k + 1
                if k % 16 == 15:  # not too far ahead: each call's tensors stay alive until it runs
                    while done.value < k - 8:
                        time.sleep(0)
            else:
                ready.value = k + 1
                while flag.value < k + 1:
                    pass
                ev[k][0].record()
                torch.relu(a + b)
                ev[k][1].record()
                torch.cuda.synchronize()
                done.value = k + 1
        torch.cuda.synchronize()
        out["events_ms"] = [s.elapsed_time(e) for s, e in ev]
    cu.cuMemHostUnregister(c_void_p(host))
    print(json.dumps(out), flush=True)


# -- the clock: no CUDA ------------------------------------------------------------------------------

def clock(pages: list[mmap.mmap], calls: int, together: bool) -> list[list[float]]:
    """Each call of each side in turn (or of every side at once, `together`): wait until its side
    has it ready, let the device drain, stamp, release it, spin until it is done, stamp."""
    words = [(_u32(m, FLAG), _u32(m, DONE), _u32(m, READY)) for m in pages]
    deadline = time.monotonic() + 120
    times: list[list[float]] = [[] for _ in pages]
    now = time.perf_counter_ns
    for k in range(calls):
        sides = [words] if together else [[w] for w in words]
        for group in sides:
            for _, _, ready in group:
                while ready.value < k + 1:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"call {k} never ready")
            time.sleep(0.0003)
            t0 = now()
            for flag, _, _ in group:
                flag.value = k + 1
            for _, done, _ in group:
                while done.value < k + 1:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"call {k} never done")
            t1 = now()
            for i, w in enumerate(words):
                if w in group:
                    times[i].append((t1 - t0) / 1e6)
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--side", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--procs", type=int, default=4)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--floats", type=int, default=1 << 24)
    ap.add_argument("--mode", choices=["gated", "host"], default="gated")
    ap.add_argument("--overlap", action="store_true")
    args = ap.parse_args()
    if args.side:
        side(args.side, args.calls, args.floats, args.mode, args.overlap)
        return 0
    procs = 2 if args.overlap else args.procs
    paths = [f"/dev/shm/gpu_clock_{os.getpid()}_{i}" for i in range(procs)]
    pages = [_page(p, True) for p in paths]
    kids = [subprocess.Popen([sys.executable, __file__, "--side", p, "--calls", str(args.calls), "--floats",
                              str(args.floats), "--mode", args.mode] + (["--overlap"] if args.overlap else []),
                             stdout=subprocess.PIPE, text=True) for p in paths]
    try:
        times = clock(pages, args.calls, together=args.overlap)
        outs = [json.loads(k.communicate(timeout=120)[0].strip().splitlines()[-1]) for k in kids]
    finally:
        for k in kids:
            k.kill()
        for p in paths:
            os.unlink(p)
    if args.overlap:
        both = list(zip(outs[0]["stamps_ns"], outs[1]["stamps_ns"]))[5:]
        overlapped = sum(min(a[1], b[1]) > max(a[0], b[0]) for a, b in both)
        spans = [round((max(a[1], b[1]) - min(a[0], b[0])) / 1e3, 1) for a, b in both]
        print(f"two processes' 0.2 ms kernels released at once: {overlapped} of {len(both)} overlapped; "
              f"first start to last end median {statistics.median(spans)} us (0.2 ms apiece: ~200 at once, ~400 one after the other)")
        return 0
    print(f"| process | mode | calls | events median us | clock median us | clock less events: median us | p10-p90 us |")
    print("|---|---|---:|---:|---:|---:|---|")
    meds = []
    for i, (o, t) in enumerate(zip(outs, times)):
        ev, ck = o["events_ms"][10:], t[10:]
        over = sorted((c - e) * 1e3 for c, e in zip(ck, ev))
        meds.append(statistics.median(over))
        print(f"| {i} (pid {o['pid']}) | {args.mode} | {len(over)} | {statistics.median(ev) * 1e3:.1f} | "
              f"{statistics.median(ck) * 1e3:.1f} | {meds[-1]:.1f} | {over[len(over) // 10]:.1f}-{over[9 * len(over) // 10]:.1f} |")
    print(f"\n{outs[0]['gpu']}: the processes' medians of clock less events span {min(meds):.1f}-{max(meds):.1f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
