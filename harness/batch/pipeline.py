"""The scheduling pipeline of a batch: builds go to the executor's CPU workers as the run starts;
each built solution waits in its problem's queue until a device slot has a free lane, and a slot
prefers the problems whose reference it already holds. Outcomes become records (results.jsonl),
skips and timeline events. Everything here runs on the batch's main thread: the executor's threads
only run tasks."""
from __future__ import annotations

import sys
import threading
import time
import traceback
from collections import Counter, defaultdict, deque
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from ..config import Config
from ..records.result import EvalResult
from ..report import clip
from .executor import (SESSIONS_PER_SLOT, CompileOutcome, CompileTask, DeviceSlot, EvalOutcome, EvalTask, Executor,
                       sessions_per_slot)
from .plan import Item, Skipped
from .runfolder import EventLog, ResultsFile

HEARTBEAT_S = 30.0  # between "inflight" events in the run's timeline


@dataclass
class SlotState:
    slot: DeviceSlot
    busy: dict[int, tuple[Item, float]] = field(default_factory=dict)  # item index -> (item, start)
    recent: list[str] = field(default_factory=list)   # problems whose reference this slot holds (LRU last)
    busy_s: float = 0.0        # the evaluations' own times, summed (they overlap when concurrency > 1)
    occupied_s: float = 0.0    # time with at least one evaluation in flight
    done: int = 0
    lost: Optional[str] = None  # why its GPU was taken for lost (health.py): it gets no more work
    _occupied_since: float = 0.0

    background: Callable[[], int] = lambda: 0  # of `busy`, those in a phase that holds no lane

    @property
    def free(self) -> bool:
        if self.lost is not None:
            return False
        lanes = max(1, self.slot.concurrency)
        return len(self.busy) < 2 * lanes and len(self.busy) - self.background() < lanes

    def start(self, item: Item) -> None:
        now = time.perf_counter()
        if not self.busy:
            self._occupied_since = now
        self.busy[item.index] = (item, now)

    def finish(self, item: Item) -> None:
        self.busy.pop(item.index, None)
        if not self.busy:
            self.occupied_s += time.perf_counter() - self._occupied_since


@dataclass
class BatchSummary:
    run_dir: Path
    items: int = 0
    resumed: int = 0
    unsigned: int = 0  # --resume: lines of results.jsonl passed over, not signed by this harness
    records: int = 0
    skipped: list[Skipped] = field(default_factory=list)
    statuses: Counter = field(default_factory=Counter)
    wall_s: float = 0.0
    compile_wall_s: float = 0.0
    compile_cpu_s: float = 0.0
    compiles: int = 0
    setup_s: float = 0.0       # from the call to the pipeline's start: probing, planning, the run directory
    shutdown_s: float = 0.0    # from the last item's end to every process closed
    device_s: dict[str, float] = field(default_factory=dict)
    occupied_s: dict[str, float] = field(default_factory=dict)
    references: dict[str, int] = field(default_factory=dict)
    overdue: dict[str, int] = field(default_factory=dict)  # slow candidate phases that freed their lane
    held_s: dict[str, float] = field(default_factory=dict)  # each device held for timing (DeviceGate.held_s)
    interrupted: bool = False
    lost_slots: dict[str, str] = field(default_factory=dict)  # slot -> why its GPU was taken for lost
    moved: int = 0  # evaluations run again on another slot after theirs was lost
    # the timing CPUs lent to builds (cpus.Lender): timing phases that took theirs back, and the
    # seconds spent moving builds off it; None: not lent
    reclaims: Optional[int] = None
    reclaim_s: Optional[float] = None

    def to_json(self) -> dict:
        return {"run_dir": str(self.run_dir), "items": self.items, "resumed": self.resumed, "unsigned": self.unsigned,
                "records": self.records, "statuses": dict(self.statuses), "wall_s": round(self.wall_s, 3),
                "setup_s": round(self.setup_s, 3), "shutdown_s": round(self.shutdown_s, 3),
                "compiles": self.compiles, "compile_wall_s": round(self.compile_wall_s, 3),
                "compile_cpu_s": round(self.compile_cpu_s, 3),
                "device_busy_s": {k: round(v, 3) for k, v in self.device_s.items()},
                "device_occupied_s": {k: round(v, 3) for k, v in self.occupied_s.items()},
                "device_timing_held_s": {k: round(v, 3) for k, v in self.held_s.items()},
                "references_started": self.references, "overdue_phases": self.overdue,
                "interrupted": self.interrupted, "lost_slots": self.lost_slots, "moved": self.moved,
                "timing_cpu_reclaims": self.reclaims,
                "timing_cpu_reclaim_s": None if self.reclaim_s is None else round(self.reclaim_s, 4),
                "skipped": [s.__dict__ for s in self.skipped]}


