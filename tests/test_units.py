"""Unit tests of the parts that judge: tolerances, fingerprints, clock checks, static rules, config."""
from __future__ import annotations

import random

import pytest
import torch

from harness.config import Tolerance, load_config
from harness.correctness import compare_tensors
from harness.static_checks import check_source
from harness.timing import Measurement, clock_checks, fingerprints_match, summarize

FP32 = Tolerance(atol=1e-4, rtol=1e-4, rel_l2=1e-4)


def test_zeros_fail_tiny_softmax():
    ref = torch.softmax(0.1 * torch.randn(4, 16384), dim=1)
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
    from harness.timing import _fingerprint
    return _fingerprint(torch, t, seed, 16)


def test_fingerprint_matches_honest_and_catches_stale():
    ref = torch.softmax(torch.randn(8, 4096), 1)
    honest = ref + 1e-7 * torch.randn_like(ref)
    stale = torch.softmax(torch.randn(8, 4096), 1)  # another call's answer: same sums, same scale
    assert fingerprints_match(_fp(honest, 7), _fp(ref, 7), FP32)
    assert not fingerprints_match(_fp(stale, 7), _fp(ref, 7), FP32)
    assert not fingerprints_match(_fp(torch.zeros_like(ref), 7), _fp(ref, 7), FP32)


def _measure(cand_rounds, ref_rounds, cand_t, ref_t, cand_host=None, ref_host=None):
    m = Measurement()
    m.cand, m.ref = cand_t, ref_t
    m.cand_host, m.ref_host = cand_host or [t + 0.01 for t in cand_t], ref_host or [t + 0.01 for t in ref_t]
    m.cand_rounds, m.ref_rounds = cand_rounds, ref_rounds
    return m


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
    faked.cand_rounds = [(w, 10 * 0.05, n) for w, _, n in cand_rounds]
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
        assert clock_checks(m, cfg, cuda=False) == on_cpu


def test_summarize():
    s = summarize([1.0, 2.0, 3.0, 4.0])
    assert (s.median, s.min, s.max, s.count) == (2.5, 1.0, 4.0, 4)
    assert 0 < s.rel_sem < 1


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


def test_config_layers(tmp_path):
    user = tmp_path / "c.toml"
    user.write_text("[timing]\nbudget_s = 9.0\n")
    cfg = load_config(user, {"timing.warmup": 7, "device": "cpu"})
    assert (cfg.timing.budget_s, cfg.timing.warmup, cfg.device) == (9.0, 7, "cpu")
    assert cfg.timing.min_calls == load_config().timing.min_calls
    assert cfg.digest() != load_config().digest()


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


def test_samples_at_low_clocks_are_dropped():
    from harness.records import Reply
    from harness.timing import _keep
    reply = Reply(op="time", ok=True, times_ms=[1.0, 1.0, 1.0], clocks_mhz=[1980, 1200, 1900])
    assert _keep(reply, 0.75, 1980) == [True, False, True]
    assert _keep(Reply(op="time", ok=True, times_ms=[1.0, 2.0]), 0.75, 1980) == [True, True]  # no readings
