"""`harness batch --backend ray`: the same pipeline with its builds as Ray tasks and each device slot
a Ray actor (harness/batch/ray_backend.py), on a local Ray started on this machine (a real one, not a
mock). Every CPU verdict fixture that needs no config of its own gets the same verdict through Ray
as through the built-in pool, and the one its header expects."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import CACHE, ROOT, fixtures_in, make_config, read_expectation



def _fixtures() -> list:
    """The CPU fixtures a batch of one config can hold (no `# config:` of their own), each in a
    folder named after its problem (the batch's matching rule)."""
    return [e for e in map(read_expectation, fixtures_in("fixtures/cpu")) if not e.overrides and e.device == "cpu"]


def _run(subs: Path, out: Path, backend: str) -> dict[str, dict]:
    from harness.batch.run import run_batch
    cfg = make_config(device="cpu", cache_dir=str(CACHE), **{
        "timing.budget_s": 0.3, "timing.max_calls": 20, "timing.round_calls": 5, "timing.min_rounds": 3,
        "correctness.trials": 2, "batch.cpu_concurrent_evaluations": 2,
        # the build cache is the suite's, shared with tests running beside this one: a solution's
        # import may wait there on another test's build of the same extension, over a minute on a
        # loaded 2-core host (honest_cpp timed out so twice), which says nothing about either backend
        "timeouts.load_s": 600})
    summary = run_batch([str(subs)], cfg, problem_roots=[str(ROOT / "tests" / "problems")], out=str(out),
                        compile_workers=1, quiet=True, show_progress=False, backend=backend)
    assert not summary.interrupted
    recs = [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines() if line.strip()]
    return {Path(r["solution"]).name: r for r in recs}


def test_the_cpu_fixtures_get_the_same_verdicts_through_ray_as_through_the_local_pool(tmp_path):
    ray = pytest.importorskip("ray")
    exps = _fixtures()
    subs = tmp_path / "subs"
    for e in exps:
        dest = subs / e.problem.stem / e.path.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(e.path, dest)
    local = _run(subs, tmp_path / "local", "local")
    through_ray = _run(subs, tmp_path / "ray", "ray")
    assert not ray.is_initialized()  # the batch's own Ray, shut down with it
    assert set(local) == set(through_ray) == {e.path.name for e in exps}
    for e in exps:
        a, b = local[e.path.name], through_ray[e.path.name]
        assert a["status"] == b["status"] == e.status, (e.path.name, a["status"], b["status"], a.get("error"), b.get("error"))
        assert a["problem"] == b["problem"]
        if b.get("env"):  # evaluated on a slot: the record names the node it ran on
            assert b["env"]["hostname"]


def test_a_task_ray_lost_is_an_items_error_not_the_batchs():
    """What Ray raises for a task or actor lost with its node becomes the item's outcome with an
    error (the pipeline skips it without a record; --resume runs it again)."""
    from concurrent.futures import Future

    from harness.batch.executor import EvalOutcome
    from harness.batch.ray_backend import _settled
    lost, fine = Future(), Future()
    a = _settled(lost, lambda e: EvalOutcome(index=3, slot="cuda:0", error=e))
    b = _settled(fine, lambda e: EvalOutcome(index=4, slot="cuda:0", error=e))
    lost.set_exception(RuntimeError("The actor died unexpectedly"))
    fine.set_result(EvalOutcome(index=4, slot="cuda:0"))
    assert a.result().error == "RuntimeError: The actor died unexpectedly" and a.result().index == 3
    assert b.result().error is None


def test_a_slot_whose_actor_dies_is_lost_and_its_item_moves():
    """A real actor killed (as its node going would) while an evaluation waits on it: the outcome
    says the slot's device is lost (`device_lost`), so the pipeline takes the slot out and runs the
    item again on another one (pipeline.Pipeline._lose, tested with a fake executor in
    test_batch.py); other Ray failures stay the item's error."""
    ray = pytest.importorskip("ray")
    import time

    from harness.batch.executor import EvalOutcome
    from harness.batch.ray_backend import _settled

    @ray.remote
    class Slow:
        def evaluate(self):
            time.sleep(60)

    def outcome(e, lost=False):
        return EvalOutcome(index=1, slot="cuda:1", error=e, device_lost=f"gone: {e}" if lost else None)
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        a = Slow.remote()
        pending = _settled(a.evaluate.remote().future(), outcome, lambda e: outcome(e, lost=True))
        time.sleep(1.0)
        ray.kill(a)
        got = pending.result(timeout=60)
        assert got.device_lost and "Actor" in got.error, got
    finally:
        ray.shutdown()


def test_each_gpu_slot_is_an_actor_that_sees_the_gpu_ray_gave_it():
    """The GPU actors' logic on the CPU: a local Ray told it has two GPUs places one slot actor on
    each, and each actor's children see that GPU alone (CUDA_VISIBLE_DEVICES from Ray's assignment,
    whatever the driver's slot was named), with a timing CPU by the GPU's index, in a process of
    its own."""
    ray = pytest.importorskip("ray")
    import os

    from harness.batch.executor import DeviceSlot
    from harness.batch.ray_backend import RayExecutor
    ray.init(num_cpus=2, num_gpus=2, include_dashboard=False, log_to_driver=False)
    try:
        slots = [DeviceSlot(name=f"cuda:{i}", device="cuda", env={"CUDA_VISIBLE_DEVICES": "7"}) for i in range(2)]
        ex = RayExecutor(slots, 1, "small", None)
        where = ray.get([a.where.remote() for a in ex._actors.values()])
        assert sorted(w["visible"] for w in where) == ["0", "1"]
        assert len({w["pid"] for w in where}) == 2 and all(w["pid"] != os.getpid() for w in where)
        if len(os.sched_getaffinity(0)) >= 2:  # one timing CPU each, not the same one
            assert len({w["timing_cpu"] for w in where}) == 2 and None not in {w["timing_cpu"] for w in where}
        ex.shutdown()
    finally:
        ray.shutdown()


def test_the_evaluator_hands_its_work_to_ray_too():
    """The API for RL loops (harness.Evaluator) on the same backend: records as through the pool."""
    pytest.importorskip("ray")
    from harness import Evaluator
    cfg = make_config(device="cpu", cache_dir=str(CACHE), **{"timing.budget_s": 0.3, "timing.max_calls": 20,
                                                             "correctness.trials": 2})
    fixtures = ROOT / "tests" / "fixtures" / "cpu"
    with Evaluator(cfg, problems=[ROOT / "tests" / "problems"], backend="ray") as ev:
        got = {p: ev.evaluate(fixtures / p, "relu_add").status.value
               for p in ("honest_cpp.py", "wrong_cpp.py", "raise_in_forward.py")}
    assert got == {"honest_cpp.py": "passed", "wrong_cpp.py": "incorrect", "raise_in_forward.py": "runtime_error"}
