"""The timing loop, in two halves.

Child side (`time_calls`): one timed call per seed, each on fresh inputs generated from that seed in
fresh buffers, L2 flushed before the call (outside the measured interval), CUDA events around the call,
then a device-wide synchronize so work on any stream has finished before the output is fingerprinted.

Parent side (`measure`): reference and candidate alternate in rounds on the same GPU, using the same
secret seeds, so clock and thermal drift cancel in the ratio; the candidate's process group is stopped
while the reference is timed. Sampling stops adaptively once the standard error of the mean is under a
target for both sides (or a budget runs out). Every timed output's fingerprint is compared with the
reference's for the same seed, and the reported device times are checked against the host clocks.
"""
from __future__ import annotations

import math
import os
import random
import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Optional

# --------------------------------------------------------------------------------------------------
# Child side

_PINNED: dict[str, Any] = {}


def pinned(name: str, default: Any = None) -> Any:
    """The primitive `name` as pin() took it (before the solution's import), or `default` unpinned."""
    return _PINNED.get(name, default)


def is_pinned() -> bool:
    return bool(_PINNED)


def pin(torch) -> None:
    """Keep references to the primitives the timing loop relies on, taken before the candidate's
    module is imported: rebinding `torch.sum`, `torch.cuda.synchronize` or `time.perf_counter`
    afterwards (to skip the flush or the final sync) does not reach the loop. The host-clock checks
    in the parent remain the defence against anything subtler."""
    _PINNED.update(sum=torch.sum, zeros=torch.zeros, empty=torch.empty, perf_counter=time.perf_counter,
                   clone=torch.clone, equal=torch.equal)  # the last two: worker.trials' input check
    if torch.cuda.is_available():
        _PINNED.update(synchronize=torch.cuda.synchronize, Event=torch.cuda.Event)
        _PINNED["hold"] = _gpu_hold(torch)


# Every thread spins on the GPU's nanosecond timer. Launched as two 1024-thread blocks per SM it
# takes every thread slot of every SM, so it holds the whole GPU: a kernel the forward launches on
# another stream (unseen by the interval's events) cannot run hidden inside the hold.
# torch.cuda._sleep is a single thread and would leave the GPU free for exactly that; torch's own
# elementwise kernels are register-bound below full occupancy. PTX loaded through the driver, not a
# Triton kernel: Triton's first launch cost each process about 0.6 s (H100), paid again by every
# further process a short problem is timed in, against 0.02 s for this (bench/diag/hold_start.py).
_HOLD_PTX = """
.version 7.0
.target sm_75
.address_size 64
.visible .entry harness_hold(.param .u64 ns)
{
    .reg .pred %p;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [ns];
    mov.u64 %rd2, %globaltimer;
$L_spin:
    mov.u64 %rd3, %globaltimer;
    sub.s64 %rd4, %rd3, %rd2;
    setp.lt.s64 %p, %rd4, %rd1;
    @%p bra $L_spin;
    ret;
}
"""


