"""harness/timing/clocks.py: the clock checks that compare what a process reports with the parent's
wall clock (timer_mismatch, unsynced_stream, impossible_timing), on quiet rounds, with the CPU floor."""
from __future__ import annotations

import random

import pytest

from harness.config import load_config
from harness.timing.clocks import clock_checks
from harness.timing.measure import Measurement, Side


def _measure(cand_rounds, ref_rounds, cand_t, ref_t, cand_host=None, ref_host=None):
    quiet = lambda rs: [r if len(r) == 5 else (*r, 0.0) if len(r) == 4 else (*r, True, 0.0) for r in rs]  # noqa: E731
    return Measurement(cand=Side(times=cand_t, host=cand_host or [t + 0.01 for t in cand_t], rounds=quiet(cand_rounds)),
                       ref=Side(times=ref_t, host=ref_host or [t + 0.01 for t in ref_t], rounds=quiet(ref_rounds)))


def test_clock_checks_judge_quiet_rounds_but_cannot_be_escaped_by_contention():
    """Rounds in which the candidate's process waited for a CPU (parent-read schedstat) carry host
    time that is not hidden GPU time: with enough quiet rounds they are left out, which matters to
    the per-call gap test (a low quantile over calls, swamped when most calls are contended; the
    per-round wall test takes the best round and is unaffected). A solution whose every round is
    contended is still checked, on all of them."""
    cfg = load_config()
    ref_rounds = [(10 * 1.3, 10 * 1.0, 10, True)] * 10
    quiet = [(10 * 1.3, 10 * 1.0, 10, True)] * 5
    stretched = [(10 * 2.3, 10 * 1.0, 10, False, 10.0)] * 20  # 1 ms per call of waiting for a CPU
    host = [1.01] * 50 + [2.0] * 200
    assert clock_checks(_measure(quiet + stretched, ref_rounds, [1.0] * 250, [1.0] * 100, cand_host=host), cfg) == []
    # the same wall with no wait for a CPU to explain it: 1 ms per call of hidden work in most rounds
    hidden = [(10 * 2.3, 10 * 1.0, 10, True, 0.0)] * 20
    assert "timer_mismatch" in clock_checks(_measure(quiet + hidden, ref_rounds, [1.0] * 250, [1.0] * 100, cand_host=host), cfg)
    assert "unsynced_stream" in clock_checks(_measure(stretched, ref_rounds, [1.0] * 200, [1.0] * 100,
                                                      cand_host=[2.0] * 200), cfg)


def test_clock_checks_pass_honest_and_flag_hidden_time():
    cfg = load_config()
    rng = random.Random(0)
    t_ref, t_c = 1.0, 0.5
    ref_rounds = [(10 * (t_ref + 0.3 + rng.uniform(0, 0.02)), 10 * t_ref, 10) for _ in range(10)]
    cand_rounds = [(10 * (t_c + 0.3 + rng.uniform(0, 0.02)), 10 * t_c, 10) for _ in range(10)]
    honest = _measure(cand_rounds, ref_rounds, [t_c] * 100, [t_ref] * 100)
    assert clock_checks(honest, cfg) == []
    # reports 0.05 ms per call while the parent's clock sees 0.5 ms of work
    faked = _measure(cand_rounds, ref_rounds, [0.05] * 100, [t_ref] * 100)
    faked.cand.rounds = [(w, 10 * 0.05, n, True) for w, _, n in cand_rounds]
    assert clock_checks(faked, cfg) == ["timer_mismatch"]
    # events see 0.05 ms; the device was busy 0.5 ms longer (work on an unsynchronized stream)
    side = _measure(cand_rounds, ref_rounds, [t_c] * 100, [t_ref] * 100, cand_host=[t_c + 0.5] * 100)
    assert "unsynced_stream" in clock_checks(side, cfg)


def test_clock_checks_cpu_floor():
    """0.2 ms per call of unexplained host time on a 0.05 ms kernel: hidden time on a GPU, the
    noise of two processes on a loaded CPU host. 2 ms is hidden time on either."""
    cfg = load_config()
    t = 0.05
    ref_rounds = [(10 * (t + 0.3), 10 * t, 10) for _ in range(10)]
    for extra, on_gpu, on_cpu in ((0.2, ["timer_mismatch"], []), (2.0, ["timer_mismatch"], ["timer_mismatch"])):
        cand_rounds = [(10 * (t + 0.3 + extra), 10 * t, 10) for _ in range(10)]
        m = _measure(cand_rounds, ref_rounds, [t] * 100, [t] * 100)
        assert clock_checks(m, cfg, cuda=True) == on_gpu
        detail = {}
        assert clock_checks(m, cfg, cuda=False, detail=detail) == on_cpu
        # the record of a flagged run shows the numbers compared: per call, over the reference
        assert detail["wall_over_cand_ms"] - detail["wall_over_ref_ms"] == pytest.approx(extra, abs=1e-3)
        assert detail["wall_floor_ms"] == pytest.approx(cfg.hardening.cpu_wall_abs_ms)


