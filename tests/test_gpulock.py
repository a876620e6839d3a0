"""The drain of a paused candidate's GPU work (harness/process/gpulock.py): which processes are
locked and what a failed lock means, with a stand-in for the driver; on a machine without one, a
pause drains nothing and rejects nothing. The drain itself, on a GPU: tests/test_gpu.py
(gpu_work_beside_reference.py)."""
from __future__ import annotations

import ctypes

import pytest
from conftest import TESTS, read_expectation


class FakeDriver:
    """GetState answers for CUDA processes only; Lock fails for those in `refuse`."""

    def __init__(self, states: dict[int, int], refuse: set[int] = frozenset()):
        self.states, self.refuse = dict(states), set(refuse)
        self.locked: list[int] = []
        self.unlocked: list[int] = []
        self.timeouts: list[int] = []

    def cuCheckpointProcessGetState(self, pid, out):
        if pid not in self.states:
            return 999  # no CUDA in it
        out._obj.value = self.states[pid]
        return 0

    def cuCheckpointProcessLock(self, pid, args):
        self.timeouts.append(args._obj.timeoutMs)
        if pid in getattr(self, "unsupported", ()):
            return 801
        if pid in self.refuse:
            return 909
        self.states[pid] = 1  # locked
        self.locked.append(pid)
        return 0

    def cuCheckpointProcessUnlock(self, pid, _):
        self.states[pid] = 0
        self.unlocked.append(pid)
        return 0


def test_every_cuda_process_is_locked_and_one_the_lock_cannot_hold_is_named(monkeypatch):
    from harness.process import gpulock
    fake = FakeDriver({2: 0, 3: 0, 4: 2, 6: 0}, refuse={3})  # 1: no CUDA; 4: checkpointed by someone else
    fake.unsupported = {6}  # CUPTI attached: the driver will not lock it
    monkeypatch.setattr(gpulock, "_driver", lambda: fake)
    held = gpulock.hold([1, 2, 3, 4, 6], timeout_s=2.0)
    assert held.pids == [2] and fake.locked == [2] and held.unsupported == [6]
    assert len(held.failed) == 2 and "pid 3" in held.failed[0] and "pid 4" in held.failed[1], held.failed
    assert all(0 < t <= 2000 for t in fake.timeouts), fake.timeouts
    held.release()
    assert fake.unlocked == [2] and held.pids == []


def test_a_process_that_left_cuda_between_the_state_and_the_lock_is_not_a_failure(monkeypatch):
    from harness.process import gpulock

    class Gone(FakeDriver):
        def cuCheckpointProcessLock(self, pid, args):
            del self.states[pid]  # exited meanwhile
            return 3
    fake = Gone({5: 0})
    monkeypatch.setattr(gpulock, "_driver", lambda: fake)
    held = gpulock.hold([5], timeout_s=1.0)
    assert held.pids == [] and held.failed == []


def _worker(tmp_path):
    from harness.build import child_env
    from harness.problems import find_problem
    from harness.process.worker import Worker
    exp = read_expectation(TESTS / "fixtures" / "cpu" / "honest_cpp.py")
    setup = {"role": "candidate", "problem_path": str(find_problem(exp.problem).path),
             "solution_path": str(exp.path), "device": "cpu", "size": "small", "dtype": None, "cpu_threads": 1}
    w = Worker(setup, env=child_env(tmp_path / "ext", "cpu"))
    assert w.wait_reply("load", 300).ok
    return w


def test_a_pause_locks_the_process_it_stops_and_unlocks_it_when_resumed(tmp_path, monkeypatch):
    """With a driver (a stand-in here), pause(drain_gpu_s) locks the worker's process before the
    stop, keeps how long that took, names a lock that failed, and resume() unlocks it."""
    from harness.process import gpulock
    w = _worker(tmp_path)
    try:
        fake = FakeDriver({w.proc.pid: 0})
        monkeypatch.setattr(gpulock, "_driver", lambda: fake)
        w.pause(drain_gpu_s=1.0)
        assert w.stopped and fake.locked == [w.proc.pid] and len(w.drained_ms) == 1 and not w.undrained
        w.resume()
        assert fake.unlocked == [w.proc.pid] and not w.stopped
        fake.refuse.add(w.proc.pid)
        w.pause(drain_gpu_s=1.0)
        assert w.undrained and str(w.proc.pid) in w.undrained[0], w.undrained
        w.resume()
        w.pause()  # no drain asked: the driver is not called
        w.resume()
        assert fake.locked == [w.proc.pid] and len(fake.timeouts) == 2
    finally:
        w.kill()
        w.close(grace=0)


