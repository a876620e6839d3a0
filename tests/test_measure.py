"""harness/timing/measure.py: the parent's measurement of both sides with fake workers (throttled
rounds and timing/monitor.py's round_state, the launch hold, CUDA-graph capture restarts, further
pairs, the choice of kernel spans, the warm-up round's launch counts) and the pooling of several
process pairs."""
from __future__ import annotations

import math
import os

import pytest
from conftest import fake_measurement as _measurement

from harness.config import load_config


def test_round_state_drops_transient_slowdowns_but_not_the_power_cap():
    from harness.timing.monitor import round_state
    base = {"sm": 1980, "mem": 3201, "temp": 40, "power_w": 300.0, "reasons": 0, "power_ns": 0, "thermal_ns": 0}
    at = lambda **kw: {**base, **kw}  # noqa: E731
    ok = round_state(base, at(reasons=0x4, power_ns=2_000_000), 0.75, 1980)  # power-capped: what it costs
    assert not ok["slow"] and ok["power_cap_ns"] == 2_000_000
    assert round_state(base, at(thermal_ns=5), 0.75, 1980)["why"] == ["thermal_limited"]
    assert round_state(base, at(reasons=0x8 | 0x1), 0.75, 1980)["why"] == ["hw_slowdown"]
    assert round_state(base, at(sm=1200), 0.75, 1980)["why"] == ["low_sm_clock"]
    assert round_state(None, base, 0.75, 1980) == {"slow": False}  # no NVML: every round kept


def _steady_monitor(reasons: int = 0):
    """A GpuMonitor stand-in whose every reading is the same, with these clock-event reasons."""

    class Monitor:
        max_sm = 1980

        def __init__(self, gpu=None):
            pass

        def snapshot(self):
            return {"sm": 1980, "mem": 3201, "temp": 50, "power_w": 400.0, "reasons": reasons, "power_ns": 0,
                    "thermal_ns": 0}

    return Monitor


@pytest.fixture(autouse=True)
def _quiet_gpu(monkeypatch):
    """The stand-in references here answer timing only: the GPU they would probe is quiet
    (tests/test_gpulock.py covers the probes)."""
    import harness.timing.measure as measuring
    from harness.records.messages import QuietReply
    monkeypatch.setattr(measuring, "ask_quiet", lambda ref, batch, max_s, timeout:
                        QuietReply(ok=True, quiet_s=0.0004, quiet_probes=3, quiet=True))


class _FakeTimed:
    """A worker answering `time` commands with fixed samples and whatever clocks it claims."""

    def __init__(self, ms: float, claimed_mhz: int):
        self.ms, self.claimed, self.returncode = ms, claimed_mhz, None

    def request(self, cmd, timeout):
        from harness.records.messages import TimeReply
        n = len(cmd.seeds)
        return TimeReply(ok=True, times_ms=[self.ms] * n, host_ms=[self.ms + 0.05] * n,
                     fingerprints=[[] for _ in range(n)], clocks_mhz=[self.claimed] * n,
                     max_clock_mhz=1980), n * (self.ms + 0.1) / 1e3

    def pause(self, drain_gpu_s=None):
        pass

    def resume(self):
        pass


def test_throttled_rounds_are_judged_on_the_parents_readings(monkeypatch):
    """The candidate's own clock reports cannot get its samples dropped (selection bias); a round
    in which the parent's NVML readings show thermal limiting is re-taken."""
    import random

    import harness.timing.measure as measuring
    snaps = iter(range(10_000))

    class Monitor:
        max_sm = 1980

        def __init__(self, gpu=None):
            pass

        def snapshot(self):
            i = next(snaps)
            # snapshots come in threes per round (before candidate, after it, after the reference);
            # round 3's candidate interval (snapshots 9 -> 10) is thermally limited
            return {"sm": 1980, "mem": 3201, "temp": 50, "power_w": 400.0, "reasons": 0, "power_ns": 0,
                    "thermal_ns": 1000 if i >= 10 else 0}

    monkeypatch.setattr(measuring, "GpuMonitor", Monitor)
    cfg = load_config(None, {"timing.min_rounds": 4, "timing.min_calls": 20, "timing.round_calls": 10})
    m = measuring.measure(_FakeTimed(1.0, claimed_mhz=100), _FakeTimed(2.0, claimed_mhz=1980), cfg,
                       random.Random(0), cuda=True, tol=cfg.correctness.tol["fp32"], timeout=5, ref_timeout=5)
    assert m.retaken == ["candidate: thermal_limited"], m.retaken
    assert m.throttled == 10
    assert len(m.cand.times) == len(m.ref.times) - 10  # the claimed 100 MHz dropped nothing
    assert "throttled" not in m.flags


