"""Standby candidate workers: started ahead of need with torch imported, activated by their setup,
replaced at once, and never a different verdict from a fresh child. CPU only."""
from __future__ import annotations

import os
import signal
import time

import pytest
import torch

from conftest import TESTS, evaluate_fixture, make_config, read_expectation
from harness.build import child_env
from harness.process.standby import Standby
from harness.process.worker import Worker

SETUP = {"role": "candidate", "problem_path": str(TESTS / "problems" / "relu_add.py"), "device": "cpu",
         "size": "small", "dtype": None, "cpu_threads": 1}


@pytest.fixture
def standby(monkeypatch):
    """Made in the test itself: pytest changes os.environ between phases (PYTEST_CURRENT_TEST), and
    a standby serves only the environment it was started with."""
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    standbys: list[Standby] = []
    taken: list[Worker] = []

    def make(depth: int = 1, **kw) -> tuple[Standby, list[Worker]]:
        standbys.append(Standby(child_env(None, "cpu"), depth, **kw))
        return standbys[-1], taken

    yield make
    for w in taken:
        w.close(grace=0)
    for sb in standbys:
        sb.close()


def _setup(tmp_path):
    """A solution that reports, by failing its import, the extension directory it was given."""
    sol = tmp_path / "report_ext_dir.py"
    sol.write_text('import os\nraise RuntimeError("ext=" + os.environ.get("TORCH_EXTENSIONS_DIR", "unset"))\n')
    return {**SETUP, "solution_path": str(sol)}, child_env(tmp_path / "ext", "cpu")


def _ext_seen(w: Worker) -> str:
    reply = w.wait_reply("load", 120)
    assert not reply.ok and "ext=" in reply.error, reply.error
    return reply.error.split("ext=", 1)[1].split()[0]


def test_standby_preloads_then_takes_its_setup(standby, tmp_path):
    sb, taken = standby()
    setup, env = _setup(tmp_path)
    idle = sb.idle
    # its first line comes before any setup is sent: torch already imported, no CUDA context made
    assert idle.ready(120)
    assert idle.preloaded.notes == {"torch": torch.__version__, "cuda_initialized": "False"}
    assert "TORCH_EXTENSIONS_DIR" not in sb.env

    w = sb.take(setup, env, 120)
    taken.append(w)
    assert w is idle and w.preloaded is not None
    assert _ext_seen(w) == str(tmp_path / "ext")  # from the setup, not the environment it started with

    # replaced at once, by another process that is starting up
    assert sb.idle is not None and sb.idle is not idle and sb.idle.returncode is None
    assert sb.idle.ready(120)


def test_standby_falls_back_to_a_fresh_worker(standby, tmp_path):
    sb, taken = standby()
    setup, env = _setup(tmp_path)
    dead = sb.idle
    assert dead.ready(120)
    os.killpg(dead.proc.pid, signal.SIGKILL)
    dead.proc.wait(30)

    w = sb.take(setup, env, 120)
    taken.append(w)
    assert w is not dead and w.preloaded is None  # spawned with its setup, as without a standby
    assert _ext_seen(w) == str(tmp_path / "ext")
    assert sb.idle is not dead and sb.idle.ready(120)

    # another environment (another GPU), or a role a standby never takes: a fresh worker, and the
    # idle one is kept
    idle = sb.idle
    for s, e in ((setup, child_env(tmp_path / "ext", "cpu", {"CUDA_VISIBLE_DEVICES": "1"})),
                 ({**setup, "role": "compile"}, env)):
        w = sb.take(s, e, 120)
        taken.append(w)
        assert w is not idle and w.preloaded is None and sb.idle is idle


@pytest.mark.parametrize("prime,fork", [(None, True), ("cpu", True), (None, False)])
@pytest.mark.parametrize("name", ["fixtures/cpu/honest_cpp.py", "fixtures/cpu/zeros_tiny_softmax.py",
                                  "fixtures/cpu/raise_in_forward.py",
                                  # both defeated by what pin() took before the solution's import:
                                  # from the standby's priming when it was primed
                                  "adversarial/cpu/timer_rebind_pinned.py", "adversarial/cpu/input_mutation_hidden.py"])
def test_evaluate_with_standby_gives_the_same_verdict(standby, name, prime, fork):
    """Forked from the slot's fork server (forkserver.py) or started fresh, primed or not."""
    from harness.evaluation import evaluate
    sb, _ = standby(prime=prime, fork=fork)
    exp = read_expectation(TESTS / name)
    if prime:
        _wait_primed(sb.idle)
    served: list[Worker] = []
    take = sb.take

    def recording_take(*args, **kw) -> Worker:
        served.append(take(*args, **kw))
        return served[-1]

    sb.take = recording_take
    rec = evaluate(exp.path, exp.problem, make_config(device="cpu", **exp.overrides), standby=sb)
    fresh = evaluate_fixture(exp)
    assert len(served) == 1 and served[0].preloaded is not None, "the candidate did not come from the standby"
    assert served[0].forked == fork
    assert (rec.status, sorted(rec.flags)) == (fresh.status, sorted(fresh.flags)) == (exp.status, sorted(exp.flags))


