"""Several evaluations on one device slot (sharing.DeviceGate): untimed phases overlap, timing never
overlaps anything, the other candidates are stopped while one is timed, and a failure seen while
sharing is re-run alone before it becomes a verdict. CPU only."""
from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

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
    # the slot's time held for timing (a batch's device_timing_held_s) is the timing phase's, not the waits
    assert 0.2 <= gate.held_s <= ex[0][2] - ex[0][1] + 0.01 < 0.3, gate.held_s


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
    ("problem p: the reference's outputs of one trial take 9.00 GB; the host can take 3.00 GB now", True),
    ("the solution's process died: segmentation fault (SIGSEGV)", False),
    ("correctness trials: RuntimeError: CUDA error: an illegal memory access was encountered", False),
    ("building ModelNew: TypeError: __init__() takes 1 positional argument but 3 were given", False),
])
def test_only_failures_a_neighbour_could_cause_are_rerun_alone(text, rerun):
    from harness.batch.executor import neighbour_may_have_caused
    from harness.records.result import EvalResult, Status
    for status in (Status.runtime_error, Status.interface_error, Status.too_big):
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


def test_a_gpu_slot_of_one_evaluation_still_has_a_gate_for_its_standbys_priming():
    """Priming a standby (process.standby.Standby) runs GPU work inside a shared phase: on a GPU slot the
    gate must be a real one, even with one evaluation at a time, or priming could overlap timing."""
    from harness.batch.executor import DeviceSlot, SlotRuntime
    from harness.batch.sharing import SoloGate
    gpu = SlotRuntime(DeviceSlot("cuda:0", "cuda", concurrency=1), "small", None)
    cpu = SlotRuntime(DeviceSlot("cpu", "cpu", concurrency=1), "small", None)
    assert type(gpu.gate) is DeviceGate and type(cpu.gate) is SoloGate


def test_a_busy_looping_forward_is_timed_out_without_holding_up_the_others():
    """Real processes, two lanes of a CPU slot: a forward that never returns (hang_forward, run_s 4)
    beside three honest solutions. The honest ones pass, all of them before the hang's verdict (its
    lane is the only one it holds), and the hang gets `timeout` within run_s and the stops the
    others' timing caused it (at most STOP_CREDIT_S), not after as many stops as they make."""
    from harness.batch.executor import DeviceSlot, EvalTask, SlotRuntime
    from harness.problems import find_problem
    from harness.process.worker import STOP_CREDIT_S
    from harness.records.result import Status
    hang = read_expectation(TESTS / "fixtures" / "cpu" / "hang_forward.py")
    honest = read_expectation(TESTS / "fixtures" / "cpu" / "honest_linear_torch.py")
    cfg = make_config(device="cpu", **{"timeouts.run_s": 4, "batch.standby_workers": 0})
    rt = SlotRuntime(DeviceSlot("cpu", "cpu", {"CUDA_VISIBLE_DEVICES": ""}, concurrency=2), "small", None, None, 2)
    done: dict[int, float] = {}

    def run(task):
        out = rt.evaluate(task)
        done[task.index] = time.perf_counter()
        return out

    tasks = [EvalTask(0, str(hang.path), find_problem(hang.problem), None, cfg, None)]
    tasks += [EvalTask(i, str(honest.path), find_problem(honest.problem), None, cfg, None) for i in (1, 2, 3)]
    try:
        with ThreadPoolExecutor(2) as pool:
            outs = list(pool.map(run, tasks))
    finally:
        rt.close()
    assert outs[0].record.status == Status.timeout, outs[0].record.error
    assert [o.record.status for o in outs[1:]] == [Status.passed] * 3, [o.record.error for o in outs[1:]]
    assert outs[0].record.phases.correctness_s < 4 + STOP_CREDIT_S + 5
    assert sum(done[i] < done[0] for i in (1, 2, 3)) >= 2  # the other lane kept going meanwhile


def test_a_gpu_left_busy_by_a_stopped_neighbour_is_given_back_not_timed_beside(monkeypatch):
    """The quiet probe finds the device busy after the gate stopped a neighbour mid-phase (its kernel
    runs on, perhaps for ever): the timing gives the gate back and asks again, probing every time,
    until the device is quiet; only past run_s + STOP_CREDIT_S + quiet_max_s (the neighbour's own
    timeout has fired by then) is it timed beside the busy device, flagged device_not_quiet."""
    from types import SimpleNamespace

    from harness.config import load_config
    from harness.records.result import EvalResult, PhaseTimes, Status
    from harness.stages import timed
    from harness.stages.context import Context
    gate = DeviceGate()
    monkeypatch.setattr(timed.time, "sleep", lambda s: None)
    answers = iter([False, False, True])
    probes = []

    def quiet(ref, ctx, flags, final):
        probes.append(final)
        return next(answers)
    monkeypatch.setattr(timed, "_quiet", quiet)
    monkeypatch.setattr(timed, "measure", lambda *a, **k: "measured")
    ctx = Context(cfg=load_config(), gate=gate, problem=None, device="cuda", phases=PhaseTimes(),
                  res=EvalResult(problem="p", solution="s", status=Status.passed))
    timer = timed.PairTimer(ctx, SimpleNamespace(), SimpleNamespace(rng=None, lock=threading.RLock()))
    with gate.stoppable() as phase:  # a neighbour mid-phase: the first hold preempts it
        phase.add(SimpleNamespace(pause=lambda: None, resume=lambda: None))
        worker = SimpleNamespace(pid=None)
        assert timer._once(worker, worker, 0) == "measured"
    assert probes == [False, False, False] and timer.quiet_retries == 2
    timer.not_quiet_since = timed.time.perf_counter() - timer.not_quiet_for - 1  # waited long enough
    monkeypatch.setattr(timed, "_quiet", lambda ref, ctx, flags, final: final)
    assert timer._once(worker, worker, 0) == "measured" and timer.quiet_retries == 2


