"""Where a batch's work runs: builds on CPU workers, evaluations on device slots.

The pipeline (pipeline.py) decides what runs next and writes the records; an `Executor` only runs two
kinds of task and hands back futures:

- `submit_compile(task)`: build one solution into the content-addressed cache in an isolated child
  (no GPU visible). Anything that needs no device finishes here with its record: no code, rejected
  by the static checks, a failed build.
- `submit_eval(task, slot)`: evaluate one built solution on one device slot (a GPU, or the CPU). A
  slot runs up to `slot.concurrency` evaluations at once, their timing one at a time with the device
  to itself (sharing.DeviceGate), and keeps the reference sessions of the problems it works on
  (outputs and process computed once, reused by every solution of that problem on that slot), and
  standby candidate processes (started while earlier solutions run).
- `retire(problem)`: no more evaluations of this problem: slots close its reference sessions.

`LocalExecutor` runs compiles on a thread pool (each compile is a child process already) and gives
each slot one thread per evaluation it may run at once. `ray_backend.RayExecutor` runs the same work
on a Ray cluster (compile tasks as remote functions, one actor per slot running `SlotRuntime`): the
tasks and outcomes are plain, picklable data and the work functions below carry no state but the
slot's sessions.
"""
from __future__ import annotations

import os
import re
import threading
import time
import traceback
from collections import Counter, OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Protocol

from .. import baselines
from ..build import build_child, child_env, torch_versions
from ..config import Config
from ..cpus import Lender
from ..memory import PROVISIONAL, Admission, Hold, Need, load_kept, need_key, save_need
from ..process.standby import Standby
from ..process.worker import close_all
from ..problems import Problem
from ..records.messages import CompileReply
from ..records.result import EvalResult, Status
from .health import LOSE_GPU_ENV, gpu_lost, schedule_loss
from .sharing import DeviceGate, SoloGate

Compiled = tuple[Optional[CompileReply], Optional[str], str]  # build.compile_solution's (reply, failure, log)
SESSIONS_PER_SLOT = 2  # live reference sessions per device slot: bounds host and device memory


def sessions_per_slot(concurrency: int) -> int:
    """Live reference sessions a slot keeps: one per evaluation in flight and one more. Fewer, and
    evaluations of a few problems interleaved on a shared slot keep evicting each other's reference
    (21 reference starts of ~4 s each for 3 problems, seen with 4 lanes and 2 sessions)."""
    return max(SESSIONS_PER_SLOT, concurrency + 1)


# failures that a neighbour on a shared device can cause (its memory use, its load): re-run alone
# (they fail fast; a timeout is not re-run: it would stall the slot for another timeouts.run_s, and a
# neighbour cannot slow a forward by the ~100x a timeout takes)
RERUN_ALONE = (Status.runtime_error, Status.interface_error, Status.too_big)
# ...and of those, only the ones whose message says memory ran short (device or host: the kernel's
# OOM killer leaves SIGKILL) or that a library's handle could not be made (cuBLAS and cuDNN report an
# allocation failure that way). A re-run alone stops the whole slot: a solution that raises, or
# segfaults, would do so alone too, and re-running every such one cost a warm batch 4-10 s each.
# Matching too much only costs that time again; matching too little would keep a neighbour's verdict.
NEIGHBOUR_CAUSED = re.compile(r"out of memory|OutOfMemory|alloc|NOT_INITIALIZED|CUDNN_STATUS_INTERNAL_ERROR"
                              r"|ERROR_OUT_OF_MEMORY|MemoryError|SIGKILL|SIGBUS|std::bad_alloc"
                              # a neighbour may have killed the fork server its process came from
                              r"|fork server was killed"
                              # the host's free memory, which neighbours take too, could not hold a trial
                              r"|the host can take", re.IGNORECASE)


# failures a lost GPU gives an honest solution (as would a problem's reference failing, or the
# harness): after one, the slot's GPU is asked whether it still answers (health.py)
DEVICE_MAY_BE_LOST = (Status.runtime_error, Status.timeout, Status.too_big)


