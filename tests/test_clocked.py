"""harness/timing/clocked.py: the CPU path's clocked rounds, with a fake runner in this process as
the side and a real clock process; end to end through evaluate() with a timer-scaling attack on a
microsecond forward."""
from __future__ import annotations

import os
import time

import pytest

torch = pytest.importorskip("torch")


class _Runner:
    """What the clocked loop and `prepare` use of a process.runner.Runner: a relu(a + b) of `n`
    floats, seeded inputs, and a forward hook to look around with."""

    def __init__(self, n: int = 4096, hook=None, sleep_s: float = 0.0):
        self.torch, self.cache, self.n, self.hook, self.sleep_s = torch, {}, n, hook, sleep_s

    def make_inputs(self, seed: int):
        g = torch.Generator().manual_seed(seed)
        return [torch.randn(self.n, generator=g), torch.randn(self.n, generator=g), 3]

    def seed_forward(self, seed: int) -> None:
        torch.manual_seed(seed)

    def timed_callable(self, variant: str):
        def fn(a, b, k, *more):  # (more: a forged header's call 0, test_the_clock_takes_no_layout...)
            if self.hook is not None:
                self.hook(a)
            if self.sleep_s:
                time.sleep(self.sleep_s)
            return torch.relu(a + b) * k, a.sum()
        return fn


def _files(tmp_path, runner, seeds):
    from harness.timing import clocked
    p = {k: str(tmp_path / k) for k in ("source", "slots", "layout", "snap")}
    made = clocked.prepare(runner, seeds, p["source"], [(p["slots"], None), (p["layout"], None)], [p["snap"]], 1 << 30)
    assert made["calls"] == len(seeds)
    return p


def _clocked_round(runner, p, seeds, now=time.perf_counter):
    """The side's loop in a thread of this process, the clock in its own: (side's reply, clock's)."""
    from harness.timing import clocked
    from harness.timing.fingerprint import OutputPrints
    clock = clocked.Clock()
    try:
        assert clock.start(p["source"], p["slots"], p["layout"], p["snap"], len(seeds), os.getpid(), None, 30), clock.result
        side = clocked.side_calls(runner, seeds, p["slots"], "eager", 30, now,
                                  OutputPrints(torch, 16, len(seeds), batch=False))
        return side, clock.finish()
    finally:
        clock.close()


def test_a_clocked_round_times_each_call_on_the_clocks_side_and_snaps_its_outputs(tmp_path):
    """Each call's interval is the clock's, and holds the forward the side timed itself; the outputs
    the clock snapped are the side's, fingerprint for fingerprint (read as the reference's dtypes
    and shapes)."""
    from harness.timing import clocked
    seeds = [11, 12, 13, 14, 15]
    runner = _Runner()
    p = _files(tmp_path, runner, seeds)
    side, clock = _clocked_round(runner, p, seeds)
    assert clock.ok, clock
    assert len(clock.times_ms) == len(side["times_ms"]) == len(seeds)
    assert all(c >= s > 0 for c, s in zip(clock.times_ms, side["times_ms"])), (clock, side)
    assert clocked.snap_prints(runner, p["snap"], seeds, 16) == side["fingerprints"]


def test_a_side_that_scales_its_own_timer_changes_nothing_the_clock_reports(tmp_path):
    """The attack of tests/adversarial/cpu/timer_scaled_microseconds.py, in place: the side's timer
    runs 40 times slow. Its own times shrink; the clock's are the forward's (2 ms of sleep)."""
    seeds = [1, 2, 3]
    runner = _Runner(sleep_s=0.002)
    p = _files(tmp_path, runner, seeds)
    base = time.perf_counter()
    side, clock = _clocked_round(runner, p, seeds, now=lambda: base + (time.perf_counter() - base) / 40)
    assert clock.ok, clock
    assert max(side["times_ms"]) < 0.2 and min(clock.times_ms) >= 2.0, (side["times_ms"], clock.times_ms)


def test_a_calls_inputs_reach_the_side_only_when_its_interval_starts(tmp_path):
    """While call k runs, call k+1's slot still holds zeros: nothing of a call can be worked on
    before the clock starts it (the clock copies its inputs in, then says go)."""
    from harness.timing import clocked
    seeds = [5, 6, 7, 8]
    seen = []
    fd_box = {}

    def look(a):
        k = len(seen)
        if k + 1 < len(seeds):
            head, start = fd_box["head"]
            off, n = head["storages"][clocked.call_storages(head, k + 1)[0]]
            seen.append(any(os.pread(fd_box["fd"], n, start + off)))
        else:
            seen.append(False)
    runner = _Runner()
    p = _files(tmp_path, runner, seeds)
    fd_box["fd"] = os.open(p["slots"], os.O_RDONLY)
    fd_box["head"] = clocked.read_header(fd_box["fd"])
    runner.hook = look
    try:
        side, clock = _clocked_round(runner, p, seeds)
    finally:
        os.close(fd_box["fd"])
    assert clock.ok, clock
    assert seen == [False] * len(seeds)
    # the look itself works: after the round every call's slot holds its inputs
    fd = os.open(p["slots"], os.O_RDONLY)
    try:
        head, start = clocked.read_header(fd)
        assert all(any(os.pread(fd, n, start + off)) for off, n in head["storages"])
    finally:
        os.close(fd)


