"""harness/batch/executor.py: a slot's reference sessions (kept, evicted when idle, started once and
early beside the first candidate, reused after a candidate's own timeout) and its closing. The
slot's sharing of the device is pinned in test_sharing.py."""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest

from conftest import TESTS, make_config, read_expectation


def test_sessions_in_use_are_never_evicted(monkeypatch):
    """SlotRuntime keeps at most max_sessions reference sessions, closing the least recently used
    idle one, and never one another evaluation still holds."""
    import harness.evaluation as ev
    from harness.batch.executor import DeviceSlot, EvalTask, SlotRuntime
    from harness.problems import find_problem
    from harness.records.result import EvalResult, Status
    from harness.reference import ReferenceSession

    closed: list[str] = []
    monkeypatch.setattr(ReferenceSession, "close", lambda self: closed.append(self.problem.name))
    release = threading.Event()
    holding = threading.Event()

    def fake_evaluate(solution, problem, cfg, *, reference, gate, **kw):
        if solution == "hold":
            holding.set()
            release.wait(10)
        return EvalResult(problem=problem.name, solution=solution, status=Status.passed)

    monkeypatch.setattr(ev, "evaluate", fake_evaluate)
    cfg = make_config(device="cpu", **{"batch.standby_workers": 0})
    probs = [find_problem(TESTS / "problems" / f"{n}.py") for n in ("relu_add", "softmax_wide", "linear_relu")]
    rt = SlotRuntime(DeviceSlot("cpu", "cpu", {}, concurrency=2), "small", None, 2, 2)
    with ThreadPoolExecutor(2) as pool:
        held = pool.submit(rt.evaluate, EvalTask(0, "hold", probs[0], None, cfg, None))
        assert holding.wait(10)
        for i, p in enumerate([probs[1], probs[2], probs[1], probs[2]], 1):  # each evicts the other idle one
            assert rt.evaluate(EvalTask(i, "quick", p, None, cfg, None)).record.status == Status.passed
            assert len(rt.sessions) <= 2 and probs[0].name not in closed
        release.set()
        assert held.result().record.status == Status.passed
    assert closed.count("softmax_wide") >= 1 and closed.count("linear_relu") >= 1
    rt.close()
    assert probs[0].name in closed


def test_a_slot_closes_its_processes_all_at_once():
    """At a batch's end every reference and standby process of a slot is closed at once: a GPU
    process's exit takes its context's teardown, and one after another they added seconds."""
    from harness.batch.executor import DeviceSlot, SlotRuntime

    closed: list[str] = []

    class Slow:
        def __init__(self, name):
            self.name = name

        def close(self):
            time.sleep(0.4)
            closed.append(self.name)

    rt = SlotRuntime(DeviceSlot("cpu", "cpu", {}, concurrency=4), "small", None, 5, 4)
    for i in range(4):
        rt.sessions[f"p{i}"] = Slow(f"p{i}")
    rt.standby = Slow("standby")
    t0 = time.perf_counter()
    rt.close()
    assert time.perf_counter() - t0 < 1.0
    assert sorted(closed) == ["p0", "p1", "p2", "p3", "standby"] and not rt.sessions and rt.standby is None