def test_a_deeper_standby_hands_out_the_oldest_and_refills(standby, tmp_path):
    """depth 2: the next two candidates are both started ahead; each take() hands out the oldest
    (the one with the most time to have finished starting) and starts one more at the back."""
    sb, taken = standby(2)
    first, second = list(sb.pool)
    setup, env = _setup(tmp_path)
    w = sb.take(setup, env, 120)
    taken.append(w)
    assert w is first and w.preloaded is not None
    assert len(sb.pool) == 2 and sb.pool[0] is second and sb.pool[1] not in (first, second)
    assert _ext_seen(w) == str(tmp_path / "ext")



def _pid_namespace_depth(w: Worker) -> int:
    """How many PID namespaces `w` has a pid in (2: born in one of its own), from /proc's NSpid."""
    for line in open(f"/proc/{w.pid}/status"):
        if line.startswith("NSpid:"):
            return len(line.split()) - 1
    raise AssertionError("no NSpid")


@pytest.mark.skipif(not (__import__("harness.sandbox", fromlist=["views"]).views() or {}).get("own_pids"),
                    reason="no PID namespaces here")
def test_references_of_a_gpu_slot_take_standbys_born_in_the_harness_namespace(standby, tmp_path):
    """A jailed candidate is born in a PID namespace of its own (sandbox.born_apart); a reference that
    reads CUDA IPC cannot be (pid 1 to pid 1: the driver refuses the handle), so a GPU slot's pool
    keeps both kinds, each take hands out its own kind and starts its own kind again. Without IPC (a
    CPU slot) a reference takes either."""
    from harness.sandbox import JAILS
    sb, taken = standby(2, apart=True, ipc=True)
    first, second = list(sb.pool)
    assert (first.apart, second.apart) == (True, False)
    assert _pid_namespace_depth(first) == 2 and _pid_namespace_depth(second) == 1
    setup, env = _setup(tmp_path)
    ref = sb.take({**setup, "role": "reference"}, env, 120)
    taken.append(ref)
    assert ref is second and [w.apart for w in sb.pool] == [True, False] and sb.pool[1] is not second
    jail, cand = JAILS.make(None, None), None
    try:
        cand = sb.take({**setup, "jail": jail.model_dump()}, env, 120)
        assert cand is first and cand.preloaded is not None and _pid_namespace_depth(cand) == 2
        assert [w.apart for w in sb.pool] == [False, True]
    finally:
        if cand is not None:
            cand.close(grace=0)
        JAILS.release(jail)
    cpu, _ = standby(1, apart=True, ipc=False)
    only = cpu.idle
    assert only.apart and cpu.take({**setup, "role": "reference"}, env, 120) is only
    taken.append(only)


def test_a_group_of_takes_is_started_together_and_the_pool_ends_at_its_depth(standby, tmp_path):
    """reserve(n) before n takes (a candidate's further processes): all n are started at once, so
    they prepare side by side instead of one replacement per take; the takes hand out exactly those,
    oldest first, and start no more until the pool is below its depth again."""
    sb, taken = standby(2)
    before = list(sb.pool)
    sb.reserve(5)
    group = list(sb.pool)
    assert len(group) == 5 and group[:2] == before
    setup, env = _setup(tmp_path)
    for i in range(3):
        taken.append(sb.take(setup, env, 120))
        assert taken[-1] is group[i] and len(sb.pool) == 4 - i
    for _ in range(2):
        taken.append(sb.take(setup, env, 120))
    assert taken == group and len(sb.pool) == 2 and not set(sb.pool) & set(group)
    assert all(_ext_seen(w) == str(tmp_path / "ext") for w in taken)
    sb.reserve(1)  # fewer than it holds: nothing started
    assert len(sb.pool) == 2

def test_further_processes_are_taken_from_the_standby_started_together(standby):
    """A side timed in several processes takes its further ones from the slot's standby, all of
    them started at once (Standby.reserve) before the first is taken, the reference's as the
    candidate's; the verdict and the process counts are those of a fresh evaluation."""
    from harness.evaluation import evaluate, resolve_size
    from harness.problems import find_problem
    from harness.reference import ReferenceSession
    sb, _ = standby(1)
    served: list[Worker] = []
    groups: list[list[Worker]] = []
    take, reserve = sb.take, sb.reserve

    def recording_take(*args, **kw) -> Worker:
        served.append(take(*args, **kw))
        return served[-1]

    def recording_reserve(n: int, role: str = "candidate") -> None:
        reserve(n, role)
        groups.append(list(sb.pool)[:n])

    sb.take, sb.reserve = recording_take, recording_reserve
    cfg = make_config(device="cpu", **{"timing.processes_when": "always", "timing.processes": 3,
                                       "timing.processes_max": 3, "timing.processes_budget_s": 60})
    problem = find_problem(str(TESTS / "problems/relu_add.py"))
    ref = ReferenceSession(problem, cfg, "cpu", resolve_size(cfg, "cpu"), None, standby=sb)  # as a batch slot's
    try:
        rec = evaluate(TESTS / "fixtures/cpu/honest_cpp.py", problem.path, cfg, standby=sb, reference=ref)
    finally:
        ref.close()
    assert rec.status.value == "passed", (rec.error, rec.log_tail)
    assert rec.timing_method["processes"] == {"candidate": 3, "reference": 3}, rec.timing_method
    assert [len(g) for g in groups] == [2, 2], "each side's two further processes were not started together"
    # each side's first process, then each group taken whole, one group after the other
    assert len(served) == 6 and served[2:] == groups[0] + groups[1], (served, groups)
    assert all(w.preloaded is not None for w in served)