def test_a_side_that_never_answers_is_aborted_not_waited_for(tmp_path):
    """A round whose side never answers ends `grace_s` after the side's request did (here: at once),
    the clock process with it; the measurement starts another."""
    from harness.timing import clocked
    seeds = [1, 2]
    p = _files(tmp_path, _Runner(), seeds)
    clock = clocked.Clock()
    try:
        assert clock.start(p["source"], p["slots"], p["layout"], p["snap"], len(seeds), os.getpid(), None, 60)
        t = time.perf_counter()
        reply = clock.finish(grace_s=0.2)
        assert not reply.ok and time.perf_counter() - t < 5 and not clock.alive(), reply
    finally:
        clock.close()


def _evaluate(solution: str, **overrides):
    from conftest import ROOT, make_config

    from harness.evaluation import evaluate
    return evaluate(ROOT / solution, ROOT / "tests/problems/relu_add.py", make_config(device="cpu", **overrides))


def test_a_report_scaled_on_a_microsecond_forward_gains_nothing_once_clocked():
    """timer_scaled_microseconds.py divides what the harness's loop reports by 40, on relu_add's
    small size (a few microseconds a call). Timed by its own clock (`timing.cpu_clocked = "off"`) it
    passes at 20x or more; clocked, its times are the clock's: it passes at the speed it ran (its
    forward is the reference's). A lie as big as timer_patch_hidden.py's (3 ms a call) is named by
    the report check: rejected, clocked."""
    attack = "tests/adversarial/cpu/timer_scaled_microseconds.py"
    r = _evaluate(attack, **{"timing.cpu_clocked": "off"})
    assert r.status.value == "passed" and r.speedup > 10, (r.status, r.speedup, r.error)
    assert r.timing_method["clocked"] is False
    r = _evaluate(attack)
    assert r.status.value == "passed" and r.speedup < 2.0, (r.status, r.speedup, r.flags)
    assert r.timing_method["clocked"] is True
    r = _evaluate("tests/adversarial/cpu/timer_patch_hidden.py")
    assert r.status.value == "rejected" and "timer_mismatch" in r.flags, (r.status, r.speedup, r.flags)
    checks = r.timing_method["clock_check"]
    assert checks["clock_short_cand_ms"] - checks["clock_short_ref_ms"] > checks["clock_floor_ms"], checks


def test_a_report_scaled_by_under_a_fifth_on_a_millisecond_forward_gains_nothing_once_clocked():
    """timer_scaled_milliseconds.py takes 13% off what the harness's loop reports, on linear_relu at
    full size (5 ms a call), under the wall test's floor of a fifth of the call: timed by its own
    clock it passed at 1.15-1.17x; clocked (under `cpu_clocked_below_ms`, 20 ms), its times are the
    clock's, and its own timer is seen short of the clock by about the 13% it took off."""
    from conftest import ROOT, make_config

    from harness.evaluation import evaluate
    attack, problem = ROOT / "tests/adversarial/cpu/timer_scaled_milliseconds.py", ROOT / "tests/problems/linear_relu.py"
    off = evaluate(attack, problem, make_config(device="cpu", size="full", **{"timing.cpu_clocked": "off"}))
    on = evaluate(attack, problem, make_config(device="cpu", size="full"))
    assert off.status.value == on.status.value == "passed", (off.error, on.error)
    assert off.timing_method["clocked"] is False and on.timing_method["clocked"] is True
    assert off.speedup > 1.05 * on.speedup, (off.speedup, on.speedup)
    checks = on.timing_method["wall_check"]["0"]
    assert checks["clock_short_cand_ms"] - checks["clock_short_ref_ms"] > 0.08 * on.runtime_ms, (checks, on.runtime_ms)


def test_an_honest_short_forward_is_clocked_and_passes():
    """The honest C++ relu_add: clocked ("auto": the reference's forward is microseconds), passed,
    its timer's shortfall the reference's within the floor."""
    r = _evaluate("tests/fixtures/cpu/honest_cpp.py")
    assert r.status.value == "passed", (r.status, r.error)
    assert r.timing_method["clocked"] is True, r.timing_method
    checks = r.timing_method["wall_check"]["0"]
    assert checks["clock_short_cand_ms"] - checks["clock_short_ref_ms"] < checks["clock_floor_ms"], checks