def test_without_a_driver_a_pause_drains_nothing_and_rejects_nothing(tmp_path):
    from harness.process import gpulock
    if gpulock.unavailable() is None:
        pytest.skip("this machine has a CUDA driver with the checkpoint API")
    w = _worker(tmp_path)
    try:
        w.pause(drain_gpu_s=1.0)
        assert w.stopped and w.drain_unavailable and not w.undrained and not w.drained_ms
        w.resume()
    finally:
        w.kill()
        w.close(grace=0)


def test_an_undrained_measurement_rejects_the_candidate():
    from harness.stages.context import Failure
    from harness.stages.timed import _sound
    from harness.timing.measure import Measurement

    class Cand:
        def log_tail(self):
            return ""
    m = Measurement(flags=["gpu_undrained"], undrained=["pid 7: lock failed, CUDA driver error 702"])
    with pytest.raises(Failure) as e:
        _sound(m, Cand())
    assert e.value.status.value == "rejected" and "gpu_undrained" in e.value.flags and "pid 7" in str(e.value)
    assert ctypes.sizeof(__import__("harness.process.gpulock", fromlist=["_LockArgs"])._LockArgs) == 64


class Reply:
    def __init__(self, **kw):
        self.ok, self.error = True, None
        self.__dict__.update(kw)


class FakeCand:
    """What _leave_gpu_quiet asks of a candidate's Worker: its pause's drain as told."""

    def __init__(self, locked_all=False, undrained=(), left_ms=0.4):
        self.sent, self.paused, self.resumed = [], [], 0
        self.drained_ms, self.undrained, self.unfrozen = [], list(undrained), 0
        self.drain_unavailable, self.drain_locked_all, self._locked_all = None, False, locked_all
        self.left_ms = left_ms

    def request(self, cmd, timeout):
        self.sent.append(cmd)
        return Reply(), 0.001

    def pause(self, drain_gpu_s=None):
        self.paused.append(drain_gpu_s)
        self.drain_locked_all = False
        if drain_gpu_s is not None:
            self.drained_ms.append(self.left_ms)
            self.drain_locked_all = self._locked_all

    def resume(self):
        self.resumed += 1


class FakeRef:
    def __init__(self, *quiet_s, quiet=True, probes=3):
        self.quiet_s, self.quiet, self.probes, self.sent = list(quiet_s), quiet, probes, []

    def request(self, cmd, timeout):
        self.sent.append(cmd)
        return Reply(quiet_s=self.quiet_s.pop(0), quiet_probes=self.probes, quiet=self.quiet), 0.001


def _cfg(**kw):
    from harness.config import load_config
    return load_config(None, kw)


def test_the_reference_probes_for_a_quiet_gpu_before_each_round_locked_or_not():
    """Locked or not, the reference's process waits for a quiet GPU (a lock the driver gave is the
    candidate's process's to answer); the CPU path and gpu_drain_s = 0 neither lock nor probe."""
    from harness.timing.measure import Measurement, _leave_gpu_quiet
    m, cand, ref, cfg = Measurement(), FakeCand(locked_all=True), FakeRef(0.0005, 0.0004), _cfg()
    assert _leave_gpu_quiet(m, cand, ref, cfg, True, 5.0) is True
    assert _leave_gpu_quiet(m, cand, ref, cfg, True, 5.0) is True
    assert cand.paused == [10.0, 10.0] and [c.op for c in ref.sent] == ["quiet", "quiet"]
    assert m.gpu_left_checks == {"locked": 2, "probed": 2} and max(m.drained_ms) < 1
    m2, cand2 = Measurement(), FakeCand()
    assert _leave_gpu_quiet(m2, cand2, FakeRef(), cfg, False, 5.0) is False  # the CPU path: no drain
    assert cand2.paused == [None] and m2.gpu_left_checks == {} and not m2.drained_ms
    m3, cand3 = Measurement(), FakeCand()
    assert _leave_gpu_quiet(m3, cand3, FakeRef(), _cfg(**{"hardening.gpu_drain_s": 0}), True, 5.0) is False
    assert cand3.paused == [None] and m3.gpu_left_checks == {}


