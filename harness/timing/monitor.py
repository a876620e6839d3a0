"""What the GPU and the host were doing while a side was timed.

NVML readings of the GPU (`GpuMonitor`, read by the parent around every round and judged by
`round_state`), the host's run-queue wait, steal time and CPU placement from /proc (read by the parent,
out of the child's reach), and `quiet_gpu`, which the reference's process runs to wait for a GPU free
of other contexts' work.
"""
from __future__ import annotations

import time
from typing import Optional

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


def main_thread_ns(worker) -> Optional[tuple[int, int]]:
    """(ns on a CPU, ns runnable but waiting for one) of the worker's main thread (where the timing
    loop runs), from the kernel's schedstat: read by the parent, so the child cannot change it."""
    proc = getattr(worker, "proc", None)
    if proc is None:
        return None
    try:
        with open(f"/proc/{proc.pid}/schedstat") as f:
            ran, waited = f.read().split()[:2]
        return int(ran), int(waited)
    except (OSError, ValueError):
        return None


def runqueue_wait_ns(worker) -> Optional[int]:
    """Nanoseconds the worker's main thread has spent runnable but not running."""
    ns = main_thread_ns(worker)
    return None if ns is None else ns[1]


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


def quiet_gpu(torch, probe_us: float, probes: int, max_s: float) -> dict:
    """Wait until the GPU runs no other context's work: a neighbour stopped in the middle of a phase
    (sharing.DeviceGate.stoppable) may have queued some. Contexts time-slice a GPU, so a one-element
    kernel waits for any other context's queued work (a time slice of it) and takes ~10-20 us when
    alone; `probes` of them in a row under `probe_us` is quiet."""
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


def ask_quiet(ref, batch, max_s: float, timeout: float):
    """The parent's side of quiet_gpu: the reference's process (`ref`, a Worker) probes until the GPU
    runs nothing else, for at most `max_s` (`batch`: config.Batch's probe settings). Its QuietReply."""
    from ..records.messages import QuietCommand
    reply, _ = ref.request(QuietCommand(probe_us=batch.quiet_probe_us, probes=batch.quiet_probes, max_s=max_s), timeout)
    if not reply.ok:
        raise RuntimeError(f"reference failed while waiting for a quiet GPU: {reply.error}")
    return reply
