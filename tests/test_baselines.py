"""baselines.py: torch.compile(Model)'s time is measured by a problem's first evaluation on a device
and stack, kept on disk, and read by the later ones instead of being timed beside each."""
from __future__ import annotations

import json

import pytest

from conftest import ROOT, make_config


@pytest.mark.slow
def test_the_compiled_baseline_is_measured_once_and_read_after(tmp_path):
    from harness.evaluation import evaluate
    from harness.problems import find_problem
    from harness.reference import ReferenceSession

    cfg = make_config(device="cpu", cache_dir=str(tmp_path / "cache"), **{"timing.compile_baseline": "on"})
    prob = find_problem(ROOT / "tests/problems/relu_add.py")
    sol = ROOT / "tests/fixtures/cpu/honest_cpp.py"
    with ReferenceSession(prob, cfg, "cpu", "small", None) as ref:
        first = evaluate(sol, prob, cfg, reference=ref)
        assert first.status.value == "passed", (first.error, first.log_tail)
        assert first.timing_method["compile_baseline"] == "measured" and first.compile_runtime_ms > 0
        kept = list((tmp_path / "cache" / "baselines").glob("*.json"))
        assert len(kept) == 1
        rec = json.loads(kept[0].read_text())
        assert rec["problem"] == prob.name and rec["events_ms"] == first.compile_runtime_ms

        second = evaluate(sol, prob, cfg, reference=ref)
        assert second.status.value == "passed", (second.error, second.log_tail)
        assert second.timing_method["compile_baseline"]["cached"] == rec["key"]
        assert second.compile_runtime_ms == first.compile_runtime_ms
        assert second.speedup_compile == pytest.approx(second.compile_runtime_ms / second.runtime_ms, rel=1e-9)

    # off: timed beside the candidate again, whatever is on disk
    live = make_config(device="cpu", cache_dir=str(tmp_path / "cache"),
                       **{"timing.compile_baseline": "on", "timing.compile_baseline_cache": False})
    third = evaluate(sol, prob, live)
    assert third.status.value == "passed" and third.timing_method["compile_baseline"] == "measured"


def test_the_key_moves_with_what_moves_a_time():
    from harness.baselines import key_for
    from harness.config import load_config
    from harness.records.result import EnvInfo

    env = EnvInfo(device="cuda", gpu_name="NVIDIA H100 80GB HBM3", driver="580", torch="2.11", cuda="13.0",
                  python="3.12", harness="0.1.0", hostname="a")
    cfg = load_config()
    k, _ = key_for("abc", "full", None, env, cfg)
    assert k == key_for("abc", "full", None, env.model_copy(update={"hostname": "b"}), cfg)[0]  # another host
    assert k != key_for("abd", "full", None, env, cfg)[0]                          # the problem's bytes
    assert k != key_for("abc", "small", None, env, cfg)[0]                         # its size
    assert k != key_for("abc", "full", None, env.model_copy(update={"gpu_name": "NVIDIA H200"}), cfg)[0]
    assert k != key_for("abc", "full", None, env.model_copy(update={"torch": "2.12"}), cfg)[0]
    assert k != key_for("abc", "full", None, env, load_config(overrides={"correctness.allow_tf32": True}))[0]