def neighbour_may_have_caused(rec: EvalResult) -> bool:
    """Could another evaluation on the same device have caused this failure?"""
    if rec.status not in RERUN_ALONE:
        return False
    return bool(NEIGHBOUR_CAUSED.search(f"{rec.error or ''}\n{rec.log_tail or ''}"))


@dataclass
class DeviceSlot:
    """One place evaluations run: a GPU (its children see only it) or the CPU."""

    name: str                      # "cuda:0", "cpu"
    device: str                    # "cuda" | "cpu"
    env: dict[str, str] = field(default_factory=dict)
    concurrency: int = 1           # evaluations in flight on it at once (sharing.py)
    timing_cpu: Optional[int] = None  # the host CPU its reference is timed on (cpus.py)
    cand_cpu: Optional[int] = None    # ...and its candidate; None: the same one
    timing_cpus: str = "apart"        # [hardening] timing_cpus: how a Ray actor picks its own pair
    gpu_name: Optional[str] = None  # its GPU's model (devices.probe_gpus): part of a kept need's key
    background_cpus: Optional[set[int]] = None  # where its standbys start up; None: anywhere
    stop_untimed: bool = True      # timing stops untimed phases in child processes (sharing.py)


@dataclass
class CompileTask:
    index: int
    solution: str
    problem: Problem
    label: Optional[str]
    cfg: Config
    device: str
    size: str
    dtype: Optional[str]
    env: dict[str, str] = field(default_factory=dict)  # for the build child: CUDA_VISIBLE_DEVICES="" on GPU runs
    # on a GPU run, an import that fails with no GPU visible is retried in the evaluation stage (the
    # solution may touch CUDA at import time), not judged here
    retry_import_on_device: bool = False
    builds: bool = True  # has extensions to build; False: only read and parsed, no build child
    cpus: Optional[set[int]] = None  # where the build child and its compilers run; None: anywhere


@dataclass
class CompileOutcome:
    index: int
    compiled: Optional[Compiled] = None     # a build to evaluate on a device
    record: Optional[EvalResult] = None     # finished without a device
    needs_device: bool = False
    wall_s: float = 0.0
    cpu_s: Optional[float] = None           # CPU time of the build child and everything it ran
    error: Optional[str] = None             # a harness failure (no record)


@dataclass
class EvalTask:
    index: int
    solution: str
    problem: Problem
    label: Optional[str]
    cfg: Config
    compiled: Optional[Compiled]            # None: evaluate() builds (or only parses) on the slot
    compile_s: float = 0.0


@dataclass
class EvalOutcome:
    index: int
    slot: str
    record: Optional[EvalResult] = None
    error: Optional[str] = None
    problem_failed: bool = False            # the reference itself failed: no verdict for anyone
    busy_s: float = 0.0
    reference_dropped: Optional[str] = None  # why its problem's reference process is not reused
    device_lost: Optional[str] = None       # it failed and the slot's GPU no longer answers (health.py)


class Executor(Protocol):
    slots: list[DeviceSlot]
    compile_workers: int

    def submit_compile(self, task: CompileTask) -> "Future[CompileOutcome]": ...

    def submit_eval(self, task: EvalTask, slot: DeviceSlot) -> "Future[EvalOutcome]": ...

    def retire(self, problem_key: str) -> None: ...

    def lose(self, slot: DeviceSlot) -> None:
        """`slot`'s GPU is lost: its processes are closed, and it gets no more work."""
        ...

    def backgrounded(self, slot: str) -> int:
        """Evaluations on `slot` now in a phase that holds no lane (sharing.DeviceGate.background)."""
        ...

    def references_started(self) -> dict[str, int]: ...

    def overdue_phases(self) -> dict[str, int]: ...

    def held_seconds(self) -> dict[str, float]:
        """Per slot, seconds its device was held for timing (sharing.DeviceGate.held_s)."""
        ...

    def expected_seconds(self, problem: Problem, cache_dir: str) -> Optional[float]:
        """How long an evaluation of `problem` took in an earlier run here (memory.KeptNeed.seconds)."""
        ...

    def shutdown(self, cancel: bool = False) -> None: ...