def test_a_slowdown_that_persists_is_measured_under_and_flagged(monkeypatch):
    """A GPU stuck in a slowdown (a hardware-slowdown reason on every reading) must not make every
    evaluation fail for want of samples: after a bounded number of re-takes the rounds are kept and
    the record is flagged throttled."""
    import random

    import harness.timing.measure as measuring

    monkeypatch.setattr(measuring, "GpuMonitor", _steady_monitor(reasons=0x8))
    cfg = load_config(None, {"timing.min_rounds": 4, "timing.min_calls": 20, "timing.round_calls": 10})
    m = measuring.measure(_FakeTimed(1.0, 1980), _FakeTimed(2.0, 1980), cfg, random.Random(0), cuda=True,
                       tol=cfg.correctness.tol["fp32"], timeout=5, ref_timeout=5)
    assert "throttled" in m.flags and len(m.cand.times) >= 20 and len(m.ref.times) >= 20
    assert len(m.retaken) == 2 * 4 + 10



def test_a_reference_without_a_working_hold_times_both_sides_without_one(monkeypatch):
    """A hold on the candidate's side only would keep its launching out of its interval and leave
    the reference's in (a false unsynced_stream, seen when the reference's hold check ran beside
    other contexts): when the reference reports no hold, both sides are timed without, from a new
    warm-up round, and the record is flagged."""
    import random

    import harness.timing.measure as measuring

    class Side(_FakeTimed):
        def __init__(self, ms, has_hold):
            super().__init__(ms, 1980)
            self.has_hold, self.holds = has_hold, []

        def request(self, cmd, timeout):
            self.holds.append(cmd.hold_us)
            reply, wall = super().request(cmd, timeout)
            if cmd.hold_us > 0 and not self.has_hold:
                reply.flags = ["launch_hold_unavailable"]
            return reply, wall

    monkeypatch.setattr(measuring, "GpuMonitor", _steady_monitor())
    cfg = load_config(None, {"timing.min_rounds": 4, "timing.min_calls": 20, "timing.round_calls": 10,
                             "timing.compile_baseline": "off"})
    cand, ref = Side(1.0, True), Side(2.0, False)
    m = measuring.measure(cand, ref, cfg, random.Random(0), cuda=True, tol=cfg.correctness.tol["fp32"],
                       timeout=5, ref_timeout=5)
    assert "launch_hold_unavailable" in m.flags and m.hold_us == 0.0
    assert cand.holds[0] > 0 and all(h == 0 for h in cand.holds[1:]) and cand.holds == ref.holds
    assert len(m.cand.times) == len(m.ref.times) == 10 * (len(cand.holds) - 2)  # two warm-up rounds out
    # a candidate's own word about its hold changes nothing for the reference
    cand, ref = Side(1.0, False), Side(2.0, True)
    m = measuring.measure(cand, ref, cfg, random.Random(0), cuda=True, tol=cfg.correctness.tol["fp32"],
                       timeout=5, ref_timeout=5)
    assert "launch_hold_unavailable" not in m.flags and m.hold_us > 0 and all(h > 0 for h in ref.holds)


class _GraphFake(_FakeTimed):
    """A worker whose forward cannot be captured: its first graph-mode round answers as the child
    does, flagged and without samples (`fail`: with an error instead, as a half-captured process can)."""

    def __init__(self, ms: float, fail: bool = False):
        super().__init__(ms, 1980)
        self.fail, self.modes = fail, []

    def request(self, cmd, timeout):
        from harness.records.messages import TimeReply
        self.modes.append(cmd.cuda_graph)
        if cmd.cuda_graph:
            if self.fail:
                return TimeReply(ok=False, error="Offset increment outside graph capture"), 0.01
            return TimeReply(ok=True, flags=["cuda_graph_unavailable"], max_clock_mhz=1980), 0.01
        return super().request(cmd, timeout)


class _NoNvml:
    max_sm = None

    def __init__(self, gpu=None):
        pass

    def snapshot(self):
        return None


