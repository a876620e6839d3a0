"""Several evaluations on one device slot (sharing.DeviceGate): untimed phases overlap, timing never
overlaps anything, the other candidates are stopped while one is timed, and a failure seen while
sharing is re-run alone before it becomes a verdict. CPU only."""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest

from conftest import TESTS, make_config, read_expectation
from harness.batch.sharing import DeviceGate


class FakeWorker:
    def __init__(self):
        self.calls: list[str] = []

    def pause(self):
        self.calls.append("pause")

    def resume(self):
        self.calls.append("resume")


def _overlaps(a, b) -> bool:
    return a[1] < b[2] and b[1] < a[2]


def test_timing_waits_for_shared_phases_and_new_ones_wait_behind_it():
    gate = DeviceGate(record=True)
    order: list[str] = []

    def reader(name, delay, hold):
        time.sleep(delay)
        with gate.shared():
            order.append(f"{name}+")
            time.sleep(hold)
            order.append(f"{name}-")

    def writer():
        time.sleep(0.1)
        with gate.exclusive():
            order.append("T+")
            time.sleep(0.2)
            order.append("T-")

    ts = [threading.Thread(target=reader, args=("A", 0, 0.4)), threading.Thread(target=writer),
          threading.Thread(target=reader, args=("B", 0.2, 0.05))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    # the timer waited for A; B, which came while the timer waited, came after it
    assert order == ["A+", "A-", "T+", "T-", "B+", "B-"], order
    ex = [e for e in gate.log if e[0] == "exclusive"]
    assert len(ex) == 1 and not any(_overlaps(ex[0], e) for e in gate.log if e is not ex[0])


def test_timing_stops_every_candidate_process_but_the_pair_it_times():
    """Another evaluation's candidate is stopped; so is this evaluation's own further process while
    another pair of its own is timed (timing.processes_for: none may work beside the timed one,
    through CUDA IPC say); the processes it keeps are not."""
    gate = DeviceGate()
    mine, mine_too, other = FakeWorker(), FakeWorker(), FakeWorker()
    registered = threading.Barrier(2)
    done = threading.Event()

    def neighbour():
        gate.register(other)
        registered.wait()
        done.wait(5)
        gate.unregister()

    t = threading.Thread(target=neighbour)
    t.start()
    gate.register(mine, mine_too)
    registered.wait()
    with gate.exclusive(keep=(mine,)):
        assert other.calls == ["pause"] and mine.calls == [] and mine_too.calls == ["pause"]
    assert other.calls == ["pause", "resume"] and mine_too.calls == ["pause", "resume"]
    with gate.exclusive(keep=(mine_too,)):
        assert mine.calls == ["pause"] and mine_too.calls == ["pause", "resume"]
    done.set()
    t.join()
    gate.unregister()
    with gate.exclusive():  # nobody registered: nothing to stop
        pass
    assert other.calls == ["pause", "resume", "pause", "resume"] and mine.calls == ["pause", "resume"]


class StampedWorker:
    """Records when it was stopped and let go (perf_counter)."""

    def __init__(self):
        self.stops: list[tuple[str, float]] = []

    def pause(self):
        self.stops.append(("pause", time.perf_counter()))

    def resume(self):
        self.stops.append(("resume", time.perf_counter()))


def test_timing_stops_a_stoppable_phase_instead_of_waiting_for_it():
    """A stoppable phase (work in a child process) does not hold a timing back: the timing stops
    its worker for as long as it holds the device, says it did (held.preempted: the caller waits
    for a quiet GPU), and lets it go on after. A worker that joins a phase while a timing holds
    the device is stopped at once. A plain shared phase is still waited for; so is everything by a
    re-run alone, which needs the device's memory back."""
    gate = DeviceGate(record=True)
    early, late = StampedWorker(), StampedWorker()
    in_phase, timing_on, late_added = threading.Event(), threading.Event(), threading.Event()
    out = {}

    def phase():
        with gate.stoppable() as ph:
            ph.add(early)
            out["phase_id"] = ph.id
            in_phase.set()
            assert timing_on.wait(5)
            ph.add(late)  # joins while the timing holds the device
            late_added.set()
            time.sleep(0.3)
        out["phase_end"] = time.perf_counter()

    t = threading.Thread(target=phase)
    t.start()
    assert in_phase.wait(5)
    t0 = time.perf_counter()
    with gate.exclusive() as held:
        out["waited"] = time.perf_counter() - t0
        timing_on.set()
        assert late_added.wait(5)
        time.sleep(0.1)
        t1 = time.perf_counter()
    t.join()
    assert out["waited"] < 0.2  # the phase (0.3 s more) was not waited for
    assert held.preempted == [out["phase_id"]]
    assert [k for k, _ in early.stops] == ["pause", "resume"] and early.stops[0][1] <= t0 + out["waited"]
    assert [k for k, _ in late.stops] == ["pause", "resume"]
    assert all(t1 <= when for _, when in (early.stops[1], late.stops[1]))
    kinds = [e[0] for e in gate.log]
    assert kinds == ["exclusive", "stoppable"] and gate.log[0][3] == (out["phase_id"],)

    # a shared phase is waited for; a re-run alone waits for a stoppable one
    assert _phase_then_writer(gate, gate.shared, "exclusive")[0] == ["phase done", "exclusive began"]
    assert _phase_then_writer(gate, gate.stoppable, "alone")[0] == ["phase done", "alone began"]


def _phase_then_writer(gate: DeviceGate, enter, kind: str, worker=None):
    """A phase entered with `enter()` (0.2 s long), then `gate.exclusive(kind)` asked for while it
    runs: the order they ended and began in, and what the exclusive phase held."""
    started, order = threading.Event(), []

    def other():
        with enter() as ph:
            if worker is not None:
                ph.add(worker)
            started.set()
            time.sleep(0.2)
            order.append("phase done")

    t = threading.Thread(target=other)
    t.start()
    assert started.wait(5)
    with gate.exclusive(kind) as held:
        order.append(f"{kind} began")
    t.join()
    return order, held


def test_with_stop_untimed_off_a_stoppable_phase_is_waited_for():
    gate, w = DeviceGate(stop_untimed=False), StampedWorker()
    order, held = _phase_then_writer(gate, gate.stoppable, "exclusive", w)
    assert order == ["phase done", "exclusive began"] and held.preempted == [] and w.stops == []


def test_a_workers_timeout_leaves_out_the_time_it_was_stopped(tmp_path):
    """A neighbour's timing stops a worker mid-request: the request's timeout counts only the time
    it ran. Real process: a forward that never returns, 1 s of timeout, stopped for 1.5 s of it."""
    from harness.build import child_env
    from harness.process.worker import Worker, WorkerTimeout
    from harness.problems import find_problem
    from harness.records.messages import BuildCommand, TrialsCommand
    exp = read_expectation(TESTS / "fixtures" / "cpu" / "hang_forward.py")
    setup = {"role": "candidate", "problem_path": str(find_problem(exp.problem).path),
             "solution_path": str(exp.path), "device": "cpu", "size": "small", "dtype": None, "cpu_threads": 1}
    w = Worker(setup, env=child_env(tmp_path / "ext", "cpu"))
    try:
        assert w.wait_reply("load", 120).ok
        assert w.request(BuildCommand(init_seed=1), 60)[0].ok
        assert not w.out_of_step
        stop, go = threading.Timer(0.3, w.pause), threading.Timer(1.8, w.resume)
        stop.start(), go.start()
        t0 = time.perf_counter()
        with pytest.raises(WorkerTimeout):
            w.request(TrialsCommand(seeds=[1], shapes=[{}]), 1.0)
        waited = time.perf_counter() - t0
        go.join()
        assert 2.4 < waited < 4.0, waited
        assert w.out_of_step  # its reply may still come: the worker is not to be asked again
        assert abs(w.stopped_for() - 1.5) < 0.2, w.stopped_for()
    finally:
        w.kill()
        w.close(grace=0)


def test_shared_seen_only_when_a_neighbour_overlapped():
    gate = DeviceGate()
    seen = {}
    both = threading.Barrier(2)

    def phase(name, wait_for_other):
        gate.reset_seen()
        if wait_for_other:
            both.wait()
        with gate.shared():
            if wait_for_other:
                both.wait()
            time.sleep(0.05)
        seen[name] = gate.shared_seen

    with ThreadPoolExecutor(2) as ex:
        list(ex.map(phase, ["a", "b"], [True, True]))
    assert seen == {"a": True, "b": True}
    phase("alone", False)
    assert seen["alone"] is False
    with gate.alone():  # inside alone(), this thread's own phases neither wait nor count as shared
        with gate.shared():
            with gate.exclusive():
                pass
    assert [k for k, *_ in gate.log or []] == []  # not recording: no log kept


def test_a_failure_while_sharing_is_rerun_alone(monkeypatch):
    """SlotRuntime: a runtime_error seen while another evaluation shared the device, whose message
    says memory ran short, is evaluated again with the device to itself; that second verdict is the
    record, flagged rerun_alone. A failure no neighbour can cause (the solution raised) is final at
    once, shared or not, and so is any failure with no neighbour."""
    import harness.evaluation as ev
    from harness.batch.executor import DeviceSlot, EvalTask, SlotRuntime
    from harness.problems import find_problem
    from harness.records.result import EvalResult, Status

    calls: list[tuple[str, bool]] = []
    together = threading.Barrier(3, timeout=10)
    errors = {"flaky": "correctness trials: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
              "solo": "correctness trials: torch.OutOfMemoryError: CUDA out of memory.",
              "raises": "correctness trials: ValueError: shapes (4,) and (5,) do not match"}

    def fake_evaluate(solution, problem, cfg, *, gate, **kw):
        alone = gate._mine()
        calls.append((solution, alone))
        with gate.shared():
            if not alone and solution != "solo":
                together.wait()  # the three first tries overlap for sure
            time.sleep(0.05)
        with gate.exclusive():
            pass
        if solution in errors and not alone or solution == "raises":
            return EvalResult(problem=problem.name, solution=solution, status=Status.runtime_error,
                              error=errors[solution])
        return EvalResult(problem=problem.name, solution=solution, status=Status.passed)

    monkeypatch.setattr(ev, "evaluate", fake_evaluate)
    cfg = make_config(device="cpu", **{"batch.standby_workers": 0})
    prob = find_problem(TESTS / "problems" / "relu_add.py")
    rt = SlotRuntime(DeviceSlot("cpu", "cpu", {"CUDA_VISIBLE_DEVICES": ""}, concurrency=3), "small", None, 3, 3)
    rt.gate = DeviceGate(record=True)
    try:
        with ThreadPoolExecutor(3) as pool:
            outs = list(pool.map(rt.evaluate, [EvalTask(i, s, prob, None, cfg, None)
                                               for i, s in enumerate(("flaky", "steady", "raises"))]))
        solo = rt.evaluate(EvalTask(3, "solo", prob, None, cfg, None))
    finally:
        rt.close()
    flaky, steady, raises = (o.record for o in outs)
    assert flaky.status == Status.passed and "rerun_alone" in flaky.flags
    assert flaky.timing_method["first_try_while_shared"] == "runtime_error"
    assert steady.status == Status.passed and "rerun_alone" not in steady.flags
    assert raises.status == Status.runtime_error and "rerun_alone" not in raises.flags
    assert solo.record.status == Status.runtime_error and "rerun_alone" not in solo.record.flags
    assert ("flaky", True) in calls and ("raises", True) not in calls and ("solo", True) not in calls
    assert rt.reruns == 1
    alone = [e for e in rt.gate.log if e[0] == "alone"]
    assert len(alone) == 1 and not any(_overlaps(alone[0], e) for e in rt.gate.log if e is not alone[0])


@pytest.mark.parametrize("text,rerun", [
    ("the solution's process died: killed (out of memory?) (SIGKILL)", True),
    ("correctness trials: RuntimeError: CUDA error: CUBLAS_STATUS_NOT_INITIALIZED when calling cublasCreate", True),
    ("building ModelNew: RuntimeError: cudaMalloc failed: out of memory", True),
    ("correctness trials: RuntimeError: DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 GB", True),
    ("the solution's process died: segmentation fault (SIGSEGV)", False),
    ("correctness trials: RuntimeError: CUDA error: an illegal memory access was encountered", False),
    ("building ModelNew: TypeError: __init__() takes 1 positional argument but 3 were given", False),
])
def test_only_failures_a_neighbour_could_cause_are_rerun_alone(text, rerun):
    from harness.batch.executor import neighbour_may_have_caused
    from harness.records.result import EvalResult, Status
    for status in (Status.runtime_error, Status.interface_error):
        assert neighbour_may_have_caused(EvalResult(problem="p", solution="s", status=status, error=text)) is rerun
    for status in (Status.incorrect, Status.timeout, Status.passed):
        assert not neighbour_may_have_caused(EvalResult(problem="p", solution="s", status=status, error=text))


def test_real_evaluations_share_a_slot_and_timing_overlaps_nothing():
    """Real processes: four fixtures on one CPU slot with three evaluations at once. Every verdict
    is the one it gets alone, some untimed phases ran side by side, and no timing phase overlapped
    any other phase but the stoppable ones it stopped."""
    from harness.batch.executor import DeviceSlot, EvalTask, SlotRuntime
    from harness.problems import find_problem
    names = ["honest_linear_torch.py", "zeros_tiny_softmax.py", "raise_in_forward.py", "wrong_cpp.py"]
    exps = [read_expectation(TESTS / "fixtures" / "cpu" / n) for n in names]
    cfg = make_config(device="cpu")
    rt = SlotRuntime(DeviceSlot("cpu", "cpu", {"CUDA_VISIBLE_DEVICES": ""}, concurrency=3), "small", None, 2, 3)
    rt.gate = DeviceGate(record=True)
    try:
        with ThreadPoolExecutor(3) as pool:
            outs = list(pool.map(rt.evaluate, [EvalTask(i, str(e.path), find_problem(e.problem), None, cfg, None)
                                               for i, e in enumerate(exps)]))
    finally:
        rt.close()
    for e, o in zip(exps, outs):
        assert o.record is not None, o.error
        assert o.record.status == e.status, (e.path.name, o.record.status, o.record.error)
    timed = [e for e in rt.gate.log if e[0] in ("exclusive", "alone")]
    assert timed, "nothing was timed"
    for t in timed:
        # a timing overlaps no shared phase and no other timing; a stoppable phase only when it
        # stopped that phase's processes (and not at all when it is a re-run alone)
        for e in rt.gate.log:
            if e is not t and _overlaps(t, e):
                assert e[0] == "stoppable" and t[0] == "exclusive" and e[3] in t[3], (t, e)
    assert rt.gate.peak_shared >= 2


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


def test_the_profilers_start_up_holds_no_shared_phase_and_the_listing_does():
    """The kernel listing's seconds of CUPTI start-up run no solution code: a neighbour's timing need
    not wait for them (its gate stops this candidate meanwhile). The profiled forward itself runs the
    solution on the device: a shared phase."""
    from harness.config import load_config
    from harness.records.messages import KernelsReply, ProfilerReply
    from harness.records.result import EvalResult, PhaseTimes, Status
    from harness.stages.context import Context
    from harness.stages.kernels import run_listing

    gate = DeviceGate(record=True)
    seen: list[tuple[str, int]] = []

    class Cand:
        def request(self, cmd, timeout):
            seen.append((cmd.op, gate._readers))
            if cmd.op == "profiler":
                assert cmd.kernel_list == "cupti"
                return ProfilerReply(ok=True, profile_s=3.5, notes={"kernel_list": "cupti"}), 3.5
            return KernelsReply(ok=True, kernels_seen=["my_relu_kernel(float*)"], profile_s=0.01,
                         notes={"kernel_list": "cupti"}), 0.01

    res = EvalResult(problem="p", solution="s", status=Status.passed, flags=["no_custom_kernel"])
    phases = PhaseTimes()
    ctx = Context(cfg=load_config(), gate=gate, problem=None, res=res, phases=phases, device="cuda")
    run_listing(ctx, Cand(), ["my_relu_kernel"], 7)
    assert seen == [("profiler", 0), ("kernels", 1)]
    assert phases.profiler_start_s == 3.5 and phases.profile_s == 0.01
    assert res.timing_method["kernel_list"] == "cupti"
    assert res.flags == []  # its own kernel ran: the flag set from the trials' call count is lifted
    assert [k for k, *_ in gate.log] == ["shared"]


def test_a_timing_cpu_per_gpu_slot_kept_free_of_background_work():
    """cpus.plan: one timing CPU per slot from the top, its SMT siblings kept free too; builds and
    standbys get the rest, unless that would leave them under half the machine. cpus.pinned moves a
    process onto the timing CPU for the block and back after it."""
    import os
    import subprocess
    import sys

    from harness import cpus
    from harness.batch.executor import DeviceSlot, SlotRuntime
    smt = lambda c: {c % 8, c % 8 + 8}  # noqa: E731  (16 CPUs, 8 cores of 2 threads)
    assert cpus.plan(1, list(range(16)), smt) == ([15], set(range(16)) - {7, 15})
    assert cpus.plan(2, list(range(16)), smt) == ([15, 14], set(range(16)) - {6, 7, 14, 15})
    timing, background = cpus.plan(1, [0, 1], lambda c: {0, 1})  # a 2-CPU VM: nothing to spare
    assert timing == [1] and background is None
    assert cpus.plan(3, [0, 1], lambda c: {c}) == ([1, 0, None], None)

    allowed = sorted(os.sched_getaffinity(0))
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        before = os.sched_getaffinity(p.pid)
        with cpus.pinned([p.pid, None], allowed[-1]):
            assert os.sched_getaffinity(p.pid) == {allowed[-1]}
        assert os.sched_getaffinity(p.pid) == before
        with cpus.pinned([p.pid], None):  # no timing CPU (the CPU path): left alone
            assert os.sched_getaffinity(p.pid) == before
    finally:
        p.kill()
        p.wait()
    # a slot keeps a reference session per evaluation in flight, and one more
    assert SlotRuntime(DeviceSlot("cuda:0", "cuda", {}, concurrency=4), "full", None, concurrency=4).max_sessions == 5


@pytest.mark.parametrize("children_lists", [True, False], ids=["children-lists", "proc-scan"])
def test_builds_borrow_the_timing_cpu_only_while_nothing_is_timed(monkeypatch, children_lists):
    """cpus.Lender: a build's every process and thread runs on the background CPUs and the timing CPU
    while no timing phase holds it; a timing phase (pinned with the lender) moves them all off it
    first, a process forked meanwhile inherits that, and they get it back after. The gate of a batch's
    slot carries the lender to the timing phase. Both ways of finding a build's processes: the
    kernel's children lists, and a scan of /proc where it has none."""
    import os
    import subprocess
    import sys

    from harness import cpus
    from harness.batch.executor import DeviceSlot, SlotRuntime
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip("needs two CPUs")
    if children_lists and not cpus._children_lists(os.getpid()):
        pytest.skip("this kernel has no /proc/PID/task/TID/children")
    monkeypatch.setattr(cpus, "_children_lists", lambda pid: children_lists)
    timing_cpu, background = allowed[-1], set(allowed[:-1])
    assert cpus.Lender.plan([timing_cpu], None) is None  # nothing reserved: nothing to lend
    assert cpus.Lender.plan([None], background) is None
    smt = lambda c: {c % 8, c % 8 + 8}  # noqa: E731
    planned = cpus.Lender.plan([15, 14], set(range(16)) - {6, 7, 14, 15}, smt)
    assert planned.timing == {15: {7, 15}, 14: {6, 14}} and planned.mask() == set(range(16))
    with planned.reclaimed(15):
        assert planned.mask() == set(range(16)) - {7, 15}
        with planned.reclaimed(14), planned.reclaimed(15):
            assert planned.mask() == set(range(16)) - {6, 7, 14, 15}
        assert planned.mask() == set(range(16)) - {7, 15}  # the outer phase still holds it
    assert planned.mask() == set(range(16))

    # a build child with a thread and a grandchild, and a pipe to fork another on demand
    code = ("import os, subprocess, sys, threading, time\n"
            "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
            "kids = [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])]\n"
            "print(kids[0].pid, flush=True)\n"
            "for line in sys.stdin:\n"
            "    kids.append(subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']))\n"
            "    print(kids[-1].pid, flush=True)\n")
    build = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    timed = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    lender = cpus.Lender(background, {timing_cpu: {timing_cpu}})

    def masks(*roots):
        kids = cpus._children_by_parent()
        out, stack = {}, list(roots)
        while stack:
            p = stack.pop()
            for t in os.listdir(f"/proc/{p}/task"):
                out[int(t)] = frozenset(os.sched_getaffinity(int(t)))
            stack.extend(kids.get(p, ()))
        return out

    spawned = []
    try:
        grandchild = int(build.stdout.readline())
        spawned.append(grandchild)
        cpus.restrict(build.pid, background)
        lender.track(build.pid)
        seen = masks(build.pid)
        assert grandchild in seen and len(seen) >= 3  # the child's threads and the grandchild
        assert set(seen.values()) == {frozenset(allowed)}
        gate = SlotRuntime(DeviceSlot("cuda:0", "cuda", {}, timing_cpu=timing_cpu), "full", None,
                           lender=lender).gate
        assert gate.lender is lender
        with cpus.pinned([timed.pid], gate.timing_cpu, gate.lender):
            assert os.sched_getaffinity(timed.pid) == {timing_cpu}
            assert set(masks(build.pid).values()) == {frozenset(background)}
            build.stdin.write("fork\n")
            build.stdin.flush()
            late = int(build.stdout.readline())
            spawned.append(late)
            assert os.sched_getaffinity(late) == background  # inherited
            lender.track(build.pid)  # a build starting meanwhile gets the same
            assert set(masks(build.pid).values()) == {frozenset(background)}
        after = masks(build.pid)
        assert late in after and set(after.values()) == {frozenset(allowed)}
        lender.untrack(build.pid)
        with lender.reclaimed(timing_cpu):  # an ended build is left alone
            assert set(masks(build.pid).values()) == {frozenset(allowed)}
        assert lender.moves == 4
    finally:
        for pid in spawned:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        for p in (build, timed):
            p.kill()
            p.wait()


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
            self.worker, self.trials = SimpleNamespace(returncode=None, out_of_step=False), []

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
    from harness.reference import ReferenceError, ReferenceSession

    began, asked, fail = [], [], []

    def fake_start(self, on_worker=None):
        if self.worker is None:
            began.append((time.perf_counter(), threading.current_thread().name))
            time.sleep(0.3)
            if fail:
                raise ReferenceError("problem relu_add failed to load: boom")
            self.worker, self.trials = SimpleNamespace(returncode=None, out_of_step=False), []

    def fake_evaluate(solution, problem, cfg, *, reference, gate, **kw):
        time.sleep(0.2)  # the candidate's start and trials
        asked.append(time.perf_counter())
        reference.start()
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
        assert max(o.busy_s for o in outs) < 0.45  # 0.3 s of start under 0.2 s of candidate, not after it
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


def test_a_gpu_slot_of_one_evaluation_still_has_a_gate_for_its_standbys_priming():
    """Priming a standby (process.standby.Standby) runs GPU work inside a shared phase: on a GPU slot the
    gate must be a real one, even with one evaluation at a time, or priming could overlap timing."""
    from harness.batch.executor import DeviceSlot, SlotRuntime
    from harness.batch.sharing import SoloGate
    gpu = SlotRuntime(DeviceSlot("cuda:0", "cuda", concurrency=1), "small", None)
    cpu = SlotRuntime(DeviceSlot("cpu", "cpu", concurrency=1), "small", None)
    assert type(gpu.gate) is DeviceGate and type(cpu.gate) is SoloGate


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
