"""A long-lived evaluator for loops that score many generations (a reward in a reinforcement-learning
loop, a sweep): the batch's machinery kept warm between calls. Builds run on the batch's build
workers; evaluations on its device slots, whose reference processes (one per problem, reused by every
solution of it) and standby candidate processes stay up; memory is admitted as in a batch. Each call
gives the same record `harness eval` would.

    from harness import Evaluator
    with Evaluator(device="cpu", problems=["tests/problems"]) as ev:
        record = ev.evaluate(generated_text, "relu_add")          # text (code or a raw response) or a path
        for record in ev.evaluate_many([(text, "relu_add"), ...]):  # in the order they finish
            ...

Nothing is written to disk but the build cache and the generations' own files (in `workdir`, a
temporary folder by default). `Evaluator(backend="ray", address=...)` runs the same work on Ray, as
`harness batch --backend ray` does (workdir then on storage the nodes share)."""
from __future__ import annotations

import itertools
import tempfile
import threading
from concurrent.futures import Future, as_completed
from pathlib import Path
from typing import Iterable, Iterator, Optional, Union

from .config import Config, load_config
from .problems import Problem, find_problem
from .pyast import parse
from .records.result import EvalResult

Source = Union[str, Path]


class EvaluationFailed(RuntimeError):
    """No verdict on the solution: its problem's reference failed, or the harness did."""