@pytest.mark.parametrize("fail", [False, True])
def test_a_candidate_that_cannot_be_captured_is_restarted_not_failed(fail, monkeypatch):
    """Graph mode: a candidate whose capture fails (flagged, or erroring in the process the failed
    capture left behind) gets a fresh, eager re-measurement from evaluate(), never a verdict here."""
    import random

    import harness.timing.measure as measuring
    monkeypatch.setattr(measuring, "GpuMonitor", _NoNvml)
    cfg = load_config(None, {"timing.cuda_graph": True, "timing.min_rounds": 2, "timing.min_calls": 4})
    cand, ref = _GraphFake(1.0, fail=fail), _GraphFake(2.0)
    m = measuring.measure(cand, ref, cfg, random.Random(0), cuda=True, tol=cfg.correctness.tol["fp32"],
                       timeout=5, ref_timeout=5)
    assert m.restart_candidate and m.error is None and not m.flags and not m.cand.times
    assert ref.modes == []  # the reference was not asked: the round is void


def test_a_reference_that_cannot_be_captured_turns_graphs_off_for_both_sides(monkeypatch):
    import random

    import harness.timing.measure as measuring
    monkeypatch.setattr(measuring, "GpuMonitor", _NoNvml)
    cfg = load_config(None, {"timing.cuda_graph": True, "timing.min_rounds": 2, "timing.min_calls": 4})
    cand, ref = _FakeTimed(1.0, 1980), _GraphFake(2.0)
    m = measuring.measure(cand, ref, cfg, random.Random(0), cuda=True, tol=cfg.correctness.tol["fp32"],
                       timeout=5, ref_timeout=5)
    assert not m.cuda_graph and m.flags == ["cuda_graph_unavailable"] and not m.restart_candidate
    assert ref.modes[0] is True and not any(ref.modes[1:])  # graphs for the first round only
    assert len(m.cand.times) >= 4 and len(m.ref.times) >= 4

class _Commands(_FakeTimed):
    """A worker answering `time` commands with fixed samples, keeping every command it was sent;
    kernel spans it cannot record."""

    def __init__(self, ms: float):
        super().__init__(ms, 1980)
        self.cmds = []

    def request(self, cmd, timeout):
        self.cmds.append(cmd)
        reply, wall = super().request(cmd, timeout)
        if cmd.spans:
            reply = reply.model_copy(update={"flags": ["kernel_span_unavailable"]})
        return reply, wall


@pytest.mark.parametrize("graph", [False, True])
def test_a_further_pair_starts_under_the_first_pairs_hold_without_a_warm_up_round(graph, monkeypatch):
    """A further process pair (timing.processes_for) had its warm-up request when it started
    (timing.warm_up): it is timed from its first round under the first pair's hold, and keeps
    processes_rounds rounds. With CUDA graphs it still has a warm-up round, whose capture may fail."""
    import random

    import harness.timing.measure as measuring
    monkeypatch.setattr(measuring, "GpuMonitor", _NoNvml)
    cfg = load_config(None, {"timing.min_calls": 4, "timing.compile_baseline": "off", "timing.cuda_graph": graph})
    cand, ref = _Commands(1.0), _Commands(2.0)
    m = measuring.measure(cand, ref, cfg, random.Random(0), cuda=True, tol=cfg.correctness.tol["fp32"], timeout=5,
                       ref_timeout=5, compiled=False, spans=False, min_rounds=3, hold_us=321.0)
    for w in (cand, ref):
        assert [c.hold_us for c in w.cmds[graph:]] == [321.0] * 3
        assert [c.warmup for c in w.cmds] == [cfg.timing.warmup] * graph + [0] * 3
    assert m.rounds == 3 + graph and len(m.cand.rounds) == len(m.ref.rounds) == 3
    assert m.hold_us == 321.0 and m.max_clock_mhz == 1980


def test_min_rounds_counts_kept_rounds_not_those_that_chose_kernel_spans(monkeypatch):
    """A short problem's first pair spends a warm-up round, a round that chooses kernel spans and
    another warm-up round under CUPTI before it keeps any: timing.min_rounds counts the kept ones
    (it counted all of them, so such a problem kept two fewer)."""
    import random

    import harness.timing.measure as measuring
    monkeypatch.setattr(measuring, "GpuMonitor", _NoNvml)
    cfg = load_config(None, {"timing.min_calls": 4, "timing.compile_baseline": "off", "timing.min_rounds": 4,
                             "timing.kernel_span": "auto"})
    cand, ref = _Commands(0.01), _Commands(0.01)
    m = measuring.measure(cand, ref, cfg, random.Random(0), cuda=True, tol=cfg.correctness.tol["fp32"], timeout=5,
                       ref_timeout=5)
    assert [c.spans for c in ref.cmds][:3] == [True, False, True]  # warm-up (launch counts), choice, warm-up
    assert len(m.cand.rounds) == len(m.ref.rounds) == 4 and m.rounds == 7
    assert "kernel_span_unavailable" in m.flags


