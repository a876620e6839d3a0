"""A side timed in several processes (config.Timing.processes): when it applies, how the pairs'
measurements pool, and (CPU, real processes) that the record and the reference's reuse are right.
The verdict on a solution that cheats only in a later process is pinned by
tests/adversarial/cpu/timer_patch_second_process.py."""
from __future__ import annotations

import math

import pytest

from conftest import ROOT, make_config


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
    (4, [23.66, 24.46, 23.9, 24.2], 0.00375, 8),  # 1.45% (relu(x + y) on 4M floats, session 20): the cap
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


def _measurement(cand: list[float], ref: list[float], **kw):
    from harness.timing.measure import Measurement, Side

    def side(xs):
        s = Side(times=list(xs), host=[x + 0.1 for x in xs], enqueue=[0.01] * len(xs), launch=[0.02] * len(xs),
                 span=[x - 0.001 for x in xs], launches=[2] * len(xs))
        s.rounds = [(sum(xs) + 1.0, sum(xs), len(xs), True)]
        return s
    return Measurement(cand=side(cand), ref=side(ref), spans=True, rounds=1, seconds=0.5, **kw)


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


def test_an_honest_solution_timed_in_three_processes_a_side_and_the_references_kept(tmp_path, monkeypatch):
    """Real processes on the CPU path: three pairs measured, the record says so and gives each pair's
    medians, every pair's calls pooled; a second solution of the problem reuses the session's
    further reference processes instead of starting new ones. The candidate's further processes,
    started at once, each poison at most FURTHER_POISON_BYTES of the GPU's memory, not a quarter."""
    from harness.evaluation import evaluate
    from harness.stages import candidate
    from harness.problems import find_problem
    from harness.reference import ReferenceSession
    setups = []

    class Recorded(candidate.Worker):
        def __init__(self, setup, *a, **k):
            setups.append(setup)
            super().__init__(setup, *a, **k)

    monkeypatch.setattr(candidate, "Worker", Recorded)
    cfg = make_config(device="cpu", **{"timing.processes_when": "always", "timing.processes": 3,
                                       "timing.processes_max": 3, "timing.processes_budget_s": 0})
    prob = find_problem(ROOT / "tests/problems/relu_add.py")
    with ReferenceSession(prob, cfg, "cpu", "small", None) as ref:
        r = evaluate(ROOT / "tests/fixtures/cpu/honest_cpp.py", prob, cfg, reference=ref)
        assert r.status.value == "passed", (r.error, r.log_tail)
        assert r.timing_method["processes"] == {"candidate": 3, "reference": 3}
        pairs = r.timing_method["pair_medians_ms"]
        assert len(pairs) == 3 and all(c > 0 and rr > 0 for c, rr in pairs)
        # every pair contributes its kept calls (at least cpu_min_calls each)
        assert r.runtime_stats.count >= 3 * cfg.timing.cpu_min_calls
        assert r.phases.processes_s > 0
        assert [st.poison_max_bytes for st in setups] == [None] + [candidate.FURTHER_POISON_BYTES] * 2
        extra = [w.pid for w in ref.extra]
        assert len(extra) == 2 and all(w.returncode is None for w in ref.extra)
        r2 = evaluate(ROOT / "tests/fixtures/cpu/honest_cpp.py", prob, cfg, reference=ref)
        assert r2.status.value == "passed", (r2.error, r2.log_tail)
        assert [w.pid for w in ref.extra] == extra
    assert ref.extra == []


def test_a_second_wave_of_processes_where_the_first_ones_disagree():
    """Real processes: two a side at first, then (a target no spread meets) one more each, up to
    processes_max; the further pairs pooled as the first ones are, the reference's kept."""
    from harness.evaluation import evaluate
    from harness.problems import find_problem
    from harness.reference import ReferenceSession
    cfg = make_config(device="cpu", **{"timing.processes_when": "always", "timing.processes": 2,
                                       "timing.processes_max": 3, "timing.processes_target_rel": 1e-9,
                                       "timing.processes_budget_s": 0})
    prob = find_problem(ROOT / "tests/problems/relu_add.py")
    with ReferenceSession(prob, cfg, "cpu", "small", None) as ref:
        r = evaluate(ROOT / "tests/fixtures/cpu/honest_cpp.py", prob, cfg, reference=ref)
        assert r.status.value == "passed", (r.error, r.log_tail)
        assert r.timing_method["processes"] == {"candidate": 3, "reference": 3}
        assert len(r.timing_method["pair_medians_ms"]) == 3
        assert r.runtime_stats.count >= 3 * cfg.timing.cpu_min_calls
        assert len(ref.extra) == 2


def test_a_budget_spent_starts_no_further_processes():
    """The budget (timing.processes_budget_s) spent by the first pair: one process a side, and the
    record says how many the offsets asked for."""
    from harness.evaluation import evaluate
    cfg = make_config(device="cpu", **{"timing.processes_when": "always", "timing.processes": 3,
                                       "timing.processes_budget_s": 0.001})
    r = evaluate(ROOT / "tests/fixtures/cpu/honest_cpp.py", ROOT / "tests/problems/relu_add.py", cfg)
    assert r.status.value == "passed", (r.error, r.log_tail)
    assert r.timing_method["processes"] == {"candidate": 1, "reference": 1}
    assert r.timing_method["processes_wanted"] == {"candidate": 3, "reference": 3}
    assert "pair_medians_ms" not in r.timing_method and r.phases.processes_s == 0


def test_one_process_a_side_by_default_on_the_cpu():
    from harness.evaluation import evaluate
    r = evaluate(ROOT / "tests/fixtures/cpu/honest_cpp.py", ROOT / "tests/problems/relu_add.py", make_config(device="cpu"))
    assert r.status.value == "passed", r.error
    assert r.timing_method["processes"] == {"candidate": 1, "reference": 1}
    assert "pair_medians_ms" not in r.timing_method and r.phases.processes_s == 0


def test_a_batch_times_each_side_in_several_processes_from_its_standbys(tmp_path):
    """The batch path: further candidate processes come from the slot's standbys, two evaluations
    share the slot (each one's further processes registered with its gate), and the problem's
    further reference processes are shared by its solutions."""
    from harness.batch.run import run_batch
    sols = tmp_path / "sols" / "relu_add"
    for i, body in enumerate(["torch.relu(a + b)", "(a + b).clamp_min(0)", "torch.maximum(a + b, torch.zeros_like(a))"]):
        (sols.parent / "relu_add").mkdir(parents=True, exist_ok=True)
        (sols / f"s{i}.py").write_text("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
                                       f"    def forward(self, a, b):\n        return {body}\n")
    cfg = make_config(device="cpu", **{"timing.processes_when": "always", "timing.processes": 2, "timing.processes_max": 2,
                                       "timing.processes_budget_s": 0,
                                       "batch.cpu_concurrent_evaluations": 2})
    run = tmp_path / "run"
    summary = run_batch([str(tmp_path / "sols")], cfg, problem_roots=[str(ROOT / "tests/problems")], out=str(run),
                        compile_workers=1)
    import json
    recs = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines()]
    assert len(recs) == 3 and all(r["status"] == "passed" for r in recs), [(r["status"], r["error"]) for r in recs]
    for r in recs:
        assert r["timing_method"]["processes"] == {"candidate": 2, "reference": 2}
        assert len(r["timing_method"]["pair_medians_ms"]) == 2
    assert summary.references == {"cpu": 1}