def _hold_kernel(torch):
    """spin(ns): the hold kernel launched on the current stream. The CUDA context must be current."""
    import ctypes
    from ctypes import POINTER, c_uint, c_uint64, c_void_p

    cuda = ctypes.CDLL("libcuda.so.1")  # an instance of our own: the argtypes below are set on it alone

    def check(rc: int, what: str) -> None:
        if rc:
            raise RuntimeError(f"{what}: CUresult {rc}")

    module, fn = c_void_p(), c_void_p()
    check(cuda.cuModuleLoadData(ctypes.byref(module), _HOLD_PTX.encode()), "cuModuleLoadData")
    check(cuda.cuModuleGetFunction(ctypes.byref(fn), module, b"harness_hold"), "cuModuleGetFunction")
    launch = cuda.cuLaunchKernel
    launch.argtypes = [c_void_p] + [c_uint] * 7 + [c_void_p, POINTER(c_void_p), c_void_p]
    device = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(device)
    blocks = props.multi_processor_count * max(1, props.max_threads_per_multi_processor // 1024)
    # the current stream as torch's own launches read it, its getter taken now: a solution rebinding
    # torch.cuda's stream helpers later does not move the hold off the forward's stream
    raw_stream = torch._C._cuda_getCurrentRawStream
    arg = c_uint64(0)
    params = (c_void_p * 1)(ctypes.cast(ctypes.pointer(arg), c_void_p))

    def spin(ns: float) -> None:
        arg.value = max(0, int(ns))
        check(launch(fn, blocks, 1, 1, 1024, 1, 1, 0, raw_stream(device), params, None), "cuLaunchKernel")

    return spin


def _gpu_hold(torch):
    """A callable that holds the current stream for about `us` microseconds with a kernel that fills
    the GPU, or None where the driver cannot load it or the hold turns out not to keep a kernel on
    another stream waiting (checked here, on this GPU)."""
    P = _PINNED
    try:
        side, probe = torch.cuda.Stream(), P["zeros"](1, device="cuda")  # and the context made current
        spin = _hold_kernel(torch)
        Event, sync = P["Event"], P["synchronize"]
        ev = lambda: Event(enable_timing=True)  # noqa: E731
        spin(1000)
        with torch.cuda.stream(side):
            probe.add_(1)
        sync()
        a, b, c = ev(), ev(), ev()
        a.record()
        spin(300_000)
        b.record()
        with torch.cuda.stream(side):  # free to start at once: it must still wait for the hold
            probe.add_(1)
            c.record(side)
        sync()
        if a.elapsed_time(c) < 0.95 * a.elapsed_time(b) or a.elapsed_time(b) < 0.29:
            return None
    except Exception:
        return None
    return lambda us: spin(us * 1e3)


# the projection's signs: one fixed +-1 pattern per output size, the same in every process (a
# candidate's and the reference's fingerprints of one output must agree)
_SIGN_SEED = 0x5167_A5ED
_SIGNS: dict = {}
PRINT_BUFFER_BYTES = 256 << 20  # a timing request's copies of its outputs, fingerprinted together


def _tensors(torch, out) -> list:
    return [out] if isinstance(out, torch.Tensor) else [t for t in out if isinstance(t, torch.Tensor)]


def _reduced_as(torch, t):
    """The dtype a fingerprint reduces `t` in: the common float types as they are; others (integers,
    bool, float8, which has next to no arithmetic) through float64."""
    return t.dtype if t.dtype in (torch.float64, torch.float32, torch.float16, torch.bfloat16) else torch.float64


def _signs(torch, n: int, device):
    key = (str(device), n)
    if key not in _SIGNS:
        if len(_SIGNS) >= 4:  # a process times one or two output sizes; never hold many
            _SIGNS.clear()
        gen = torch.Generator(device=device).manual_seed(_SIGN_SEED)
        _SIGNS[key] = torch.randint(0, 2, (n,), generator=gen, device=device, dtype=torch.int8) * 2 - 1
    return _SIGNS[key]


def _prints(torch, blocks: list, seeds: list[int], npos: int) -> list[list[float]]:
    """The fingerprints of len(seeds) calls at once: `blocks` holds, per output tensor, a (calls, n)
    tensor of its flattened values, one row per call (see _fingerprint)."""
    f64 = torch.float64
    parts = []  # per output tensor: n, k, and its (calls, 4 + k) values on the device
    for b in blocks:
        n = b.shape[1]
        if not n:
            parts.append((0, 0, None))
            continue
        k = min(npos, n)
        pos = torch.tensor([[r.randrange(n) for _ in range(k)] for r in map(random.Random, seeds)],
                           dtype=torch.long, device=b.device)
        # on a GPU, float32 accumulation (of float64 outputs, float64): a float64 sum of a float32
        # tensor reads a float64 copy of it, made first, and four such sums were most of the
        # fingerprint's GPU time. The GPU reduces in a tree, within 1e-6 of float64 at 16M elements
        # (tests/test_gpu.py); a CPU's float32 norms ran up to 2% off there, so a CPU stays in float64.
        acc = torch.float32 if b.is_cuda and b.dtype != f64 else f64
        total = b.sum(1, dtype=acc)
        # summed as it is: 2 * sum(b over s = 1) - sum(b) cancels, and in float32 the output's mean
        # then shows (1e-4 of the L2 norm at a mean of 1000 over 16M elements)
        proj = (b * _signs(torch, n, b.device)).sum(1, dtype=acc)  # s * b is exact
        head = torch.stack([total, torch.linalg.vector_norm(b, 1, dim=1, dtype=acc),
                            torch.linalg.vector_norm(b, 2, dim=1, dtype=acc), proj], 1).to(f64)
        parts.append((n, k, torch.cat([head, b.gather(1, pos).to(f64)], 1)))
    vals = [p[2] for p in parts if p[2] is not None]
    rows = (vals[0] if len(vals) == 1 else torch.cat(vals, 1)).cpu().tolist() if vals else [[] for _ in seeds]
    out = []
    for row in rows:
        fp: list[float] = []
        i = 0
        for n, k, v in parts:
            if v is None:
                fp += [0.0] * 6
                continue
            fp += [float(n)] + row[i:i + 4] + [float(k)] + row[i + 4:i + 4 + k]
            i += 4 + k
        out.append(fp)
    return out


def _fingerprint(torch, out, seed: int, npos: int) -> list[float]:
    """Per output tensor: [numel, sum, abs-sum, L2 norm, a +-1 projection, k, k values at positions].
    The positions come from the call's seed, so an output cached for other inputs does not match the
    reference's fingerprint for these even where sums agree; the projection's signs are fixed per
    output size (any error not orthogonal to them shows). A timing request fingerprints its calls in
    batches (OutputPrints); this is one call's."""
    blocks = [t.detach().reshape(1, -1).to(_reduced_as(torch, t)) for t in _tensors(torch, out)]
    return _prints(torch, blocks, [seed], npos)[0]


class OutputPrints:
    """The fingerprints of a timing request's outputs. Each call's outputs are copied into a row of a
    buffer (one copy per output tensor, outside the interval), and a batch of rows is reduced at once
    after the calls: about a dozen small kernels, a readback and a synchronisation per call, and
    CUPTI records of them all, cost more host time than the forward they follow for a short
    problem (bench/diag/pair_cost.py). The buffer takes at most PRINT_BUFFER_BYTES and an eighth of
    the GPU's free memory; an output too large for two rows is fingerprinted in place, call by call."""

    def __init__(self, torch, npos: int, calls: int, free_bytes: Optional[int] = None):
        self.torch, self.npos, self.calls = torch, npos, calls
        self.budget = min(PRINT_BUFFER_BYTES, (free_bytes // 8) if free_bytes else PRINT_BUFFER_BYTES)
        self.fps: list[list[float]] = []
        self.seeds: list[int] = []
        self.layout: Optional[list] = None  # per output tensor: (numel, reduced dtype, device)
        self.bufs: Optional[list] = None

    def add(self, out, seed: int) -> None:
        torch = self.torch
        ts = _tensors(torch, out)
        layout = [(t.numel(), _reduced_as(torch, t), t.device) for t in ts]
        if self.seeds and (layout != self.layout or len(self.seeds) == self.bufs[0].shape[0]):
            self.flush()
        if layout != self.layout:
            self.layout, self.bufs = layout, None
            row = sum(n * dt.itemsize for n, dt, _ in layout)
            rows = min(self.calls, self.budget // max(row, 1))
            if rows >= 2 and ts:
                self.bufs = [torch.empty((rows, n), dtype=dt, device=dev) for n, dt, dev in layout]
        if self.bufs is None:
            self.fps.append(_fingerprint(torch, out, seed, self.npos))
            return
        i = len(self.seeds)
        for buf, t in zip(self.bufs, ts):
            buf[i].copy_(t.detach().reshape(-1))
        self.seeds.append(seed)

    def flush(self) -> None:
        if self.seeds:
            self.fps += _prints(self.torch, [b[:len(self.seeds)] for b in self.bufs], self.seeds, self.npos)
            self.seeds = []


def quiet_gpu(torch, probe_us: float, probes: int, max_s: float) -> dict:
    """Wait until the GPU runs no other context's work: a neighbour stopped in the middle of a phase
    (sharing.DeviceGate.stoppable) may have queued some. Contexts time-slice a GPU, so a one-element
    kernel waits for any other context's queued work (a time slice of it) and takes ~10-20 us when
    alone (bench/diag/neighbour_drain.py); `probes` of them in a row under `probe_us` is quiet."""
    x = torch.zeros(1, device="cuda")
    t0 = time.perf_counter()
    run = n = 0
    while run < probes:
        a = time.perf_counter()
        x.add_(1)
        torch.cuda.synchronize()
        n += 1
        run = run + 1 if (time.perf_counter() - a) * 1e6 < probe_us else 0
        if time.perf_counter() - t0 > max_s:
            break
    return {"quiet_s": time.perf_counter() - t0, "quiet_probes": n, "quiet": run >= probes}


def _persisting_l2_reset():
    """cudaCtxResetPersistingL2Cache, if the runtime library can be found: lines a solution marked
    persisting (an access-policy window on its weights) would otherwise survive the flush."""
    import ctypes
    import ctypes.util
    import glob
    import os
    import sys
    names = [ctypes.util.find_library("cudart")] + sorted(
        p for d in sys.path for p in glob.glob(os.path.join(d, "nvidia", "*", "lib", "libcudart.so*")))
    names += sorted(glob.glob(os.path.join(os.path.dirname(__import__("torch").__file__), "lib", "libcudart*.so*")))
    for name in filter(None, names):
        try:
            fn = ctypes.CDLL(name).cudaCtxResetPersistingL2Cache
            return fn
        except (OSError, AttributeError):
            continue
    return None


def nvml_handle(visible: Optional[str] = None):
    """(pynvml, handle) for the first GPU of `visible` (a CUDA_VISIBLE_DEVICES value, by index or
    UUID; default: this process's), or (None, None) without NVML. NVML makes no CUDA context."""
    try:
        import os

        import pynvml  # nvidia-ml-py
        pynvml.nvmlInit()
        idx = ((os.environ.get("CUDA_VISIBLE_DEVICES") if visible is None else visible) or "0").split(",")[0]
        h = (pynvml.nvmlDeviceGetHandleByUUID(idx) if idx.startswith("GPU-")
             else pynvml.nvmlDeviceGetHandleByIndex(int(idx)))
        return pynvml, h
    except Exception:
        return None, None


# clock-event reasons (NVML bit values) that mark a transient slowdown: samples taken under one are
# not what the kernel costs. The software power cap is left out on purpose: power-heavy kernels run
# under it in steady state, so it is part of what they cost (its time is reported, not dropped).
SLOWDOWNS = {0x8: "hw_slowdown", 0x20: "sw_thermal", 0x40: "hw_thermal", 0x80: "hw_power_brake"}
POWER_CAP = 0x4


class GpuMonitor:
    """NVML readings of one GPU. The parent takes them around every timing round, and decides on
    them which rounds are discarded as throttled: a candidate's process could report anything about
    its own clocks. The violation counters are cumulative device-wide nanoseconds spent power- or
    thermally-limited, so a slowdown inside a round is seen even when the clocks have recovered by
    the time the round ends. (Children read the SM clock after each call, and the environment.)"""

    def __init__(self, visible: Optional[str] = None):
        self.nvml, self.h = nvml_handle(visible)
        self.max_sm = self._get(lambda n, h: n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_SM))

    def _get(self, f):
        if self.h is None:
            return None
        try:
            return f(self.nvml, self.h)
        except Exception:  # a reading this GPU or driver does not support
            return None

    def sm(self) -> Optional[int]:
        return self._get(lambda n, h: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM))

    def snapshot(self) -> Optional[dict]:
        if self.h is None:
            return None
        viol = lambda pol: self._get(lambda n, h: n.nvmlDeviceGetViolationStatus(h, pol).violationTime)  # noqa: E731
        return {"sm": self.sm(),
                "mem": self._get(lambda n, h: n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM)),
                "temp": self._get(lambda n, h: n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU)),
                "power_w": self._get(lambda n, h: n.nvmlDeviceGetPowerUsage(h) / 1000.0),
                "reasons": self._get(lambda n, h: n.nvmlDeviceGetCurrentClocksEventReasons(h)),
                "power_ns": viol(self.nvml.NVML_PERF_POLICY_POWER),
                "thermal_ns": viol(self.nvml.NVML_PERF_POLICY_THERMAL)}