class _Spans(_FakeTimed):
    """A worker that records kernel spans when asked: its GPU work takes `span_ms` a call, and its
    events `ms` (launching leaked into each interval); `cupti` False: CUPTI cannot be had, and says why."""

    def __init__(self, ms: float, span_ms: float, cupti: bool = True):
        super().__init__(ms, 1980)
        self.span, self.cupti, self.cmds = span_ms, cupti, []

    def request(self, cmd, timeout):
        self.cmds.append(cmd)
        reply, wall = super().request(cmd, timeout)
        if cmd.spans and self.cupti:
            reply = reply.model_copy(update={"span_ms": [self.span] * len(cmd.seeds),
                                             "span_launches": [1] * len(cmd.seeds)})
        elif cmd.spans:
            reply = reply.model_copy(update={"flags": ["kernel_span_unavailable"], "span_why": "the canary fill was not listed"})
        return reply, wall


@pytest.mark.parametrize("span_ms, chosen", [(0.024, True), (0.06, False)])
def test_kernel_spans_are_chosen_by_the_references_gpu_work_not_its_events(span_ms, chosen, monkeypatch):
    """timing.kernel_span = "auto" compares the reference's GPU work in the warm-up round (CUPTI's
    spans, recorded there for launch counts) with kernel_span_below_ms, not its events: a round whose
    launching outlasted the hold put a 24 us kernel's events over 50 us, and that run alone was
    timed by events (H100)."""
    import random

    import harness.timing.measure as measuring
    monkeypatch.setattr(measuring, "GpuMonitor", _NoNvml)
    cfg = load_config(None, {"timing.min_calls": 4, "timing.compile_baseline": "off", "timing.min_rounds": 2,
                             "timing.kernel_span": "auto"})
    cand, ref = _Spans(0.08, span_ms), _Spans(0.08, span_ms)
    m = measuring.measure(cand, ref, cfg, random.Random(0), cuda=True, tol=cfg.correctness.tol["fp32"], timeout=5,
                       ref_timeout=5)
    assert m.span_basis_ms == span_ms and m.spans is chosen
    assert measuring.span_choice(m, cfg.timing)[0] is chosen
    assert [c.spans for c in ref.cmds][:3] == ([True, False, True] if chosen else [True, False, False])


def test_a_process_without_cupti_says_why_in_the_record(monkeypatch):
    """Spans asked for and CUPTI not had in one process: both sides fall back to events, and the
    record says which process and why, so a run timed by events can be told from one by spans."""
    import random

    import harness.timing.measure as measuring
    monkeypatch.setattr(measuring, "GpuMonitor", _NoNvml)
    cfg = load_config(None, {"timing.min_calls": 4, "timing.compile_baseline": "off", "timing.min_rounds": 2})
    cand, ref = _Spans(0.03, 0.024, cupti=False), _Spans(0.03, 0.024)
    m = measuring.measure(cand, ref, cfg, random.Random(0), cuda=True, tol=cfg.correctness.tol["fp32"], timeout=5,
                       ref_timeout=5, spans=True, hold_us=300.0)
    spans, note = measuring.span_choice(m, cfg.timing)
    assert not spans and "kernel_span_unavailable" in m.flags
    assert note["kernel_span_fallback"] == ("CUPTI's records could not be had "
                                            "(candidate: the canary fill was not listed)")


