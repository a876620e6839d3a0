"""Memory: what one evaluation needs on the host and on its GPU, and `Admission`, which starts an
evaluation's memory-hungry work only while the machine holds it.

What an evaluation holds, once trials stream one at a time (stages/check.py):
- in the parent, one trial's payload from each side (the reference's and the candidate's outputs,
  their inputs only where a call changed them);
- in each of its processes, the forward's working set: on a GPU its device memory (the caching
  allocator's peak), on the CPU host memory (the resident peak above the process's start).
The reference measures both on its first trial; until then an evaluation holds `PROVISIONAL`, and
then holds the measured need instead before its candidate runs a trial (`Hold.grow`: waiting where
it is more, giving back at once where it is less).

An evaluation is admitted while what the host (its GPU) has available now, less a margin and less
what the other evaluations hold, covers its need: on the host everything they hold (part of it may
be taken already, so this counts it twice rather than risk the machine), on a GPU only what their
processes have not taken yet (NVML's per-process figures; whole where it has none). The oldest hold is never kept waiting: it can
always proceed, so two evaluations waiting to grow cannot wait on each other forever, and a need
larger than the machine fails by itself, as `too_big`, instead of waiting for ever.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Callable, Optional

GB = 1 << 30
HOST_MARGIN = 2 * GB   # kept free on the host beyond every hold: the kernel, the build children
GPU_MARGIN = 1 * GB    # kept free on a GPU: contexts of processes that start meanwhile
PROCESS_GPU = GB // 2  # a CUDA context and the allocator's first blocks, per process


@dataclass
class Need:
    host: int
    gpu: int = 0
    measured: bool = False

    def describe(self) -> str:
        return f"{self.host / GB:.1f} GB of host memory" + (f", {self.gpu / GB:.1f} GB of GPU memory" if self.gpu else "")


PROVISIONAL = Need(host=GB, gpu=2 * GB)


def measured(payload: int, work_rss: int, gpu_peak: Optional[int], device: str) -> Need:
    """From the reference's first trial: its reply's size (outputs, and inputs where its forward
    changes them), the resident memory its forward took and (GPU) the device memory its allocator
    peaked at. The candidate is taken to need what the reference does: the parent holds both
    payloads, and both processes a working set (on a GPU, in device memory)."""
    host = 2 * payload + (2 * work_rss if device == "cpu" else work_rss)
    gpu = 2 * (gpu_peak or 0) + 2 * PROCESS_GPU if device == "cuda" else 0
    return Need(host=host, gpu=gpu, measured=True)


def host_memory() -> tuple[Optional[int], Optional[int]]:
    """(available, total) bytes: the kernel's MemAvailable and MemTotal (Linux), else (None, None)."""
    vals: dict[str, int] = {}
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                k, v = line.split(":", 1)
                if k in ("MemAvailable", "MemTotal"):
                    vals[k] = int(v.split()[0]) * 1024
    except (OSError, ValueError):
        pass
    return vals.get("MemAvailable"), vals.get("MemTotal")


def gpu_memory(visible: Optional[str]) -> tuple[Optional[int], Optional[int]]:
    """(free, total) bytes of the first GPU of `visible` (CUDA_VISIBLE_DEVICES), from NVML: the
    parent holds no CUDA context of its own. (None, None) where NVML cannot say."""
    from .timing.monitor import nvml_handle
    nvml, h = nvml_handle(visible)
    if h is None:
        return None, None
    try:
        info = nvml.nvmlDeviceGetMemoryInfo(h)
        return int(info.free), int(info.total)
    except Exception:  # noqa: BLE001
        return None, None


def gpu_usage(visible: Optional[str]) -> Optional[dict[int, int]]:
    """Device memory each process holds on the first GPU of `visible`, by pid (NVML's compute
    processes); None where NVML cannot say."""
    from .timing.monitor import nvml_handle
    nvml, h = nvml_handle(visible)
    if h is None:
        return None
    try:
        return {int(p.pid): int(p.usedGpuMemory or 0) for p in nvml.nvmlDeviceGetComputeRunningProcesses(h)}
    except Exception:  # noqa: BLE001
        return None


def frame_limit(budget_gb: float = 0) -> int:
    """The most one reply's frames may announce: what the host can hold now (or the configured
    budget). An honest output past it is too big for this machine."""
    if budget_gb:
        return int(budget_gb * GB)
    avail, _ = host_memory()
    return max(GB, avail - HOST_MARGIN) if avail is not None else 64 * GB


class TooBig(Exception):
    """The problem needs more memory than this machine has: every solution of it gets `too_big`."""


