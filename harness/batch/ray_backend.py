"""The batch's work on a Ray cluster (`harness batch --backend ray [--address ADDR]`).

The same `Executor` as LocalExecutor (executor.py), so the pipeline, the run folder and every rule
of an evaluation are the ones a local batch has; only where the work runs differs:

- a build is a Ray task (`compile_item`, one CPU each) on any node with a CPU free;
- each device slot is a Ray actor holding that slot's `SlotRuntime` (its reference sessions,
  standbys and DeviceGate: shared untimed phases, exclusive timing, the sandbox), on a node with a
  GPU free for a GPU slot, with one thread per evaluation it may run at once;
- outcomes come back to the driver, which alone writes the run folder (records, signatures, events).

`ray.init()` with no address starts a local Ray on this machine: the backend CI tests, on the CPU
(tests/test_ray_backend.py). Ray is an optional extra (`pip install .[ray]`). docs/cluster.md says
how a cluster run goes and what this backend does not do yet.
"""
from __future__ import annotations

import os
from concurrent.futures import Future
from typing import Optional

from .executor import CompileOutcome, CompileTask, DeviceSlot, EvalOutcome, EvalTask, SlotRuntime, compile_item


def available() -> Optional[str]:
    """None where Ray can be imported; else why not."""
    try:
        import ray  # noqa: F401
    except ImportError as e:
        return f"ray is not installed ({e}): pip install '.[ray]'"
    return None


def node_gpus() -> int:
    """The GPUs of this node, whatever this process may see (the driver lists them all)."""
    try:
        return len(os.listdir("/proc/driver/nvidia/gpus"))
    except OSError:
        return 0


def compile_on_node(task: CompileTask, lender=None) -> CompileOutcome:
    """compile_item, its jail kept off the CPUs this node's references are timed on (each of the
    node's slot actors picks its own by its GPU's index, as `SlotActor` does here)."""
    from .. import cpus
    from ..sandbox import keep_off_references
    cuda = task.device == "cuda"
    pairs = cpus.slot_cpus(node_gpus(), mode=task.cfg.hardening.timing_cpus)[0] if cuda else ()
    keep_off_references(cuda, task.cfg.timing.cpu_threads, pairs)
    return compile_item(task, lender)


class SlotActor:
    """One device slot's SlotRuntime, in a Ray actor process. A GPU slot's actor is given one GPU by
    Ray, and its children see that one (whatever index the driver's slot name had)."""

    def __init__(self, slot: DeviceSlot, size: str, dtype: Optional[str], max_sessions: Optional[int],
                 host_gb: float, gpu_gb: float):
        from .. import cpus
        from ..memory import Admission
        if slot.device == "cuda":
            import ray
            ids = [int(g) for g in ray.get_gpu_ids()]
            slot.env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, ids))
            # a timing CPU of this node's own, by the GPU's index: the actors of one node take
            # different ones without asking each other (cpus.plan takes them from the top)
            rank = ids[0] if ids else 0
            pairs, background = cpus.slot_cpus(max(rank + 1, node_gpus()), mode=slot.timing_cpus)
            (slot.timing_cpu, slot.cand_cpu), slot.background_cpus = pairs[rank], background
            from ..sandbox import keep_off_references
            keep_off_references(True, 1, pairs)  # every slot's of this node, not only its own
        # each actor admits against its own node's memory (memory.py reads the host's and GPU's free),
        # and closes its idle references while memory is short, as LocalExecutor's slots do
        admission = Admission(host_gb, gpu_gb)
        self.rt = SlotRuntime(slot, size, dtype, max_sessions, slot.concurrency, None, admission)
        admission.on_wait = self.rt.free_idle

    def evaluate(self, task: EvalTask) -> EvalOutcome:
        return self.rt.evaluate(task)  # (the record's env.hostname names this node)

    def retire(self, key: str) -> None:
        if key in self.rt.sessions:
            self.rt.retire(key)

    def close(self) -> None:
        self.rt.close()

    def counts(self) -> tuple[int, int, int, float]:
        """(evaluations in a background phase, references started, overdue phases, seconds held for timing)."""
        return self.rt.gate.backgrounded, self.rt.references_started, self.rt.gate.overdue, self.rt.gate.held_s

    def where(self) -> dict:
        """Where this slot's work runs: its process, the GPUs its children see, its timing CPUs."""
        return {"pid": os.getpid(), "visible": self.rt.slot.env.get("CUDA_VISIBLE_DEVICES"),
                "timing_cpu": self.rt.slot.timing_cpu, "cand_cpu": self.rt.slot.cand_cpu}