def problem_key(p: Problem) -> str:
    return str(p.path)


# --------------------------------------------------------------------------------------------------
# The work itself, independent of where it runs.

_source_lock = threading.Lock()


def compile_item(task: CompileTask, lender: Optional[Lender] = None) -> CompileOutcome:
    """Build one solution in an isolated child. Items that need no device get their record here.
    `lender`: the build also borrows the timing CPUs while nothing is timed (cpus.Lender)."""
    from ..build import builds_extensions, extensions_dir, source_file
    from ..evaluation import evaluate
    from ..reference import ReferenceSession
    from ..solutions import load_solution
    from ..static_checks import check_source

    t0 = time.perf_counter()
    out = CompileOutcome(index=task.index)
    cfg = task.cfg
    try:
        sol = load_solution(task.solution)
        idle_ref = ReferenceSession(task.problem, cfg, task.device, task.size, task.dtype)  # never started
        if sol.code is None or check_source(sol.code).rejected or not _parses(sol.code):
            out.record = evaluate(task.solution, task.problem, cfg, label=task.label, reference=idle_ref)
            return out
        if not builds_extensions(sol.code):  # nothing to build: evaluate() only parses it, on the slot
            out.needs_device = True
            return out
        cache = Path(cfg.cache_dir).resolve()
        with _source_lock:  # two threads must not write the same extracted file at once
            module = source_file(sol.code, sol.path, cache, sol.extracted)
        ext = extensions_dir(sol.code, task.device, cache)
        # at idle priority, so that a build never slows an evaluation beside it, with its CPU seconds
        from ..light_header import first_try
        from ..sandbox import memory_cap, wanted
        reply, failure, log, cpu = build_child(module, ext, task.device, cfg.timeouts.compile_s, task.env,
                                               idle=True, cpus=task.cpus, lender=lender,
                                               jailed=wanted(cfg.hardening.sandbox, task.device, cfg.cache_dir),
                                               memory_bytes=memory_cap(cfg.hardening.jail_memory_gb),
                                               light=first_try(cfg, task.device, sol.code))
        out.cpu_s = cpu
        built_ok = failure is None and reply is not None and reply.ok
        retry = task.retry_import_on_device and (
            (failure or "").startswith("died") or (reply is not None and reply.category == "import_error"))
        if built_ok:
            out.compiled, out.needs_device = (reply, failure, log), True
        elif retry:
            out.compiled, out.needs_device = None, True
        else:
            out.record = evaluate(task.solution, task.problem, cfg, label=task.label, reference=idle_ref,
                                  compiled=(reply, failure, log))
    except Exception as e:  # noqa: BLE001 - a harness bug must not stop the batch
        out.error = f"internal error while building: {type(e).__name__}: {e}\n{traceback.format_exc(limit=4)}"
    finally:
        out.wall_s = time.perf_counter() - t0
        if out.record is not None:
            _charge_compile(out.record, out.wall_s)
    return out


def _parses(code: str) -> bool:
    from ..pyast import parse
    try:
        parse(code)
    except (SyntaxError, ValueError):
        return False
    return True


def _own_seconds(rec) -> Optional[float]:
    """A passed evaluation's time less its build and its waits for others (the gate, memory): what
    the problem itself costs a lane. None for any other verdict, whose time is the solution's doing."""
    if rec.status != Status.passed:
        return None
    p = rec.phases
    return round(max(0.0, p.total_s - p.compile_s - p.wait_s - p.memory_wait_s), 2)


def _charge_compile(rec: EvalResult, seconds: float) -> None:
    """The build ran ahead of the evaluation: its wall time is the record's compile phase."""
    rec.phases.total_s += max(0.0, seconds - rec.phases.compile_s)
    rec.phases.compile_s = max(rec.phases.compile_s, seconds)