def test_the_launch_hold_reaches_both_sides_alike(monkeypatch):
    """timing.launch_hold_us is part of every timing command, the same for reference and candidate
    (a hold on one side only would hide that side's launch latency alone). "auto" sizes it from the
    reference's launch time in the warm-up round, never from what the candidate reports: a
    candidate claiming slow launches must not get a longer hold to hide work in."""
    import random

    import harness.timing.measure as measuring
    monkeypatch.setattr(measuring, "GpuMonitor", _NoNvml)

    def run(hold, cand_launch_ms):
        seen = {"cand": [], "ref": []}

        class Rec(_FakeTimed):
            def __init__(self, ms, side, launch_ms):
                super().__init__(ms, 1980)
                self.side, self.launch_ms = side, launch_ms

            def request(self, cmd, timeout):
                seen[self.side].append(cmd.hold_us)
                reply, wall = super().request(cmd, timeout)
                n = len(cmd.seeds)
                return reply.model_copy(update={"launch_ms": [self.launch_ms] * n,
                                                "enqueue_ms": [self.launch_ms / 2] * n}), wall

        cfg = load_config(None, {"timing.launch_hold_us": hold, "timing.min_rounds": 2, "timing.min_calls": 4,
                                 "timing.compile_baseline": "off"})
        m = measuring.measure(Rec(1.0, "cand", cand_launch_ms), Rec(2.0, "ref", 0.1), cfg, random.Random(0), cuda=True,
                           tol=cfg.correctness.tol["fp32"], timeout=5, ref_timeout=5)
        return seen, m

    seen, m = run(200, 0.1)
    assert set(seen["cand"]) == set(seen["ref"]) == {200.0} and m.hold_us == 200.0
    # auto: the shortest hold while the warm-up round measures the reference (0.1 ms to launch a
    # call), then 2 x 100 + 50; the candidate's claimed 4 ms is recorded and ignored
    seen, m = run("auto", 4.0)
    assert seen["cand"] == seen["ref"] and seen["ref"][0] == measuring.WARM_HOLD_US and set(seen["ref"][1:]) == {250.0}
    assert m.hold_us == 250.0 and m.cand.launch[0] == 4.0 and m.cand.enqueue[0] == 2.0
    assert measuring.auto_hold_us([40.0], 5000.0) == 5000.0  # capped


def test_a_missing_launch_hold_is_flagged_on_the_references_word_only(monkeypatch):
    """launch_hold_unavailable (no hold kernel on this machine) comes from the reference's process,
    which runs no solution code; a candidate claiming it cannot put the flag on its own record."""
    import random

    import harness.timing.measure as measuring
    monkeypatch.setattr(measuring, "GpuMonitor", _NoNvml)

    class Claims(_FakeTimed):
        def __init__(self, ms, flags):
            super().__init__(ms, 1980)
            self.flags = flags

        def request(self, cmd, timeout):
            reply, wall = super().request(cmd, timeout)
            return reply.model_copy(update={"flags": self.flags}), wall

    cfg = load_config(None, {"timing.min_rounds": 2, "timing.min_calls": 4, "timing.compile_baseline": "off"})
    run = lambda c, r: measuring.measure(Claims(1.0, c), Claims(2.0, r), cfg, random.Random(0), cuda=True,  # noqa: E731
                                      tol=cfg.correctness.tol["fp32"], timeout=5, ref_timeout=5)
    assert "launch_hold_unavailable" in run([], ["launch_hold_unavailable"]).flags
    assert "launch_hold_unavailable" not in run(["launch_hold_unavailable"], []).flags


class _LaunchCounting(_FakeTimed):
    """A worker whose forward launches `n` kernels: CUPTI's count comes with each call's span, and
    only when the command asks for spans."""

    def __init__(self, ms, n):
        super().__init__(ms, 1980)
        self.n, self.asked = n, []

    def request(self, cmd, timeout):
        reply, wall = super().request(cmd, timeout)
        self.asked.append(cmd.spans)
        if cmd.spans:
            k = len(cmd.seeds)
            reply = reply.model_copy(update={"span_ms": [self.ms * 0.9] * k, "span_launches": [self.n] * k})
        return reply, wall


@pytest.mark.parametrize("per_launch", [0.09, 0.0])
def test_the_warm_up_round_counts_each_sides_launches_for_a_problem_timed_by_events(monkeypatch, per_launch):
    """A problem of 1 ms is timed by events, yet each side's launches per call are counted in the
    warm-up round (its samples are not kept), from CUPTI's records, for the process offset; the
    timed rounds ask for no records. With the per-launch offset off, nothing is counted."""
    import random

    import harness.timing.measure as measuring
    monkeypatch.setattr(measuring, "GpuMonitor", _steady_monitor(reasons=0))
    cfg = load_config(None, {"timing.min_rounds": 2, "timing.min_calls": 20, "timing.round_calls": 10,
                             "timing.compile_baseline": "off", "timing.process_bias_per_launch_us": per_launch})
    cand, ref = _LaunchCounting(1.0, 1), _LaunchCounting(2.0, 16)
    m = measuring.measure(cand, ref, cfg, random.Random(0), cuda=True, tol=cfg.correctness.tol["fp32"],
                       timeout=5, ref_timeout=5)
    assert not m.spans and len(m.cand.times) >= 20
    assert cand.asked[0] is (per_launch > 0) and not any(cand.asked[1:]) and not any(ref.asked[1:])
    assert (m.cand.launch_count(), m.ref.launch_count()) == ((1, 16) if per_launch else (None, None))


