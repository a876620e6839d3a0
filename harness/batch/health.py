"""Is a slot's GPU still there? Asked after an evaluation on it failed, so that a GPU lost mid-batch
(fallen off the bus, an uncorrectable memory error, taken away from the harness) moves its work to
the other slots instead of turning every later solution on it into a false `runtime_error`.

The question goes to the driver in a fresh process with the slot's environment: no torch import
(a Python start and the driver's, under a second), no state shared with the batch's processes, and
the same device mapping (CUDA_VISIBLE_DEVICES) the slot's children get."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
from typing import Optional

# Exit 0: the device took a context, an allocation and a kernel-free memset. Running out of memory
# counts as an answer: the other evaluations on the GPU may hold all of it.
_ASK = r"""
import ctypes, sys
try:
    cu = ctypes.CDLL("libcuda.so.1")
except OSError as e:
    print(f"no CUDA driver: {e}"); sys.exit(3)
OOM = 2
def name(r):
    s = ctypes.c_char_p()
    cu.cuGetErrorName(r, ctypes.byref(s))
    return (s.value or b"").decode() or str(r)
def need(r, what, oom_ok=False):
    if r == OOM and oom_ok:
        sys.exit(0)
    if r:
        print(f"{what}: {name(r)}"); sys.exit(3)
need(cu.cuInit(0), "cuInit")
n = ctypes.c_int()
need(cu.cuDeviceGetCount(ctypes.byref(n)), "cuDeviceGetCount")
if n.value < 1:
    print("no device visible"); sys.exit(3)
dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
need(cu.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
need(cu.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain", oom_ok=True)
need(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
need(cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(1 << 20)), "cuMemAlloc", oom_ok=True)
need(cu.cuMemsetD8_v2(ptr, ctypes.c_ubyte(0), ctypes.c_size_t(1 << 20)), "cuMemsetD8")
need(cu.cuCtxSynchronize(), "cuCtxSynchronize")
"""


def gpu_lost(env: dict[str, str], timeout: float = 60.0) -> Optional[str]:
    """None when the GPU that `env` maps answers; else why it is taken for lost (a device that does
    not answer within `timeout` is lost too: a hung GPU would hang every evaluation after)."""
    try:
        p = subprocess.run([sys.executable, "-I", "-S", "-c", _ASK], env={**os.environ, **env},
                           capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"the driver did not answer within {timeout:.0f} s"
    except OSError as e:
        return f"could not ask the driver: {e}"
    if p.returncode == 0:
        return None
    said = (p.stdout.strip() or p.stderr.strip()).splitlines()
    return said[-1] if said else f"the device check exited with code {p.returncode}"


# Fault injection for the multi-GPU bench (bench/kernelbench.py --lose-gpu): "cuda:1@60" takes that
# slot's GPU away from the harness 60 s into the batch, as a slot restarted without its device would
# find it: new processes see no GPU, idle ones are closed. Nothing reads it but LocalExecutor.
LOSE_GPU_ENV = "HARNESS_FAULT_LOSE_GPU"


def schedule_loss(spec: Optional[str], runtimes: dict) -> Optional[threading.Timer]:
    if not spec:
        return None
    name, _, after = spec.partition("@")
    rt = runtimes.get(name)
    if rt is None:
        raise ValueError(f"{LOSE_GPU_ENV}={spec!r}: no slot {name!r} (slots: {', '.join(runtimes)})")

    def take_away():
        rt.slot.env["CUDA_VISIBLE_DEVICES"] = ""
        rt.close()

    timer = threading.Timer(float(after or 0), take_away)
    timer.daemon = True
    timer.start()
    return timer