def test_a_remeasurement_after_a_clock_flag_is_adopted_only_if_it_could_be_reported(monkeypatch):
    """The first measurement flagged by the host-clock checks is measured again, and one no check
    flags is adopted. A forged report the second time (fewer times than calls: malformed_report)
    passed no clock check as a flag, and was adopted: now it ends the evaluation as it would have
    as the first measurement."""
    from types import SimpleNamespace

    from harness.config import load_config
    from harness.records.result import EvalResult, PhaseTimes, Status
    from harness.stages import timed
    from harness.stages.context import Context, Failure
    from harness.timing.measure import Measurement, Side

    def measurement(malformed: bool) -> Measurement:
        m = Measurement(cand=Side(times=[1.0] * 5), ref=Side(times=[1.0] * 5))
        if malformed:
            m.flags.append("malformed_report")
        return m
    made = iter([measurement(False), measurement(True)])
    flags = iter([["timer_mismatch"], []])
    monkeypatch.setattr(timed.PairTimer, "_once", lambda self, c, r, pair, quiet_builds=False: next(made))
    monkeypatch.setattr(timed, "clock_checks", lambda m, cfg, cuda, note: next(flags))
    ctx = Context(cfg=load_config(), gate=DeviceGate(), problem=None, device="cuda", phases=PhaseTimes(),
                  res=EvalResult(problem="p", solution="s", status=Status.passed))
    timer = timed.PairTimer(ctx, SimpleNamespace(), SimpleNamespace(rng=None, lock=threading.RLock()))
    worker = SimpleNamespace(log_tail=lambda: "")
    with pytest.raises(Failure) as e:
        timer.checked(worker, worker, 0)
    assert e.value.status == Status.runtime_error and "malformed_report" in e.value.flags


def test_a_phase_that_joins_late_never_stops_the_process_the_timing_keeps():
    """A stoppable phase begun before a timing (its evaluation then waited for the reference session's
    lock) adds the session's reference, which that timing keeps and is using: it must not be stopped
    (the timing's request to it would wait out timeouts.problem_s holding the gate: the 170 s stall of
    a cold throughput bench), and the phase asks it nothing until the timing has ended."""
    gate, ref = DeviceGate(), FakeWorker()
    in_phase, order = threading.Event(), []
    held_box = {}

    def neighbour():
        with gate.stoppable() as phase:
            in_phase.set()
            while "timing began" not in order:
                time.sleep(0.01)
            phase.add(ref)  # ReferenceSession.trial/judge: on_worker(self.worker), under its lock
            order.append("neighbour asks the reference")

    t = threading.Thread(target=neighbour, daemon=True)
    t.start()
    assert in_phase.wait(5)
    with gate.exclusive(keep=(ref,)) as held:
        order.append("timing began")
        time.sleep(0.2)
        held_box["calls"] = list(ref.calls)
        order.append("timing ended")
    t.join(5)
    assert not t.is_alive()
    assert held_box["calls"] == [] and ref.calls == [], ref.calls
    assert order == ["timing began", "timing ended", "neighbour asks the reference"], order


def test_a_timing_waits_for_a_request_to_its_reference_already_in_flight(monkeypatch):
    """The problem's reference process serves every evaluation of the problem, each request under
    the session's lock. A timing that took the gate while another evaluation's request to that
    process was still in flight (its phase stoppable, the process kept by the timing so not stopped)
    asked the same process for its rounds beside it: two threads reading one pipe, and the
    reference's rounds beside another trial's work. The timing now holds the session's lock too,
    taken before the gate: it begins once the request in flight has its reply."""
    from types import SimpleNamespace

    from harness.config import load_config
    from harness.records.result import EvalResult, PhaseTimes, Status
    from harness.stages import timed
    from harness.stages.context import Context
    gate, ref = DeviceGate(), SimpleNamespace(rng=None, lock=threading.RLock())
    order: list[str] = []
    monkeypatch.setattr(timed, "_quiet", lambda ref, ctx, flags, final: True)
    monkeypatch.setattr(timed, "measure", lambda *a, **k: order.append("timed") or "measured")
    ctx = Context(cfg=load_config(), gate=gate, problem=None, device="cuda", phases=PhaseTimes(),
                  res=EvalResult(problem="p", solution="s", status=Status.passed))
    timer = timed.PairTimer(ctx, SimpleNamespace(), ref)
    asking = threading.Event()

    def neighbour():  # ReferenceSession.trial: under the lock, the process added, then its request
        with gate.stoppable() as phase, ref.lock:
            phase.add(FakeWorker())
            asking.set()
            time.sleep(0.3)
            order.append("neighbour's reply read")

    t = threading.Thread(target=neighbour, daemon=True)
    t.start()
    assert asking.wait(5)
    worker = SimpleNamespace(pid=None)
    assert timer._once(worker, worker, 0) == "measured"
    t.join(5)
    assert order == ["neighbour's reply read", "timed"], order
