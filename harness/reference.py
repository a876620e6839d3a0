"""The reference side of an evaluation: the problem's `Model` in a process of its own.

A `ReferenceSession` holds one live reference worker for one problem on one device and the run's
secret seeds. Its trial outputs are computed as a solution's judging asks for them, one trial at a
time (`trial`), and kept (never in a file a candidate could read) only while they are small: in the
parent's memory, or on a GPU in the reference's process, where they are judged (`judge`). A
KernelBench output reaches gigabytes, and five of them for each of a batch's live problems exhausted a
128 GiB host. A batch reuses one session for every solution of a problem;
`harness eval` makes one.
"""
from __future__ import annotations

import random
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Optional

from .build import child_env
from .config import Config, Tolerance
from .payload import TRIAL_CACHE_BYTES
from .process.standby import Standby
from .process.worker import Worker, WorkerDied
from .problems import Problem
from .records.messages import BuildCommand, Setup, TrialsCommand
from .records.result import EnvInfo

if TYPE_CHECKING:
    from .correctness import TrialData
    from .memory import Need


class ReferenceError(RuntimeError):
    """The problem itself failed: not the solution's fault, and no verdict for it."""


class JudgeFailed(RuntimeError):
    """The reference could not judge a candidate's device outputs (stages/check.py judges the trial
    from bytes instead)."""


class ReferenceTooBig(ReferenceError):
    """The reference's forward ran out of memory, or its outputs would not fit the host: its
    solutions get `too_big` (perhaps only because of a neighbour: a batch re-runs them alone)."""


def frame_allowance(payload: int, inputs: int) -> int:
    """What a candidate's answer to a trial may take, from the reference's: its outputs twice over (in
    a wider dtype, which judging then fails as incorrect), its inputs where it changed them, and a
    header's slack. Past it, the answer is refused unread: a reply's size is the candidate's to write."""
    return 2 * payload + inputs + (64 << 20)


# what every process of a GPU comparison NaN-fills and keeps cached at its start (process.runner._poison),
# the same a side, so that both carve their tensors alike; small, as several start at once (7 taking
# 8 GB each ran an H100 out of memory)
POISON_BYTES = 1 << 30
OOM = ("out of memory", "OutOfMemoryError", "std::bad_alloc", "MemoryError", "CUBLAS_STATUS_ALLOC_FAILED")


def out_of_memory(text: Optional[str]) -> bool:
    return any(m in (text or "") for m in OOM)


def problem_error(problem: str, what: str, error: Optional[str]) -> "ReferenceError":
    """The reference's failure: `ReferenceTooBig` where it ran out of memory (perhaps only beside
    others: a batch runs its solutions again alone), else the problem's own `ReferenceError`."""
    return (ReferenceTooBig if out_of_memory(error) else ReferenceError)(f"problem {problem}: {what}: {error}")


@dataclass
class TrialPlan:
    init_seed: int
    seeds: list[int]
    shapes: list[dict[str, Any]]
    shape_names: list[str]


def make_plan(rng: random.Random, trials: int, extra_shapes: list[dict[str, Any]]) -> TrialPlan:
    seeds, shapes, names = [], [], []
    for _ in range(trials):
        seeds.append(rng.getrandbits(62))
        shapes.append({})
        names.append("default")
    for s in extra_shapes:
        seeds.append(rng.getrandbits(62))
        shapes.append(dict(s))
        names.append(",".join(f"{k}={v}" for k, v in s.items()))
    return TrialPlan(init_seed=rng.getrandbits(62), seeds=seeds, shapes=shapes, shape_names=names)


def _module(problem: Problem):
    """The problem's syntax tree, or None where it does not parse."""
    from .pyast import parse
    try:
        return parse(problem.text)
    except SyntaxError:
        return None