class SlotRuntime:
    """One device slot's state: its environment, up to `max_sessions` live reference sessions
    (least recently used closed first, never one in use) and its standby candidates. Up to
    `concurrency` evaluations run on it at once, each on its own thread, through its `DeviceGate`
    (sharing.py): their untimed phases overlap, their timing does not."""

    def __init__(self, slot: DeviceSlot, size: str, dtype: Optional[str], max_sessions: Optional[int] = None,
                 concurrency: int = 1, lender: Optional[Lender] = None, admission: Optional[Admission] = None,
                 check_device=gpu_lost):
        self.slot, self.size, self.dtype = slot, size, dtype
        self.check_device = check_device  # env -> why its GPU is lost, or None (health.gpu_lost)
        # the machine's memory, shared by every slot of a batch (memory.py); one of its own otherwise
        self.admission = admission
        self.concurrency = max(1, concurrency)
        self.max_sessions = max(1, max_sessions or sessions_per_slot(self.concurrency))
        # a GPU slot's gate is a real one even for one evaluation at a time: its standbys' priming
        # (process.standby.Standby) runs GPU work, and timing must stop it like any untimed phase
        shared = self.concurrency > 1 or self.slot.device == "cuda"
        self.gate: DeviceGate = (DeviceGate if shared else SoloGate)(timing_cpu=self.slot.timing_cpu,
                                                                     cand_cpu=self.slot.cand_cpu,
                                                                     stop_untimed=self.slot.stop_untimed,
                                                                     lender=lender)
        self.sessions: OrderedDict[str, object] = OrderedDict()  # reusable, by problem key
        self._users: Counter = Counter()    # id(session) -> evaluations holding it
        self._doomed: dict[int, object] = {}  # out of `sessions`, closed when the last holder is done
        self.references_started = 0
        self.reruns = 0
        self.standby: Optional[Standby] = None
        self._starting: set[int] = set()  # sessions being started ahead of their evaluations
        self._starters: list[threading.Thread] = []
        self._lock = threading.Lock()
        self.env = None  # what the slot's references said of its device and stack (records.result.EnvInfo)

    def _session(self, problem: Problem, cfg: Config):
        from ..reference import ReferenceSession
        key = problem_key(problem)
        with self._lock:
            s = self.sessions.get(key)
            if s is not None:
                self.sessions.move_to_end(key)
            else:
                idle = [k for k, v in self.sessions.items() if not self._users[id(v)]]
                while idle and len(self.sessions) >= self.max_sessions:
                    old = self.sessions.pop(idle.pop(0))
                    self._doomed[id(old)] = old
                s = ReferenceSession(problem, cfg, self.slot.device, self.size, self.dtype,
                                     env_extra=dict(self.slot.env), on_start=self._count_start)
                kept = load_kept(cfg.cache_dir, self._need_key(problem))
                if kept is not None:
                    s.expected = kept.need()
                    s.kept_s = kept.seconds
                self.sessions[key] = s
            self._users[id(s)] += 1
        self._close_doomed()
        return s

    def expected_seconds(self, problem: Problem, cache_dir: str) -> Optional[float]:
        """How long an evaluation of `problem` took when last kept on this kind of device (None: unknown)."""
        kept = load_kept(cache_dir, self._need_key(problem))
        return kept.seconds if kept is not None else None

    def _need_key(self, problem: Problem) -> str:
        return need_key(problem.source_hash, self.size, self.dtype, self.slot.device, self.slot.gpu_name,
                        torch_versions()[0])

    def _count_start(self) -> None:
        with self._lock:
            self.references_started += 1

    def _release(self, key: str, session, drop: bool) -> None:
        """An evaluation is done with `session`; `drop`: it is not to be reused (closed once no
        other evaluation holds it)."""
        with self._lock:
            self._users[id(session)] -= 1
            if drop and self.sessions.get(key) is session:
                self._doomed[id(self.sessions.pop(key))] = session
        self._close_doomed()

    def drop(self, key: str) -> None:
        with self._lock:
            s = self.sessions.pop(key, None)
            if s is not None:
                self._doomed[id(s)] = s
        self._close_doomed()

    def _close_doomed(self) -> None:
        with self._lock:
            idle = [i for i in self._doomed if not self._users[i]]
            done = [self._doomed.pop(i) for i in idle]
            for i in idle:
                self._users.pop(i, None)
        for s in done:
            s.close()

    def _standby(self, cfg: Config) -> Optional[Standby]:
        from ..sandbox import views, wanted
        with self._lock:
            if cfg.batch.standby_workers and self.standby is None:
                depth = cfg.batch.standby_workers if self.slot.device == "cuda" else 1
                # evaluations that overlap each take one: keep one more started per evaluation
                prime = self.slot.device if self.slot.device == "cuda" and cfg.batch.prime_standbys else None
                # standbys born as the slot's jailed candidates will be (sandbox.born_apart)
                view = views() if wanted(cfg.hardening.sandbox, self.slot.device, cfg.cache_dir) else None
                self.standby = Standby(child_env(None, self.slot.device, dict(self.slot.env)),
                                       depth + self.concurrency - 1, cpus=self.slot.background_cpus,
                                       prime=prime, gate=self.gate, timeout=cfg.timeouts.load_s,
                                       fork=cfg.batch.fork_standbys, apart=bool(view and view["own_pids"]),
                                       ipc=self.slot.device == "cuda")
            return self.standby

    def _early_reference(self, key: str, session) -> None:
        """Start a problem's reference beside the first candidate's start and trials instead of after
        them: without this, the evaluations that begin a problem (up to a lane each) waited for it,
        0.54 s per solution on average in a warm throughput bench on an H100 (0.07 s with it). The
        candidate still gets memory poisoned by its own process, and every later solution of the
        problem follows a reference process already, in a batch; the process boundary is what keeps
        them apart.
        A failure is left to the evaluation's own start, which reports it."""
        with self._lock:
            if session.worker is not None or id(session) in self._starting:
                return
            self._starting.add(id(session))
            self._users[id(session)] += 1  # not closed under the start by the LRU

        def start():
            try:
                with self.gate.stoppable() as phase:
                    session.start(on_worker=phase.add)
            except Exception:  # noqa: BLE001
                pass
            finally:
                with self._lock:
                    self._starting.discard(id(session))
                self._release(key, session, drop=False)

        t = threading.Thread(target=start, daemon=True, name=f"reference-{self.slot.name}")
        with self._lock:
            self._starters = [s for s in self._starters if s.is_alive()] + [t]
        t.start()

    def evaluate(self, task: EvalTask) -> EvalOutcome:
        from ..evaluation import evaluate
        from ..reference import ReferenceError

        t0 = time.perf_counter()
        out = EvalOutcome(index=task.index, slot=self.slot.name)
        key = problem_key(task.problem)
        session = self._session(task.problem, task.cfg)
        standby = self._standby(task.cfg)
        if session.worker is None and session.standby is None:
            session.standby = standby  # its reference starts from there too (Standby.take)
        drop = False

        def run(hold: Hold):
            rec = evaluate(task.solution, task.problem, task.cfg, label=task.label, reference=session,
                           compiled=task.compiled, env_extra=dict(self.slot.env), standby=standby, gate=self.gate,
                           hold=hold)
            if task.compiled is not None:
                _charge_compile(rec, task.compile_s)
            else:  # built here, after a first try without the GPU
                rec.phases.compile_s += task.compile_s
                rec.phases.total_s += task.compile_s
            return rec

        admission = self._admission(task.cfg)
        gpu = self.slot.env.get("CUDA_VISIBLE_DEVICES", "0") if self.slot.device == "cuda" else None
        try:
            hold = admission.hold(self._need(session, task), gpu, measured=lambda: session.need)
        except BaseException:
            self._release(key, session, False)
            raise
        before_start = hold.waited_s  # in no phase of evaluate(), so not in its total either
        waited = 0.0
        if task.cfg.batch.early_reference and self.slot.device == "cuda":
            # inside the hold: a reference's start takes device memory (its inputs, in its warm-up)
            self._early_reference(key, session)
        try:
            self.gate.reset_seen()
            rec = run(hold)
            if neighbour_may_have_caused(rec) and (self.gate.shared_seen or rec.status == Status.too_big):
                # it failed while other evaluations shared the device (or idle processes kept memory
                # there), whose memory use may be the cause: the verdict comes from a run on its own,
                # once every other evaluation on the device has ended and idle processes are closed
                # (memory.Admission.alone)
                first = rec.status.value
                waited += hold.waited_s
                hold.release()
                hold = admission.alone(gpu)
                with self.gate.alone():
                    rec = run(hold)
                self.reruns += 1
                rec.flags.append("rerun_alone")
                rec.timing_method.setdefault("first_try_while_shared", first)
            out.record = rec
            self.env = session.env or self.env
            took = _own_seconds(rec)
            moved = took is not None and (session.kept_s is None or abs(took - session.kept_s) > 0.25 * session.kept_s)
            if session.need is not None and (session.need != session.expected or moved):
                session.expected = session.need
                session.kept_s = took if moved else session.kept_s
                save_need(task.cfg.cache_dir, self._need_key(task.problem), task.problem.name, session.need,
                          seconds=session.kept_s)
            # a reference that died, or that may have a reply still in flight (it timed out mid-round),
            # is not reused: the next solution of this problem gets a fresh one. A candidate that
            # timed out on its own (a hang in its trials) leaves the reference as it was: restarting
            # it cost the next solution of that problem 1-2.5 s on an H200 machine.
            ref = session.worker
            if ref is not None and ref.returncode is not None:
                out.reference_dropped = "it exited"
            elif ref is not None and ref.out_of_step:
                out.reference_dropped = "a reply it owed was not read"
            drop = out.reference_dropped is not None
        except ReferenceError as e:
            out.error, out.problem_failed, drop = str(e), True, True
            out.reference_dropped = "it failed"
        except Exception as e:  # noqa: BLE001 - a harness bug must not stop the batch
            out.error = f"internal error while evaluating: {type(e).__name__}: {e}\n{traceback.format_exc(limit=6)}"
            drop = True
            out.reference_dropped = "internal error"
        finally:
            hold.release()
            self._release(key, session, drop)
        if out.record is not None:
            out.record.phases.memory_wait_s = waited + hold.waited_s
            out.record.phases.total_s += before_start
            out.record.slot = self.slot.name
        if self.slot.device == "cuda" and (out.record is None or out.record.status in DEVICE_MAY_BE_LOST):
            out.device_lost = self.check_device(dict(self.slot.env))
        out.busy_s = time.perf_counter() - t0
        return out

    def _need(self, session, task: EvalTask) -> Need:
        """What an evaluation is admitted with: its problem's measured (or kept) need, where it has
        one; only the reference's share of it where the torch.compile baseline is to be compiled
        first (stages/baseline.py: the evaluation grows to the whole before its candidate's trials)."""
        need = session.need or session.expected or PROVISIONAL
        cfg = task.cfg
        if self.slot.device == "cuda" and cfg.timing.compile_baseline != "off":
            env = session.env or self.env  # (the GPU's stack, as any reference on this slot reported it)
            if env is None or baselines.find(cfg, task.problem.source_hash, self.size, self.dtype, env)[2] is None:
                need = need.compiling()
        return need

    def _admission(self, cfg: Config) -> Admission:
        with self._lock:
            if self.admission is None:
                self.admission = Admission(cfg.memory.host_gb, cfg.memory.gpu_gb)
                self.admission.on_wait = self.free_idle
            return self.admission

    def free_idle(self) -> None:
        """Memory is short: the reference sessions no evaluation holds now are closed (a later
        solution of their problem starts its reference again)."""
        with self._lock:
            idle = [k for k, v in self.sessions.items() if not self._users[id(v)] and id(v) not in self._starting]
            for k in idle:
                gone = self.sessions.pop(k)
                self._doomed[id(gone)] = gone
        self._close_doomed()

    def retire(self, key: str) -> None:
        self.drop(key)

    def close(self) -> None:
        """Every reference and standby process at once: on a GPU each exit takes a context's
        teardown (about 0.3-0.5 s), and one after another they added seconds to a batch's end."""
        for t in list(self._starters):  # a reference still starting for an evaluation that ended early
            t.join()
        with self._lock:
            self._doomed.update((id(s), s) for s in self.sessions.values())
            self.sessions.clear()
            idle = [i for i in self._doomed if not self._users[i]]
            done = [self._doomed.pop(i) for i in idle]
        standby, self.standby = self.standby, None
        close_all([s.close for s in done] + ([standby.close] if standby is not None else []))