def runqueue_wait_ns(worker) -> Optional[int]:
    """Nanoseconds the worker's main thread (where the timing loop runs) has spent runnable but not
    running, from the kernel's schedstat: read by the parent, so the child cannot change it."""
    proc = getattr(worker, "proc", None)
    if proc is None:
        return None
    try:
        with open(f"/proc/{proc.pid}/schedstat") as f:
            return int(f.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None


def last_cpu(worker) -> Optional[int]:
    """The CPU the worker's main thread last ran on (/proc/PID/stat, field 39), read by the parent."""
    proc = getattr(worker, "proc", None)
    if proc is None:
        return None
    try:
        with open(f"/proc/{proc.pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[36])
    except (OSError, ValueError, IndexError):
        return None


def steal_jiffies() -> dict[int, int]:
    """Per CPU, the time the hypervisor ran something else while this CPU's work waited (/proc/stat's
    steal column, in clock ticks): invisible to the run-queue wait of schedstat."""
    out: dict[int, int] = {}
    try:
        with open("/proc/stat") as f:
            for line in f:
                name, *vals = line.split()
                if name.startswith("cpu") and name[3:].isdigit() and len(vals) >= 8:
                    out[int(name[3:])] = int(vals[7])
    except (OSError, ValueError):
        pass
    return out


def _contended(w0: Optional[int], w1: Optional[int], wall_s: float, frac: float) -> bool:
    return w0 is not None and w1 is not None and (w1 - w0) > frac * wall_s * 1e9


def round_state(before: Optional[dict], after: Optional[dict], throttle: float, max_sm: Optional[int]) -> dict:
    """What happened on the GPU during one round, from the parent's snapshots around it; `slow` when
    the round must be re-taken: a transient slowdown reason at its end, thermal-limited time inside
    it, or the SM clock below `throttle` x its maximum."""
    if not before or not after:
        return {"slow": False}
    delta = lambda k: (after[k] - before[k]) if after.get(k) is not None and before.get(k) is not None else 0  # noqa: E731
    reasons = after.get("reasons") or 0
    sm = after.get("sm")
    why = [name for bit, name in SLOWDOWNS.items() if reasons & bit]
    if delta("thermal_ns") > 0:
        why.append("thermal_limited")
    if sm and max_sm and sm < throttle * max_sm:
        why.append("low_sm_clock")
    return {"slow": bool(why), "why": why, "power_cap_ns": delta("power_ns"), "thermal_ns": delta("thermal_ns"),
            "reasons": reasons, "sm": sm, "mem": after.get("mem"), "temp": after.get("temp"),
            "power_w": after.get("power_w")}


def _capture(torch, fn, inputs):
    """A CUDA graph of one forward on static input buffers; None if the forward cannot be captured."""
    prev = torch.cuda.current_stream()
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                fn(*inputs)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            out = fn(*inputs)
        torch.cuda.synchronize()
        return g, out, inputs
    except Exception:
        # a capture that fails inside CUDA ends with torch.cuda.graph's __exit__ raising before it
        # restores the stream (and the RNG's and allocator's capture state: measure() restarts such
        # a candidate); the stream at least is put back, for a reference that failed cleanly
        torch.cuda.set_stream(prev)
        torch.cuda.synchronize()
        return None


def call_work(acts: list[tuple[int, int, str]], windows: list[tuple[int, int]],
              harness: list[str]) -> list[list[tuple[int, int, str]]]:
    """Each call's GPU activities (start ns, end ns, kernel name, or "<memcpy>" or "<memset>") that
    started inside its window (host timestamps in the same clock), less the harness's own,
    `harness`: the names a call without a forward ran (hold, the flush's fill of its semaphores and
    its reduction), the earliest-starting one of each name.

    A solution cannot shorten its span by naming kernels like the harness's: the earliest of a name
    is dropped, and the harness's own start first (hold) or queue behind the hold (flush), so a
    namesake that started earlier, on a stream of its own, makes the flush count instead. Work on
    another stream during the hold counts from its start."""
    import bisect
    acts = sorted(acts)
    starts = [a[0] for a in acts]
    out = []
    for w0, w1 in windows:
        inside = acts[bisect.bisect_left(starts, w0):bisect.bisect_right(starts, w1)]
        drop = list(harness)
        rest = []
        for a in inside:
            if a[2] in drop:
                drop.remove(a[2])
            else:
                rest.append(a)
        out.append(rest)
    return out


def span_of(work: list[tuple[int, int, str]]) -> float:
    """A call's kernel span (ms): from the first start to the last end of its work (call_work);
    -1.0 for a call with none."""
    return (max(a[1] for a in work) - min(a[0] for a in work)) / 1e6 if work else -1.0


def time_calls(runner, seeds: list[int], *, warmup: int, flush_l2: bool, npos: int,
               flush_method: str = "read", variant: str = "eager", graph: bool = False,
               hold_us: float = 0.0, spans: bool = False) -> dict:
    torch = runner.torch
    cuda = runner.device == "cuda"
    fn = runner.timed_callable(variant)
    times: list[float] = []
    host: list[float] = []
    enqueue: list[float] = []
    launch: list[float] = []
    leaked = 0  # calls whose interval had opened before the forward was enqueued
    clocks: list[int] = []
    flags: list[str] = []
    flush = reset_l2 = None
    clock = None
    if cuda:  # one NVML handle per process: opening one (init, the max-clock query) took 1-2 ms a request
        if "monitor" not in runner.cache:
            runner.cache["monitor"] = GpuMonitor()
        clock = runner.cache["monitor"]
    if not _PINNED:  # the reference's process: no solution code in it, pinning now is as good
        pin(torch)
    P = _PINNED
    if cuda:
        sync = P.get("synchronize", torch.cuda.synchronize)
        Event = P.get("Event", torch.cuda.Event)
    now = P["perf_counter"]
    if cuda and flush_l2:
        l2 = getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 50 << 20) or (50 << 20)
        # twice the L2, and at least 256 MB: the flush must also outlast the host's launch of the
        # forward, which is what keeps launch latency out of the interval (see below)
        buf = P["zeros"](max(2 * l2, 256 << 20) // 4, dtype=torch.float32, device="cuda")
        if flush_method == "write":
            flush = buf.zero_
        else:
            sink, _sum = P["empty"]((), dtype=torch.float32, device="cuda"), P["sum"]
            flush = lambda: _sum(buf, 0, out=sink)  # noqa: E731
        if "reset_l2" not in runner.cache:  # looked up once: finding the library takes ~3 ms
            runner.cache["reset_l2"] = _persisting_l2_reset()
        reset_l2 = runner.cache["reset_l2"]
    if cuda and hold_us > 0 and P.get("hold") is None and not P.get("hold_rechecked"):
        # the check at pin() ran beside other contexts' work (a standby primed, or a candidate
        # started, while other evaluations ran): time-slicing lets the side stream's kernel in while
        # the hold is switched out, and the check fails though the hold works on a quiet GPU. Here
        # the GPU is quiet, as it is for every timed call: check once more, in the same conditions.
        P["hold_rechecked"] = True
        P["hold"] = _gpu_hold(torch)
    hold = P.get("hold") if cuda and hold_us > 0 else None
    if cuda and hold_us > 0 and hold is None:
        flags.append("launch_hold_unavailable")
    start = Event(enable_timing=True) if cuda else None
    end = Event(enable_timing=True) if cuda else None
    rec, span_why = None, None
    if cuda and spans:
        rec = runner.span_recorder() if hasattr(runner, "span_recorder") else None
        if rec is None:
            flags.append("kernel_span_unavailable")
            span_why = getattr(runner, "span_why", None)
    prints = OutputPrints(torch, npos, len(seeds), torch.cuda.mem_get_info()[0] if cuda else None)
    fps = prints.fps
    windows: list[tuple[int, int]] = []  # per call, CUPTI's clock (ns): from before the hold to after the sync
    span_ms: list[float] = []
    launches: list[int] = []  # per call, the kernels, copies and fills of the forward (CUPTI's records)

    def shield() -> None:  # what precedes each forward on the GPU: the hold, then the flush
        if hold is not None:
            hold(hold_us)
        if flush is not None:
            flush()

    def report() -> dict:  # the lists as filled so far
        return {"times_ms": times, "host_ms": host, "enqueue_ms": enqueue, "launch_ms": launch,
                "launch_leaked": leaked, "fingerprints": fps, "clocks_mhz": clocks,
                "max_clock_mhz": clock.max_sm if clock else None, "flags": flags,
                "l2_reset": reset_l2 is not None, "span_ms": span_ms, "span_launches": launches,
                "span_why": span_why}

    with torch.no_grad():
        for k in range(warmup):
            fn(*runner.make_inputs(seeds[0] ^ (0x5EED + k)))
        captured = None
        if cuda and graph:
            key = ("graph", variant)
            if key not in runner.cache:
                runner.cache[key] = _capture(torch, fn, runner.make_inputs(seeds[0] ^ 0x6A6A))
            captured = runner.cache[key]
            if captured is None:
                # stop here: after a capture that failed inside CUDA this process may still be half
                # in capture mode, and the parent times both sides eagerly instead
                flags.append("cuda_graph_unavailable")
                return report()
        if cuda:
            sync()
        if rec is not None:
            rec.start(spans=True)
            # a call without its forward: the kernels the harness itself runs in each call
            w0 = rec.timestamp()
            shield()
            sync()
            windows.append((w0, rec.timestamp()))
        try:
            for seed in seeds:
                inputs = runner.make_inputs(seed)
                if captured is not None:  # new values, copied into the graph's static buffers
                    for dst, src in zip(captured[2], inputs):
                        if isinstance(dst, torch.Tensor):
                            dst.copy_(src)
                if cuda:
                    sync()  # inputs ready; nothing else in flight
                if reset_l2 is not None:
                    reset_l2()
                w0 = rec.timestamp() if rec is not None else 0
                t0 = now()
                if cuda:
                    # Hold, flush and start event are enqueued back to back: the interval opens when
                    # they end on the GPU, while the host is already launching the forward, so they
                    # stay outside it and the forward's launching is hidden as in steady use, where
                    # the host runs ahead of the GPU (a synchronize here would put 10-80 us of launch
                    # latency into every sample, varying with the host). The hold comes first, so the
                    # flush is the last thing to touch L2 before the interval.
                    shield()
                    start.record()
                    t_enq = now()
                    if captured is not None:
                        captured[0].replay()
                        out = captured[1]
                    else:
                        out = fn(*inputs)
                    t_out = now()
                    enqueue.append((t_out - t_enq) * 1e3)
                    launch.append((t_out - t0) * 1e3)
                    end.record()
                    leaked += bool(start.query())
                    sync()  # device-wide: side streams included
                    if rec is not None:
                        windows.append((w0, rec.timestamp()))
                else:
                    out = fn(*inputs)
                t1 = now()
                host.append((t1 - t0) * 1e3)
                times.append(start.elapsed_time(end) if cuda else (t1 - t0) * 1e3)
                if clock is not None and clock.h is not None:
                    clocks.append(clock.sm() or 0)
                prints.add(out, seed)
                del out, inputs
        finally:
            if rec is not None:
                rec.stop()
        prints.flush()  # after the recording: its kernels are not the calls'
        if rec is not None and len(windows) == len(times) + 1:
            first = [a for a in rec.spans if windows[0][0] <= a[0] <= windows[0][1]]
            work = call_work(rec.spans, windows[1:], [a[2] for a in sorted(first)])
            span_ms[:] = [span_of(w) for w in work]
            launches[:] = [len(w) for w in work]
            rec.spans = None
    return report()


# --------------------------------------------------------------------------------------------------
# Parent side: statistics


def summarize(samples: list[float]):
    from .records.result import Stats
    n = len(samples)
    mean = statistics.fmean(samples)
    std = statistics.stdev(samples) if n > 1 else 0.0
    return Stats(median=statistics.median(samples), mean=mean, std=std, min=min(samples), max=max(samples),
                 count=n, rel_sem=(std / math.sqrt(n) / mean) if n > 1 and mean > 0 else float("inf"))


def ratio_ci(ref: list[float], cand: list[float], iters: int = 400, seed: int = 0) -> tuple[float, float]:
    """95% bootstrap interval of median(ref) / median(cand)."""
    rng = random.Random(seed)
    ratios = []
    for _ in range(iters):
        r = statistics.median(rng.choices(ref, k=len(ref)))
        c = statistics.median(rng.choices(cand, k=len(cand)))
        ratios.append(r / c if c > 0 else float("inf"))
    ratios.sort()
    return ratios[int(0.025 * iters)], ratios[int(0.975 * iters) - 1]


def process_bias_us(t, spans: bool, launches: Optional[int]) -> float:
    """The standard deviation (us) of the offset a fresh process adds to one side's median: the
    measure's own for a forward of one kernel (config.Timing.process_bias_us, or
    kernel_span_process_bias_us), plus `process_bias_per_launch_us` for each kernel, copy or fill
    after the first. Every process starts each dependent launch at its own speed, the same for all
    of them (bench/diag/chain_bias.py), so the offsets of a forward's launches add up rather than
    average out. `launches`: the side's count per call (None: not counted, taken as one)."""
    base = t.kernel_span_process_bias_us if spans else t.process_bias_us
    return base + t.process_bias_per_launch_us * max(0, (launches or 1) - 1)


def process_offset_rel(t, spans: bool, launches: Optional[int], median_ms: Optional[float]) -> float:
    """One side's modelled process offset (process_bias_us) as a share of its median. Under spans the
    one-kernel part is a timestamp tick, the same in every process (bench/diag/offset_source.py):
    left out, so a forward of one kernel timed by spans has none."""
    if not median_ms or median_ms <= 0:
        return 0.0
    offset = process_bias_us(t, spans, launches) - (t.kernel_span_process_bias_us if spans else 0.0)
    return max(0.0, offset) / (median_ms * 1e3)


def processes_for(t, cuda: bool, spans: bool, launches: Optional[int], median_ms: Optional[float]) -> int:
    """How many processes one side is timed in at first (config.Timing.processes): one, unless its
    process offset (process_offset_rel) is over `processes_above_rel` of its median, which more calls
    in one process do not shrink and more processes do, by the square root of their number."""
    if t.processes <= 1 or t.processes_when == "never":
        return 1
    if t.processes_when == "always":
        return t.processes
    if not cuda or not median_ms or median_ms <= 0:
        return 1
    return t.processes if process_offset_rel(t, spans, launches, median_ms) > t.processes_above_rel else 1


def processes_needed(t, n: int, medians: list[float], offset_rel: float = 0.0) -> int:
    """How many processes a side already timed in `n` (> 1) needs, from its processes' own medians:
    enough that the standard error of their mean, the larger of their observed spread and the
    modelled offset (`offset_rel`) over the square root of their number, is under
    `processes_target_rel`, and at most `processes_max`. The model is a mean over many processes;
    one problem's offsets can be twice it (relu(x + y) at 24 us: 0.7% of sd between processes on an
    H100 against 0.375% modelled), and only its own processes show that."""
    cap = max(t.processes, t.processes_max)
    if n <= 1 or n >= cap or len(medians) < 2 or t.processes_target_rel <= 0:
        return n
    mean = statistics.fmean(medians)
    if mean <= 0:
        return n
    sd = max(statistics.stdev(medians) / mean, offset_rel)
    return max(n, min(cap, math.ceil((sd / t.processes_target_rel) ** 2 - 1e-9)))


def pairs_within_budget(t, measured: list) -> Optional[int]:
    """How many more process pairs fit into `processes_budget_s` of timing wall, all pairs together:
    at the cost of the further pairs measured so far, or before any, of a warm-up round and
    `processes_rounds` at the first pair's kept rounds' wall (its own wall also holds what a process
    and a reference session pay once, and the torch.compile baseline). None: no limit."""
    if t.processes_budget_s <= 0:
        return None
    spent = sum(m.seconds for m in measured)
    further = [m.seconds for m in measured[1:]]
    if further:
        per = statistics.fmean(further)
    else:
        first = measured[0]
        walls = [statistics.median(r[0] for r in s.rounds) / 1e3 for s in (first.cand, first.ref) if s.rounds]
        per = sum(walls) * (t.processes_rounds + 1) if len(walls) == 2 else first.seconds
    return max(0, int((t.processes_budget_s - spent) / per)) if per > 0 else None


def widen_for_process_bias(ci: tuple[float, float], speedup: float, ref_ms: float, cand_ms: float,
                           ref_bias_us: float, cand_bias_us: float) -> tuple[tuple[float, float], float]:
    """`ci` (which covers the calls of these two processes only) widened for the offset each process
    adds to its median, whatever the number of calls (process_bias_us): several percent at 4 us,
    under 0.1% from 0.3 ms up for a forward of a few kernels (bench/diag/process_bias.py,
    chain_bias.py). Each side's median carries one such offset; they add to the log ratio in
    quadrature, and to each end of the bootstrap interval in quadrature too. Returns the interval
    and the ratio's relative standard deviation from the offsets."""
    if (ref_bias_us <= 0 and cand_bias_us <= 0) or not speedup or ref_ms <= 0 or cand_ms <= 0:
        return ci, 0.0
    rel = math.hypot(ref_bias_us / (ref_ms * 1e3), cand_bias_us / (cand_ms * 1e3))
    z, ls = 1.96 * rel, math.log(speedup)
    lo, hi = ci
    return (math.exp(ls - math.hypot(max(0.0, ls - math.log(lo)), z)),
            math.exp(ls + math.hypot(max(0.0, math.log(hi) - ls), z))), rel


def _close(x: float, y: float, tol: float) -> bool:
    if math.isnan(x) or math.isnan(y):
        return math.isnan(x) and math.isnan(y)
    if math.isinf(x) or math.isinf(y):
        return x == y
    return abs(x - y) <= tol


def fingerprints_match(a: list[float], b: list[float], tol) -> bool:
    """Compare a candidate's fingerprint `a` with the reference's `b` (see _fingerprint).
    Elementwise |c - r| <= atol + rtol*|r| bounds a sum's error by numel*atol + rtol*abs-sum;
    ||c - r|| <= rel_l2*||r|| bounds the norms' difference by the same (triangle inequality) and a
    random-sign projection of the error by a few times that."""
    if len(a) != len(b):
        return False
    i = 0
    while i < len(b):
        n, k = b[i], int(b[i + 5])
        if a[i] != n or int(a[i + 5]) != k:
            return False
        bound_sum = n * tol.atol + tol.rtol * abs(b[i + 2])
        bound_l2 = tol.rel_l2 * abs(b[i + 3]) + 1e-12
        if not (_close(a[i + 1], b[i + 1], bound_sum) and _close(a[i + 2], b[i + 2], bound_sum)
                and _close(a[i + 3], b[i + 3], bound_l2) and _close(a[i + 4], b[i + 4], 6 * bound_l2)):
            return False
        for x, y in zip(a[i + 6:i + 6 + k], b[i + 6:i + 6 + k]):
            if not _close(x, y, tol.atol + tol.rtol * abs(y)):
                return False
        i += 6 + k
    return True


# --------------------------------------------------------------------------------------------------
# Parent side: interleaved rounds


def reply_spans(reply) -> list[float]:
    """A time reply's kernel spans, one per call: -1.0 each where it has none (not asked, or CUPTI
    could not be had)."""
    n = len(reply.times_ms)
    return reply.span_ms if len(reply.span_ms) == n else [-1.0] * n


@dataclass
class Side:
    """One side's kept calls (candidate, or reference) and the rounds they came in."""
    times: list[float] = field(default_factory=list)    # device ms per call (host ms on the CPU)
    host: list[float] = field(default_factory=list)     # host ms per whole call (hold, flush, forward, sync)
    enqueue: list[float] = field(default_factory=list)  # host ms launching the forward alone
    launch: list[float] = field(default_factory=list)   # host ms from the hold's launch to the forward enqueued
    leaked: int = 0  # calls whose interval opened before their forward was enqueued
    span: list[float] = field(default_factory=list)  # kernel span ms per call (-1.0: none), when asked
    launches: list[int] = field(default_factory=list)  # the latest round's launches per call (CUPTI), if counted
    # per round: (parent wall ms, sum of reported ms, calls, quiet: no wait for a CPU)
    rounds: list[tuple[float, float, int, bool]] = field(default_factory=list)

    def keep(self, reply, wall_s: float, quiet: bool) -> None:
        self.times.extend(reply.times_ms)
        self.host.extend(reply.host_ms)
        self.enqueue.extend(reply.enqueue_ms)
        self.launch.extend(reply.launch_ms)
        self.leaked += reply.launch_leaked
        self.span.extend(reply_spans(reply))
        self.rounds.append((wall_s * 1e3, sum(reply.times_ms), len(reply.times_ms), quiet))

    def median(self, what: str) -> Optional[float]:
        xs = getattr(self, what)
        return round(statistics.median(xs), 4) if xs else None

    def launch_count(self) -> Optional[int]:
        """The forward's kernels, copies and fills per call (the median call), where counted."""
        return int(statistics.median_low(self.launches)) if self.launches else None

    def timed(self, spans: bool) -> list[float]:
        """The samples the statistics are taken of: the kernel spans recorded, or the events."""
        return [x for x in self.span if x > 0] if spans else self.times


@dataclass
class Measurement:
    cand: Side = field(default_factory=Side)
    ref: Side = field(default_factory=Side)
    compiled: list[float] = field(default_factory=list)
    compiled_span: list[float] = field(default_factory=list)
    spans: bool = False  # the timed rounds asked for kernel spans (config.Timing.kernel_span)
    span_basis_ms: Optional[float] = None  # what kernel_span = "auto" compared with kernel_span_below_ms
    span_why: Optional[str] = None  # asked for and not had: which process, and why (its own word)
    hold_us: float = 0.0  # the launch hold of the timed rounds
    contended_rounds: int = 0
    restart_candidate: bool = False  # the candidate's capture failed: time it again, fresh and eager
    mismatched_calls: int = 0
    rounds: int = 0
    throttled: int = 0
    cuda_graph: bool = False
    l2_reset: bool = False
    max_clock_mhz: Optional[int] = None
    clocks_mhz: list[int] = field(default_factory=list)
    # the parent's NVML readings of the kept rounds (round_state), and why rounds were re-taken
    gpu_rounds: list[dict] = field(default_factory=list)
    retaken: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    # CPU path: which host CPUs each side's main thread was found on after its requests, and the
    # hypervisor's steal per CPU over the measurement (ms), for the record of the host's conditions
    host_cpus: dict = field(default_factory=dict)
    host_steal_ms: dict = field(default_factory=dict)
    error: Optional[str] = None
    compile_error: Optional[str] = None
    seconds: float = 0.0


# Warm-up round under "auto": the shortest hold, so that the launch it measures includes the hold's
# own launcher (Triton's Python launcher costs tens of microseconds)
WARM_HOLD_US = 1.0


def auto_hold_us(ref_launch_ms: list[float], cap_us: float) -> float:
    """The launch hold for both sides: twice the reference's median launch time for one call (its
    own process, so a candidate cannot size the hold it is timed under: from the hold's launch
    through the flush's and the forward's) plus 50 us for jitter, at most `cap_us`. A candidate that
    launches for longer than this has the rest inside its interval, as without a hold; one that
    launches faster is covered."""
    med = statistics.median(ref_launch_ms) if ref_launch_ms else 0.0
    return round(min(cap_us, 2e3 * med + 50.0), 1)


def measure(cand, ref, cfg, rng: random.Random, *, cuda: bool, tol, timeout: float,
            ref_timeout: float, gpu: Optional[str] = None, compiled: bool = True, spans: Optional[bool] = None,
            min_rounds: Optional[int] = None, budget_s: Optional[float] = None,
            hold_us: Optional[float] = None) -> Measurement:
    """Alternate candidate and reference rounds (and the torch.compile baseline, when on) until both
    are stable or the budget is spent. `cand` and `ref` are process.worker.Worker objects with built models;
    `gpu` the CUDA_VISIBLE_DEVICES value their GPU is named by, for the parent's NVML readings.
    A side's further process pair (processes_for) passes what its first pair settled: `compiled`
    False (one torch.compile baseline is enough), `spans` (whether to record kernel spans, without
    the rounds that decide it; whether they are reported is decided on the pooled calls), and its own
    `min_rounds` and `budget_s`, since its calls are pooled with the others' and what more processes
    buy is their offsets averaged, not more calls; and the first pair's `hold_us`, which also skips
    the warm-up round (its processes had theirs, timing.warm_up) unless CUDA graphs are captured."""
    from .records.messages import Command
    t = cfg.timing
    m = Measurement(cuda_graph=cuda and t.cuda_graph, spans=bool(cuda and spans))
    min_rounds = t.min_rounds if min_rounds is None else min_rounds
    budget_s = t.budget_s if budget_s is None else budget_s
    mon = GpuMonitor(gpu) if cuda else None
    snap = mon.snapshot if mon is not None else (lambda: None)
    # on the CPU path contention is the noise itself, and the clock checks' floor is set for it
    rq = runqueue_wait_ns if cuda else (lambda w: None)
    steal0 = {} if cuda else steal_jiffies()

    def where(side: str, w) -> None:  # the CPU path's host conditions; a GPU's sides are pinned
        cpu = None if cuda else last_cpu(w)
        if cpu is not None:
            seen = m.host_cpus.setdefault(side, {})
            seen[cpu] = seen.get(cpu, 0) + 1
    t_start = time.perf_counter()
    round_calls = max(2, t.round_calls)
    min_calls = t.min_calls if cuda else t.cpu_min_calls
    with_compiled = compiled and (t.compile_baseline == "on" or (t.compile_baseline == "auto" and cuda))
    warm = True
    no_hold = False  # the reference's process has no working hold: neither side gets one
    span_decided = t.kernel_span == "off" or spans is not None
    # the warm-up round, whose samples are not kept, also counts each side's launches per call
    # from CUPTI's records (process_bias_us), where spans will not
    count_launches = cuda and t.process_bias_per_launch_us > 0
    # "auto": the warm-up round runs the shortest hold and measures how long the reference takes to
    # launch a call; every later round holds both sides for twice that, plus a margin
    m.hold_us = 0.0 if not cuda else (WARM_HOLD_US if t.launch_hold_us == "auto" else float(t.launch_hold_us))
    unkept = 0  # rounds whose samples were not kept: warm-up rounds, the one that chose kernel spans
    warm_spans: list[float] = []  # the reference's kernel spans in the warm-up round, where recorded
    if hold_us is not None:
        m.hold_us = hold_us
        if not m.cuda_graph:
            warm = False
            m.max_clock_mhz = mon.max_sm if mon is not None else None
    while True:
        seeds = [rng.getrandbits(62) for _ in range(round_calls)]
        cmd = Command(op="time", seeds=seeds, warmup=t.warmup if warm else 0, flush_l2=t.flush_l2, flush_method=t.flush_method,
                      hold_us=m.hold_us, cuda_graph=m.cuda_graph, spans=m.spans or (warm and count_launches))
        s0, q0 = snap(), rq(cand)
        c_reply, c_wall = cand.request(cmd, timeout)
        where("candidate", cand)
        s1, q1 = snap(), rq(cand)
        if warm and m.cuda_graph and (not c_reply.ok or "cuda_graph_unavailable" in c_reply.flags):
            # a capture that fails inside CUDA (a launch on the legacy stream, say) leaves torch half
            # in capture mode in that process (RNG offsets, allocator pool, current stream), and
            # may surface as an error of this first round: evaluate() times both sides again,
            # eagerly, with the candidate in a fresh process; an error that persists there is its own
            m.restart_candidate = True
            break
        if not c_reply.ok:
            m.error = c_reply.error
            m.flags.append(c_reply.error_kind or "runtime_error")
            break
        cand.pause()  # nothing of the candidate's runs while the reference is timed
        try:
            p0 = rq(ref)
            r_reply, r_wall = ref.request(cmd, ref_timeout)
            where("reference", ref)
            s2, p1 = snap(), rq(ref)
            if with_compiled:
                k_reply, _ = ref.request(cmd.model_copy(update={"variant": "compiled", "cuda_graph": False}),
                                         ref_timeout + (600 if warm else 0))
                if not k_reply.ok:
                    m.compile_error, with_compiled = k_reply.error, False
                    if ref.returncode is not None:
                        raise RuntimeError(f"reference died in torch.compile: {k_reply.error}")
        finally:
            cand.resume()
        if not r_reply.ok:
            raise RuntimeError(f"reference failed while timing: {r_reply.error}")
        if warm and m.cuda_graph and "cuda_graph_unavailable" in r_reply.flags:
            m.cuda_graph = False  # both sides or neither: a fair comparison first
            m.flags.append("cuda_graph_unavailable")
            continue  # the warm-up round again, eagerly
        if len(c_reply.times_ms) != len(seeds) or len(c_reply.fingerprints) != len(seeds):
            m.flags.append("malformed_report")
            break
        for side, reply in ((m.cand, c_reply), (m.ref, r_reply)):
            if reply.span_launches:
                side.launches = list(reply.span_launches)
        for cf, rf in zip(c_reply.fingerprints, r_reply.fingerprints):
            if not fingerprints_match(cf, rf, tol):
                m.mismatched_calls += 1
        m.rounds += 1
        unkept += 1  # until the round is kept, below
        m.l2_reset = bool(r_reply.l2_reset)
        m.max_clock_mhz = m.max_clock_mhz or r_reply.max_clock_mhz
        if "launch_hold_unavailable" in r_reply.flags and "launch_hold_unavailable" not in m.flags:
            m.flags.append("launch_hold_unavailable")  # the reference's process: its word can be taken
            if m.hold_us > 0:
                # a hold on one side only would leave the launching inside the reference's interval
                # and out of the candidate's: both sides without, from a new warm-up round (the
                # fingerprints' verdict on the calls made so far stands)
                m.hold_us, warm, no_hold = 0.0, True, True
                m.cand, m.ref, m.rounds, unkept = Side(), Side(), 0, 0
                continue
        if warm:  # the first round's wall includes warm-up and captures; keep its samples out
            warm = False
            if not span_decided:
                warm_spans = [x for x in reply_spans(r_reply) if x > 0]
            if cuda and t.launch_hold_us == "auto" and not no_hold and hold_us is None:
                m.hold_us = auto_hold_us(r_reply.launch_ms + (k_reply.launch_ms if with_compiled else []),
                                         t.launch_hold_max_us)
            m.max_clock_mhz = (mon.max_sm if mon is not None else None) or r_reply.max_clock_mhz
            continue
        if cuda and not span_decided:
            # A short problem is timed by kernel spans from here, after one more warm-up round, since
            # CUPTI's first records in a process (its buffers; the hold resized for launches with
            # CUPTI on) are not those of a steady call; this round's go. "Short" is the reference's
            # GPU work, as the warm-up round's CUPTI records (launch counts) give it, else this first
            # round under the full hold's events. Events also hold whatever launching outlasted the
            # hold: on them, one run of five of a 24 us kernel was timed by events (2.7 us more) and
            # the rest by spans (#5, H100, session 25), the run with the most leaked launches.
            span_decided = True
            m.span_basis_ms = statistics.median(warm_spans or r_reply.times_ms)
            if t.kernel_span == "on" or (t.kernel_span == "auto" and m.span_basis_ms < t.kernel_span_below_ms):
                m.spans, warm = True, True
                continue
        if m.spans and any("kernel_span_unavailable" in r.flags for r in (c_reply, r_reply)):
            m.spans = False  # both sides or neither; the events of the calls so far stand
            m.flags.append("kernel_span_unavailable")
            m.span_why = "; ".join(f"{name}: {r.span_why or 'CUPTI could not be had'}"[:200]
                                   for name, r in (("candidate", c_reply), ("reference", r_reply))
                                   if "kernel_span_unavailable" in r.flags)
        st_c = round_state(s0, s1, t.throttle_ratio, m.max_clock_mhz)
        st_r = round_state(s1, s2, t.throttle_ratio, m.max_clock_mhz)
        for side, st, reply in (("candidate", st_c, c_reply), ("reference", st_r, r_reply)):
            if st["slow"] and len(m.retaken) >= 2 * t.min_rounds + 10:
                # a slowdown that persists is the machine's state, not an accident of one round:
                # measure under it, flagged, rather than never finish
                st["slow"] = False
                if "throttled" not in m.flags:
                    m.flags.append("throttled")
            if st["slow"]:  # re-taken by the next rounds
                m.throttled += len(reply.times_ms)
                m.retaken.append(f"{side}: {', '.join(st['why'])}")
            elif st.get("sm") is not None:
                m.gpu_rounds.append(st)
        # A round in which a side waited for a CPU keeps its samples (dropping them would let a
        # solution pick its own rounds by making them contended) but is marked, and the host-clock
        # checks look at quiet rounds where there are enough: contention on one side looks like
        # hidden time on that side.
        quiet_c = not _contended(q0, q1, c_wall, t.max_runqueue_frac)
        quiet_r = not _contended(p0, p1, r_wall, t.max_runqueue_frac)
        m.contended_rounds += (not quiet_c) + (not quiet_r)
        if not st_c["slow"]:
            m.cand.keep(c_reply, c_wall, quiet_c)
        if not st_r["slow"]:
            m.ref.keep(r_reply, r_wall, quiet_r)
            m.clocks_mhz += r_reply.clocks_mhz  # the reference's own per-call readings: trusted
        if with_compiled and k_reply.ok:
            m.compiled += k_reply.times_ms
            m.compiled_span += reply_spans(k_reply)
        unkept -= 1
        c_t, r_t = m.cand.timed(m.spans), m.ref.timed(m.spans)
        n = min(len(c_t), len(r_t))
        elapsed = time.perf_counter() - t_start
        if n >= min_calls and m.rounds - unkept >= min_rounds:
            stable = summarize(c_t).rel_sem < t.target_rel_sem and summarize(r_t).rel_sem < t.target_rel_sem
            if stable or n >= t.max_calls or elapsed > budget_s:
                break
        if m.rounds > 4 * (t.max_calls // round_calls + min_rounds) + 8:
            m.flags.append("throttled")  # clocks never recovered: report what we have, flagged
            break
    m.seconds = time.perf_counter() - t_start
    if steal0:
        tick_ms = 1e3 / os.sysconf("SC_CLK_TCK")
        m.host_steal_ms = {c: round((v - steal0.get(c, v)) * tick_ms, 1) for c, v in steal_jiffies().items()}
    return m


def warm_up(t, rng: random.Random, spans: Optional[bool] = None):
    """The command for a process's first timing request (a further process's, and on a GPU the first
    reference's and candidate's), sent outside the timing phase, its samples discarded: what a
    process pays once (CUPTI's start, NVML, the flush buffer) made a fresh
    reference's first measurement 0.9-1.2 s longer than later ones on an H100 (relu_add_4m). No hold:
    a request with one re-checks a hold that failed its check at pin() beside other processes' work,
    and must do so on a quiet GPU, in the timing phase (time_calls); run here, beside the other
    evaluations' phases, that check failed and left an identical solution timed without a hold."""
    from .records.messages import Command
    if spans is None:  # a process's first request, before any pair settled spans: CUPTI started unless off
        spans = t.kernel_span != "off"
    return Command(op="time", seeds=[rng.getrandbits(62) for _ in range(2)], warmup=t.warmup, flush_l2=t.flush_l2,
                   flush_method=t.flush_method, hold_us=0.0, spans=spans)


def pooled(ms: list[Measurement]) -> Measurement:
    """Measurements of several process pairs (processes_for) as one: every kept call of each side,
    in order, each measurement having passed its own clock and fingerprint checks. The launch hold,
    clock maximum and L2 reset are the first's; the torch.compile baseline is timed in the first only."""
    if len(ms) == 1:
        return ms[0]
    first = ms[0]
    out = Measurement(compiled=list(first.compiled), compiled_span=list(first.compiled_span), spans=first.spans,
                      hold_us=first.hold_us, cuda_graph=first.cuda_graph, l2_reset=first.l2_reset,
                      max_clock_mhz=first.max_clock_mhz, compile_error=first.compile_error,
                      span_basis_ms=first.span_basis_ms)
    for m in ms:
        for mine, theirs in ((out.cand, m.cand), (out.ref, m.ref)):
            for f in ("times", "host", "enqueue", "launch", "span", "rounds"):
                getattr(mine, f).extend(getattr(theirs, f))
            mine.leaked += theirs.leaked
            mine.launches = mine.launches or list(theirs.launches)
        for f in ("contended_rounds", "mismatched_calls", "rounds", "throttled"):
            setattr(out, f, getattr(out, f) + getattr(m, f))
        out.seconds += m.seconds
        out.spans = out.spans and m.spans
        out.span_why = out.span_why or m.span_why
        out.clocks_mhz += m.clocks_mhz
        out.gpu_rounds += m.gpu_rounds
        out.retaken += m.retaken
        out.flags += [f for f in m.flags if f not in out.flags]
        for k, v in m.host_steal_ms.items():
            out.host_steal_ms[k] = round(out.host_steal_ms.get(k, 0.0) + v, 1)
        for side, seen in m.host_cpus.items():
            mine = out.host_cpus.setdefault(side, {})
            for c, n in seen.items():
                mine[c] = mine.get(c, 0) + n
    return out


def span_choice(m: Measurement, t) -> tuple[bool, dict]:
    """Whether the record reports kernel spans (config.Timing.kernel_span), and what that rests on."""
    if not m.spans:
        # asked for and not had: CUPTI could not be opened in one of the two processes
        why = f" ({m.span_why})" if m.span_why else ""
        return False, ({"kernel_span_fallback": f"CUPTI's records could not be had{why}"}
                       if "kernel_span_unavailable" in m.flags else {})
    note: dict = {}
    for name, side in (("candidate", m.cand), ("reference", m.ref)):
        if len(side.span) != len(side.times) or len(side.times) < 2 or any(x <= 0 for x in side.span):
            note["kernel_span_fallback"] = f"{name}: calls with no GPU work recorded by CUPTI"
            return False, note
    gap = {name: statistics.median(e - s for e, s in zip(side.times, side.span))
           for name, side in (("candidate", m.cand), ("reference", m.ref))}
    note["events_minus_span_us"] = {k: round(v * 1e3, 3) for k, v in gap.items()}
    allowed = max(t.kernel_span_slack_us / 1e3, t.kernel_span_slack_rel * statistics.median(m.ref.times))
    if gap["candidate"] > gap["reference"] + allowed:
        note["kernel_span_fallback"] = (f"the candidate's events exceed its recorded GPU work by "
                                        f"{(gap['candidate'] - gap['reference']) * 1e3:.2f} us more than the "
                                        f"reference's do (allowed {allowed * 1e3:.2f}): work no record shows")
        return False, note
    return True, note


def gpu_summary(m: Measurement) -> dict:
    """The GPU's state over the kept rounds, from the parent's readings, for the record."""
    g = m.gpu_rounds
    if not g:
        return {}
    med = lambda xs: sorted(xs)[len(xs) // 2] if xs else None  # noqa: E731
    vals = lambda k: [r[k] for r in g if r.get(k) is not None]  # noqa: E731
    temps = vals("temp")
    seen = 0
    for r in g:
        seen |= r.get("reasons") or 0
    return {"sm_clock_mhz_after_rounds": med(vals("sm")), "mem_clock_mhz": med(vals("mem")),
            "temperature_c": [min(temps), max(temps)] if temps else None,
            "power_w_max": round(max(vals("power_w")), 1) if vals("power_w") else None,
            "power_capped_ms": round(sum(vals("power_cap_ns")) / 1e6, 3),
            "thermal_limited_ms": round(sum(vals("thermal_ns")) / 1e6, 3),
            "clock_event_reasons": [n for b, n in {POWER_CAP: "sw_power_cap", **SLOWDOWNS}.items() if seen & b],
            "rounds_retaken": m.retaken[:10]}


def _quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def _calls_by_round(side: Side) -> list:
    """Pair each kept round with its calls' (host ms, device ms); rounds and samples are appended
    together (Side.keep), in order."""
    out, i = [], 0
    for r in side.rounds:
        n = r[2]
        out.append((r, list(zip(side.host[i:i + n], side.times[i:i + n]))))
        i += n
    return out


def clock_checks(m: Measurement, cfg, cuda: bool = True, detail: Optional[dict] = None) -> list[str]:
    """Reported device times against host clocks. Reference and candidate pay the same harness
    overhead per call (input generation, flush, fingerprint), so the reference calibrates it.

    Contention on a busy host (compilers running beside the evaluation) only ever adds time, and
    adds it at random; a cheat's hidden time is there in every call. So both tests compare low
    quantiles (the quietest calls and rounds), which contention rarely reaches and a cheat always
    does; a flag is then confirmed by further measurements before it becomes a verdict
    (hardening.clock_check_confirmations, evaluation.py). `detail`, when
    given, receives the numbers each test compared (ms per call), for the record of a flagged run."""
    flags = []
    if len(m.cand.times) < 2 or len(m.ref.times) < 2:
        return flags
    h = cfg.hardening
    med_c = statistics.median(m.cand.times)
    # quiet rounds (no wait for a CPU on that side) where there are enough of both; else all rounds,
    # so a solution cannot escape the checks by keeping its own process contended
    c_rounds, r_rounds = _calls_by_round(m.cand), _calls_by_round(m.ref)
    if sum(q for *_, q in m.cand.rounds) >= 5 and sum(q for *_, q in m.ref.rounds) >= 5:
        c_rounds, r_rounds = [r for r in c_rounds if r[0][3]], [r for r in r_rounds if r[0][3]]
    cand_pairs = [p for _, pairs in c_rounds for p in pairs]
    ref_pairs = [p for _, pairs in r_rounds for p in pairs]
    # per call: host time to device-idle minus device time; side-stream work and work finished by
    # threads after forward returns show up here, not in the events
    gap_c = _quantile([hh - tt for hh, tt in cand_pairs], 0.25)
    gap_r = _quantile([hh - tt for hh, tt in ref_pairs], 0.25)
    gap_floor = max(h.gap_abs_ms, h.gap_rel * med_c)
    if gap_c - gap_r > gap_floor:
        flags.append("unsynced_stream")
    if detail is not None:
        detail.update(gap_cand_ms=round(gap_c, 4), gap_ref_ms=round(gap_r, 4), gap_floor_ms=round(gap_floor, 4))
    # per round: the parent's own wall clock, which the candidate cannot reach
    over_c = [(w - t) / n for (w, t, n, _), _ in c_rounds]
    over_r = [(w - t) / n for (w, t, n, _), _ in r_rounds]
    if any(t > w for w, t, *_ in m.cand.rounds):
        flags.append("impossible_timing")
    elif len(over_c) >= 5:
        low_c, low_r = min(over_c), min(over_r)
        unexplained = low_c - low_r
        # below a quarter of the harness's own per-call overhead, hidden time is not measurable
        # on the CPU the per-call overhead is host work in two different processes, and on a loaded
        # host it differs between them by tenths of a millisecond (seen on 2-core CI machines)
        floor = max(h.wall_abs_ms if cuda else h.cpu_wall_abs_ms, h.wall_rel * med_c, 0.25 * low_r)
        if unexplained > floor:
            flags.append("timer_mismatch")
        if detail is not None:
            detail.update(wall_over_cand_ms=round(low_c, 4), wall_over_ref_ms=round(low_r, 4),
                          wall_floor_ms=round(floor, 4), rounds_compared=[len(c_rounds), len(r_rounds)])
    return flags
