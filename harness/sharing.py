"""Several evaluations on one device, with the device to itself whenever something is timed.

Most of an evaluation is not timed: the candidate's start and import, its correctness trials, the
reference's trials, judging in the parent, the kernel listing. Those phases are mostly host latency,
so a device slot runs a few evaluations at once through them (`[batch] concurrent_evaluations`).
Timing is different: nothing else may run on the device, or on the host beside it, while a side is
timed. A `DeviceGate` is the slot's readers-writer lock for that:

- `shared()`: one untimed phase of one evaluation; any number at once.
- `exclusive(owner)`: a timing phase. It waits until every shared phase in flight has ended, and new
  shared phases wait behind it (writer preference: timing is never starved). While it is held, the
  other evaluations' candidate processes are stopped (SIGSTOP): between phases they are idle, and a
  candidate's own background threads must not launch work beside someone else's timing.
- `alone()`: a whole evaluation with the device to itself, for re-running one that failed while the
  device was shared (out of memory, or a timeout, because of a neighbour) before its failure is a
  verdict.

What it cannot stop: GPU work a neighbour queued before it was stopped still drains. Every request
to a candidate ends with its results copied back (synchronizing), so this is only work launched
from a candidate's own background thread between its requests.
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Optional


class DeviceGate:
    def __init__(self, record: bool = False, timing_cpu: Optional[int] = None):
        # the host CPU both sides of a GPU timing run on (cpus.py); None: wherever they are
        self.timing_cpu = timing_cpu
        self._cv = threading.Condition()
        self._readers = 0
        self._writer: Optional[int] = None      # thread id holding exclusive() or alone()
        self._writers_waiting = 0
        self._started = 0                        # shared phases begun so far
        self._workers: dict[int, object] = {}    # thread id -> that evaluation's live candidate
        self._local = threading.local()
        # (kind, start, end) of every phase, for tests that check timing never overlapped anything
        self.log: Optional[list[tuple[str, float, float]]] = [] if record else None
        self.peak_shared = 0
        self.backgrounded = 0  # evaluations in a phase that needs no lane (background())

    # -- who is running --------------------------------------------------------------------------
    def register(self, worker) -> None:
        """This thread's evaluation now has `worker` as its candidate (stopped during others' timing)."""
        with self._cv:
            self._workers[threading.get_ident()] = worker

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
            self._started += 1
            mark = self._started
            self.peak_shared = max(self.peak_shared, self._readers)
            if self._readers > 1:  # a neighbour's phase was under way when this one began
                self._local.seen = True
        self._add_wait(w0)
        t0 = time.perf_counter()
        try:
            yield
        finally:
            with self._cv:
                if self._started != mark:  # or one began while this one ran
                    self._local.seen = True
                self._readers -= 1
                self._note("shared", t0)
                self._cv.notify_all()

    @contextmanager
    def exclusive(self, kind: str = "exclusive"):
        if self._mine():
            yield
            return
        me = threading.get_ident()
        w0 = time.perf_counter()
        with self._cv:
            self._writers_waiting += 1
            try:
                while self._writer is not None or self._readers:
                    self._cv.wait()
            finally:
                self._writers_waiting -= 1
            self._writer = me
            others = [w for t, w in self._workers.items() if t != me]
        self._add_wait(w0)
        for w in others:
            w.pause()
        t0 = time.perf_counter()
        try:
            yield
        finally:
            for w in others:
                w.resume()
            with self._cv:
                self._writer = None
                self._note(kind, t0)
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

    def _note(self, kind: str, t0: float) -> None:
        if self.log is not None:
            self.log.append((kind, t0, time.perf_counter()))


class SoloGate(DeviceGate):
    """The gate of a device with one evaluation at a time (`harness eval`, a CPU slot): no waiting."""

    @contextmanager
    def shared(self):
        yield

    @contextmanager
    def exclusive(self, kind: str = "exclusive"):
        yield