class LocalExecutor:
    """Compiles on a thread pool of `compile_workers` (each build is its own child process); a
    thread per evaluation a device slot may run at once, and the slot's SlotRuntime owning its
    reference sessions."""

    def __init__(self, slots: list[DeviceSlot], compile_workers: int, size: str, dtype: Optional[str],
                 max_sessions: Optional[int] = None, lender: Optional[Lender] = None,
                 admission: Optional[Admission] = None, check_device=gpu_lost):
        self.slots = slots
        # the slots' timing CPUs, lent to builds while nothing is timed (cpus.Lender); local only: a
        # remote backend's builds run on other hosts
        self.lender = lender
        self.compile_workers = max(1, compile_workers)
        self._compile_pool = ThreadPoolExecutor(self.compile_workers, thread_name_prefix="compile")
        # solutions with nothing to build never wait behind a build: their devices stay fed meanwhile
        self._light_pool = ThreadPoolExecutor(1, thread_name_prefix="read")
        # twice the lanes: evaluations in a background phase leave theirs to another (pipeline.SlotState)
        self._slot_pools = {s.name: ThreadPoolExecutor(2 * max(1, s.concurrency), thread_name_prefix=f"slot-{s.name}")
                            for s in slots}
        self.admission = admission  # one for every slot: they share the host's memory
        self._runtimes = {s.name: SlotRuntime(s, size, dtype, max_sessions, s.concurrency, lender, admission,
                                              check_device) for s in slots}
        if admission is not None:
            runtimes = list(self._runtimes.values())
            admission.on_wait = lambda: [rt.free_idle() for rt in runtimes]
        self._fault = schedule_loss(os.environ.get(LOSE_GPU_ENV), self._runtimes)

    def submit_compile(self, task: CompileTask) -> "Future[CompileOutcome]":
        return (self._compile_pool if task.builds else self._light_pool).submit(compile_item, task, self.lender)

    def submit_eval(self, task: EvalTask, slot: DeviceSlot) -> "Future[EvalOutcome]":
        return self._slot_pools[slot.name].submit(self._runtimes[slot.name].evaluate, task)

    def retire(self, problem_key: str) -> None:
        for name, rt in self._runtimes.items():
            if problem_key in rt.sessions:
                self._slot_pools[name].submit(rt.retire, problem_key)

    def lose(self, slot: DeviceSlot) -> None:
        self._slot_pools[slot.name].submit(self._runtimes[slot.name].close)

    def backgrounded(self, slot: str) -> int:
        return self._runtimes[slot].gate.backgrounded

    def references_started(self) -> dict[str, int]:
        return {name: rt.references_started for name, rt in self._runtimes.items()}

    def overdue_phases(self) -> dict[str, int]:
        """Per slot, candidate phases that gave up their lane for running long (DeviceGate.stoppable)."""
        return {name: rt.gate.overdue for name, rt in self._runtimes.items()}

    def held_seconds(self) -> dict[str, float]:
        return {name: rt.gate.held_s for name, rt in self._runtimes.items()}

    def expected_seconds(self, problem: Problem, cache_dir: str) -> Optional[float]:
        rt = next(iter(self._runtimes.values()), None)
        return rt.expected_seconds(problem, cache_dir) if rt is not None else None

    def shutdown(self, cancel: bool = False) -> None:
        if self._fault is not None:
            self._fault.cancel()
        self._compile_pool.shutdown(wait=not cancel, cancel_futures=cancel)
        self._light_pool.shutdown(wait=not cancel, cancel_futures=cancel)
        for name, pool in self._slot_pools.items():
            if not cancel:
                pool.submit(self._runtimes[name].close)
            pool.shutdown(wait=not cancel, cancel_futures=cancel)
        if cancel:
            for rt in self._runtimes.values():
                for s in [*rt.sessions.values(), rt.standby]:
                    try:
                        if s is not None:
                            s.close()
                    except Exception:  # noqa: BLE001
                        pass