# --- kernel spans (timing.measure.span_choice) -------------------------------------------------

def _span_measurement(cand_events, cand_span, ref_events, ref_span):
    from harness.timing.measure import Measurement, Side
    m = Measurement(spans=True)
    m.cand, m.ref = Side(times=list(cand_events), span=list(cand_span)), Side(times=list(ref_events), span=list(ref_span))
    return m


def test_span_choice_takes_spans_when_the_events_hold_no_more_than_the_reference_s():
    from harness.config import Timing
    from harness.timing.measure import span_choice
    m = _span_measurement([0.0040, 0.0041] * 5, [0.0011] * 10, [0.0045, 0.0044] * 5, [0.0015] * 10)
    use, note = span_choice(m, Timing())
    assert use and "kernel_span_fallback" not in note
    assert note["events_minus_span_us"]["candidate"] == pytest.approx(2.95, abs=0.01)


def test_span_choice_falls_back_to_events_on_work_no_record_shows():
    """A candidate whose interval holds GPU time that CUPTI records do not (a host function in the
    stream, say) is timed by its events, as is one with a call that recorded nothing."""
    from harness.config import Timing
    from harness.timing.measure import span_choice
    hidden = _span_measurement([0.0090] * 10, [0.0011] * 10, [0.0045] * 10, [0.0015] * 10)
    use, note = span_choice(hidden, Timing())
    assert not use and "work no record shows" in note["kernel_span_fallback"]
    empty = _span_measurement([0.0040] * 10, [0.0011] * 9 + [-1.0], [0.0045] * 10, [0.0015] * 10)
    use, note = span_choice(empty, Timing())
    assert not use and note["kernel_span_fallback"].startswith("candidate")
    unasked = _span_measurement([0.004] * 4, [0.001] * 4, [0.004] * 4, [0.001] * 4)
    unasked.spans = False  # events were the method from the start: nothing to choose
    assert span_choice(unasked, Timing()) == (False, {})
    unasked.flags.append("kernel_span_unavailable")  # asked for, and a process could not open CUPTI
    assert span_choice(unasked, Timing()) == (False, {"kernel_span_fallback": "CUPTI's records could not be had"})


# --- several process pairs pooled (timing.measure.pooled) ---------------------------------------

def test_pooled_keeps_every_call_of_every_pair_and_the_first_pairs_baseline():
    from harness.timing.measure import pooled
    a = _measurement([1.0, 1.1], [2.0, 2.1], compiled=[1.5, 1.6], hold_us=300.0, flags=["throttled"])
    b = _measurement([1.2, 1.3, 1.4], [2.2, 2.3], hold_us=250.0, mismatched_calls=1, flags=["throttled", "x"])
    p = pooled([a, b])
    assert p.cand.times == [1.0, 1.1, 1.2, 1.3, 1.4] and p.ref.times == [2.0, 2.1, 2.2, 2.3]
    assert p.cand.host == a.cand.host + b.cand.host and p.cand.span == a.cand.span + b.cand.span
    assert len(p.cand.rounds) == 2 and p.rounds == 2 and p.mismatched_calls == 1
    assert p.compiled == [1.5, 1.6] and p.hold_us == 300.0 and p.spans
    assert p.flags == ["throttled", "x"] and math.isclose(p.seconds, 1.0)
    assert pooled([a]) is a


def test_each_pairs_calls_stay_with_their_round_for_the_clock_checks():
    """The checks pair each round's parent wall with that round's calls; pooling appends both in step."""
    from harness.timing.clocks import _calls_by_round
    from harness.timing.measure import pooled
    p = pooled([_measurement([1.0, 1.1], [2.0]), _measurement([5.0, 5.5, 6.0], [2.0])])
    rounds = _calls_by_round(p.cand)
    assert [len(calls) for _, calls in rounds] == [2, 3]
    assert [t for _, t in rounds[1][1]] == [5.0, 5.5, 6.0]


class _Serving(_Commands):
    """A reference that also makes rounds' inputs files (InputsCommand), `calls` of the seeds at most,
    or refuses them as a file cannot carry them; its events and the candidate's in one log."""

    def __init__(self, ms: float, log: list, calls: int = 0):
        super().__init__(ms)
        self.log, self.calls = log, calls

    def request(self, cmd, timeout):
        from harness.records.messages import InputsReply
        if cmd.op == "inputs":
            self.log.append("inputs")
            if not self.calls:
                return InputsReply(ok=True, unservable="a tensor inside a list"), 0.001
            open(cmd.path, "wb").close()
            return InputsReply(ok=True, calls=min(self.calls, len(cmd.seeds)), bytes=1), 0.001
        self.log.append(f"ref {len(cmd.seeds)}")
        return super().request(cmd, timeout)


