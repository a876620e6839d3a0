"""The child's pinned primitives and the launch hold.

`pin` keeps references to the primitives the timing loop relies on, taken before the candidate's module
is imported; the hold is a PTX kernel that fills the GPU and keeps the forward's launching out of the
timed interval; `persisting_l2_reset` finds the runtime's reset of persisting L2 lines.
"""
from __future__ import annotations

import time
from typing import Any

# the pinned primitives by name (pin); the timing loop reads them here, and records its one re-check
# of the hold ("hold_rechecked")
PINNED: dict[str, Any] = {}


def pinned(name: str, default: Any = None) -> Any:
    """The primitive `name` as pin() took it (before the solution's import), or `default` unpinned."""
    return PINNED.get(name, default)


def is_pinned() -> bool:
    return bool(PINNED)


def pin(torch) -> None:
    """Keep references to the primitives the timing loop relies on, taken before the candidate's
    module is imported: rebinding `torch.sum`, `torch.cuda.synchronize` or `time.perf_counter`
    afterwards (to skip the flush or the final sync) does not reach the loop. The host-clock checks
    in the parent remain the defence against anything subtler."""
    PINNED.update(sum=torch.sum, zeros=torch.zeros, empty=torch.empty, perf_counter=time.perf_counter,
                  arange=torch.arange)  # sum and arange: also runner.input_digest
    if torch.cuda.is_available():
        PINNED.update(synchronize=torch.cuda.synchronize, Event=torch.cuda.Event)
        PINNED["hold"] = gpu_hold(torch)


# Every thread spins on the GPU's nanosecond timer. Launched as two 1024-thread blocks per SM it
# takes every thread slot of every SM, so it holds the whole GPU: a kernel the forward launches on
# another stream (unseen by the interval's events) cannot run hidden inside the hold.
# torch.cuda._sleep is a single thread and would leave the GPU free for exactly that; torch's own
# elementwise kernels are register-bound below full occupancy. PTX loaded through the driver, not a
# Triton kernel: Triton's first launch costs each process about 0.6 s (H100), paid again by every
# further process a short problem is timed in, against 0.02 s for this.
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


def gpu_hold(torch):
    """A callable that holds the current stream for about `us` microseconds with a kernel that fills
    the GPU, or None where the driver cannot load it or the hold turns out not to keep a kernel on
    another stream waiting (checked here, on this GPU)."""
    P = PINNED
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


def persisting_l2_reset():
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
