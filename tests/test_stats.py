"""harness/timing/stats.py: summaries, the process-bias model that widens a small kernel's interval,
and how many processes a side is timed in (processes_for, processes_needed, pairs_within_budget)."""
from __future__ import annotations

import math

import pytest
from conftest import fake_measurement as _measurement
from conftest import make_config

from harness.timing.stats import side_offset_us, summarize, widen_for_process_bias


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


def test_a_long_forwards_interval_is_widened_by_a_share_of_its_median():
    """timing.process_offset_floor_rel: a forward of milliseconds moves by a share of its median from
    process to process (memory layout, the GPU's state), not by microseconds: identities of 1-13 ms
    spread about 0.1% in the ratio, and without this term 14-20% of their intervals excluded 1. A
    few-microsecond forward keeps the launch model's offset, which is larger there."""
    t = make_config(device="cuda").timing
    assert side_offset_us(t, False, 1, 0.004) == t.process_bias_us  # 4 us: the model
    assert side_offset_us(t, False, 1, 3.0) == pytest.approx(3000 * t.process_offset_floor_rel)  # 3 ms: 2.1 us
    (lo, hi), rel = widen_for_process_bias((0.9995, 1.0005), 1.0, 3.0, 3.0,
                                           side_offset_us(t, False, 1, 3.0), side_offset_us(t, False, 1, 3.0))
    assert rel == pytest.approx(math.sqrt(2) * t.process_offset_floor_rel)
    # an identity 0.15% off (within the corpus's p5-p95) is inside its interval
    assert lo < 0.9985 and hi > 1.0015
    off = make_config(device="cuda", **{"timing.process_offset_floor_rel": 0.0}).timing
    assert side_offset_us(off, False, 1, 3.0) == off.process_bias_us


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


def _timing(**kw):
    from harness.config import Timing
    return Timing(**kw)


@pytest.mark.parametrize("when,cuda,spans,launches,median_ms,expect", [
    ("auto", True, True, 2, 0.024, 4),     # relu(x + y) at 24 us by spans: 0.09 us of offset, 0.375%
    ("auto", True, True, 1, 0.004, 1),     # one kernel by spans: only the tick, the same everywhere
    ("auto", True, False, 1, 0.060, 4),    # one kernel at 60 us by events: 0.25 us, 0.42%
    ("auto", True, False, 1, 0.287, 1),    # softmax at 0.29 ms by events: 0.09%
    ("auto", True, False, 2, 0.110, 1),    # two launches at 0.11 ms by events: 0.34 us, 0.31%
    ("auto", True, False, 16, 0.060, 4),   # 16 launches at 60 us: 1.6 us, 2.7%
    ("auto", False, False, 3, 0.010, 1),   # the CPU has no such model: one process unless asked
    ("always", False, False, 1, 5.0, 4),
    ("never", True, True, 16, 0.010, 1),
    ("auto", True, True, 2, None, 1),      # no samples: nothing to decide on
])
def test_a_side_is_timed_in_several_processes_where_its_offset_is_a_sizeable_share(when, cuda, spans, launches,
                                                                                     median_ms, expect):
    from harness.timing.stats import processes_for
    assert processes_for(_timing(processes_when=when), cuda, spans, launches, median_ms) == expect
    assert processes_for(_timing(processes_when=when, processes=1), cuda, spans, launches, median_ms) == 1


@pytest.mark.parametrize("n,medians,offset_rel,expect", [
    (4, [24.0, 24.05, 24.0, 24.04], 0.00375, 4),  # 0.11% of sd: the model's 0.375% asks for 3, it has 4
    (4, [23.9, 24.1, 23.95, 24.2], 0.00375, 6),   # 0.57% of sd: (0.57 / 0.25)^2 = 5.2
    (4, [23.66, 24.46, 23.9, 24.2], 0.00375, 8),  # 1.45% (relu(x + y) on 4M floats): the cap
    (4, [23.9, 24.1, 23.95, 24.2], 0.02, 8),      # a model above what was seen counts
    (1, [24.0], 0.01, 1),                         # one process: nothing to go on
    (8, [23.0, 25.0, 24.0], 0.0, 8),              # at the cap already
])
def test_more_processes_where_the_first_ones_disagree(n, medians, offset_rel, expect):
    from harness.timing.stats import processes_needed
    assert processes_needed(_timing(processes_max=8), n, medians, offset_rel) == expect
    assert processes_needed(_timing(processes_max=5), n, medians, offset_rel) == max(n, min(expect, 5))
    assert processes_needed(_timing(processes_max=8, processes_target_rel=0), n, medians, offset_rel) == n
    assert processes_needed(_timing(), n, medians, offset_rel) == expect  # the default: up to 8