class Pipeline:
    def __init__(self, items: list[Item], cfg: Config, executor: Executor, device: str, size: str,
                 dtype: Optional[str], results: ResultsFile, events: EventLog, summary: BatchSummary,
                 console, verbose: bool, compile_env: dict[str, str]):
        self.items, self.cfg, self.ex = items, cfg, executor
        self.device, self.size, self.dtype = device, size, dtype
        self.results, self.events, self.summary = results, events, summary
        self.console, self.verbose = console, verbose
        self.compile_env = compile_env
        # builds keep off the slots' timing CPUs, like their standbys (cpus.py)
        self.background_cpus = next((s.background_cpus for s in executor.slots), None)
        # mirrors the slots' own LRU of reference sessions
        self.max_sessions = max((sessions_per_slot(s.concurrency) for s in executor.slots),
                                default=SESSIONS_PER_SLOT)
        self.ready: dict[str, deque[tuple[Item, CompileOutcome]]] = defaultdict(deque)
        self.pending_compile: Counter = Counter(it.pkey for it in items)
        self.inflight: Counter = Counter()
        self.failed_problems: dict[str, str] = {}
        self.stall_reported: set[int] = set()  # items whose stall is in the timeline already (_heartbeat)
        self.moved: set[int] = set()  # items already moved off a lost slot: their next outcome stands
        self.retired: set[str] = set()
        lane_free = cfg.batch.background_frees_lane  # or every evaluation in flight keeps its lane
        self.slots = [SlotState(s, background=(lambda name=s.name: executor.backgrounded(name)) if lane_free
                                else (lambda: 0)) for s in executor.slots]
        self.compiling = 0          # items in the first stage (builds and reads)
        self.building = 0           # of which builds in flight or queued
        self.builds_total = sum(it.builds for it in items)
        self.compiled = 0
        self.compile_failed = 0
        self.done = 0
        self.skipped = 0
        self.total = len(items)
        self.t0 = time.perf_counter()

    # -- scheduling -------------------------------------------------------------------------------
    def _pick(self, st: SlotState) -> Optional[tuple[Item, CompileOutcome]]:
        ready = [k for k, q in self.ready.items() if q]
        if not ready:
            return None
        for k in reversed(st.recent):          # 1. a problem whose reference this slot holds
            if self.ready.get(k):
                return self.ready[k].popleft()
        held = {k for s in self.slots if s is not st for k in s.recent}
        free = [k for k in ready if k not in held]
        if free:                                # 2. a problem no other slot works on, in plan order
            k = min(free, key=self._order)
        else:                                   # 3. help with the problem that has the most waiting
            k = max(ready, key=lambda k: (len(self.ready[k]), -self._order(k)))
        return self.ready[k].popleft()

    def _order(self, key: str) -> int:
        return self._first.get(key, 0)

    def _plan_order(self) -> dict[str, int]:
        """Each problem's rank for `_pick`: the longest first, by how long an evaluation of it took in
        an earlier run (memory.KeptNeed.seconds), then the rest in the plan's order. A long one
        planned late ends the batch alone on one GPU while the others idle: on two H200s, level-2
        problems timed in 5-8 processes a side took 27-35 s and ended their batches 7.5 s after the
        rest (bench/results/multigpu-NVIDIA_H200.md, session 39)."""
        first: dict[str, Item] = {}
        for it in self.items:
            first.setdefault(it.pkey, it)
        took = {}
        for k, it in first.items():
            try:
                took[k] = self.ex.expected_seconds(it.problem, self.cfg.cache_dir) or 0.0
            except Exception:  # noqa: BLE001 - a hint: without it the plan's order stands
                took[k] = 0.0
        ranked = sorted(first, key=lambda k: (-took[k], first[k].index))
        return {k: i for i, k in enumerate(ranked)}

    def _dispatch(self, futures: dict) -> None:
        # fill the slots round-robin, one evaluation each per pass: work spreads over every GPU
        # before any GPU takes a second concurrent evaluation
        while True:
            started = False
            for st in self.slots:
                if not st.free:
                    continue
                nxt = self._pick(st)
                if nxt is None:
                    return
                self._start(st, *nxt, futures)
                started = True
            if not started:
                return

    def _start(self, st: SlotState, item: Item, co: CompileOutcome, futures: dict) -> None:
        k = item.pkey
        if k in st.recent:
            st.recent.remove(k)
        st.recent.append(k)
        del st.recent[:-self.max_sessions]
        st.start(item)
        self.inflight[k] += 1
        task = EvalTask(index=item.index, solution=str(item.path), problem=item.problem, label=item.label,
                        cfg=self.cfg, compiled=co.compiled, compile_s=co.wall_s)
        futures[self.ex.submit_eval(task, st.slot)] = ("eval", item, (st, co))

    def _retire_finished(self) -> None:
        for k in list(self.pending_compile):
            if k in self.retired:
                continue
            if self.pending_compile[k] == 0 and not self.ready.get(k) and self.inflight[k] == 0:
                self.retired.add(k)
                self.ex.retire(k)
                for st in self.slots:
                    if k in st.recent:
                        st.recent.remove(k)

    # -- outcomes ---------------------------------------------------------------------------------
    def _record(self, item: Item, rec: EvalResult) -> None:
        self.results.write(rec)
        self.done += 1
        self.summary.records += 1
        self.summary.statuses[rec.status.value] += 1
        if self.verbose:
            sp = f" {rec.speedup:.2f}x" if rec.speedup else ""
            why = f"  ({clip((rec.error or '').splitlines()[0], 200)})" if rec.status.value != "passed" and rec.error else ""
            flags = f"  flags={','.join(rec.flags)}" if rec.flags else ""
            self.console.print(f"[{self.done + self.skipped}/{self.total}] {rec.status.value}{sp}  "
                               f"label={item.label or '-'}  problem={item.problem.name}  {item.short()}{flags}{why}",
                               highlight=False, soft_wrap=True)

    def _skip(self, item: Item, reason: str) -> None:
        sk = Skipped(str(item.path), reason, item.label, item.problem.name)
        self.skipped += 1
        self.summary.skipped.append(sk)
        self.events.write("skipped", **sk.__dict__)
        self.console.print(f"[yellow]skipped[/] {item.path}: {reason.splitlines()[0][:400]}",
                           highlight=False, soft_wrap=True)

    def _on_compiled(self, item: Item, co: CompileOutcome) -> None:
        # the run's timeline, for finding what bounds its wall time (bench/throughput.py reads it)
        outcome = "error" if co.error else co.record.status.value if co.record is not None else "ready"
        self.events.write("compiled", index=item.index, solution=str(item.path), t=round(time.perf_counter() - self.t0, 3),
                          wall_s=round(co.wall_s, 3), cpu_s=None if co.cpu_s is None else round(co.cpu_s, 3),
                          outcome=outcome, cached=co.cpu_s == 0.0)
        self.compiling -= 1
        self.building -= item.builds
        self.summary.compiles += 1
        self.summary.compile_wall_s += co.wall_s
        self.summary.compile_cpu_s += co.cpu_s or 0.0
        k = item.pkey
        self.pending_compile[k] -= 1
        if co.error:
            self.compile_failed += 1
            self._skip(item, co.error)
        elif co.record is not None:
            self.compile_failed += co.record.status.value not in ("no_code", "unsupported")
            self._record(item, co.record)
        elif k in self.failed_problems:
            self._skip(item, f"problem {item.problem.name} failed: {self.failed_problems[k]}")
        elif not self._live_slots():
            self._skip(item, "no device left to run it on: " + "; ".join(
                f"{s.slot.name}: {s.lost}" for s in self.slots))
        else:
            self.compiled += 1
            self.ready[k].append((item, co))

    def _on_evaluated(self, item: Item, st: SlotState, co: CompileOutcome, eo: EvalOutcome) -> None:
        k = item.pkey
        started = st.busy.get(item.index, (None, None))[1]
        self.events.write("evaluated", index=item.index, solution=str(item.path), slot=st.slot.name,
                          t_start=None if started is None else round(started - self.t0, 3),
                          t=round(time.perf_counter() - self.t0, 3),
                          status=eo.record.status.value if eo.record is not None else None,
                          reference_dropped=eo.reference_dropped, device_lost=eo.device_lost)
        self.inflight[k] -= 1
        st.finish(item)
        st.busy_s += eo.busy_s
        st.done += 1
        if eo.device_lost is not None and st.lost is None:
            self._lose(st, eo.device_lost)
        if st.lost is not None and (eo.record is None or eo.record.status.value != "passed") \
                and item.index not in self.moved:
            # its failure may be the GPU's: it runs again on another slot, once (a solution that
            # itself breaks GPUs must not take them all); its problem is not failed for it
            self.moved.add(item.index)
            self.summary.moved += 1
            self.events.write("moved", index=item.index, solution=str(item.path), slot=st.slot.name)
            if self._live_slots():
                self.ready[k].appendleft((item, co))
            else:
                self._skip(item, f"no device left to run it on ({st.slot.name}: {st.lost})")
            return
        if eo.record is not None:
            self._record(item, eo.record)
        elif eo.problem_failed:
            self.failed_problems[k] = eo.error or "reference failed"
            self.events.write("problem_failed", problem=item.problem.name, slot=st.slot.name, error=eo.error)
            self.console.print(f"[red]problem {item.problem.name} failed on {st.slot.name}[/]: "
                               f"{(eo.error or '').splitlines()[0][:400]}", highlight=False, soft_wrap=True)
            self._skip(item, f"problem {item.problem.name} failed: {eo.error}")
            for other, _ in self.ready.pop(k, deque()):
                self._skip(other, f"problem {item.problem.name} failed: {eo.error}")
        else:
            self._skip(item, eo.error or "internal error")

    def _live_slots(self) -> list[SlotState]:
        return [s for s in self.slots if s.lost is None]

    def _lose(self, st: SlotState, why: str) -> None:
        """`st`'s GPU no longer answers: it takes no more work, its processes are closed, and what
        waits for a device goes to the other slots (or is skipped, when none is left)."""
        st.lost = why
        st.recent.clear()
        self.summary.lost_slots[st.slot.name] = why
        self.ex.lose(st.slot)
        self.events.write("device_lost", slot=st.slot.name, reason=why, t=round(time.perf_counter() - self.t0, 3))
        left = [s.slot.name for s in self._live_slots()]
        self.console.print(f"[red]{st.slot.name} lost[/]: {why}; "
                           + (f"its work goes to {', '.join(left)}" if left else "no device left"),
                           highlight=False, soft_wrap=True)
        if not left:
            for k in list(self.ready):
                for other, _ in self.ready.pop(k):
                    self._skip(other, f"no device left to run it on ({st.slot.name}: {why})")

    # -- the loop ---------------------------------------------------------------------------------
    def run(self, progress=None) -> None:
        self._first = self._plan_order()
        futures: dict[Future, tuple] = {}
        last_beat = time.perf_counter()
        for it in self.items:
            task = CompileTask(index=it.index, solution=str(it.path), problem=it.problem, label=it.label,
                               cfg=self.cfg, device=self.device, size=self.size, dtype=self.dtype,
                               env=dict(self.compile_env), retry_import_on_device=self.device == "cuda",
                               builds=it.builds, cpus=self.background_cpus)
            futures[self.ex.submit_compile(task)] = ("compile", it, None)
            self.compiling += 1
            self.building += it.builds
        # everything below runs on this thread; the executor's threads only run tasks
        while futures:
            self._dispatch(futures)
            done, _ = wait(list(futures), timeout=0.5, return_when=FIRST_COMPLETED)
            for f in done:
                kind, item, where = futures.pop(f)
                if kind == "compile":
                    self._on_compiled(item, f.result())
                else:
                    self._on_evaluated(item, *where, f.result())
            self._dispatch(futures)
            self._retire_finished()
            if progress is not None:
                progress()
            if time.perf_counter() - last_beat >= HEARTBEAT_S:
                last_beat = time.perf_counter()
                self._heartbeat()

    def _heartbeat(self) -> None:
        """What is in flight and what memory each evaluation holds or waits for, into the timeline:
        where a batch stalls, this says on what. An evaluation in flight past [batch] stall_report_s
        also has every thread of this process written there with its stack, once ("stall"): a
        batch that stands still says where without anyone there to send it SIGUSR1 (cli.batch_cmd:
        the same on stderr, on demand)."""
        now = time.perf_counter()
        admission = getattr(self.ex, "admission", None)
        self.events.write("inflight", t=round(now - self.t0, 1), slots={
            s.slot.name: [[it.problem.name, _name(it), round(now - t0, 1)] for it, t0 in s.busy.values()]
            for s in self.slots},
            ready=sum(len(q) for q in self.ready.values()), holds=admission.snapshot() if admission else None)
        after = self.cfg.batch.stall_report_s
        stuck = [(s.slot.name, it) for s in self.slots for i, (it, t0) in s.busy.items()
                 if after and now - t0 > after and i not in self.stall_reported]
        if stuck:
            self.stall_reported.update(it.index for _, it in stuck)
            self.events.write("stall", t=round(now - self.t0, 1), after_s=after,
                              items=[[slot, it.problem.name, _name(it)] for slot, it in stuck], threads=thread_stacks())
            self.console.print(f"[yellow]{len(stuck)} evaluation(s) in flight for over {after:g} s: every thread's "
                               "stack is in the run's events.jsonl (\"stall\")[/]", highlight=False, soft_wrap=True)

    # -- what the progress display shows -----------------------------------------------------------
    def status_lines(self) -> list[str]:
        lines = [f"build: {self.builds_total - self.building}/{self.builds_total} done ({self.compile_failed} failed), "
                 f"{min(self.building, self.ex.compile_workers)} running on {self.ex.compile_workers} workers;  "
                 f"evaluate: {sum(s.done for s in self.slots)} done, {sum(len(q) for q in self.ready.values())} "
                 f"ready, {self.compiling} not yet read or built"]
        now = time.perf_counter()
        for s in self.slots:
            what = "; ".join(f"{it.problem.name}  {it.label or '-'}/{it.path.name}  ({now - t:.0f}s)"
                             for it, t in s.busy.values()) or ("lost" if s.lost else "idle")
            lines.append(f"  {s.slot.name}: {what}")
        return lines


def _name(it: Item) -> str:
    return f"{it.label}/{it.path.name}" if it.label else it.path.name


def thread_stacks(limit: int = 30) -> dict[str, list[str]]:
    """Every thread of this process, by name, with its innermost `limit` frames."""
    names = {t.ident: t.name for t in threading.enumerate()}
    return {f"{names.get(ident, '?')} [{ident}]": [ln.rstrip() for ln in traceback.format_stack(frame, limit=limit)]
            for ident, frame in sys._current_frames().items()}
