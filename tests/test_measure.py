"""Unit tests of the parts that judge: tolerances, fingerprints, clock checks, static rules, config."""
from __future__ import annotations

import math
import random
import shutil

import pytest
import torch
from conftest import ROOT

from harness.config import Tolerance, load_config
from harness.correctness import compare_tensors
from harness.static_checks import check_source
from harness.timing.clocks import clock_checks
from harness.timing.fingerprint import fingerprints_match
from harness.timing.measure import Measurement, Side
from harness.timing.stats import summarize, widen_for_process_bias

FP32 = Tolerance(atol=1e-4, rtol=1e-4, rel_l2=1e-4)


def test_zeros_fail_tiny_softmax():
    # seeded: an unseeded draw put a value above 1e-4 in about 2% of runs (23 of 1000)
    ref = torch.softmax(0.1 * torch.randn(4, 16384, generator=torch.Generator().manual_seed(0)), dim=1)
    assert float(ref.max()) < 1e-4  # every value is inside atol of zero
    ok, _, reason = compare_tensors(torch.zeros_like(ref), ref, FP32)
    assert not ok and "relative L2" in reason


def test_fp16_arithmetic_fails_fp32_problem():
    x, w = torch.randn(64, 512), torch.randn(512, 256)
    ref = x @ w
    ok, stats, _ = compare_tensors((x.half() @ w.half()).float(), ref, FP32)
    assert not ok and stats["rel_l2_diff"] > 1e-4


def test_fp32_reordering_passes():
    x, w = torch.randn(64, 512, dtype=torch.float64), torch.randn(512, 256, dtype=torch.float64)
    ok, _, _ = compare_tensors((x.float() @ w.float()), (x @ w).float(), FP32)
    assert ok


def test_nan_must_match_positions():
    ref = torch.tensor([1.0, float("nan"), 3.0])
    assert compare_tensors(ref.clone(), ref, FP32)[0]
    assert not compare_tensors(torch.tensor([1.0, 2.0, 3.0]), ref, FP32)[0]
    assert not compare_tensors(torch.tensor([float("nan")] * 3), ref, FP32)[0]


def test_shape_and_dtype_are_part_of_the_answer():
    ref = torch.randn(8)
    assert not compare_tensors(ref.double(), ref, FP32)[0]
    assert not compare_tensors(ref[None], ref, FP32)[0]


def _fp(t, seed):
    from harness.timing.fingerprint import _fingerprint
    return _fingerprint(torch, t, seed, 16)


def test_fingerprint_matches_honest_and_catches_stale():
    ref = torch.softmax(torch.randn(8, 4096), 1)
    honest = ref + 1e-7 * torch.randn_like(ref)
    stale = torch.softmax(torch.randn(8, 4096), 1)  # another call's answer: same sums, same scale
    assert fingerprints_match(_fp(honest, 7), _fp(ref, 7), FP32)
    assert not fingerprints_match(_fp(stale, 7), _fp(ref, 7), FP32)
    assert not fingerprints_match(_fp(torch.zeros_like(ref), 7), _fp(ref, 7), FP32)


def test_fingerprint_positions_follow_the_seed():
    """The sampled positions come from the call's seed (drawn on the output's device): the same seed
    reads the same elements, another seed others, so an answer cached for one call does not match
    the next call's fingerprint even where sums happen to agree."""
    out = torch.arange(4096, dtype=torch.float32)
    a, b, c = _fp(out, 11), _fp(out, 11), _fp(out, 12)
    assert a == b and a[:4] == c[:4]  # numel, sum, abs-sum, L2 norm: seed-free
    assert a[6:] != c[6:] and len(a[6:]) == 16 and all(0 <= v < 4096 for v in a[6:])
    assert _fp(torch.empty(0), 3) == [0.0] * 6


