"""A paused candidate's GPU work drained, and its CUDA calls held, through the driver's checkpoint lock.

The candidate is frozen while the reference is timed (Worker.pause), but work its processes queued
on the GPU before the freeze runs on, and contexts time-slice the GPU: a kernel left spinning for
300 ms took a 2.66 ms matmul of the reference's to 5.15 ms on an H200, a speedup doubled from outside
the candidate's interval (bench/diag/gpu_beside.py, bench/results/clock-checks.md, session 47). A
quiet probe sees a spinning kernel but not a copy engine's work (host-to-device copies slowed a
memory-bound add of the reference's by 5.5%, unseen), and a kernel queued behind such a copy starts
after any probe. `cuCheckpointProcessLock`, called by the parent on each CUDA process of the jail
before it is frozen, blocks the process's further CUDA calls and returns once the work it had
submitted, kernels and copies on every stream, has finished (0.1-1 ms on an idle process; the 300 ms
of a left kernel otherwise), for a process of another uid in a PID namespace of its own too; it is
unlocked when the candidate is thawed. The parent loads the driver for it (cuInit makes no context).
The driver (580) will not lock a process CUPTI has been attached to (CUDA_ERROR_NOT_SUPPORTED;
bench/results/clock-checks.md, session 47: IPC exports and imports, pinned memory are fine), even after
cuptiFinalize, and every timed candidate process attaches it in its warm-up round (launch counts,
kernel spans). So the reference's process also waits for a quiet GPU before every round of its and
checks again after it (timing/measure.py), locked or not: that is what holds the GPU quiet on this
driver, and what covers a process the lock missed or that answers for itself.
"""
from __future__ import annotations

import ctypes
import threading
import time
from typing import Optional

# the longest a candidate's GPU work may outlast its round unflagged (gpu_work_after_round): locking
# an idle process took 0.1-1 ms on an H200, an idle GPU's quiet probes about 0.5 ms (session 47)
LEFT_MS = 5.0

CUDA_SUCCESS = 0
CUDA_ERROR_NOT_SUPPORTED = 801
CU_PROCESS_STATE_RUNNING = 0


class _LockArgs(ctypes.Structure):
    _fields_ = [("timeoutMs", ctypes.c_uint), ("reserved0", ctypes.c_uint), ("reserved1", ctypes.c_uint64 * 7)]


_lib: Optional[ctypes.CDLL] = None
_why: Optional[str] = None
_once = threading.Lock()


def _driver() -> Optional[ctypes.CDLL]:
    """The driver with the checkpoint calls, initialised; None where there is none (why: `unavailable`)."""
    global _lib, _why
    with _once:
        if _lib is None and _why is None:
            try:
                lib = ctypes.CDLL("libcuda.so.1")
                for name in ("cuCheckpointProcessLock", "cuCheckpointProcessUnlock", "cuCheckpointProcessGetState"):
                    getattr(lib, name)
                lib.cuCheckpointProcessLock.argtypes = [ctypes.c_int, ctypes.POINTER(_LockArgs)]
                lib.cuCheckpointProcessUnlock.argtypes = [ctypes.c_int, ctypes.c_void_p]
                lib.cuCheckpointProcessGetState.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_int)]
                rc = lib.cuInit(0)
                if rc != CUDA_SUCCESS:
                    _why = f"cuInit: CUDA driver error {rc}"
                else:
                    _lib = lib
            except (OSError, AttributeError) as e:
                _why = f"no CUDA driver with the checkpoint API: {e}"
    return _lib


def unavailable() -> Optional[str]:
    """None where the parent can drain and hold a candidate's GPU work; else why not."""
    _driver()
    return _why


def _state(lib, pid: int) -> Optional[int]:
    s = ctypes.c_int(-1)
    return s.value if lib.cuCheckpointProcessGetState(pid, ctypes.byref(s)) == CUDA_SUCCESS else None


class Held:
    """The CUDA processes one pause locked, to be unlocked when it ends."""

    def __init__(self):
        self.pids: list[int] = []
        self.ms = 0.0          # how long the locks took: the GPU work left when the candidate was paused
        self.failed: list[str] = []  # CUDA processes left running: their work may run beside the reference
        # CUDA processes the driver will not lock (CUPTI attached to one: CUDA_ERROR_NOT_SUPPORTED);
        # their work is waited out by the reference's quiet probes instead (timing/measure.py)
        self.unsupported: list[int] = []
        self.seen: set[int] = set()  # the CUDA processes looked at, locked or not

    def release(self) -> None:
        """Unlocked, every one; one the driver will not unlock is the harness's failure, not the
        candidate's (its next round would hang on it)."""
        lib, bad = _driver(), []
        for pid in self.pids:
            rc = lib.cuCheckpointProcessUnlock(pid, None)
            if rc != CUDA_SUCCESS and _state(lib, pid) is not None:
                bad.append(f"pid {pid}: CUDA driver error {rc}")
        self.pids = []
        if bad:
            raise RuntimeError(f"a paused candidate's CUDA process could not be unlocked: {'; '.join(bad)}")

    @property
    def whole(self) -> bool:
        """Every CUDA process it was given is locked."""
        return not self.failed and not self.unsupported


def hold(pids: list[int], timeout_s: float, into: Optional[Held] = None) -> Optional[Held]:
    """Lock every CUDA process among `pids` (a process without CUDA is passed over), each waited
    for up to what is left of `timeout_s`; added to `into` where given (a second pass over the
    processes started meanwhile). None where the driver cannot (unavailable)."""
    lib = _driver()
    if lib is None:
        return None
    out = into or Held()
    t0 = time.perf_counter()
    try:
        _lock_each(lib, out, [p for p in pids if p not in out.seen], timeout_s, t0)
    except BaseException:
        out.release()
        raise
    out.ms += (time.perf_counter() - t0) * 1e3
    return out


def _lock_each(lib, out: Held, pids: list[int], timeout_s: float, t0: float) -> None:
    for pid in pids:
        state = _state(lib, pid)
        if state is None:
            continue  # no CUDA in it (or gone)
        out.seen.add(pid)
        if state != CU_PROCESS_STATE_RUNNING:
            out.failed.append(f"pid {pid} in checkpoint state {state}")
            continue
        left_ms = max(1, int((timeout_s - (time.perf_counter() - t0)) * 1e3))
        rc = lib.cuCheckpointProcessLock(pid, ctypes.byref(_LockArgs(timeoutMs=left_ms)))
        if rc == CUDA_SUCCESS:
            out.pids.append(pid)
        elif rc == CUDA_ERROR_NOT_SUPPORTED:
            out.unsupported.append(pid)
        elif _state(lib, pid) is not None:  # still a CUDA process, and not locked
            out.failed.append(f"pid {pid}: lock failed, CUDA driver error {rc}")