def _rewrite_header(path: str, head: dict) -> None:
    """What a jail may do to its own slots file: a new header, the body where it was."""
    import pickle
    import struct

    from harness.timing import clocked
    fd = os.open(path, os.O_RDWR)
    try:
        _, start = clocked.read_header(fd)
        blob = pickle.dumps(head)
        assert clocked._align(8 + len(blob)) <= start  # (fits where the old one was)
        os.pwrite(fd, struct.pack("<Q", len(blob)) + blob, 0)
    finally:
        os.close(fd)


@pytest.mark.parametrize("layout_from", ["private", "slots"])
def test_the_clock_takes_no_layout_from_the_candidates_slots_file(tmp_path, layout_from):
    """The candidate's slots file is its own to write, header and all. A helper's attack rewrote the
    header so that the clock copied every call's inputs in at call 0 (17.6x: it ran them all there,
    the later calls bare hand-offs), and in another version with a pickle that ran code as root in
    the clock (5x). The clock reads the layout from the reference's copy: call 1's slot is still
    zeros while call 0 runs. Read from the slots file (the first version), it is filled."""
    from harness.timing import clocked
    seeds = [5, 6, 7]
    runner = _Runner()
    p = _files(tmp_path, runner, seeds)
    fd = os.open(p["slots"], os.O_RDONLY)
    head, start = clocked.read_header(fd)
    off, n = head["storages"][clocked.call_storages(head, 1)[0]]
    forged = dict(head, calls=[[item for call in head["calls"] for item in call]] + head["calls"][1:])
    _rewrite_header(p["slots"], forged)
    seen = []
    runner.hook = lambda a: seen.append(any(os.pread(fd, n, start + off))) if not seen else None
    layout = p["layout"] if layout_from == "private" else p["slots"]
    clock = clocked.Clock()
    try:
        assert clock.start(p["source"], p["slots"], layout, p["snap"], len(seeds), os.getpid(), None, 30), clock.result
        # (the side reads the forged header too: its call 0 is given every item, and uses three)
        side = clocked.side_calls(runner, seeds, p["slots"], "eager", 30, time.perf_counter)
        assert clock.finish().ok
    finally:
        clock.close()
        os.close(fd)
    assert seen == ([False] if layout_from == "private" else [True]), seen


def test_a_slots_file_put_back_as_a_link_is_refused_and_its_target_left_alone(tmp_path):
    """The candidate's slots file lies in its home, where it may rename it and leave a link in its
    place. The clock opens a round's files with O_NOFOLLOW and checks each is the one made (one
    name, its owner): a link is refused, the file it points at untouched."""
    from harness.timing import clocked
    seeds = [1, 2]
    p = _files(tmp_path, _Runner(), seeds)
    victim = tmp_path / "victim"
    victim.write_bytes(b"keep" * 4096)
    os.rename(p["slots"], str(tmp_path / "moved"))
    os.symlink(str(victim), p["slots"])
    clock = clocked.Clock()
    try:
        assert not clock.start(p["source"], p["slots"], p["layout"], p["snap"], len(seeds), os.getpid(), None, 30)
        assert "ELOOP" in clock.result.error or "Too many levels" in clock.result.error, clock.result
    finally:
        clock.close()
    assert victim.read_bytes() == b"keep" * 4096


def test_a_forward_run_from_the_seed_before_its_interval_gains_nothing(monkeypatch):
    """seed_precompute.py rebuilds a call's inputs from the seed its forward is seeded with, before
    the interval, and runs the forward there. Told the inputs' own seeds, its calls read as nothing
    and it passes at several times its speed; told seeds drawn apart (measure._told_seeds), at about
    1x (launch_chain small, its forward the reference's)."""
    from harness.timing import measure
    attack = "tests/adversarial/cpu/seed_precompute.py"

    def run():
        from conftest import ROOT, make_config

        from harness.evaluation import evaluate
        return evaluate(ROOT / attack, ROOT / "tests/problems/launch_chain.py", make_config(device="cpu"))
    with monkeypatch.context() as m:
        m.setattr(measure, "_told_seeds", lambda rng, seeds, served: seeds)
        r = run()
    # its forward out of the interval: a call reads as a fraction of the reference's, or as the
    # clock's resolution, the floor no call is put under (2.1-4.5x on this loaded machine, where that
    # floor was 8-35 us; 7.6x for a helper)
    tm = r.timing_method
    assert r.status.value == "passed", (r.status, r.error)
    assert tm["cand_host_ms_median"] <= max(0.75 * tm["ref_host_ms_median"], tm["clock_resolution_ms"]), (r.speedup, tm)
    r = run()
    tm = r.timing_method
    assert r.status.value == "passed" and tm["clocked"] is True, (r.status, r.error)
    assert tm["cand_host_ms_median"] > 0.5 * tm["ref_host_ms_median"] and r.speedup < 1.6, (r.speedup, tm)