def _top_names(tree) -> dict[str, Any]:
    """Each name the module assigns at its top level, and the expression last assigned to it."""
    import ast
    out: dict[str, Any] = {}
    for node in getattr(tree, "body", []):
        if isinstance(node, ast.Assign):
            for t in node.targets:
                for n in ast.walk(t):  # `A = B = 1` and `A, B = 1, 2` alike
                    if isinstance(n, ast.Name):
                        out[n.id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = node.value
    return out


def _meta_node(problem: Problem):
    """The expression assigned to HARNESS_META at the module's top level, or None."""
    return _top_names(_module(problem)).get("HARNESS_META")


def read_meta(problem: Problem) -> dict[str, Any]:
    """HARNESS_META read without importing the problem (the parent imports no problem code)."""
    import ast
    node = _meta_node(problem)
    try:
        meta = ast.literal_eval(node) if node is not None else {}
    except (ValueError, SyntaxError, TypeError):
        return {}
    return dict(meta) if isinstance(meta, dict) else {}


_NUMBER = (int, float)
# what the harness reads, and what each must be (problems/FORMAT.md); expect_flags: what the linter
# must flag, for its own test problems (tests/lint_problems)
META_KEYS: dict[str, Any] = {
    "level": lambda v: v in (1, 2, 3), "dtype": lambda v: v in ("fp32", "fp16", "bf16"),
    "atol": lambda v: v is None or isinstance(v, _NUMBER), "rtol": lambda v: v is None or isinstance(v, _NUMBER),
    "rel_l2": lambda v: v is None or isinstance(v, _NUMBER), "flops": lambda v: v is None or isinstance(v, _NUMBER),
    "bytes": lambda v: v is None or isinstance(v, _NUMBER), "train": lambda v: isinstance(v, bool),
    "small": lambda v: isinstance(v, dict) and all(isinstance(k, str) for k in v),
    "extra_shapes": lambda v: isinstance(v, list) and all(isinstance(s, dict) and all(isinstance(k, str) for k in s) for s in v),
    "expect_flags": lambda v: isinstance(v, list),
}


def meta_issues(problem: Problem) -> list[str]:
    """What is wrong with a problem's HARNESS_META that evaluating it would pass over without a word:
    not a literal dict (none of it is read), a key the harness does not read (a misspelt one leaves
    its setting at the default), a value of the wrong kind, a size in `small` or `extra_shapes` that
    names no constant of the module (it would be set, read by nothing, and the size left as it is)."""
    import ast
    import difflib
    names = _top_names(_module(problem))
    node = names.get("HARNESS_META")
    if node is None:
        return []
    try:
        meta = ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return [f"HARNESS_META (line {node.lineno}) is not a literal, so none of it is read: write numbers, "
                "not expressions or names"]
    if not isinstance(meta, dict):
        return [f"HARNESS_META is a {type(meta).__name__}, not a dict, so none of it is read"]
    out = []
    for k, v in meta.items():
        ok = META_KEYS.get(k)
        if ok is None:
            near = difflib.get_close_matches(str(k), META_KEYS, n=1)
            out.append(f"{k!r} is not a key the harness reads" + (f" (did you mean {near[0]!r}?)" if near else ""))
        elif not ok(v):
            out.append(f"{k!r} = {v!r} is not a value it takes (problems/FORMAT.md)")
        elif k in ("small", "extra_shapes"):
            for size in ([v] if k == "small" else v):
                for name in size:
                    if name not in names:
                        near = difflib.get_close_matches(name, [n for n in names if n != "HARNESS_META"], n=1)
                        out.append(f"{k} sets {name!r}, which the module does not define"
                                   + (f" (did you mean {near[0]!r}?)" if near else ""))
    return out


def tolerance_for(cfg: Config, dtype: Optional[str], meta: dict) -> Tolerance:
    """The tolerances a trial is judged by: the dtype's, or the problem's own (HARNESS_META) for it."""
    name = dtype or meta.get("dtype", "fp32")
    if name not in cfg.correctness.tol:  # the problem's HARNESS_META names one the harness has none for
        raise ReferenceError(f"HARNESS_META dtype {name!r} is not one of {', '.join(cfg.correctness.tol)}")
    tol = cfg.correctness.tol[name].model_copy()
    for k in ("atol", "rtol", "rel_l2"):
        if meta.get(k) is not None and dtype in (None, meta.get("dtype", "fp32")):
            setattr(tol, k, float(meta[k]))
    return tol


@dataclass
class ReferenceSession:
    problem: Problem
    cfg: Config
    device: str
    size: str
    dtype: Optional[str]
    # the OS's generator: a seeded Mersenne Twister's state is recoverable from its outputs, and the
    # candidate sees the seeds (a helper rebuilt the 128-bit key from 118 of them and computed every
    # later round's outputs between rounds: 2.5-2.8x passed)
    rng: random.Random = field(default_factory=random.SystemRandom)
    plan: Optional[TrialPlan] = None
    need: Optional["Need"] = None  # measured on the first trial (memory.measured)
    expected: Optional["Need"] = None  # measured by an earlier run (memory.load_kept): admission's first guess
    kept_s: Optional[float] = None  # how long an evaluation of it took then (memory.KeptNeed.seconds)
    env: Optional[EnvInfo] = None
    worker: Optional[Worker] = None
    seconds: float = 0.0
    env_extra: Optional[dict[str, str]] = None  # per-call environment overrides (a batch's GPU pinning)
    # evaluations sharing a device slot share its sessions: one request to the worker at a time,
    # timing included (PairTimer._measure). Taken before the gate's exclusive hold, after a
    # stoppable phase has begun, never inside a shared phase: any other order can wait in a cycle
    lock: threading.RLock = field(default_factory=threading.RLock, repr=False, compare=False)
    on_start: Optional[Callable[[], None]] = field(default=None, repr=False, compare=False)  # a batch's count
    standby: Optional[Standby] = field(default=None, repr=False, compare=False)  # a batch slot's started processes
    # further reference processes, for timing a short forward in several (timing.stats.processes_for),
    # started once for the session and kept for every later solution of the problem
    extra: list[Worker] = field(default_factory=list, repr=False, compare=False)

    def __post_init__(self) -> None:
        meta = read_meta(self.problem)
        extra = meta.get("extra_shapes", []) if self.cfg.correctness.extra_shapes else []
        self.meta = meta
        self.plan = make_plan(self.rng, self.cfg.correctness.trials, extra)
        # (seed, with inputs, on the device) -> trial()'s answer
        self._cache: dict[tuple, tuple["TrialData", int]] = {}
        self._cached = 0  # bytes
        # a GPU problem's outputs stay on the device and are judged there (stages/check.py)
        self.on_device = self.device == "cuda" and self.cfg.correctness.judge == "device"

    def trial(self, i: int, with_inputs: bool = False, seeds: Optional[list[int]] = None,
              on_worker: Optional[Callable[[Worker], None]] = None,
              share: Optional[bool] = None) -> tuple["TrialData", int]:
        """The reference's trial `i` of the plan (or of `seeds`: a re-check's own) and the most a
        candidate's answer to it may take in bytes (frame_allowance): from the cache, else computed
        now in the reference process. `with_inputs`: with its
        inputs after the call, even where it left them unchanged (the yardstick for a candidate that
        changed its own). `on_worker`: told of the process (a stoppable phase). `share`: its device
        outputs kept in its process for `judge` (default: `on_device`), not sent."""
        from .correctness import load_trial
        from .memory import frame_limit, measured
        from .process.worker import FrameTooLarge
        seed = (seeds or self.plan.seeds)[i]
        shape = self.plan.shapes[i] if i < len(self.plan.shapes) else {}
        share = self.on_device if share is None else share
        with self.lock:
            for key in ((seed, with_inputs, share), (seed, True, share)):
                if key in self._cache:
                    return self._cache[key]
            fresh = self.worker is None
            self.start(on_worker)  # (tells on_worker of a process it starts)
            if not fresh and on_worker is not None:
                on_worker(self.worker)
            try:
                reply, _ = self.worker.request(
                    TrialsCommand(seeds=[seed], shapes=[shape] if shape else [], inputs=with_inputs, share=share),
                    self.cfg.timeouts.problem_s, max_bytes=frame_limit(self.cfg.memory.host_gb))
            except FrameTooLarge as e:
                self.close()
                raise ReferenceTooBig(f"problem {self.problem.name}: the reference's outputs of one trial "
                                      f"take {e.announced / 2**30:.2f} GB; the host can take "
                                      f"{e.limit / 2**30:.2f} GB now") from None
            except Exception as e:
                tail = self.worker.log_tail()[-2000:] if self.worker else ""
                self.close()
                # killed outright mid-trial: the kernel's OOM killer, most likely (the machine's memory,
                # which neighbours share: its solutions are re-run alone before `too_big` stands)
                kind = ReferenceTooBig if isinstance(e, WorkerDied) and e.returncode == -9 else ReferenceError
                raise kind(f"problem {self.problem.name}: reference worker failed: {e}\n{tail}") from e
            if not reply.ok:
                self.close()
                raise problem_error(self.problem.name, "reference forward failed", reply.error)
            if len(reply.blobs) != 1:
                self.close()
                raise ReferenceError(f"problem {self.problem.name}: the reference sent {len(reply.blobs)} trials for one")
            size = reply.blob_sizes[0]
            # the candidate's answer may be bytes where the reference's stayed on the device (one it
            # could not export): its allowance counts those outputs as if sent
            got = (load_trial(reply.blobs[0], reply.kept), frame_allowance(size + reply.kept_bytes, reply.inputs_bytes or 0))
            if self.need is None:
                # the parent holds a trial's bytes only where a GPU trial falls back to them (NeedBytes)
                self.need = measured(size + reply.kept_bytes, reply.work_rss_bytes or 0, reply.gpu_peak_bytes,
                                     self.device)
            if seeds is None and (reply.persisted if reply.kept is not None else size + self._cached <= TRIAL_CACHE_BYTES):
                self._cache[(seed, with_inputs, share)] = got
                self._cached += size
            return got

    def judge(self, ref: "TrialData", pairs: list, tol: Tolerance,
              on_worker: Optional[Callable[[Worker], None]] = None) -> list[tuple[bool, dict, Optional[str]]]:
        """Judge a candidate's exported device outputs against this reference's kept ones (`ref`, a
        trial from trial(share=True)), in the reference's process, on the device: per pair of
        (kept Remote, candidate's Remote), (ok, stats, reason). Raises cuda_ipc.Refused where the
        candidate's handles do not describe memory it exported, JudgeFailed where the reference could
        not judge them (its process is closed: the trial is then judged from bytes)."""
        from .cuda_ipc import Refused
        from .records.messages import JudgeCommand, JudgePair
        cmd = JudgeCommand(token=ref.token, atol=tol.atol, rtol=tol.rtol, rel_l2=tol.rel_l2, pairs=[
            JudgePair(ref_index=r.node.get("kept", -1), node=c.node, dtype=str(c.dtype).removeprefix("torch."),
                      shape=list(c.shape), nbytes=c.nbytes) for r, c in pairs])
        with self.lock:
            if self.worker is None:
                raise JudgeFailed("the reference process that kept the trial is gone")
            if on_worker is not None:
                on_worker(self.worker)
            try:
                reply, _ = self.worker.request(cmd, self.cfg.timeouts.problem_s)
            except Exception as e:  # noqa: BLE001
                self.close()
                raise JudgeFailed(f"the reference failed judging on the device: {e}") from None
            if reply.ok and reply.gone:
                raise JudgeFailed("the reference no longer keeps the trial")
            if reply.ok and reply.unmapped:
                raise JudgeFailed(f"the candidate's outputs could not be mapped: {reply.unmapped}")
            if not reply.ok or (reply.refused is None and len(reply.results) != len(pairs)):
                self.close()
                raise JudgeFailed(f"the reference failed judging on the device: {reply.error}")
        if reply.refused is not None:
            raise Refused(reply.refused)
        return [(x.ok, x.stats, x.reason) for x in reply.results]

    def release(self, ref: "TrialData") -> None:
        """Let a kept trial go that will not be judged (best effort: the process keeps a few at most)."""
        from .records.messages import ReleaseCommand
        if ref.token is None:
            return
        with self.lock:
            if self.worker is None or any(v[0] is ref for v in self._cache.values()):
                return
            try:
                self.worker.request(ReleaseCommand(token=ref.token), self.cfg.timeouts.problem_s)
            except Exception:  # noqa: BLE001
                self.close()

    def setup_for(self, role: str, solution_path: Optional[str] = None) -> Setup:
        return Setup(role=role, problem_path=str(self.problem.path), problem_source=self.problem.text,
                     solution_path=solution_path, device=self.device,
                     size=self.size, dtype=self.dtype, cpu_threads=self.cfg.timing.cpu_threads,
                     allow_tf32=self.cfg.correctness.allow_tf32,
                     poison_max_bytes=POISON_BYTES if self.device == "cuda" else None)

    def spawn_reference(self, on_worker: Optional[Callable[[Worker], None]] = None) -> Worker:
        """A reference worker for this problem; its memory and fds are closed to other processes."""
        env = child_env(Path(self.cfg.cache_dir).resolve() / "ext" / "reference", self.device,
                        {**(self.env_extra or {}), "HARNESS_NONDUMPABLE": "1"})
        if self.standby is not None:
            return self.standby.take(self.setup_for("reference"), env, self.cfg.timeouts.problem_s,
                                     on_worker=on_worker)
        w = Worker(self.setup_for("reference"), env=env)
        if on_worker is not None:
            on_worker(w)
        return w

    def start(self, on_worker: Optional[Callable[[Worker], None]] = None) -> None:
        """Spawn the reference and build Model (its trials come when judging asks: trial()).
        `on_worker`: told of the process as soon as it exists (a stoppable phase of the slot's gate)."""
        with self.lock:
            if self.worker is None and self.on_start is not None:
                self.on_start()  # once per process started, however many evaluations waited on it
            self._start(on_worker)

    def _close_worker(self) -> None:
        if self.worker is not None:
            self.worker.close()
            self.worker = None
        for key in [k for k in self._cache if k[2]]:  # outputs kept in the process just closed
            del self._cache[key]

    def _start(self, on_worker: Optional[Callable[[Worker], None]] = None) -> None:
        import time
        if self.worker is not None and self.worker.returncode is not None:
            # it ended after a failed command (out of memory while timed, say): a run alone, the
            # problem's next solution, starts a new one
            self._close_worker()
        if self.worker is not None:
            return
        t0 = time.perf_counter()
        to = self.cfg.timeouts.problem_s
        self.worker = self.spawn_reference(on_worker)
        try:
            load = self.worker.wait_reply("load", to)
            if not load.ok:
                raise problem_error(self.problem.name, "failed to load", load.error)
            self.env = load.env
            reply, _ = self.worker.request(BuildCommand(init_seed=self.plan.init_seed), to)
            if not reply.ok:
                raise problem_error(self.problem.name, "Model failed to build", reply.error)
            if self.device == "cuda":
                # what a process pays once for timing (the launch hold's Triton build where it was not
                # primed, CUPTI's start, the flush buffer, NVML) is paid here: in the first solution's
                # timing it was 1.1-1.2 s of an H100's timing wall (bench/diag/pair_cost.py)
                from .timing.measure import warm_up
                reply, _ = self.worker.request(warm_up(self.cfg.timing, self.rng), to)
                if not reply.ok:
                    raise problem_error(self.problem.name, "reference timing failed", reply.error)
        except ReferenceError:
            self.close()
            raise
        except Exception as e:
            tail = self.worker.log_tail()[-2000:] if self.worker else ""
            self.close()
            raise ReferenceError(f"problem {self.problem.name}: reference worker failed: {e}\n{tail}") from e
        self.seconds = time.perf_counter() - t0

    def more_workers(self, n: int, on_worker: Optional[Callable[[Worker], None]] = None,
                     spans: bool = False) -> list[Worker]:
        """`n` reference processes besides the first, each with Model built from the same seed (the
        same weights), started together on the first call and reused after. They run no trials: the
        fingerprints of their timed calls are compared with the candidate's, as the first's are.
        Each is warmed up for timing (timing.measure.warm_up) here, outside the timing phase."""
        from .timing.measure import warm_up
        to = self.cfg.timeouts.problem_s
        with self.lock:
            for w in self.extra:
                if w.returncode is not None or w.out_of_step:  # as batch/executor.py drops a first one
                    w.close()
            self.extra = [w for w in self.extra if w.returncode is None and not w.out_of_step]
            missing = max(0, n - len(self.extra))
            if missing and self.standby is not None:
                self.standby.reserve(missing, "reference")  # started together, as a candidate's are (Standby.reserve)
            new = [self.spawn_reference(on_worker) for _ in range(missing)]
            try:
                for w in new:
                    load = w.wait_reply("load", to)
                    if not load.ok:
                        raise ReferenceError(f"problem {self.problem.name} failed to load again: {load.error}")
                # each step sent to every process, then their replies read: they work at once
                steps = ((lambda: BuildCommand(init_seed=self.plan.init_seed), "Model failed to build again"),
                         (lambda: warm_up(self.cfg.timing, self.rng, spans), "timing failed in a further process"))
                for make, what in steps:
                    sent = [(w, cmd, w.send(cmd)) for w in new for cmd in (make(),)]
                    for w, cmd, t0 in sent:
                        reply = w.wait_reply(cmd.op, to, t0=t0)
                        if not reply.ok:
                            raise ReferenceError(f"problem {self.problem.name}: {what}: {reply.error}")
            except Exception:
                for w in new:
                    w.close()
                raise
            self.extra += new
            return self.extra[:n]

    def close(self) -> None:
        self._close_worker()
        for w in self.extra:
            w.close()
        self.extra = []

    def __enter__(self) -> "ReferenceSession":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