def test_a_reference_started_once_is_counted_once(monkeypatch):
    """Evaluations of one problem that start together on a slot share one reference process, and
    the slot counts one start (it counted every evaluation that waited on it: 12-15 "starts" for 3
    problems in the GPU throughput bench)."""
    import harness.evaluation as ev
    from harness.batch.executor import DeviceSlot, EvalTask, SlotRuntime
    from harness.problems import find_problem
    from harness.records.result import EvalResult, Status
    from harness.reference import ReferenceSession

    spawned = []

    def fake_start(self, on_worker=None):
        if self.worker is None:
            time.sleep(0.3)  # long enough for the others to queue on the session's lock
            spawned.append(self.problem.name)
            # a live reference that owes no reply: the slot keeps it (executor.SlotRuntime.evaluate)
            self.worker = SimpleNamespace(returncode=None, out_of_step=False)

    def fake_evaluate(solution, problem, cfg, *, reference, gate, **kw):
        reference.start()
        return EvalResult(problem=problem.name, solution=solution, status=Status.passed)

    monkeypatch.setattr(ReferenceSession, "_start", fake_start)
    monkeypatch.setattr(ReferenceSession, "close", lambda self: None)
    monkeypatch.setattr(ev, "evaluate", fake_evaluate)
    cfg = make_config(device="cpu", **{"batch.standby_workers": 0})
    prob = find_problem(TESTS / "problems" / "relu_add.py")
    rt = SlotRuntime(DeviceSlot("cpu", "cpu", {}, concurrency=3), "small", None, None, 3)
    with ThreadPoolExecutor(3) as pool:
        outs = list(pool.map(rt.evaluate, [EvalTask(i, f"s{i}", prob, None, cfg, None) for i in range(3)]))
    assert all(o.record.status == Status.passed for o in outs)
    assert [(o.error, o.reference_dropped) for o in outs] == [(None, None)] * 3
    assert spawned == ["relu_add"] and rt.references_started == 1
    rt.close()


@pytest.mark.parametrize("early", [True, False])
def test_a_gpu_slot_starts_a_problems_reference_beside_its_first_candidate(monkeypatch, early):
    """[batch] early_reference: the reference starts (once, in a stoppable phase of the slot's gate)
    as the problem's first evaluations begin, while their candidates start; they find it started or
    wait for it. Off: it starts when the first evaluation asks. A start that fails early is left to
    the evaluation's own start, which reports the problem's failure."""
    import time
    from concurrent.futures import ThreadPoolExecutor
    from types import SimpleNamespace

    import harness.evaluation as ev
    from harness.batch.executor import DeviceSlot, EvalTask, SlotRuntime
    from harness.problems import find_problem
    from harness.records.result import EvalResult, Status
    from harness.memory import Need
    from harness.reference import ReferenceError, ReferenceSession

    began, asked, fail = [], [], []

    def fake_start(self, on_worker=None):
        if self.worker is None:
            began.append((time.perf_counter(), threading.current_thread().name))
            time.sleep(0.3)
            if fail:
                raise ReferenceError("problem relu_add failed to load: boom")
            self.worker = SimpleNamespace(returncode=None, out_of_step=False)

    def fake_evaluate(solution, problem, cfg, *, reference, gate, hold, **kw):
        time.sleep(0.2)  # the candidate's start and trials
        asked.append(time.perf_counter())
        reference.start()
        reference.need = Need(host=1, gpu=1, measured=True)  # its first trial measured it
        hold.grow(reference.need)
        return EvalResult(problem=problem.name, solution=solution, status=Status.passed)

    monkeypatch.setattr(ReferenceSession, "_start", fake_start)
    monkeypatch.setattr(ReferenceSession, "close", lambda self: setattr(self, "worker", None))
    monkeypatch.setattr(ev, "evaluate", fake_evaluate)
    cfg = make_config(device="cpu", **{"batch.standby_workers": 0, "batch.early_reference": early})
    prob = find_problem(TESTS / "problems" / "relu_add.py")
    rt = SlotRuntime(DeviceSlot("cuda:0", "cuda", {}, concurrency=3), "small", None, None, 3)
    rt.gate.log = []
    t0 = time.perf_counter()
    with ThreadPoolExecutor(3) as pool:
        outs = list(pool.map(rt.evaluate, [EvalTask(i, f"s{i}", prob, None, cfg, None) for i in range(3)]))
    assert all(o.record.status == Status.passed for o in outs) and rt.references_started == 1
    assert len(began) == 1
    if early:
        assert began[0][1] == "reference-cuda:0" and began[0][0] - t0 < 0.1 < min(asked) - t0
        # 0.3 s of start under 0.2 s of the first candidate, not after it; the others waited for the
        # problem's need, measured by the first (memory.Admission: first runs go one at a time)
        assert min(o.busy_s for o in outs) < 0.45 and max(o.busy_s for o in outs) < 0.7
        assert sum(k == "stoppable" for k, *_ in rt.gate.log) == 1
    else:
        assert began[0][0] >= min(asked) and max(o.busy_s for o in outs) >= 0.5
    rt.close()

    fail.append(True)
    rt = SlotRuntime(DeviceSlot("cuda:0", "cuda", {}, concurrency=1), "small", None, None, 1)
    out = rt.evaluate(EvalTask(0, "s0", prob, None, cfg, None))
    assert out.problem_failed and "boom" in out.error and out.reference_dropped == "it failed"
    assert len(began) == (3 if early else 2)  # tried early, then by the evaluation, which reports it
    rt.close()