class Evaluator:
    def __init__(self, cfg: Optional[Config] = None, *, device: Optional[str] = None, gpus: Optional[str] = None,
                 problems: Optional[Iterable[Source]] = None, compile_workers: Optional[int] = None,
                 workdir: Optional[Source] = None, backend: str = "local", address: Optional[str] = None):
        from .batch.run import make_executor, resolve_devices
        cfg = cfg or load_config()
        if device is not None:
            cfg = cfg.model_copy(update={"device": device})
        self.roots = [str(p) for p in problems] if problems else None
        self.cfg, slots, _ = resolve_devices(cfg, gpus)
        self.device, self.size = self.cfg.device, self.cfg.size
        self.dtype = None if cfg.dtype == "auto" else cfg.dtype
        # backend "ray": builds and slots on a Ray cluster at `address`, a local Ray where None (docs/cluster.md)
        self.executor, _, self._compile_env = make_executor(self.device, slots, self.cfg, compile_workers, self.size,
                                                            self.dtype, backend, address)
        self._tmp = None if workdir else tempfile.TemporaryDirectory(prefix="harness-evaluator-")
        self.workdir = Path(workdir or self._tmp.name)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._count = itertools.count()
        self._inflight = {s.name: 0 for s in slots}
        self._slots = slots
        self.lost: dict[str, str] = {}  # slot -> why its GPU was taken for lost (batch/health.py)
        self._lock = threading.Lock()
        self._problems: dict[str, Problem] = {}
        self._closed = False

    # -- the calls ----------------------------------------------------------------------------------
    def submit(self, solution: Source, problem: Union[str, Path, Problem], label: Optional[str] = None
               ) -> "Future[EvalResult]":
        """Start one evaluation; its future gives the record, or raises EvaluationFailed."""
        from .batch.executor import CompileTask
        from .build import builds_extensions
        from .solutions import load_solution
        if self._closed:
            raise RuntimeError("this Evaluator is closed")
        prob = self._problem(problem)
        index = next(self._count)
        path = self._solution_file(solution, index)
        code = load_solution(path).code
        task = CompileTask(index=index, solution=str(path), problem=prob, label=label, cfg=self.cfg,
                           device=self.device, size=self.size, dtype=self.dtype, env=dict(self._compile_env),
                           retry_import_on_device=self.device == "cuda", builds=bool(code and builds_extensions(code)),
                           cpus=next((s.background_cpus for s in self.executor.slots), None))
        result: Future = Future()
        built = self.executor.submit_compile(task)
        built.add_done_callback(lambda f: self._after_build(f, task, result))
        return result

    def evaluate(self, solution: Source, problem: Union[str, Path, Problem], label: Optional[str] = None
                 ) -> EvalResult:
        return self.submit(solution, problem, label).result()

    def evaluate_many(self, items: Iterable[tuple], ordered: bool = False) -> Iterator[EvalResult]:
        """(solution, problem[, label]) each; records as they finish (`ordered`: in the items' order).
        All are submitted at once: the slots' lanes and the memory admission pace them."""
        futures = [self.submit(*it) for it in items]
        for f in (futures if ordered else as_completed(futures)):
            yield f.result()

    # -- the steps ----------------------------------------------------------------------------------
    def _after_build(self, built: Future, task, result: Future) -> None:
        from .batch.executor import EvalTask
        try:
            co = built.result()
            if co.error:
                raise EvaluationFailed(co.error)
            if co.record is not None:  # judged without a device (no code, a failed build, ...)
                result.set_result(co.record)
                return
            self._run(EvalTask(index=task.index, solution=task.solution, problem=task.problem, label=task.label,
                               cfg=self.cfg, compiled=co.compiled, compile_s=co.wall_s), result, moved=False)
        except BaseException as e:  # noqa: BLE001 - into the caller's future
            result.set_exception(e if isinstance(e, EvaluationFailed) else EvaluationFailed(f"{type(e).__name__}: {e}"))

    def _run(self, task, result: Future, moved: bool) -> None:
        slot = self._pick_slot()
        ev = self.executor.submit_eval(task, slot)
        ev.add_done_callback(lambda f: self._after_eval(f, slot, task, result, moved))

    def _after_eval(self, ev: Future, slot, task, result: Future, moved: bool) -> None:
        with self._lock:
            self._inflight[slot.name] -= 1
        try:
            eo = ev.result()
        except BaseException as e:  # noqa: BLE001
            result.set_exception(EvaluationFailed(f"{type(e).__name__}: {e}"))
            return
        if eo.device_lost is not None:
            with self._lock:
                newly = slot.name not in self.lost
                self.lost.setdefault(slot.name, eo.device_lost)
            if newly:
                self.executor.lose(slot)
        if slot.name in self.lost and not moved and (eo.record is None or eo.record.status.value != "passed"):
            # as in a batch: its failure may be the GPU's, so it runs again on another slot, once
            # (a solution that itself breaks GPUs must not take them all)
            try:
                self._run(task, result, moved=True)
            except BaseException as e:  # noqa: BLE001
                result.set_exception(e if isinstance(e, EvaluationFailed) else EvaluationFailed(str(e)))
            return
        if eo.record is not None:
            result.set_result(eo.record)
        else:
            result.set_exception(EvaluationFailed(eo.error or "no record"))

    def _pick_slot(self):
        """The live slot with the fewest evaluations in flight (its own pool queues the rest)."""
        with self._lock:
            live = [s for s in self.executor.slots if s.name not in self.lost]
            if not live:
                raise EvaluationFailed("no device left: " + "; ".join(f"{k}: {v}" for k, v in self.lost.items()))
            slot = min(live, key=lambda s: self._inflight[s.name])
            self._inflight[slot.name] += 1
            return slot

    def _problem(self, problem) -> Problem:
        if isinstance(problem, Problem):
            return problem
        key = str(problem)
        with self._lock:
            if key not in self._problems:
                self._problems[key] = find_problem(problem, self.roots)
            return self._problems[key]

    def _solution_file(self, solution: Source, index: int) -> Path:
        """A path as it is; text into the work folder: .py where it parses as Python, else .md (a
        raw response: its code is extracted as from any response)."""
        if isinstance(solution, Path) or (isinstance(solution, str) and "\n" not in solution
                                          and Path(solution).is_file()):
            return Path(solution).resolve()
        try:
            parse(solution)
            suffix = ".py"
        except SyntaxError:
            suffix = ".md"
        path = self.workdir / f"generation_{index:06d}{suffix}"
        path.write_text(solution)
        return path

    # -- lifetime -----------------------------------------------------------------------------------
    def close(self) -> None:
        """Every process closed; in-flight evaluations end first."""
        if self._closed:
            return
        self._closed = True
        self.executor.shutdown()
        from . import cpus
        cpus.CLAIMS.release(cpus.slots_cpus(self._slots))  # its slots' timing CPUs, for others
        if self._tmp is not None:
            self._tmp.cleanup()

    def __enter__(self) -> "Evaluator":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