def test_the_gpu_floor_is_a_share_of_the_whole_per_call_wall():
    """Honest walls of two processes differ by a share of the whole per-call wall (the forward's and
    the harness's overhead): a tenth at most on KernelBench identities on an H200. A report scaled by 1.35
    on a 20 ms forward hides 5 ms a call, under the former floor of half the median call (7.4 ms)
    and over a fifth of the median call plus a fifth of the overhead (3.2 ms):
    tests/adversarial/gpu/timer_scaled_third.py."""
    cfg = load_config()
    over = 1.1  # ms a call of the harness's own: inputs, flush, fingerprint
    ref_rounds = [(10 * (20.0 + over), 10 * 20.0, 10, True, 0.0)] * 10
    t = 20.0 / 1.35
    honest_offset = 0.105 * (t + over)  # level2/44 on an H200, the largest seen
    honest = _measure([(10 * (t + over + honest_offset), 10 * t, 10, True, 0.0)] * 10, ref_rounds, [t] * 100, [20.0] * 100)
    assert clock_checks(honest, cfg, cuda=True) == []
    detail: dict = {}
    scaled = _measure([(10 * (20.0 + over), 10 * t, 10, True, 0.0)] * 10, ref_rounds, [t] * 100, [20.0] * 100)
    assert clock_checks(scaled, cfg, cuda=True, detail=detail) == ["timer_mismatch"]
    assert detail["wall_floor_ms"] == pytest.approx(0.2 * t + 0.2 * over, abs=1e-3)
    assert detail["wall_floor_ms"] < 20.0 - t < 0.5 * t


def test_the_cpu_floor_catches_a_report_scaled_by_one_and_a_half_on_a_forward_that_dominates():
    """A helper's attack (session 42): linear_relu at full size on a CPU, about 5 ms a call with 1.3 ms
    of the harness's own overhead, reported 1.5x faster. It passed twice under the former CPU floor
    (0.4 x the median call + 0.2 x the overhead: 1.65 ms against 1.2-1.5 ms unexplained); the
    largest honest margin the helper saw on that problem was below zero."""
    cfg = load_config()
    over, t, seen = 1.3, 5.2, 1.2  # ms a call: overhead, true forward, unexplained as the helper saw it
    ref_rounds = [(10 * (t + over), 10 * t, 10, True, 0.0)] * 10
    rep = t / 1.5
    scaled = _measure([(10 * (rep + over + seen), 10 * rep, 10, True, 0.0)] * 10, ref_rounds, [rep] * 100, [t] * 100)
    detail: dict = {}
    assert clock_checks(scaled, cfg, cuda=False, detail=detail) == ["timer_mismatch"]
    assert detail["wall_floor_ms"] == pytest.approx(0.2 * rep + 0.1 * over, abs=1e-3)
    assert detail["wall_floor_ms"] < seen < 0.4 * rep + 0.2 * over


def test_reported_time_beyond_the_parents_wall_clock_is_impossible():
    cfg = load_config()
    rounds = [(10.0, 10 * 0.5, 10)] * 6
    m = _measure([(4.0, 5.0, 10)] * 6, rounds, [0.5] * 60, [0.5] * 60)  # 5 ms reported in 4 ms of wall
    assert "impossible_timing" in clock_checks(m, cfg)


def test_a_cheat_that_reports_some_rounds_honestly_is_judged_by_its_median_round():
    """tests/adversarial/cpu/timer_patch_some_rounds.py: two rounds in three report a tenth of a 3 ms
    call, the third the truth. The quietest round is an honest one; the median round, like the median
    call the speedup comes from, is doctored. Made contended (its process waiting for a CPU) to be
    left out of the quiet rounds, a doctored round is judged all the same: its wait is taken out of
    its wall, and its hidden time is not a wait."""
    cfg = load_config()
    ref_rounds = [(10 * 0.35, 10 * 0.05, 10, True, 0.0)] * 12
    honest = (10 * 3.3, 10 * 3.0, 10, True, 0.0)
    doctored = (10 * 3.3, 10 * 0.3, 10, True, 0.0)
    rounds = [honest, doctored, doctored] * 4
    times = [3.0 if r is honest else 0.3 for r in rounds for _ in range(10)]
    detail: dict = {}
    assert clock_checks(_measure(rounds, ref_rounds, times, [0.05] * 120), cfg, cuda=False, detail=detail) == ["timer_mismatch"]
    assert detail["wall_over_cand_ms"] == pytest.approx(0.3) and detail["wall_over_cand_median_ms"] == pytest.approx(3.0)
    contended = (10 * 4.3, 10 * 0.3, 10, False, 10.0)  # and 1 ms per call waiting for a CPU
    rounds = [honest] * 5 + [contended] * 8
    times = [3.0 if r is honest else 0.3 for r in rounds for _ in range(10)]
    assert clock_checks(_measure(rounds, ref_rounds, times, [0.05] * 120), cfg, cuda=True) == ["timer_mismatch"]
    # honest throughout, some rounds contended: nothing to flag
    rounds = [honest] * 5 + [(10 * 4.3, 10 * 3.0, 10, False, 10.0)] * 8
    assert clock_checks(_measure(rounds, ref_rounds, [3.0] * 130, [0.05] * 120), cfg, cuda=True) == []


def test_the_references_waits_for_a_cpu_are_not_taken_out_of_its_overhead():
    """A reference slowed by contention inside its timed calls reports the wait as time, and its
    wait for a CPU counts it again: taken out of its wall, its overhead would read below the
    harness's own and an honest candidate's ordinary overhead as hidden time (seen: escaped_burner.py
    with the freezer patched out, rejected instead of passing at its 3x)."""
    cfg = load_config()
    ref_rounds = [(10 * (2.0 + 0.3), 10 * 2.0, 10, True, 10 * 1.0)] * 12  # 1 ms a call waited, inside the 2 ms
    cand_rounds = [(10 * (1.0 + 0.3), 10 * 1.0, 10, True, 0.0)] * 12
    assert clock_checks(_measure(cand_rounds, ref_rounds, [1.0] * 120, [2.0] * 120), cfg, cuda=False) == []