def test_slot_keeps_one_standby_and_closes_it():
    from harness.batch.executor import DeviceSlot, EvalTask, SlotRuntime
    from harness.problems import find_problem
    exp = read_expectation(TESTS / "fixtures" / "cpu" / "zeros_tiny_softmax.py")  # judged before any timing
    rt = SlotRuntime(DeviceSlot("cpu", "cpu", {"CUDA_VISIBLE_DEVICES": ""}), "small", None)
    try:
        task = EvalTask(0, str(exp.path), find_problem(exp.problem), None, make_config(device="cpu"), None)
        out = rt.evaluate(task)
        assert out.record is not None and out.record.status == exp.status
        first = rt.standby
        assert first is not None and first.idle is not None
        idle = first.idle
        assert rt.evaluate(task).record.status == exp.status
        assert rt.standby is first and first.idle is not idle  # one per slot, consumed each time
        last = first.idle
    finally:
        rt.close()
    assert rt.standby is None and last.returncode is not None


def test_a_reference_starts_from_the_standby_with_the_same_outputs(standby):
    """A slot's reference takes a standby too (torch already imported: a second instead of four on a
    GPU machine), despite asking not to be dumpable, which a standby is from its start; its trial
    outputs are those of a reference started fresh."""
    from harness.problems import find_problem
    from harness.reference import ReferenceSession
    sb, _ = standby()
    idle = sb.idle
    cfg = make_config(device="cpu")
    prob = find_problem(TESTS / "problems" / "relu_add.py")
    a = ReferenceSession(prob, cfg, "cpu", "small", None, standby=sb)
    b = ReferenceSession(prob, cfg, "cpu", "small", None)
    b.plan = a.plan  # the same seeds
    try:
        a.start()
        b.start()
        assert a.worker is idle and a.worker.preloaded is not None and b.worker.preloaded is None
        n = len(a.plan.seeds)
        assert n > 0
        for i in range(n):
            (x, _), (y, _) = a.trial(i, with_inputs=True), b.trial(i, with_inputs=True)
            assert torch.equal(x.out, y.out) and all(torch.equal(p, q) for p, q in zip(x.inputs_after, y.inputs_after))
        assert sb.idle is not idle  # replaced at once
    finally:
        a.close()
        b.close()


def _wait(cond, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _wait_primed(w: Worker) -> None:
    _wait(lambda: w.primed is not None or w.returncode is not None)
    assert w.primed is not None, "the standby died before it was primed"


def test_a_primed_standby_pins_before_its_setup_and_never_beside_timing(standby, tmp_path):
    """Priming (CUDA context and pinned timing primitives, on a GPU slot) runs GPU work, so it waits
    for the slot's timing to end: a shared phase of the gate, never beside an exclusive one."""
    from harness.batch.sharing import DeviceGate
    gate = DeviceGate(record=True)
    with gate.exclusive("timing"):
        sb, taken = standby(prime="cpu", gate=gate)
        idle = sb.idle
        _wait(lambda: idle.preloaded is not None)  # its priming thread reads the pipe, not this one
        time.sleep(1.0)
        assert idle.primed is None  # preloaded, but held back while the timing runs
    _wait_primed(idle)
    assert idle.primed.notes == {"cuda_initialized": "False", "pinned": "True", "hold": "False"}
    (_, t0, t1, _), (kind, s0, _, _) = gate.log
    assert kind == "stoppable" and s0 >= t1

    setup, env = _setup(tmp_path)
    w = sb.take(setup, env, 120)
    taken.append(w)
    assert w is idle and _ext_seen(w) == str(tmp_path / "ext")


def test_a_standby_taken_before_its_priming_goes_out_unprimed(standby, tmp_path):
    """While timing holds the gate, the next evaluation's take() does not wait for priming: the
    worker goes out as it is (its load pins for itself) and its priming thread stands down."""
    from harness.batch.sharing import DeviceGate
    gate = DeviceGate(record=True)
    setup, env = _setup(tmp_path)
    with gate.exclusive("timing"):
        # made inside: a forked standby is ready in milliseconds, and would be primed before the timing
        sb, taken = standby(prime="cpu", gate=gate)
        idle = sb.idle
        _wait(lambda: idle.preloaded is not None)
        w = sb.take(setup, env, 120)
        taken.append(w)
    assert w is idle and w.primed is None
    assert _ext_seen(w) == str(tmp_path / "ext")
    _wait_primed(sb.idle)  # its replacement is primed once the gate is free
    assert w.primed is None