class _Held(_Commands):
    def __init__(self, ms: float, log: list):
        super().__init__(ms)
        self.log = log

    def request(self, cmd, timeout):
        self.log.append(f"cand {len(cmd.seeds)} {'file' if cmd.inputs_path else 'own'}")
        if cmd.inputs_path:  # the round's file is there while the candidate is timed
            assert os.path.exists(cmd.inputs_path)
        return super().request(cmd, timeout)

    def pause(self, drain_gpu_s=None):
        self.log.append("pause")

    def resume(self):
        self.log.append("resume")


def test_on_the_cpu_path_the_reference_makes_each_rounds_inputs_while_the_candidate_is_held():
    """timing/inputs.py: before each round the reference's process makes its inputs into a file (here
    three calls' worth of the ten seeds: the round is cut to them); the candidate is held from the
    end of its round, through the reference's round and the next inputs' making, to its next round;
    every file is gone after. Inputs a file cannot carry: each side makes its own, and the record
    says why."""
    import random

    import harness.timing.measure as measuring
    cfg = load_config(None, {"timing.compile_baseline": "off", "timing.cpu_clocked": "off"})  # (clocked: test_clocked.py)
    log: list = []
    cand, ref = _Held(1.0, log), _Serving(1.0, log, calls=3)
    m = measuring.measure(cand, ref, cfg, random.Random(0), cuda=False, tol=cfg.correctness.tol["fp32"],
                          timeout=5, ref_timeout=5)
    assert m.inputs == "reference" and m.inputs_why is None
    paths = [c.inputs_path for c in cand.cmds]
    assert all(paths) and len(set(paths)) == len(paths) and not any(os.path.exists(p) for p in paths)
    assert [len(c.seeds) for c in cand.cmds] == [3] * len(cand.cmds)
    assert [c.inputs_path for c in ref.cmds if c.op == "time"] == paths  # both sides the same file
    # between two of the candidate's rounds: held (P), the reference timed (F), the next inputs made
    # (I), and only then let go (R), as it is timed again
    seq = "".join("|" if e.startswith("cand") else {"pause": "P", "resume": "R", "inputs": "I"}.get(e, "F")
                  for e in log)
    between = seq.split("|")
    assert between[0] == "PIR" and between[-1] == "PFR", seq
    assert set(between[1:-1]) == {"PFPIR"}, seq
    log.clear()
    cand, ref = _Held(1.0, log), _Serving(1.0, log, calls=0)
    m = measuring.measure(cand, ref, cfg, random.Random(0), cuda=False, tol=cfg.correctness.tol["fp32"],
                          timeout=5, ref_timeout=5)
    assert m.inputs == "own" and m.inputs_why == "a tensor inside a list"
    assert not any(c.inputs_path for c in cand.cmds) and len(cand.cmds[0].seeds) == cfg.timing.round_calls


def test_every_cpu_measurement_keeps_the_rounds_the_wall_test_needs():
    """A further process pair is asked for timing.processes_rounds (3) rounds; the wall test needs
    five (stats.WALL_ROUNDS), and a pair with fewer was never wall-tested: a cheat in a second process
    only passed (tests/adversarial/cpu/timer_patch_second_process.py, with rounds of many calls). On
    the CPU path every measurement keeps five; on a GPU, as asked."""
    import random

    import harness.timing.measure as measuring
    from harness.timing.stats import WALL_ROUNDS
    cfg = load_config(None, {"timing.min_calls": 4, "timing.compile_baseline": "off", "timing.cpu_served_inputs": False})
    cand, ref = _Commands(1.0), _Commands(1.0)
    m = measuring.measure(cand, ref, cfg, random.Random(0), cuda=False, tol=cfg.correctness.tol["fp32"],
                          timeout=5, ref_timeout=5, compiled=False, spans=False, min_rounds=3)
    assert len(m.cand.rounds) == len(m.ref.rounds) == WALL_ROUNDS