def test_a_timing_requests_outputs_are_fingerprinted_in_batches_as_each_call_alone():
    """OutputPrints copies each call's outputs into a row of a buffer and fingerprints a batch of
    rows at once: the same fingerprint as one call alone, whatever the batch (the candidate's and the
    reference's processes may batch differently); a batch ends where the buffer is full or the
    outputs change layout; an output too large for two rows is fingerprinted in place."""
    import random

    from harness.timing.fingerprint import OutputPrints, _fingerprint
    rng = random.Random(3)
    outs = [(torch.randn(1000), torch.randint(0, 5, (7,)), torch.empty(0)) for _ in range(5)]
    outs += [torch.randn(12), torch.randn(12).half(), torch.randn(12).half()]
    seeds = [rng.getrandbits(62) for _ in outs]
    single = [_fingerprint(torch, o, s, 16) for o, s in zip(outs, seeds)]
    row = 1000 * 4 + 7 * 8  # the integers reduce through float64
    for free, rows in ((None, len(outs)), (8 * 2 * row, 2), (8 * row, None)):
        prints = OutputPrints(torch, 16, len(outs), free)
        seen = []
        for o, s in zip(outs[:5], seeds[:5]):
            prints.add(o, s)
            seen.append(prints.bufs[0].shape[0] if prints.bufs else None)
        assert seen == [rows] * 5
        for o, s in zip(outs[5:], seeds[5:]):
            prints.add(o, s)
        prints.flush()
        assert prints.fps == single
    assert single[0][6 + 16:12 + 16] == [7.0, *single[0][7 + 16:11 + 16], 7.0]  # numel, sums, k of the integers
    assert single[0][-6:] == [0.0] * 6  # the empty tensor


def test_inputs_are_drawn_from_their_seed_and_leave_the_callers_generator_alone():
    from harness.process.runner import Runner
    setup = {"role": "reference", "problem_path": str(ROOT / "tests" / "problems" / "relu_add.py"),
             "solution_path": None, "device": "cpu", "size": "small", "dtype": None, "cpu_threads": 1}
    runner = Runner(setup)
    torch.manual_seed(99)
    state = torch.get_rng_state()
    x1, x2, y = runner.make_inputs(5), runner.make_inputs(5), runner.make_inputs(6)
    assert torch.equal(torch.get_rng_state(), state)
    assert all(torch.equal(p, q) for p, q in zip(x1, x2))
    assert not torch.equal(x1[0], y[0])
    torch.manual_seed(5)  # the values torch.manual_seed's own stream gives: a reference's trial inputs
    with torch.device("cpu"):  # are the same whichever way the generators were seeded
        assert torch.equal(runner.problem.get_inputs()[0], x1[0])


def _measure(cand_rounds, ref_rounds, cand_t, ref_t, cand_host=None, ref_host=None):
    quiet = lambda rs: [r if len(r) == 4 else (*r, True) for r in rs]  # noqa: E731
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
    stretched = [(10 * 2.3, 10 * 1.0, 10, False)] * 20  # 1 ms per call of waiting for a CPU
    host = [1.01] * 50 + [2.0] * 200
    assert clock_checks(_measure(quiet + stretched, ref_rounds, [1.0] * 250, [1.0] * 100, cand_host=host), cfg) == []
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


def test_summarize():
    s = summarize([1.0, 2.0, 3.0, 4.0])
    assert (s.median, s.min, s.max, s.count) == (2.5, 1.0, 4.0, 4)
    assert 0 < s.rel_sem < 1