def test_no_more_pairs_than_fit_in_the_budget():
    from harness.timing.stats import pairs_within_budget
    first = _measurement([1.0], [1.0])          # 0.5 s in all; its kept rounds' walls 2 ms a side
    t = _timing(processes_budget_s=2.5, processes_rounds=3)
    assert pairs_within_budget(t, [first]) == 125         # (2.5 - 0.5) / (4 x (2 + 2) ms)
    first.cand.rounds = [(50.0, 1.0, 10, True), (40.0, 1.0, 10, True), (60.0, 1.0, 10, True)]
    first.ref.rounds = [(50.0, 1.0, 10, True)]
    assert pairs_within_budget(t, [first]) == 5           # (2.5 - 0.5) / (4 x (50 + 50) ms)
    further = _measurement([1.0], [1.0])
    further.seconds = 0.3
    assert pairs_within_budget(t, [first, further, further]) == 4   # (2.5 - 1.1) / 0.3 = 4.7
    assert pairs_within_budget(_timing(processes_budget_s=1.0), [first, further, further]) == 0
    assert pairs_within_budget(_timing(processes_budget_s=0), [first]) is None


def test_a_side_is_host_bound_when_most_of_its_launches_leaked():
    """timing.stats.host_bound: over host_bound_share of the kept calls opened their interval before
    the forward was enqueued."""
    from harness.timing.measure import Side
    from harness.timing.stats import host_bound
    t = make_config(device="cuda").timing
    assert not host_bound(t, Side())
    assert host_bound(t, Side(times=[1.0] * 60, leaked=50)) and not host_bound(t, Side(times=[1.0] * 60, leaked=30))


def test_a_problem_whose_reference_processes_time_it_apart_is_timed_in_several(tmp_path):
    """level2/77 ran 4.9 or 6.4 ms by process on an H200, either side, and its identities came out at
    1.32x and 0.77x with narrow intervals: one process a side, the offset model seeing nothing for a
    5 ms forward. Each reference process's median is kept per problem and device model
    (timing/modes.py); once two lie over `process_modes_rel` apart (or four times a short forward's
    modelled offset), the evaluation says so and times every side in several processes."""
    from types import SimpleNamespace as NS

    from harness.build import torch_versions
    from harness.stages.timed import _process_modes
    from harness.timing import modes
    cfg = make_config(cache_dir=str(tmp_path))
    torch_v = torch_versions()[0]

    def ctx(gpu="NVIDIA H200", cuda=True):
        return NS(cuda=cuda, cfg=cfg, problem=NS(source_hash="abc", name="level2/77"), size="full", dtype=None,
                  res=NS(env=NS(gpu_name=gpu)))
    ref = lambda: NS(worker=NS())  # noqa: E731  (a reference session: a process each)
    first, second, third = ref(), ref(), ref()
    assert _process_modes(ctx(), first, False, 6.45, 0.0001) is None      # nothing to compare with yet
    assert _process_modes(ctx(), second, False, 6.41, 0.0001) is None     # 0.6% apart: one mode
    assert _process_modes(ctx(), first, False, 6.46, 0.0001) is None      # the same process again
    got = _process_modes(ctx(), third, False, 4.97, 0.0001)               # the other mode
    assert got is not None and got["spread_rel"] == pytest.approx(6.46 / 4.97 - 1, rel=1e-3)
    assert got["reference_processes"] == 3
    assert _process_modes(ctx(), ref(), False, 6.40, 0.0001) is not None  # and from then on
    # a measurement a neighbour's GPU work may have slowed is compared, not kept
    before = modes.load(str(tmp_path), modes.key_for("abc", "full", None, "NVIDIA H200", torch_v, False))
    _process_modes(ctx(), ref(), False, 9.9, 0.0001, keep=False)
    assert modes.load(str(tmp_path), modes.key_for("abc", "full", None, "NVIDIA H200", torch_v, False)) == before
    # kept apart: another device model, the other timing basis, the CPU path, or turned off
    assert _process_modes(ctx(gpu="NVIDIA H100 80GB HBM3"), ref(), False, 4.9, 0.0001) is None
    assert _process_modes(ctx(), ref(), True, 4.9, 0.0001) is None
    assert _process_modes(ctx(cuda=False), ref(), False, 4.9, 0.0001) is None
    cfg.timing.process_modes_rel = 0
    assert _process_modes(ctx(), ref(), False, 4.9, 0.0001) is None
    cfg.timing.process_modes_rel = 0.03
    # a short forward whose processes' offsets are modelled at 2% a side: 5% apart is within them
    short = NS(cuda=True, cfg=cfg, problem=NS(source_hash="def", name="relu"), size="full", dtype=None,
               res=NS(env=NS(gpu_name="NVIDIA H200")))
    assert _process_modes(short, ref(), False, 0.0040, 0.02) is None
    assert _process_modes(short, ref(), False, 0.0042, 0.02) is None
    # the latest few processes only
    for i in range(modes.KEEP + 3):
        modes.keep(str(tmp_path), "k", "p", {f"t{i}": 1.0 + i})
    kept = modes.load(str(tmp_path), "k")
    assert list(kept) == [f"t{i}" for i in range(3, modes.KEEP + 3)]