class _Waiting(_Commands):
    """A side of the CPU path that the host's other processes hold off its CPU in the rounds listed
    (counting its `time` requests from 0): its times in them doubled, and its timing thread's wait
    for a CPU, as the parent reads it from schedstat, half the round's wall."""

    def __init__(self, ms: float, waited_in: set):
        super().__init__(ms)
        self.waited_in, self.timed, self.ran_ns, self.waited_ns = waited_in, 0, 0, 0

    def request(self, cmd, timeout):
        if cmd.op != "time":
            return super().request(cmd, timeout)
        slow = self.timed in self.waited_in
        self.timed += 1
        reply, wall = super().request(cmd, timeout)
        if slow:
            reply = reply.model_copy(update={"times_ms": [2 * x for x in reply.times_ms],
                                             "host_ms": [2 * x for x in reply.host_ms]})
            wall *= 2
            self.waited_ns += int(wall / 2 * 1e9)
        self.ran_ns += int(wall / (2 if slow else 1) * 1e9)
        return reply, wall


@pytest.mark.parametrize("side", ["reference", "candidate"])
def test_on_the_cpu_path_a_round_a_side_waited_in_for_a_cpu_is_taken_again(side, monkeypatch):
    """A CPU round's times are host walls, and a wait for the CPU is in them: a reference held off its
    CPU in two rounds of seven had its samples doubled there (a busy loop on its CPU gave an honest
    speed 1.75x on a 2-core host). measure._judge_waits takes such a round again, on either side, and
    the record lists why; no doubled sample is kept, and the side keeps the rounds the clock checks
    need. Without it the doubled rounds are kept."""
    import random
    import statistics

    import harness.timing.measure as measuring
    monkeypatch.setattr(measuring, "runqueue_wait_ns", lambda w: getattr(w, "waited_ns", None))
    monkeypatch.setattr(measuring, "main_thread_ns", lambda w: (w.ran_ns, w.waited_ns) if hasattr(w, "ran_ns") else None)
    cfg = load_config(None, {"timing.min_calls": 10, "timing.compile_baseline": "off", "timing.cpu_served_inputs": False,
                             "timing.min_rounds": 6, "timing.round_calls": 5})
    waiting, steady = _Waiting(1.0, {2, 3, 5}), _Commands(1.0)
    cand, ref = (steady, waiting) if side == "reference" else (waiting, steady)
    m = measuring.measure(cand, ref, cfg, random.Random(0), cuda=False, tol=cfg.correctness.tol["fp32"],
                          timeout=5, ref_timeout=5, compiled=False, spans=False)
    kept = m.ref.times if side == "reference" else m.cand.times
    assert max(kept) == 1.0, kept
    assert m.retaken == [f"{side}: waited for a CPU 50% of the round"] * 3, m.retaken
    # and as many rounds kept on that side as on the other, for the clock checks: counting a round
    # re-taken on one side left a cheat's measurement with too few for the wall test, untested
    assert len(m.cand.rounds) >= 6 and len(m.ref.rounds) >= 6, (len(m.cand.rounds), len(m.ref.rounds))
    assert statistics.median(m.cand.times) == statistics.median(m.ref.times) == 1.0


def test_the_gpu_is_probed_around_every_reference_round_unless_it_was_busy_from_the_start(monkeypatch):
    """Each reference round is preceded and followed by the reference's quiet probes (work a frozen
    candidate left on the GPU: tests/test_gpulock.py); where the GPU was busy with work none of the
    harness's before the timing began (timed anyway, flagged device_not_quiet), a busy GPU is not the
    candidate's doing and is not probed for."""
    import random

    import harness.timing.measure as measuring
    from harness.records.messages import QuietReply
    asked = []
    monkeypatch.setattr(measuring, "ask_quiet", lambda ref, batch, max_s, timeout:
                        asked.append(max_s) or QuietReply(ok=True, quiet_s=0.0004, quiet_probes=3, quiet=True))
    monkeypatch.setattr(measuring, "GpuMonitor", _steady_monitor())
    cfg = load_config(None, {"timing.min_rounds": 3, "timing.min_calls": 10, "timing.round_calls": 5})
    run = lambda quiet: measuring.measure(_FakeTimed(1.0, 1980), _FakeTimed(1.0, 1980), cfg, random.Random(0),  # noqa: E731
                                          cuda=True, tol=cfg.correctness.tol["fp32"], timeout=5, ref_timeout=5,
                                          gpu_quiet=quiet)
    m = run(True)
    assert len(asked) == 2 * m.rounds and m.gpu_left_checks == {"probed": m.rounds}, (len(asked), m.rounds)
    asked.clear()
    m = run(False)
    assert asked == [] and m.gpu_left_checks == {}
