"""A side timed in several processes (config.Timing.processes), end to end with real processes on
the CPU path: the record, the reference's further processes kept and reused, the budget, the batch
path. When several processes apply is pinned in test_stats.py, how the pairs' measurements pool in
test_measure.py. The verdict on a solution that cheats only in a later process is pinned by
tests/adversarial/cpu/timer_patch_second_process.py."""
from __future__ import annotations

from conftest import ROOT, make_config


def test_an_honest_solution_timed_in_three_processes_a_side_and_the_references_kept(tmp_path, monkeypatch):
    """Real processes on the CPU path: three pairs measured, the record says so and gives each pair's
    medians, every pair's calls pooled; a second solution of the problem reuses the session's
    further reference processes instead of starting new ones. The candidate's further processes,
    started at once, each poison (on a GPU) at most POISON_BYTES of its memory, as the reference does."""
    from harness.evaluation import evaluate
    from harness.stages import candidate
    from harness.problems import find_problem
    from harness.reference import POISON_BYTES, ReferenceSession
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
        assert len(setups) == 3 and {st.poison_max_bytes for st in setups} == {None}  # the CPU path: none
        gpu_ref = ReferenceSession(prob, cfg, "cuda", "small", None)
        assert gpu_ref.setup_for("reference").poison_max_bytes == POISON_BYTES
        assert gpu_ref.setup_for("candidate").poison_max_bytes == POISON_BYTES
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


def test_a_host_bound_side_is_timed_in_several_processes_within_its_own_budget(monkeypatch):
    """A side whose launching leaked into most intervals (timing.stats.host_bound: on a GPU, its
    process's host speed is what was timed) gets `processes` processes, within host_bound_budget_s,
    though processes_budget_s is spent and the offset model asks for one; the record names it.
    (On the CPU no launch leaks: host_bound is made to say so here.)"""
    from harness.evaluation import evaluate
    from harness.stages import timed
    cfg = make_config(device="cpu", **{"timing.processes": 3, "timing.processes_max": 3,
                                       "timing.processes_budget_s": 0.001, "timing.host_bound_budget_s": 0})
    args = (ROOT / "tests/fixtures/cpu/honest_cpp.py", ROOT / "tests/problems/relu_add.py", cfg)
    monkeypatch.setattr(timed, "host_bound", lambda t, side: side is not None)
    r = evaluate(*args)
    assert r.status.value == "passed", (r.error, r.log_tail)
    assert r.timing_method["processes"] == {"candidate": 3, "reference": 3}
    assert r.timing_method["host_bound"] == ["candidate", "reference"]
    assert len(r.timing_method["pair_medians_ms"]) == 3
    monkeypatch.undo()
    r = evaluate(*args)  # not host-bound: one process a side, as the model asks
    assert r.timing_method["processes"] == {"candidate": 1, "reference": 1} and "host_bound" not in r.timing_method