def test_a_clocked_cpu_speedups_interval_holds_its_process_offset():
    """Clocked (CPU path), a candidate's time is its interval less what the clock adds to the
    reference's calls; what its own process adds beside that moved an identity of a 6 us forward
    0.76-1.22 over six evaluations while each interval, over its calls only, was a few percent wide.
    The interval is widened by `timing.cpu_clocked_offset_us` (the calls' own kept beside it);
    unclocked, or on a forward of milliseconds, it is the calls' interval."""
    import random
    from types import SimpleNamespace as NS

    from harness.stages.record import speedup
    cfg = make_config()

    def run(ref_ms, cand_ms, clocked=True):
        rng = random.Random(1)
        side = lambda ms: NS(timed=lambda spans, ms=ms: [ms * (1 + 0.01 * rng.random()) for _ in range(200)])  # noqa: E731
        res = NS(ref_runtime_ms=ref_ms, runtime_ms=cand_ms, timing_method={"clocked": clocked}, flags=[],
                 speedup=None, speedup_ci=None)
        ctx = NS(cuda=False, cfg=cfg, res=res)
        speedup(ctx, NS(pooled=NS(ref=side(ref_ms), cand=side(cand_ms)), spans=False), NS(rng=random.Random(2)))
        return res
    r = run(0.006, 0.006)
    lo, hi = r.timing_method["speedup_ci_calls"]
    assert hi - lo < 0.02 and r.speedup_ci[0] < 0.75 and r.speedup_ci[1] > 1.3  # a sixth of 6 us a side
    assert r.timing_method["process_bias_rel"] == pytest.approx(math.hypot(1 / 6, 1 / 6), rel=1e-3)
    # one solution in two runs (a new user's trial): the reference's median moved, its own offset too
    a, b = run(0.0063, 0.0365).speedup_ci, run(0.0050, 0.0370).speedup_ci
    assert a[0] < b[1] and b[0] < a[1], (a, b)
    r = run(5.0, 5.0)  # 5 ms: a microsecond is nothing
    assert r.speedup_ci[1] - r.speedup_ci[0] < 0.03
    r = run(0.006, 0.006, clocked=False)
    assert "speedup_ci_calls" not in r.timing_method and r.speedup_ci[1] - r.speedup_ci[0] < 0.02
    cfg.timing.cpu_clocked_offset_us = 0
    assert run(0.006, 0.006).speedup_ci[1] - run(0.006, 0.006).speedup_ci[0] < 0.02
