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

On a GPU a provisional hold is a problem's first run, whose size nothing says yet (KernelBench level 1
goes from kilobytes to 17 GB of inputs): one at a time on a GPU, started only while a quarter of the
GPU is free of what the others hold and will take, and holding all of that until it is measured
(nine level-1 problems started at once on 2 GB each ran 25 of them out of memory).
An evaluation that ran out of memory beside others runs again alone (`Admission.alone`): once every
other evaluation on its GPU has ended and idle processes were closed, with no newcomer admitted until
it ends; only then does `too_big` stand.

A measured need is kept on disk (`save_need`, under the build cache's folder, written by the parent
alone), keyed by the problem's bytes, size, dtype, device model and torch: the next run of the problem
(a --resume, the next batch, an RL loop's next generations) starts it with that need instead of as a
first run. It is a first guess only: the first trial measures it again, and the hold grows or shrinks. The same
file keeps how long the problem's last passed evaluation took (`KeptNeed.seconds`), by which a batch
plans its longest problems first.

An evaluation is admitted while what the host (its GPU) has available now, less a margin and less
what the other evaluations hold, covers its need: on the host everything they hold (part of it may
be taken already, so this counts it twice rather than risk the machine), on a GPU only what their
processes have not taken yet (NVML's per-process figures; whole where it has none). The oldest hold is never kept waiting: it can
always proceed, so two evaluations waiting to grow cannot wait on each other forever, and a need
larger than the machine fails by itself, as `too_big`, instead of waiting for ever.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Optional

from pydantic import BaseModel

from .cachefiles import read_keyed, write_whole

GB = 1 << 30
HOST_MARGIN = 2 * GB   # kept free on the host beyond every hold: the kernel, the build children
GPU_MARGIN = 1 * GB    # kept free on a GPU: contexts of processes that start meanwhile
PROCESS_GPU = GB // 2  # a CUDA context and the allocator's first blocks, per process
FIRST_RUN_SHARE = 0.25  # of a GPU's memory, free for a problem's first (unmeasured) run to start


@dataclass
class Need:
    host: int
    gpu: int = 0
    measured: bool = False
    # a problem's first run: on a GPU its hold takes all that is free when it starts (Admission._fits)
    first: bool = False

    def compiling(self) -> "Need":
        """While the reference's process compiles the torch.compile baseline (stages/baseline.py): its
        own share of a measured GPU need and the candidate's started process, not the candidate's forward."""
        if not self.measured or not self.gpu:
            return self
        return replace(self, gpu=min(self.gpu, self.gpu // 2 + PROCESS_GPU))

    def describe(self) -> str:
        return f"{self.host / GB:.1f} GB of host memory" + (f", {self.gpu / GB:.1f} GB of GPU memory" if self.gpu else "")


PROVISIONAL = Need(host=GB, gpu=2 * GB, first=True)


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
        self._alone_lock = threading.Lock()
        self.waited_s = 0.0  # in total, by every hold, for memory
        self.peak_holds = 0  # the most evaluations holding memory at once
        self.on_wait: Optional[Callable[[], None]] = None  # asked to free what idles (a batch's sessions)

    def hold(self, need: Need = PROVISIONAL, gpu: Optional[str] = None,
             measured: Optional[Callable[[], Optional[Need]]] = None) -> "Hold":
        """Wait until `need` fits, then hold it (a context manager). `gpu`: the GPU it runs on, by
        its CUDA_VISIBLE_DEVICES value (None: a CPU evaluation). `measured`: the problem's measured
        need once there is one (another solution's first run may measure it while this one waits)."""
        h = self._register(gpu)
        try:
            self._wait_for(h, need, measured)
        except BaseException:
            h.release()
            raise
        return h

    def alone(self, gpu: Optional[str] = None) -> "Hold":
        """A hold that waits until every other evaluation on `gpu` (every other CPU one, for None)
        has ended, admits no newcomer there meanwhile nor while it is held, and then has idle
        processes closed: an evaluation that ran out of memory beside others runs again so before
        `too_big` stands. Such runs go one at a time, so two cannot wait for each other."""
        self._alone_lock.acquire()
        try:
            h = self._register(gpu, alone=True)
            try:
                cap = self.capacity()
                # a GPU's whole memory; on the host what it measures (it waits for that in grow)
                self._wait_for(h, cap if gpu is None else Need(host=PROVISIONAL.host, gpu=cap.gpu))
                if self.on_wait is not None:
                    self.on_wait()  # what idle reference processes keep on the device
            except BaseException:
                h.release()
                raise
        except BaseException:
            self._alone_lock.release()
            raise
        h.unlock = self._alone_lock.release
        return h

    def snapshot(self) -> list[dict]:
        """The holds now, oldest first: for a batch's timeline (events.jsonl), where a stall shows."""
        with self._cv:
            return [{"gpu": h.gpu, "admitted": h.admitted, "alone": h.alone, "first": h.need.first,
                     "host_gb": round(h.need.host / GB, 2), "gpu_gb": round(h.need.gpu / GB, 2),
                     "waited_s": round(h.waited_s, 1)} for _, h in sorted(self._holds.items())]

    def _register(self, gpu: Optional[str], alone: bool = False) -> "Hold":
        with self._cv:
            h = Hold(self, self._next, gpu)
            h.alone = alone
            self._next += 1
            self._holds[h.id] = h
        return h

    def capacity(self) -> Need:
        """The most one evaluation can ever be given: the whole budget, or the machine less its margin."""
        _, total = self._host_probe()
        host = self.host_budget or ((total - HOST_MARGIN) if total else 1 << 62)
        return Need(host=host, gpu=self.gpu_budget or 1 << 62)

    def _fits(self, h: "Hold", need: Need) -> Optional[Need]:
        """The need to hold where `need` fits now (a first run's GPU part: all that is left), else None."""
        others = [o for o in self._holds.values() if o is not h]
        if h.alone:  # runs only once every other evaluation on its GPU (any CPU one, for a CPU hold) ended
            return need if not [o for o in others if o.gpu == h.gpu and o.admitted] else None
        if any(o.alone and o.gpu == h.gpu for o in others) and not h.admitted:
            return None  # no newcomer beside an evaluation that waits to run alone, or runs alone
        # the oldest always proceeds: the oldest of those that may (a newcomer waits behind a run alone,
        # which itself waits for the admitted ones to end; with such a newcomer counted as the oldest,
        # an admitted evaluation growing its hold waited for it, the run alone for that one, and a
        # KernelBench level-1 batch stood still for 270 s until it was killed)
        oldest = h.id == min(o.id for o in self._holds.values() if o is h or self._may_proceed(o))
        host_held = sum(o.need.host for o in others)
        if not oldest and self.host_budget is not None:
            if host_held + need.host > self.host_budget:
                return None
        elif not oldest:
            avail, _ = self._host_probe()
            if avail is not None and need.host > avail - HOST_MARGIN - host_held:
                return None
        if not need.gpu or h.gpu is None:
            return need
        mates = [o for o in others if o.gpu == h.gpu]
        if need.first and not oldest and any(o.need.first for o in mates):
            return None  # one problem of unknown size starting at a time on a GPU
        if self.gpu_budget is not None:
            left, total = self.gpu_budget - sum(o.need.gpu for o in mates), self.gpu_budget
            mine = need.gpu
        else:
            free, total = self._gpu_probe(h.gpu)
            if free is None:
                return need
            # the GPU's free memory already lacks what each evaluation's processes hold now: of a hold,
            # only the part its processes have not taken yet is still to come (counted whole, level 2
            # waited 20-60 s a record for memory that was in fact free). NVML's per-process figures;
            # where it has none, holds count whole
            used = self._usage_probe(h.gpu) if any(o.pids for o in mates) or h.pids else None
            used = used or {}
            coming = sum(max(0, o.need.gpu - sum(used.get(p, 0) for p in o.pids)) for o in mates)
            left = free - GPU_MARGIN - coming
            mine = max(0, need.gpu - sum(used.get(p, 0) for p in h.pids))
        if need.first:  # what is left is its own until it is measured (Hold.grow)
            if oldest or left >= max(need.gpu, FIRST_RUN_SHARE * (total or 0)):
                return replace(need, gpu=max(need.gpu, left))
            return None
        return need if oldest or mine <= left else None

    def _may_proceed(self, o: "Hold") -> bool:
        """Whether `o` may be given memory now: not a run alone (it has its own rule), and admitted
        already or not behind a run alone on its GPU."""
        return not o.alone and (o.admitted or not any(a.alone and a.gpu == o.gpu for a in self._holds.values()))

    def _wait_for(self, h: "Hold", need: Need, measured: Optional[Callable[[], Optional[Need]]] = None) -> None:
        t0 = time.perf_counter()
        asked = False
        with self._cv:
            while (got := self._fits(h, need := (need.first and measured and measured()) or need)) is None:
                if not asked and self.on_wait is not None:
                    asked = True
                    self._cv.release()
                    try:
                        self.on_wait()  # idle reference sessions give their memory back
                    finally:
                        self._cv.acquire()
                    continue
                self._cv.wait(self.poll_s)  # the machine's free memory changes without a notify
            h.need, h.admitted = got, True
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
            gone = self._holds.pop(h.id, None)
            self._cv.notify_all()
        if gone is not None and h.unlock is not None:
            h.unlock()


class Hold:
    """One evaluation's share of the machine's memory, from admission to its end."""

    def __init__(self, admission: Admission, id: int, gpu: Optional[str]):
        self.admission, self.id, self.gpu = admission, id, gpu
        self.need = Need(host=0)
        self.waited_s = 0.0
        self.admitted = False
        self.alone = False  # Admission.alone: no other evaluation on its GPU while it waits or runs
        self.unlock: Optional[Callable[[], None]] = None
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
        if self.need.first:  # what it took for its first run is taken (others see it gone from free): it waits
            self.admission._settle(self, Need(host=self.need.host, gpu=0))  # for the rest beside them
        self.admission._wait_for(self, need)

    def release(self) -> None:
        self.admission._release(self)

    def __enter__(self) -> "Hold":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


# -- needs kept on disk ------------------------------------------------------------------------------

class KeptNeed(BaseModel):
    """A problem's measured need on one device model and torch (memory.measured), as last measured,
    and how long an evaluation of it last took (`seconds`, builds left out): a batch plans the
    longest first, so that they do not end it alone on one GPU while the others idle."""

    key: str
    problem: str
    host: int
    gpu: int
    measured_at: str
    seconds: Optional[float] = None

    def need(self) -> "Need":
        """Admission's first guess for the problem's next run."""
        return Need(host=self.host, gpu=self.gpu, measured=True)


def need_key(problem_hash: str, size: str, dtype: Optional[str], device: str, device_name: Optional[str],
             torch_version: str) -> str:
    parts = [problem_hash, size, dtype, device, device_name, torch_version]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:24]


def _need_file(cache_dir: str, key: str) -> Path:
    return Path(cache_dir).resolve() / "needs" / f"{key}.json"


def load_kept(cache_dir: str, key: str) -> Optional[KeptNeed]:
    return read_keyed(_need_file(cache_dir, key), KeptNeed, key)


def save_need(cache_dir: str, key: str, problem: str, need: Need, seconds: Optional[float] = None) -> None:
    path = _need_file(cache_dir, key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        kept = KeptNeed(key=key, problem=problem, host=need.host, gpu=need.gpu, seconds=seconds,
                        measured_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
        write_whole(path, kept.model_dump_json())
    except OSError:
        pass  # a cache: the next run measures it again
