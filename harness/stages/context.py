"""What the stages of one evaluation share, and how a child process's failure becomes a verdict."""
from __future__ import annotations

import datetime as _dt
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..version import __version__
from ..build import clear_build_locks
from ..config import Config, Tolerance
from ..memory import Hold
from ..process.standby import Standby
from ..process.worker import Worker, WorkerDied, WorkerProtocolError, WorkerTimeout, describe_exit
from ..problems import Problem
from ..records.messages import Command
from ..records.result import EvalResult, PhaseTimes, Status
from ..batch.sharing import DeviceGate


class Failure(Exception):
    """Ends an evaluation with a verdict."""

    def __init__(self, status: Status, error: Optional[str], flags: Optional[list[str]] = None,
                 log: Optional[str] = None):
        super().__init__(error)
        self.status, self.error, self.flags, self.log = status, error, flags or [], log


@dataclass
class Context:
    """One evaluation's state, passed from stage to stage. `res` is the record being written."""

    cfg: Config
    gate: DeviceGate
    problem: Problem
    res: EvalResult
    phases: PhaseTimes = field(default_factory=PhaseTimes)
    t_start: float = field(default_factory=time.perf_counter)
    waited0: float = 0.0
    env_extra: Optional[dict[str, str]] = None
    standby: Optional[Standby] = None
    device: str = "cpu"
    size: str = "small"
    dtype: Optional[str] = None
    tol: Optional[Tolerance] = None
    hold: Optional[Hold] = None  # its share of the machine's memory (memory.Admission)
    jailed: bool = False  # the solution's processes run as uids of their own (sandbox.py)
    compiled_ahead: bool = False  # torch.compile(Model) compiled in the reference's process (stages/baseline.py)
    compile_error: Optional[str] = None  # ...and why it failed, where it did

    @classmethod
    def open(cls, cfg: Config, gate: DeviceGate, problem: Problem, solution: str, label: Optional[str],
             shared_reference: bool, env_extra, standby) -> "Context":
        res = EvalResult(problem=problem.name, solution=solution, status=Status.runtime_error, label=label,
                         problem_hash=problem.source_hash, config_hash=cfg.digest(), harness_version=__version__,
                         config=None if shared_reference else cfg.model_dump(),
                         started_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
        return cls(cfg=cfg, gate=gate, problem=problem, res=res, waited0=gate.waited, env_extra=env_extra,
                   standby=standby)

    @property
    def cuda(self) -> bool:
        return self.device == "cuda"

    def clock(self) -> float:
        """Phase times leave out waits at the gate (a neighbour being timed)."""
        return time.perf_counter() - self.gate.waited

    def flag(self, *flags: str) -> None:
        for f in flags:
            if f not in self.res.flags:
                self.res.flags.append(f)


def ask(worker: Worker, cmd: Command, timeout: float, what: str, max_bytes: Optional[int] = None):
    """One command to the candidate; every way it can go wrong becomes a verdict."""
    return _verdict_of(worker, timeout, what,
                       lambda: worker.request(cmd, timeout, **({} if max_bytes is None else {"max_bytes": max_bytes})))


def answer(worker: Worker, op: str, t0: float, timeout: float, what: str):
    """The candidate's reply to the `op` sent at `t0` (Worker.send), as `ask` reads it."""
    return _verdict_of(worker, timeout, what,
                       lambda: (worker.wait_reply(op, timeout, t0=t0), time.perf_counter() - t0))


def _verdict_of(worker: Worker, timeout: float, what: str, read):
    try:
        reply, wall = read()
    except WorkerTimeout:
        worker.kill()
        raise Failure(Status.timeout, f"{what} did not finish within {timeout:g} s; the process group was killed",
                      log=worker.log_tail()) from None
    except WorkerDied as e:
        raise Failure(Status.runtime_error, f"{what}: the solution's process died: {describe_exit(e.returncode)}",
                      log=worker.log_tail()) from None
    except WorkerProtocolError as e:
        raise Failure(Status.runtime_error, f"{what}: {e}", ["malformed_report"], log=worker.log_tail()) from None
    if not reply.ok:
        status = Status(reply.error_kind or "runtime_error")
        raise Failure(status, f"{what}: {reply.error}", reply.flags, log=worker.log_tail())
    return reply, wall


def wait_load(worker: Worker, timeout: float, ext_dir: Optional[Path] = None) -> None:
    """The candidate's import of the solution, as a verdict where it fails. `ext_dir`: its build
    folder, where a killed import may leave torch's build lock (build.clear_build_locks)."""
    try:
        reply = worker.wait_reply("load", timeout)
    except WorkerTimeout:
        worker.kill()
        why = (" (load_inline was building again or waiting on a build lock, removed since)"
               if ext_dir is not None and clear_build_locks(ext_dir) else "")
        raise Failure(Status.timeout, f"importing the solution took over {timeout:g} s{why}", log=worker.log_tail()) from None
    except WorkerDied as e:
        if ext_dir is not None:
            clear_build_locks(ext_dir)
        raise Failure(Status.runtime_error, f"the solution's process died while importing: {describe_exit(e.returncode)}",
                      log=worker.log_tail()) from None
    except WorkerProtocolError as e:
        raise Failure(Status.runtime_error, str(e), ["malformed_report"], log=worker.log_tail()) from None
    if not reply.ok:
        raise Failure(Status.runtime_error, f"importing the solution failed: {reply.error}", log=worker.log_tail())
