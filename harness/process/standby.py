"""Children started ahead of need: a `Standby` keeps candidate processes for a device slot's
environment, each having paid for the interpreter and the torch import (forked from the slot's fork
server where it can, forkserver.py) while the previous candidate was still running; it waits for its
setup line. A batch slot's references take from it too.
"""
from __future__ import annotations

import functools
import threading
from collections import deque
from typing import Callable, Optional, Union

from ..records.messages import Setup
from .forkserver import ForkServer
from .worker import Worker, close_all


# Read by torch when an extension is loaded, not when it is imported: the only part of a candidate's
# environment that may differ between candidates, so it arrives with the setup instead
LATE_ENV = ("TORCH_EXTENSIONS_DIR",)


def _early(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in LATE_ENV}


def _dumpable_ok(env: dict[str, str]) -> dict[str, str]:
    """`env` without the reference's request not to be dumpable, which every standby honours already."""
    return {k: v for k, v in env.items() if k != "HARNESS_NONDUMPABLE"}


class Standby:
    """Candidate children kept started for a fixed environment (a device slot's), `depth` of them:
    each needs seconds to start (interpreter, torch import), and once evaluations take only a few
    seconds themselves one replacement started per evaluation is not ready in time. Thread-safe: the
    evaluations sharing a device slot take from one Standby.

    `prime` (the slot's device): each one, once started, is also primed (Worker.prime: CUDA context,
    timing primitives pinned) by a thread of its own inside a stoppable phase of the slot's `gate`,
    so that it never runs GPU work beside a timing run (the timing stops it). A worker taken before its turn came is handed
    out unprimed and pins for itself, as a fresh one does."""

    def __init__(self, env: dict[str, str], depth: int = 1, cpus: Optional[set[int]] = None,
                 prime: Optional[str] = None, gate=None, timeout: float = 120.0, fork: bool = True,
                 apart: Optional[bool] = None, ipc: Optional[bool] = None):
        """`apart`: jailed candidates here are born in PID namespaces of their own (Jail.own_pids), so
        standbys are born so too (None: wherever this machine makes them, sandbox.views); `ipc` (a GPU
        slot; None: where `prime` is "cuda"): a reference reads its candidates' outputs through CUDA
        IPC, which no process born apart can give it (sandbox.born_apart), so references take
        standbys born in the harness's namespace, kept beside the others."""
        from ..batch.sharing import SoloGate
        self.env = _early(env)
        self.depth = max(1, depth)
        self.cpus = cpus  # where they start up: off the slot's timing CPU (cpus.py)
        self.prime_device = prime
        self.gate = gate or SoloGate()
        self.timeout = timeout
        # one torch import for all of them (forkserver.py); None: each imports its own
        self.server = ForkServer(self.env, cpus) if fork else None
        if apart is None:
            from ..sandbox import views
            apart = bool(views() and views()["own_pids"])
        self.apart, self.ipc = apart, (prime == "cuda") if ipc is None else ipc
        self._cv = threading.Condition()
        # id(worker) -> "starting" (its thread waits for the preload), "queued" (for the gate),
        # "priming", "done", or "taken" (handed out or closed before its turn: not primed)
        self._state: dict[int, str] = {}
        # both kinds from the start where both are taken (a candidate first): each take replaces its own kind
        self.pool: deque[Worker] = deque(self._spawn(self.apart and not (self.ipc and i % 2))
                                         for i in range(self.depth))

    def _spawn(self, apart: bool) -> Worker:
        w = Worker(None, env=self.env, cpus=self.cpus, forkserver=self.server, fork_timeout=self.timeout,
                   apart=apart)
        if self.prime_device:
            self._state[id(w)] = "starting"
            threading.Thread(target=self._prime, args=(w,), daemon=True, name="standby-prime").start()
        return w

    def _move(self, w: Worker, frm: str, to: str) -> bool:
        with self._cv:
            if self._state.get(id(w)) != frm:
                return False  # taken or closed meanwhile
            self._state[id(w)] = to
            self._cv.notify_all()
            return True

    def _prime(self, w: Worker) -> None:
        try:
            if not w.ready(self.timeout):
                self._move(w, "starting", "done")
                return
            if not self._move(w, "starting", "queued"):
                return
            with self.gate.stoppable() as phase:
                phase.add(w)
                if self._move(w, "queued", "priming") and not w.prime(self.prime_device, self.timeout):
                    w.kill()  # it may still be priming: it would answer "prime" to its setup
        except Exception:  # noqa: BLE001 - closed under it: take() falls back to a fresh worker
            pass
        finally:
            with self._cv:
                if self._state.get(id(w)) in ("starting", "priming"):
                    self._state[id(w)] = "done"
                self._cv.notify_all()

    def _settled(self, w: Worker, timeout: float) -> bool:
        """Under self._cv, for a worker with a priming thread: wait until that thread is neither
        reading its preload nor priming. Neither needs the gate, so a caller inside a shared phase
        cannot deadlock here. False when it is still at it after `timeout` (hung)."""
        return self._cv.wait_for(lambda: self._state[id(w)] not in ("starting", "priming"), timeout)

    def _claim(self, w: Worker, timeout: float) -> bool:
        """Make `w` this thread's to use: its priming thread, if any, is past the preload and either
        done or told not to start (never left mid-way). True when `w` is ready and alive."""
        with self._cv:
            if id(w) in self._state:
                if not self._settled(w, timeout):
                    return False  # the caller closes it
                if self._state[id(w)] == "queued":
                    self._state[id(w)] = "taken"
        return w.ready(timeout) and w.returncode is None

    @property
    def idle(self) -> Optional[Worker]:
        """The one the next take() hands out."""
        return self.pool[0] if self.pool else None

    def take(self, setup: Union[Setup, dict], env: dict[str, str], timeout: float,
             on_worker: Optional[Callable[[Worker], None]] = None) -> Worker:
        """A candidate or reference worker for `setup`, as Worker(setup, env=env) would give: the
        oldest idle one when `env` matches (a fresh one if it died meanwhile), its replacement started
        at once. A standby is not dumpable from its start, as a reference must be (HARNESS_NONDUMPABLE),
        and has run nothing but the harness's imports, so either role may have it: a reference then
        starts in about a second instead of four (the torch import), under the slot's gate.
        `on_worker`: told of the worker before it is sent its setup (a stoppable phase of the gate,
        which must be able to stop it before it runs any of the solution's code)."""
        tell = on_worker or (lambda w: None)
        setup = Setup.model_validate(setup)
        if setup.role not in ("candidate", "reference") or _early(_dumpable_ok(env)) != self.env:
            cand = Worker(setup, env=env)
            tell(cand)
            return cand
        apart = self._apart_for(setup)
        with self._cv:
            idle = next((w for w in self.pool if w.apart == apart), None)
            if idle is not None:
                self.pool.remove(idle)
        if idle is not None and self._claim(idle, timeout):
            tell(idle)
            idle.start(setup.model_copy(update={"env": {k: env[k] for k in LATE_ENV if k in env}}))
            cand = idle
        else:
            if idle is not None:
                idle.close(grace=0)
            cand = Worker(setup, env=env)  # a fresh interpreter: seconds before it imports anything
            tell(cand)
        with self._cv:
            if idle is not None:
                self._state.pop(id(idle), None)
            # its own kind replaced even where the other kind fills the pool (a slot's references and
            # candidates are taken in turns, so the pool stays near its depth)
            while len(self.pool) < self.depth or not any(w.apart == apart for w in self.pool):
                self.pool.append(self._spawn(apart))
        return cand

    def _apart_for(self, setup: Setup) -> bool:
        """The kind `setup` needs: born apart where its jail says so; a reference where it reads CUDA
        IPC never; anything else takes the slot's default kind."""
        if setup.jail is not None:
            return setup.jail.own_pids
        return self._kind(setup.role)

    def _kind(self, role: str) -> bool:
        return self.apart and not (self.ipc and role == "reference")

    def reserve(self, n: int, role: str = "candidate") -> None:
        """Make sure `n` are started for the takes that follow at once (a side's further processes,
        candidate or reference): the pool's replacements otherwise start one per take, so a group of
        7 primed about two at a time, one after another (bench/diag/further_start.py). Those not
        taken stay in the pool for later evaluations."""
        apart = self._kind(role)
        with self._cv:
            while sum(w.apart == apart for w in self.pool) < n:
                self.pool.append(self._spawn(apart))

    def settle(self, timeout: float) -> None:
        """Wait until the idle ones have finished starting (before CPU timing: they would share the cores)."""
        with self._cv:
            pool = list(self.pool)
        for w in pool:
            with self._cv:
                if id(w) in self._state:
                    self._settled(w, timeout)
                    continue
            w.ready(timeout)

    def close(self) -> None:
        with self._cv:
            pool, self.pool = list(self.pool), deque()
            for w in pool:
                if id(w) in self._state:
                    self._state[id(w)] = "taken"
            self._cv.notify_all()
        close_all([functools.partial(w.close, grace=0) for w in pool])
        if self.server is not None:
            self.server.close()