def test_the_process_offset_widens_a_small_kernels_interval_and_not_a_large_ones():
    ci = (0.99, 1.01)
    # 4 us on both sides: each median carries ±0.12 us of its process: about ±8% on the ratio
    (lo, hi), rel = widen_for_process_bias(ci, 1.0, 0.004, 0.004, 0.12, 0.12)
    assert rel == pytest.approx(math.hypot(0.03, 0.03))
    assert lo == pytest.approx(math.exp(-math.hypot(math.log(1 / 0.99), 1.96 * rel)))
    assert lo < 0.93 and hi > 1.07
    # 1 ms: the calls' interval is the whole story
    (lo, hi), rel = widen_for_process_bias(ci, 1.0, 1.0, 1.0, 0.12, 0.12)
    assert rel < 2e-4 and (lo, hi) == pytest.approx(ci, rel=1e-4)
    # off, or nothing to widen
    assert widen_for_process_bias(ci, 1.0, 0.004, 0.004, 0.0, 0.0) == (ci, 0.0)
    # an asymmetric interval keeps its shape: each end widened on its own side
    (lo, hi), _ = widen_for_process_bias((1.9, 2.3), 2.0, 0.01, 0.005, 0.12, 0.12)
    assert lo < 1.9 and hi > 2.3 and hi / 2.0 > 2.0 / lo
    # each side its own offset: a fused candidate (one launch) against a reference of many
    _, rel = widen_for_process_bias(ci, 2.0, 0.040, 0.020, 1.0, 0.03)
    assert rel == pytest.approx(math.hypot(1.0 / 40, 0.03 / 20))


def test_the_process_offset_grows_with_each_launch_after_the_first():
    """chain_bias.py: a process's offset on a chain of k kernels grows as k - 1 (each dependent
    launch waits on the front end at the process's own speed), by events and by spans alike."""
    from harness.config import Timing
    from harness.timing.stats import process_bias_us
    t = Timing(process_bias_us=0.25, kernel_span_process_bias_us=0.03, process_bias_per_launch_us=0.09)
    assert process_bias_us(t, True, 1) == pytest.approx(0.03)
    assert process_bias_us(t, True, None) == pytest.approx(0.03)  # not counted: one launch
    assert process_bias_us(t, True, 16) == pytest.approx(0.03 + 15 * 0.09)
    assert process_bias_us(t, False, 2) == pytest.approx(0.25 + 0.09)
    assert process_bias_us(Timing(process_bias_per_launch_us=0.0), False, 24) == pytest.approx(Timing().process_bias_us)


@pytest.mark.parametrize("src,flag", [
    ("import torch\ntorch.allclose = lambda *a: True", "monkeypatch"),
    ("import time as t\nt.perf_counter = None", "monkeypatch"),
    ("import torch\ntorch.cuda.Event.elapsed_time = lambda s, e: 0.0", "monkeypatch"),
    ("import torch\nsetattr(torch, 'equal', None)", "monkeypatch"),
    ("import gc\nx = gc.get_objects()", "introspection"),
    ("import sys\nf = sys._getframe(1)", "introspection"),
    ("from harness import timing", "introspection"),
    ("import subprocess", "process_creation"),
    ("import os\nos.fork()", "process_creation"),
    ("import threading\nthreading.Thread(target=print).start()", "thread_creation"),
    ("import torch\ns = torch.cuda.Stream()", "stream_creation"),
    ("src = '#include <thread>\\nvoid f() { std::thread t([]{}); t.join(); }'", "thread_creation"),
    ("src = 'cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);'", "stream_creation"),
    ("def f(x):\n    try:\n        return g(x)\n    except Exception:\n        return h(x)", "try_except_fallback"),
])
def test_static_rules(src, flag):
    assert flag in check_source(src).flags


@pytest.mark.parametrize("src", [
    "import torch\ntorch.backends.cudnn.benchmark = True",
    "import torch.nn as nn\nclass ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.w = 1",
    "# torch.allclose = lambda: True  (a comment)\nx = 'torch.allclose = 1 in a string'",
])
def test_static_rules_leave_honest_code_alone(src):
    assert check_source(src).flags == []