def test_an_unlockable_candidate_has_the_reference_wait_for_a_quiet_gpu_and_check_after():
    from harness.timing.measure import Measurement, _busy_after, _leave_gpu_quiet
    m, cand, ref, cfg = Measurement(), FakeCand(), FakeRef(0.06, 0.0004, 0.03), _cfg()
    assert _leave_gpu_quiet(m, cand, ref, cfg, True, 5.0) is True
    assert ref.sent[0].op == "quiet" and ref.sent[0].max_s == 10.0
    assert 60.0 in [round(x, 3) for x in m.drained_ms] and m.gpu_left_checks == {"probed": 1}
    assert _busy_after(m, ref, cfg, 5.0) is None  # 0.4 ms: an idle GPU's probes
    busy = _busy_after(m, ref, cfg, 5.0)
    assert busy and "30.0 ms" in busy, busy
    # a warm-up round's wait is not counted (a reference's first probe may load its kernel)
    m2 = Measurement()
    assert _leave_gpu_quiet(m2, FakeCand(left_ms=40), FakeRef(0.03), cfg, True, 5.0, warm=True) is True
    assert m2.drained_ms == []


def test_two_slow_probes_after_the_round_are_busy_though_under_five_ms():
    """Two probes slowed by another context's slices (~2.3 ms each on an H200) and three quiet ones
    come to 4.7 ms; one slow probe alone is the first after a pause (a helper's review)."""
    from harness.timing.measure import Measurement, _busy_after
    assert _busy_after(Measurement(), FakeRef(0.0047, probes=5), _cfg(), 5.0)
    assert _busy_after(Measurement(), FakeRef(0.0007, probes=4), _cfg(), 5.0) is None


def test_a_gpu_still_busy_at_the_drains_end_rejects_and_a_busy_round_is_retaken():
    from harness.timing.measure import Measurement, _judge_rounds, _leave_gpu_quiet, _retakes
    m, cand = Measurement(), FakeCand()
    assert _leave_gpu_quiet(m, cand, FakeRef(10.0, quiet=False), _cfg(), True, 5.0) is None
    assert m.flags == ["gpu_undrained"] and "busy" in m.undrained[0] and cand.resumed == 1
    m, cand = Measurement(), FakeCand(undrained=["pid 9: lock failed, CUDA driver error 909"])
    assert _leave_gpu_quiet(m, cand, FakeRef(), _cfg(), True, 5.0) is None
    assert m.flags == ["gpu_undrained"] and "909" in m.undrained[0]
    t = _cfg().timing
    m = Measurement()
    reply = Reply(times_ms=[1.0, 1.0])
    _, st_r = _judge_rounds(m, t, (None, None, None), reply, reply, "the GPU busy after the reference's round (30.0 ms)")
    assert st_r["slow"] and m.throttled == 2 and m.retaken and not m.flags
    # past the re-takes a busy round is never kept: kept, [a copy][a long spin] every round bought
    # a doubled speedup flagged only as a caveat (a helper's review)
    m.retaken = ["x"] * _retakes(t)
    _judge_rounds(m, t, (None, None, None), reply, reply, "busy")
    assert m.flags == ["gpu_undrained"] and "re-taken" in m.undrained[0]
    m = Measurement(retaken=["x"] * _retakes(t))
    _, st_r = _judge_rounds(m, t, (None, None, None), reply, reply, None)
    assert m.flags == []  # nothing slow: nothing flagged


def test_a_process_that_starts_cuda_while_another_is_locked_is_looked_at_again(monkeypatch):
    """hold() looks at each pid once; the worker's second pass over the jail's processes locks one
    that had no CUDA when first looked at (a helper's review)."""
    from harness.process import gpulock

    class Late(FakeDriver):
        def cuCheckpointProcessLock(self, pid, args):
            self.states.setdefault(2, 0)  # pid 2 now a running CUDA process
            return super().cuCheckpointProcessLock(pid, args)
    fake = Late({1: 0})
    monkeypatch.setattr(gpulock, "_driver", lambda: fake)
    held = gpulock.hold([2, 1], timeout_s=1.0)
    assert held.pids == [1]
    gpulock.hold([2, 1], timeout_s=1.0, into=held)
    assert sorted(held.pids) == [1, 2] and held.whole and fake.locked == [1, 2]


def test_an_unlock_the_driver_refuses_is_the_harness_error(monkeypatch):
    from harness.process import gpulock

    class Stuck(FakeDriver):
        def cuCheckpointProcessUnlock(self, pid, _):
            return 999
    fake = Stuck({3: 0})
    monkeypatch.setattr(gpulock, "_driver", lambda: fake)
    held = gpulock.hold([3], timeout_s=1.0)
    with pytest.raises(RuntimeError, match="could not be unlocked"):
        held.release()