def _settled(ray_future: Future, failed, gone=None) -> Future:
    """A future that always holds an outcome: Ray's own failures (a task lost with its node, an
    object not deserialised) become `failed(error)`, which the pipeline reports as a harness failure
    of that item (no record: `--resume` runs it again), not an exception out of the batch; an actor
    gone (its process or node died) becomes `gone(error)` where given: its slot lost, the item moved
    to another slot as from a lost GPU (pipeline.Pipeline._lose)."""
    out: Future = Future()

    def done(f: Future) -> None:
        try:
            out.set_result(f.result())
        except BaseException as e:  # noqa: BLE001 - whatever Ray raised, as the item's error
            msg = f"{type(e).__name__}: {e}"
            out.set_result(gone(msg) if gone is not None and _actor_gone(e) else failed(msg))
    ray_future.add_done_callback(done)
    return out


def _actor_gone(e: BaseException) -> bool:
    try:
        from ray.exceptions import RayActorError
    except ImportError:
        return False
    return isinstance(e, RayActorError)


class RayExecutor:
    """Builds as Ray tasks, each slot's evaluations on its actor (see the module's docstring)."""

    def __init__(self, slots: list[DeviceSlot], compile_workers: int, size: str, dtype: Optional[str],
                 address: Optional[str] = None, max_sessions: Optional[int] = None,
                 host_gb: float = 0.0, gpu_gb: float = 0.0):
        import ray
        self.ray = ray
        self.slots = slots
        self.compile_workers = max(1, compile_workers)
        self._own = not ray.is_initialized()
        if self._own:
            # workers import the harness as the driver does (an editable install, or the checkout)
            here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
            env = {"PYTHONPATH": os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)}
            ray.init(address=address, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True,
                     runtime_env={"env_vars": env})
        # a build lost with its node runs again elsewhere (Ray retries system failures only: an
        # exception of the harness's stays one)
        self._compile = ray.remote(num_cpus=1, max_retries=1)(compile_on_node)
        actor = ray.remote(SlotActor)
        self._actors = {
            s.name: actor.options(num_cpus=0, num_gpus=1 if s.device == "cuda" else 0,
                                  max_concurrency=2 * max(1, s.concurrency) + 2)
            .remote(s, size, dtype, max_sessions, host_gb, gpu_gb) for s in slots}
        self._lost: set[str] = set()
        self._final: Optional[dict[str, tuple[int, int, int, float]]] = None

    def submit_compile(self, task: CompileTask) -> "Future[CompileOutcome]":
        return _settled(self._compile.remote(task, None).future(),
                        lambda e: CompileOutcome(index=task.index, error=f"ray: {e}"[:500]))

    def submit_eval(self, task: EvalTask, slot: DeviceSlot) -> "Future[EvalOutcome]":
        return _settled(self._actors[slot.name].evaluate.remote(task).future(),
                        lambda e: EvalOutcome(index=task.index, slot=slot.name, error=f"ray: {e}"[:500]),
                        lambda e: EvalOutcome(index=task.index, slot=slot.name, error=f"ray: {e}"[:500],
                                              device_lost=f"its Ray actor is gone ({e})"[:300]))

    def retire(self, problem_key: str) -> None:
        for name, a in self._actors.items():
            if name not in self._lost:
                a.retire.remote(problem_key)

    def lose(self, slot: DeviceSlot) -> None:
        self._lost.add(slot.name)
        self._actors[slot.name].close.remote()

    def _counts(self) -> dict[str, tuple[int, int, int, float]]:
        if self._final is not None:  # after shutdown: what the actors said before they went
            return self._final
        names = [n for n in self._actors if n not in self._lost]
        got = self.ray.get([self._actors[n].counts.remote() for n in names])
        return dict(zip(names, got))

    def backgrounded(self, slot: str) -> int:
        return self.ray.get(self._actors[slot].counts.remote())[0] if slot not in self._lost else 0

    def references_started(self) -> dict[str, int]:
        return {n: c[1] for n, c in self._counts().items()}

    def overdue_phases(self) -> dict[str, int]:
        return {n: c[2] for n, c in self._counts().items()}

    def held_seconds(self) -> dict[str, float]:
        return {n: c[3] for n, c in self._counts().items()}

    def expected_seconds(self, problem, cache_dir: str) -> Optional[float]:
        return None  # kept where each actor's node keeps its needs: the plan's order stands

    def shutdown(self, cancel: bool = False) -> None:
        ray = self.ray
        try:
            if not cancel:
                ray.get([a.close.remote() for n, a in self._actors.items() if n not in self._lost])
            self._final = self._counts()
        except Exception:  # noqa: BLE001 - an actor already gone: its counts with it
            self._final = {}
        finally:
            for a in self._actors.values():
                ray.kill(a)
            if self._own:
                ray.shutdown()