def test_dtype_option_casts_inputs_and_both_models():
    from conftest import ROOT, make_config
    from harness.evaluation import evaluate
    r = evaluate(ROOT / "tests/fixtures/cpu/honest_linear_torch.py", ROOT / "tests/problems/linear_relu.py",
                 make_config(device="cpu", dtype="bf16"))
    assert r.status.value == "passed", r.error
    assert r.timing_method and r.config and r.config["dtype"] == "bf16"


def test_reported_time_beyond_the_parents_wall_clock_is_impossible():
    cfg = load_config()
    rounds = [(10.0, 10 * 0.5, 10)] * 6
    m = _measure([(4.0, 5.0, 10)] * 6, rounds, [0.5] * 60, [0.5] * 60)  # 5 ms reported in 4 ms of wall
    assert "impossible_timing" in clock_checks(m, cfg)


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


class _FakeTimed:
    """A worker answering `time` commands with fixed samples and whatever clocks it claims."""

    def __init__(self, ms: float, claimed_mhz: int):
        self.ms, self.claimed, self.returncode = ms, claimed_mhz, None

    def request(self, cmd, timeout):
        from harness.records.messages import Reply
        n = len(cmd.seeds)
        return Reply(op="time", ok=True, times_ms=[self.ms] * n, host_ms=[self.ms + 0.05] * n,
                     fingerprints=[[] for _ in range(n)], clocks_mhz=[self.claimed] * n,
                     max_clock_mhz=1980), n * (self.ms + 0.1) / 1e3

    def pause(self):
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
    assert measuring.gpu_summary(m)["rounds_retaken"] == ["candidate: thermal_limited"]
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
        from harness.records.messages import Reply
        self.modes.append(cmd.cuda_graph)
        if cmd.cuda_graph:
            if self.fail:
                return Reply(op="time", ok=False, error="Offset increment outside graph capture"), 0.01
            return Reply(op="time", ok=True, flags=["cuda_graph_unavailable"], max_clock_mhz=1980), 0.01
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
    timed by events (#5, H100, session 25)."""
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


def test_trial_payload_round_trips_and_refuses_forgeries():
    """The trial wire format (harness.payload): tensors of every accepted dtype, nested sequences
    and scalars come back equal; a header that lies about its tensors, names a dtype outside the
    list, or holds an unknown node is refused with ValueError, never loaded."""
    import json
    import struct

    import torch

    from harness.payload import decode, encode
    rec = {"out": [torch.randn(3, 4), torch.tensor([True, False]), torch.zeros(0, 5),
                   torch.randn(2).to(torch.bfloat16), torch.arange(6, dtype=torch.int64).reshape(2, 3)],
           "inputs_after": [3, 1.5, float("nan"), float("-inf"), None, "x"], "out_meta": [{"type": "torch.Tensor"}]}
    blob = b"".join(encode(torch, rec))
    back = decode(blob)
    assert all(torch.equal(a, b) and a.dtype == b.dtype for a, b in zip(rec["out"], back["out"]))
    assert back["inputs_after"][:2] == [3, 1.5] and math.isnan(back["inputs_after"][2])
    assert back["inputs_after"][3:] == [float("-inf"), None, "x"] and back["out_meta"] == rec["out_meta"]

    def forged(tree, tensors, data=b""):
        head = json.dumps({"tree": {"map": tree} if isinstance(tree, dict) else tree, "tensors": tensors}).encode()
        return struct.pack("<Q", len(head)) + head + data

    ok = forged({"out": {"t": 0}}, [{"dtype": "float32", "shape": [2], "nbytes": 8}], b"\0" * 8)
    assert torch.equal(decode(ok)["out"], torch.zeros(2))
    for bad in (forged({"out": {"t": 0}}, [{"dtype": "float32", "shape": [4], "nbytes": 8}], b"\0" * 8),
                forged({"out": {"t": 0}}, [{"dtype": "float32", "shape": [2], "nbytes": 8}], b"\0" * 4),
                forged({"out": {"t": 0}}, [{"dtype": "float32", "shape": [2], "nbytes": 8}], b"\0" * 12),
                forged({"out": {"t": 0}}, [{"dtype": "Tensor", "shape": [2], "nbytes": 8}], b"\0" * 8),
                forged({"out": {"t": 1}}, [{"dtype": "float32", "shape": [2], "nbytes": 8}], b"\0" * 8),
                forged({"out": {"__reduce__": "os.system"}}, []),
                forged(["not", "a", "record"], []),
                blob[:5]):
        with pytest.raises(ValueError):
            decode(bad)


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


def test_a_build_the_compiler_rejected_is_not_compiled_again(tmp_path, monkeypatch):
    """The same source fails the same way: its compiler error is remembered in its build directory,
    and a second build returns it without starting a compiler. A failure that says nothing about
    the source (the compiler killed) is not remembered."""
    import harness.build as build
    from harness.records.messages import CompileReply
    src = ROOT / "tests/fixtures/cpu/compile_error_cpp.py"
    ext = build.extensions_dir(src.read_text(), "cpu", tmp_path)
    first, failure, log = build.compile_solution(src, ext, "cpu", 300)
    assert failure is None and first.category == "compile_error" and (ext / build.FAILED_BUILD).exists()

    def no_compiler(*a, **k):
        raise AssertionError("a compiler was started for a build already known to fail")
    monkeypatch.setattr(build, "Worker", no_compiler)
    again, failure, log2 = build.compile_solution(src, ext, "cpu", 300)
    assert failure is None and again.error == first.error and again.category == "compile_error" and log2 == log
    killed = CompileReply(ok=False, category="compile_error", error="error: ninja: build stopped: Killed")
    assert build._deterministic(first) and not build._deterministic(killed)


def test_a_batch_build_the_compiler_rejected_is_not_compiled_again(tmp_path, monkeypatch):
    """The same memory on the batch's build path (build.build_child at idle priority, as executor.compile_item calls it)."""
    import harness.build as build
    src = ROOT / "tests/fixtures/cpu/compile_error_cpp.py"
    ext = build.extensions_dir(src.read_text(), "cpu", tmp_path)
    first, failure, log, cpu = build.build_child(src, ext, "cpu", 300, {}, idle=True)
    assert failure is None and first.category == "compile_error" and (ext / build.FAILED_BUILD).exists()

    def no_compiler(*a, **k):
        raise AssertionError("a compiler was started for a build already known to fail")
    monkeypatch.setattr(build, "Worker", no_compiler)  # the name build_child starts its child with
    again, failure, log2, cpu2 = build.build_child(src, ext, "cpu", 300, {}, idle=True)
    assert failure is None and again.error == first.error and log2 == log and cpu2 == 0.0


def test_a_build_that_succeeded_is_not_run_again_while_its_libraries_are_unchanged(tmp_path, monkeypatch):
    """A warm run skips the build child of a source that built before: the reply and log come from
    the build directory's marker. Any library rebuilt, replaced or removed since makes it build again."""
    import harness.build as build
    src = ROOT / "tests/fixtures/cpu/honest_cpp.py"
    ext = build.extensions_dir(src.read_text(), "cpu", tmp_path)
    first, failure, log = build.compile_solution(src, ext, "cpu", 300)
    assert failure is None and first.ok and first.extensions and (ext / build.BUILT).exists()
    libs = sorted(ext.rglob("*.so"))
    assert libs

    started = []
    real_worker = build.Worker

    def counting(*a, **k):
        started.append(a)
        return real_worker(*a, **k)
    monkeypatch.setattr(build, "Worker", counting)
    again, failure, log2, cpu = build.build_child(src, ext, "cpu", 300, idle=True)
    assert not started and failure is None and again.ok and again.extensions == first.extensions
    assert again.seconds == 0.0 and cpu == 0.0 and log2 == log

    libs[0].write_bytes(libs[0].read_bytes() + b"\0")  # replaced behind the cache's back
    third, failure, _ = build.compile_solution(src, ext, "cpu", 300)
    assert len(started) == 1 and failure is None and third.ok
    libs[0].unlink()
    assert build.remembered_build(ext) is None


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


# --- kernel spans (timing.loop.call_work, timing.measure.span_choice) ---------------------------

HOLD, FLUSH = "harness_hold", "_ZN2at6native13reduce_kernelILi512E"


def test_call_work_leaves_out_the_harness_kernels_and_keeps_all_of_the_forward():
    from harness.timing.loop import call_work, span_of
    acts = [
        # call 1: hold, the flush's fill and reduction, then the forward's two kernels and a copy
        (100, 400, HOLD), (398, 399, "<memset>"), (400, 460, FLUSH), (470, 480, "k1"), (482, 490, "k2"),
        (491, 495, "<memcpy>"),
        # call 2: a kernel of the forward on its own stream, started during the hold, and one named
        # like the flush that runs before it: the earliest namesake goes, the real flush counts
        (1100, 1400, HOLD), (1150, 1160, "side"), (1200, 1210, FLUSH), (1399, 1400, "<memset>"), (1400, 1460, FLUSH),
        (1470, 1480, "k1"), (1481, 1482, "<memset>"),
        # call 3: nothing of the forward's
        (2100, 2400, HOLD), (2399, 2400, "<memset>"), (2400, 2460, FLUSH),
        (3000, 3001, "outside every window"),
    ]
    work = call_work(acts, [(0, 999), (1000, 1999), (2000, 2999)], [HOLD, "<memset>", FLUSH])
    spans = [span_of(w) for w in work]
    assert spans[0] == pytest.approx((495 - 470) / 1e6)
    assert spans[1] == pytest.approx((1482 - 1150) / 1e6)
    assert spans[2] == -1.0
    # what each call launched, the harness's own left out: its launch count (process_bias_us)
    assert [[a[2] for a in w] for w in work] == [["k1", "k2", "<memcpy>"], ["side", FLUSH, "k1", "<memset>"], []]


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


def test_cpu_children_get_a_history_free_heap(monkeypatch):
    """glibc's dynamic mmap threshold and its trimming of the heap's top both depend on a process's
    allocation history; on the CPU path that made an identical candidate's per-call overhead 0.6-3 ms
    above its reference's, which the host-clock check reads as hidden time (bench/results/
    diagnostics.md). Every child gets both fixed; GPU children the threshold only."""
    from harness.build import child_env
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    cpu, gpu = child_env(None, "cpu"), child_env(None, "cuda")
    assert int(cpu["MALLOC_MMAP_THRESHOLD_"]) == int(gpu["MALLOC_MMAP_THRESHOLD_"]) == 32 << 20
    assert int(cpu["MALLOC_TRIM_THRESHOLD_"]) >= 1 << 30 and "MALLOC_TRIM_THRESHOLD_" not in gpu


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="no ptxas (CUDA toolkit) on this machine")
def test_the_hold_kernel_assembles_and_fits_two_1024_thread_blocks_per_sm(tmp_path):
    """The hold is PTX the driver loads in each process (timing.hold._hold_kernel): it assembles for
    Hopper, its one entry is `harness_hold` (the name _hold_kernel looks up), and it needs no more
    than the 32 registers a thread that 2048 threads per SM leave (65536 per SM)."""
    import re
    import subprocess

    from harness.timing.hold import _HOLD_PTX
    src = tmp_path / "hold.ptx"
    src.write_text(_HOLD_PTX)
    out = subprocess.run(["ptxas", "-v", "-arch=sm_90", str(src), "-o", str(tmp_path / "hold.cubin")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "Compiling entry function 'harness_hold'" in out.stderr
    regs = int(re.search(r"Used (\d+) registers", out.stderr).group(1))
    assert regs <= 32, out.stderr