class Admission:
    """The machine's memory, handed out to evaluations (one per batch, or per `harness eval`).
    `host_gb`/`gpu_gb`: a fixed budget ([memory] in the config); 0 takes what the machine has
    available at each decision."""

    def __init__(self, host_gb: float = 0, gpu_gb: float = 0, poll_s: float = 0.25,
                 host_probe: Callable[[], tuple] = host_memory,
                 gpu_probe: Callable[[Optional[str]], tuple] = gpu_memory,
                 usage_probe: Callable[[Optional[str]], Optional[dict]] = gpu_usage):
        self.host_budget = int(host_gb * GB) if host_gb else None
        self.gpu_budget = int(gpu_gb * GB) if gpu_gb else None
        self.poll_s = poll_s
        self._host_probe, self._gpu_probe, self._usage_probe = host_probe, gpu_probe, usage_probe
        self._cv = threading.Condition()
        self._holds: dict[int, "Hold"] = {}
        self._next = 0
        self.waited_s = 0.0  # in total, by every hold, for memory
        self.peak_holds = 0  # the most evaluations holding memory at once
        self.on_wait: Optional[Callable[[], None]] = None  # asked to free what idles (a batch's sessions)

    def hold(self, need: Need = PROVISIONAL, gpu: Optional[str] = None) -> "Hold":
        """Wait until `need` fits, then hold it (a context manager). `gpu`: the GPU it runs on, by
        its CUDA_VISIBLE_DEVICES value (None: a CPU evaluation)."""
        with self._cv:
            h = Hold(self, self._next, gpu)
            self._next += 1
            self._holds[h.id] = h
        try:
            self._wait_for(h, need)
        except BaseException:
            h.release()
            raise
        return h

    def capacity(self) -> Need:
        """The most one evaluation can ever be given: the whole budget, or the machine less its margin."""
        _, total = self._host_probe()
        host = self.host_budget or ((total - HOST_MARGIN) if total else 1 << 62)
        return Need(host=host, gpu=self.gpu_budget or 1 << 62)

    def _fits(self, h: "Hold", need: Need) -> bool:
        others = [o for o in self._holds.values() if o is not h]
        if not others or h.id == min(self._holds):  # the oldest always proceeds
            return True
        host_held = sum(o.need.host for o in others)
        if self.host_budget is not None:
            if host_held + need.host > self.host_budget:
                return False
        else:
            avail, _ = self._host_probe()
            if avail is not None and need.host > avail - HOST_MARGIN - host_held:
                return False
        if need.gpu and h.gpu is not None:
            mates = [o for o in others if o.gpu == h.gpu]
            if self.gpu_budget is not None:
                return sum(o.need.gpu for o in mates) + need.gpu <= self.gpu_budget
            free, _ = self._gpu_probe(h.gpu)
            if free is None:
                return True
            # the GPU's free memory already lacks what each evaluation's processes hold now: of a hold,
            # only the part its processes have not taken yet is still to come (counted whole, level 2
            # waited 20-60 s a record for memory that was in fact free). NVML's per-process figures;
            # where it has none, holds count whole
            used = self._usage_probe(h.gpu) if any(o.pids for o in mates) or h.pids else None
            used = used or {}
            coming = sum(max(0, o.need.gpu - sum(used.get(p, 0) for p in o.pids)) for o in mates)
            mine = max(0, need.gpu - sum(used.get(p, 0) for p in h.pids))
            if mine > free - GPU_MARGIN - coming:
                return False
        return True

    def _wait_for(self, h: "Hold", need: Need) -> None:
        t0 = time.perf_counter()
        asked = False
        with self._cv:
            while not self._fits(h, need):
                if not asked and self.on_wait is not None:
                    asked = True
                    self._cv.release()
                    try:
                        self.on_wait()  # idle reference sessions give their memory back
                    finally:
                        self._cv.acquire()
                    continue
                self._cv.wait(self.poll_s)  # the machine's free memory changes without a notify
            h.need = need
            self.peak_holds = max(self.peak_holds, len(self._holds))
        waited = time.perf_counter() - t0
        h.waited_s += waited
        with self._cv:
            self.waited_s += waited

    def _settle(self, h: "Hold", need: Need) -> None:
        with self._cv:
            h.need = need
            self._cv.notify_all()

    def _release(self, h: "Hold") -> None:
        with self._cv:
            self._holds.pop(h.id, None)
            self._cv.notify_all()


class Hold:
    """One evaluation's share of the machine's memory, from admission to its end."""

    def __init__(self, admission: Admission, id: int, gpu: Optional[str]):
        self.admission, self.id, self.gpu = admission, id, gpu
        self.need = Need(host=0)
        self.waited_s = 0.0
        # the evaluation's processes on its GPU (memory.gpu_usage: what of the need they hold already)
        self.pids: set[int] = set()

    def track(self, *pids: Optional[int]) -> None:
        self.pids.update(p for p in pids if p)

    def grow(self, need: Need) -> None:
        """Hold the measured need instead of the provisional one: raises TooBig where the machine
        could never give it, waits until it fits beside the others where it is more than held now,
        and gives the rest back at once where it is less."""
        cap = self.admission.capacity()
        if need.host > cap.host or need.gpu > cap.gpu:
            raise TooBig(f"needs {need.describe()}; this machine can give one evaluation "
                         f"{cap.host / GB:.1f} GB of host memory"
                         + (f" and {cap.gpu / GB:.1f} GB of GPU memory" if cap.gpu < 1 << 62 else ""))
        if need.host <= self.need.host and need.gpu <= self.need.gpu:
            self.admission._settle(self, need)
            return
        self.admission._wait_for(self, need)

    def release(self) -> None:
        self.admission._release(self)

    def __enter__(self) -> "Hold":
        return self

    def __exit__(self, *exc) -> None:
        self.release()
