"""Several evaluations on one device, with the device to itself whenever something is timed.

Most of an evaluation is not timed: the candidate's start and import, its correctness trials, the
reference's trials, judging in the parent, the kernel listing. Those phases are mostly host latency,
so a device slot runs a few evaluations at once through them (`[batch] concurrent_evaluations`).
Timing is different: nothing else may run on the device, or on the host beside it, while a side is
timed. A `DeviceGate` is the slot's readers-writer lock for that:

- `shared()`: one untimed phase of one evaluation whose work runs in the parent (judging) or must
  not be frozen half-way (a process's exit); any number at once.
- `stoppable()`: an untimed phase whose work runs in child processes, named to it with `add(worker)`
  (a candidate's start and trials, a reference's start, a standby's priming). Timing does not wait
  for it to end: it stops those processes (SIGSTOP) for as long as it holds the device, and they go
  on where they were. A worker's request timeouts leave out the time it was stopped.
- `exclusive(owner)`: a timing phase. It waits until every shared phase in flight has ended, and new
  shared phases wait behind it (writer preference: timing is never starved); stoppable phases are
  stopped instead. While it is held, the other evaluations' candidate processes are stopped too:
  between phases they are idle, and a candidate's own background threads must not launch work
  beside someone else's timing. `held.preempted` says whether it stopped a phase mid-way: GPU work
  that phase had queued may still be draining, and the caller waits for the device to be quiet
  (timing.quiet_gpu, from the reference's process) before it times anything.
- `alone()`: a whole evaluation with the device to itself, for re-running one that failed while the
  device was shared (out of memory because of a neighbour) before its failure is a verdict. It waits
  for stoppable phases to end as for shared ones: a stopped process still holds its memory.

Why stop rather than wait: a writer waiting for every phase in flight to end waited for the longest
of them (a start of 1-5 s), while the phases queued behind it waited too. With 4 evaluations in
flight, a warm batch spent 3.6 s per solution at the gate against 0.36 s of timing.

What it cannot stop: GPU work a neighbour queued before it was stopped still drains (hence the quiet
wait), and a neighbour's exit in progress.
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from ..cpus import Lender


class DeviceGate:
    def __init__(self, record: bool = False, timing_cpu: Optional[int] = None, stop_untimed: bool = True,
                 lender: Optional["Lender"] = None, cand_cpu: Optional[int] = None):
        # the host CPUs the reference and the candidate of a GPU timing run on (cpus.slot_cpus);
        # None: wherever they are; a cand_cpu of None: the reference's
        self.timing_cpu = timing_cpu
        self.cand_cpu = timing_cpu if cand_cpu is None else cand_cpu
        self.lender = lender  # a batch's cpus.Lender: builds borrow the timing CPUs while nothing is timed
        # False: stoppable phases are shared ones, waited for ([batch] stop_untimed_phases)
        self.stop_untimed = stop_untimed
        self._cv = threading.Condition()
        self._readers = 0
        self._writer: Optional[int] = None      # thread id holding exclusive() or alone()
        self._writers_waiting = 0
        self._started = 0                        # shared phases begun so far
        self._workers: dict[int, tuple] = {}     # thread id -> that evaluation's live candidate processes
        self._phases: dict[int, "Stoppable"] = {}  # stoppable phases in flight, by id
        self._next_phase = 0
        self._held: Optional["Held"] = None      # the exclusive phase holding the gate, if any
        self._alone_waiting = 0
        self._local = threading.local()
        # (kind, start, end, detail) of every phase (_note), for tests that check what timing overlapped
        self.log: Optional[list[tuple]] = [] if record else None
        self.peak_shared = 0
        self.backgrounded = 0  # evaluations in a phase that needs no lane (background())
        self.overdue = 0  # stoppable phases that gave up their lane for running long (stoppable())
        # seconds the device was held for timing (exclusive(), alone()): over the run's wall time, how
        # near the slot came to its bound, where timing is what evaluations queue for
        self.held_s = 0.0

    # -- who is running --------------------------------------------------------------------------
    def register(self, *workers) -> None:
        """This thread's evaluation now has `workers` as its candidate's processes (stopped during
        any timing but of the ones it keeps: others', and its own of another process pair)."""
        with self._cv:
            self._workers[threading.get_ident()] = workers

    def unregister(self) -> None:
        with self._cv:
            self._workers.pop(threading.get_ident(), None)

    @property
    def shared_seen(self) -> bool:
        """Did another evaluation run a phase beside this thread's, since reset_seen()?"""
        return getattr(self._local, "seen", False)

    def reset_seen(self) -> None:
        self._local.seen = False

    @property
    def waited(self) -> float:
        """Seconds this thread has spent waiting at the gate (kept out of its phase times)."""
        return getattr(self._local, "waited", 0.0)

    def _add_wait(self, since: float) -> None:
        self._local.waited = self.waited + time.perf_counter() - since

    def _mine(self) -> bool:
        return self._writer == threading.get_ident()

    # -- the lock --------------------------------------------------------------------------------
    @property
    def _in_flight(self) -> int:
        """Untimed phases under way, of both kinds: how many evaluations share the device now."""
        return self._readers + len(self._phases)

    def _enter(self) -> int:
        """Under self._cv, as an untimed phase begins: count it; returns its mark."""
        self._started += 1
        self.peak_shared = max(self.peak_shared, self._in_flight)
        if self._in_flight > 1:  # a neighbour's phase was under way when this one began
            self._local.seen = True
        return self._started

    def _leave(self, mark: int) -> None:
        if self._started != mark:  # or one began while this one ran
            self._local.seen = True

    @contextmanager
    def shared(self):
        if self._mine():  # inside alone(): the device is this thread's already
            yield
            return
        w0 = time.perf_counter()
        with self._cv:
            while self._writer is not None or self._writers_waiting:
                self._cv.wait()
            self._readers += 1
            mark = self._enter()
        self._add_wait(w0)
        t0 = time.perf_counter()
        try:
            yield
        finally:
            with self._cv:
                self._leave(mark)
                self._readers -= 1
                self._note("shared", t0)
                self._cv.notify_all()

    @contextmanager
    def stoppable(self, frees_lane_after: Optional[float] = None):
        """An untimed phase of work in child processes: `with gate.stoppable() as phase:
        phase.add(worker)` as soon as the worker exists, before it is sent its work.
        `frees_lane_after`: once the phase has run this many seconds it counts as backgrounded
        (background()), so that a hung or slow candidate waiting out its timeout does not hold one of
        the slot's lanes meanwhile."""
        if self._mine():
            yield Stoppable(self, -1, tracked=False)
            return
        if not self.stop_untimed:
            with self.shared():
                yield Stoppable(self, -1, tracked=False)
            return
        w0 = time.perf_counter()
        with self._cv:
            # not while a timing holds the device, and not ahead of a re-run alone that waits for
            # the device to empty; a waiting timing does not wait for this phase, so no need to yield
            while self._writer is not None or self._alone_waiting:
                self._cv.wait()
            phase = Stoppable(self, self._next_phase)
            self._next_phase += 1
            self._phases[phase.id] = phase
            mark = self._enter()
        self._add_wait(w0)
        t0 = time.perf_counter()
        late = _Overdue(self, frees_lane_after) if frees_lane_after else None
        try:
            yield phase
        finally:
            with self._cv:
                if late is not None:
                    late.end()
                self._leave(mark)
                del self._phases[phase.id]
                self._note("stoppable", t0, phase.id)
                self._cv.notify_all()

    @contextmanager
    def exclusive(self, kind: str = "exclusive", keep: tuple = ()):
        """`keep`: this evaluation's own processes, never stopped (its reference may be one that a
        stoppable phase of another evaluation started)."""
        if self._mine():
            yield Held()
            return
        me = threading.get_ident()
        alone = kind == "alone"
        w0 = time.perf_counter()
        with self._cv:
            self._writers_waiting += 1
            self._alone_waiting += alone
            try:
                while self._writer is not None or self._readers or (alone and self._phases):
                    self._cv.wait()
            finally:
                self._writers_waiting -= 1
                self._alone_waiting -= alone
            self._writer = me
            held = Held()
            mine = held.keep = {id(w) for w in keep}
            for ws in self._workers.values():
                for w in ws:
                    if id(w) not in mine:
                        held.stop(w)
            for phase in self._phases.values():
                held.preempted.append(phase.id)
                for w in phase.workers:
                    if id(w) not in mine:
                        held.stop(w)
            self._held = held
        self._add_wait(w0)
        t0 = time.perf_counter()
        try:
            yield held
        finally:
            with self._cv:  # as they were stopped: under the lock, so no phase joins half-way
                self.held_s += time.perf_counter() - t0
                self._held = None
                held.release()
                self._writer = None
                self._note(kind, t0, tuple(held.preempted))
                self._cv.notify_all()

    def alone(self):
        return self.exclusive("alone")

    @contextmanager
    def background(self):
        """A phase of host work alone that holds no lane: the profiler's start-up in a candidate
        process, 3.5-6 s on an H200 machine, after that evaluation's timing. The pipeline counts
        such evaluations out of the slot's `concurrent_evaluations` and starts others beside them
        (up to twice as many in flight). Not a shared phase: timing need not wait for it, and still
        stops the process (it stays registered)."""
        with self._cv:
            self.backgrounded += 1
        try:
            yield
        finally:
            with self._cv:
                self.backgrounded -= 1

    def _note(self, kind: str, t0: float, detail=None) -> None:
        """(kind, start, end, detail): detail is a stoppable phase's id, or the ids of the phases
        an exclusive one stopped."""
        if self.log is not None:
            self.log.append((kind, t0, time.perf_counter(), detail))


class _Overdue:
    """A stoppable phase's lane, given up once it has run `after` seconds (DeviceGate.stoppable)."""

    def __init__(self, gate: DeviceGate, after: float):
        self.gate, self.ended, self.counted = gate, False, False
        self.timer = threading.Timer(after, self._fire)
        self.timer.daemon = True
        self.timer.start()

    def _fire(self) -> None:
        with self.gate._cv:
            if not self.ended:
                self.counted = True
                self.gate.backgrounded += 1
                self.gate.overdue += 1

    def end(self) -> None:
        """Under the gate's lock, as the phase ends."""
        self.timer.cancel()
        self.ended = True
        if self.counted:
            self.gate.backgrounded -= 1


class Held:
    """What an exclusive phase stopped: processes, and the stoppable phases they belonged to."""

    def __init__(self):
        self.stopped: dict[int, object] = {}
        self.preempted: list[int] = []  # ids of the stoppable phases under way when it began
        self.keep: set[int] = set()  # ids of the processes the timing itself uses (exclusive(keep=))

    def stop(self, w) -> None:
        if id(w) not in self.stopped:
            self.stopped[id(w)] = w
            w.pause()

    def release(self) -> None:
        for w in self.stopped.values():
            w.resume()


class Stoppable:
    """One stoppable phase (DeviceGate.stoppable): the processes doing its work."""

    def __init__(self, gate: DeviceGate, id: int, tracked: bool = True):
        self.gate, self.id, self.tracked = gate, id, tracked
        self.workers: list = []

    def add(self, worker) -> None:
        """From here on, a timing phase stops `worker` while it holds the device; one holding it
        already stops it now (it joined after that phase began)."""
        if not self.tracked:  # inside this thread's own alone(), or phases never stopped: nothing to do
            return
        with self.gate._cv:
            # the holder's own process (its reference, shared by the problem's evaluations): never
            # stopped under the timing that uses it, nor asked anything beside it; this phase goes on
            # once that timing has ended (a timing holding the gate never waits for a session's lock:
            # it took its own before the gate, PairTimer._measure)
            while self.gate._held is not None and id(worker) in self.gate._held.keep:
                self.gate._cv.wait()
            self.workers.append(worker)
            if self.gate._held is not None:
                if self.id not in self.gate._held.preempted:
                    self.gate._held.preempted.append(self.id)
                self.gate._held.stop(worker)


class SoloGate(DeviceGate):
    """The gate of a device with one evaluation at a time (`harness eval`, a CPU slot): no waiting."""

    @contextmanager
    def shared(self):
        yield

    @contextmanager
    def stoppable(self, frees_lane_after: Optional[float] = None):
        yield Stoppable(self, -1, tracked=False)

    @contextmanager
    def exclusive(self, kind: str = "exclusive", keep: tuple = ()):
        yield Held()