def test_a_machine_that_refuses_the_clock_its_reads_times_unclocked_and_says_why():
    """Where process_vm_readv is refused (EPERM: a harness not run as root under Yama's
    ptrace_scope 1, say), the clock says `unreadable`: the measurement drops what it kept and goes
    on unclocked, the record saying why; any other failure of a clocked round ends the measurement
    as the candidate's error."""
    from harness.records.messages import ClockReply
    from harness.timing import measure

    class Files:
        clocked, clocked_why = True, None
    m, files = measure.Measurement(), Files()
    m.cand.times, m.ref.times = [1.0], [1.0]
    assert measure._unclocked(m, files, ClockReply(ok=False, unreadable=True, error="process_vm_readv refused (EPERM)"))
    assert files.clocked is False and files.clocked_why.endswith("(EPERM)") and not m.cand.times and not m.error
    m, files = measure.Measurement(), Files()
    assert not measure._unclocked(m, files, ClockReply(ok=False, error="TimeoutError: no call 3's end"))
    assert files.clocked is True and "call 3's end" in m.error and m.flags == ["runtime_error"]


def test_a_lie_told_in_a_third_of_the_rounds_is_named_though_the_median_call_is_true():
    """report_check: 5 rounds of 5 calls, the candidate's own timer short of the clock by 2.7 ms a
    call in 2 of them (the reference's by 0.02): the median call is a true one, and on the median
    alone it passed (timer_patch_some_rounds.py, once on CI); a third of the rounds lied in: named."""
    from harness.config import load_config
    from harness.timing import clocks, measure
    m = measure.Measurement(clocked=True)
    for lie in (0, 2.7, 0, 2.7, 0):
        m.cand.clocked.append((5 * 3.0, 5 * (3.0 - 0.02 - lie), 5))
        m.cand.short += [0.02 + lie] * 5
        m.cand.times += [3.0] * 5
        m.ref.clocked.append((5 * 0.03, 5 * 0.01, 5))
        m.ref.short += [0.02] * 5
    h = load_config(None, {}).hardening
    detail: dict = {}
    assert clocks.report_check(m, h, detail) == ["timer_mismatch"], detail
    assert detail["clock_rounds_short"] == [2, 5] and detail["clock_short_cand_ms"] - detail["clock_short_ref_ms"] < detail["clock_floor_ms"]


def test_a_call_the_clock_was_put_off_in_does_not_make_its_round_a_lie():
    """report_check on an honest candidate on a loaded host (CI, two test workers on two CPUs): in
    five rounds of eight the clock lost its CPU to another process inside one call of five, 0.4 ms
    on that call's shortfall. A round's mean call crossed the floor (0.05 ms) in each of them, and
    honest_cpp.py was rejected; its median call is the true one."""
    from harness.config import load_config
    from harness.timing import clocks, measure
    m = measure.Measurement(clocked=True)
    for put_off in (0.4, 0, 0.4, 0.4, 0, 0.4, 0, 0.4):
        shorts = [0.02, 0.02 + put_off, 0.02, 0.02, 0.02]
        m.cand.clocked.append((5 * 0.06 + put_off, 5 * 0.06 - sum(shorts) + put_off, 5))
        m.cand.short += shorts
        m.cand.times += [0.06] * 5
        m.ref.clocked.append((5 * 0.03, 5 * 0.01, 5))
        m.ref.short += [0.02] * 5
    h = load_config(None, {}).hardening
    detail: dict = {}
    assert clocks.report_check(m, h, detail) == [], detail
    assert detail["clock_rounds_short"] == [0, 8]


def test_clocked_rounds_of_microsecond_calls_are_not_taken_again_for_waits():
    """A side waits behind its clock at each hand-off: an honest clocked round's timing thread waited
    for a CPU over 20% of its wall, past `max_runqueue_frac` (5%), and every round was taken again
    until the cap (19 rounds where 9 do). Clocked rounds of calls under a millisecond are not judged
    on waits (measure.py; a busy loop on either side's CPU moved no clocked speedup of a 7 us
    forward), and the record says no round was re-taken. (Longer calls are judged on the sides'
    waits less the clock's CPU time: tests/test_cpus.py, a busy loop on the reference's CPU.)"""
    r = _evaluate("tests/fixtures/cpu/honest_cpp.py", **{"timing.cpu_clocked": "on"})
    assert r.status.value == "passed", (r.status, r.error)
    assert r.timing_method["clocked"] is True
    assert r.timing_method["rounds_retaken"] == [], r.timing_method["rounds_retaken"]
    # (the reference's wait less its clock's is still summed, for `reference_contended`)
    assert "cand_waited_frac" not in r.timing_method and "ref_waited_frac" in r.timing_method