def test_a_candidates_own_timeout_keeps_its_problems_reference(tmp_path, monkeypatch):
    """A candidate that hangs in its trials times out without touching the reference process, so
    the next solution of that problem reuses it (restarting it cost 1-2.5 s on an H200 machine). A
    reference with a reply still owed (it timed out itself) is not reused. Real processes, CPU."""
    import harness.evaluation as ev
    from harness.batch.executor import DeviceSlot, EvalTask, SlotRuntime
    from harness.problems import find_problem
    from harness.records.result import Status
    honest = tmp_path / "honest.py"
    honest.write_text("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
                      "    def forward(self, a, b):\n        return torch.relu(a + b)\n")
    hang = read_expectation(TESTS / "fixtures" / "cpu" / "hang_forward.py")
    prob = find_problem(hang.problem)
    cfg = make_config(device="cpu", **{"timeouts.run_s": 3, "batch.standby_workers": 0})
    rt = SlotRuntime(DeviceSlot("cpu", "cpu", {"CUDA_VISIBLE_DEVICES": ""}), "small", None)
    try:
        statuses = [rt.evaluate(EvalTask(i, str(s), prob, None, cfg, None)).record.status
                    for i, s in enumerate([honest, hang.path, honest])]
        assert statuses == [Status.passed, Status.timeout, Status.passed]
        assert rt.references_started == 1
        # an evaluation after which the reference still owes a reply: the next one starts a new one
        real = ev.evaluate

        def left_waiting(*args, reference, **kw):
            rec = real(*args, reference=reference, **kw)
            reference.worker.out_of_step = True
            return rec
        monkeypatch.setattr(ev, "evaluate", left_waiting)
        out = rt.evaluate(EvalTask(3, str(honest), prob, None, cfg, None))
        assert out.record.status == Status.passed and out.reference_dropped == "a reply it owed was not read"
        monkeypatch.setattr(ev, "evaluate", real)
        assert rt.evaluate(EvalTask(4, str(honest), prob, None, cfg, None)).record.status == Status.passed
        assert rt.references_started == 2
    finally:
        rt.close()


def test_memory_short_closes_the_reference_sessions_no_evaluation_holds():
    """SlotRuntime.free_idle (the admission's on_wait): idle sessions are closed and their processes
    gone; one in use stays. It once raised KeyError half-way, leaving the sessions it had taken out
    unclosed: on KernelBench level 1 two such references kept 45 GB of an H100 for the whole batch."""
    from harness.batch.executor import DeviceSlot, SlotRuntime

    class Session:
        def __init__(self):
            self.closed = False

        def close(self):
            self.closed = True

    rt = SlotRuntime(DeviceSlot("cuda:0", "cuda", {}, concurrency=2), "small", None, 4, 2)
    idle, busy, other = Session(), Session(), Session()
    rt.sessions.update(a=idle, b=busy, c=other)
    rt._users[id(busy)] += 1
    rt.free_idle()
    assert idle.closed and other.closed and not busy.closed
    assert list(rt.sessions) == ["b"] and not rt._doomed
    rt._users[id(busy)] -= 1
    rt.close()
    assert busy.closed
