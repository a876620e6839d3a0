"""Shared test setup: fixtures carry their expected verdict in a header, evaluations are cached per
session, and builds go to one cache so each C++ fixture compiles once per machine.

Which test file pins which part of harness/:
  test_correctness.py    correctness.py (compare_tensors) and payload.py (the trial wire format)
  test_fingerprint.py    timing/fingerprint.py: timed outputs' fingerprints
  test_clocks.py         timing/clocks.py: clock checks against the parent's wall clock
  test_stats.py          timing/stats.py: summaries, process-bias model, how many processes a side gets
  test_measure.py        timing/measure.py with fake workers (and monitor.round_state); pooled pairs
  test_loop.py           timing/loop.py (call_work, span_of) and timing/hold.py (the hold's PTX)
  test_cupti.py          cupti.py without a GPU
  test_static_checks.py  static_checks.py: the source rules
  test_build.py          build.py: the build cache, child_env
  test_worker.py         process/worker.py (a stopped worker's timeout), process/runner.py (inputs, dtype)
  test_standby.py        process/standby.py: standby workers
  test_forkserver.py     process/forkserver.py: standbys forked from a fork server
  test_processes.py      several processes a side, end to end (stages, reference, batch)
  test_config.py         config.py and configs/*.toml
  test_cpus.py           cpus.py: the timing CPU, pinning, the lender
  test_sharing.py        batch/sharing.py (DeviceGate) and the slot's re-run alone (batch/executor.py)
  test_executor.py       batch/executor.py: a slot's reference sessions and closing
  test_devices.py        batch/devices.py: GPU slots, the GPU probe, NVML
  test_batch.py          `harness batch` end to end, batch/plan.py, batch/pipeline.py, batch/run.py
  test_leaderboard.py    leaderboard.py: fast_p, geomean, merging runs
  test_cli.py            cli.py as a user runs it
  test_extract.py        extracting code from model responses (solutions.py)
  test_problems.py       problems.py, the shipped problems and the linter (lint.py, lint_rules.py)
  test_imports.py        the import graph of harness/
  test_verdicts.py       every verdict, end to end, from fixtures/ and adversarial/ (CPU)
  test_gpu.py            the GPU part: CUDA fixtures, seed problems' CUDA solutions, sticky errors
  test_bench.py          the throughput bench's solutions (bench/)
Fixtures stay one file per verdict, with their `# expect:` header (read_expectation below)."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from harness.config import Tolerance

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
CACHE = Path(os.environ.get("HARNESS_TEST_CACHE", ROOT / ".cache" / "test-harness"))

FP32 = Tolerance(atol=1e-4, rtol=1e-4, rel_l2=1e-4)

HEADER = re.compile(r"^(?:#|<!--)\s*(expect|problem|config|device):\s*(.*?)\s*(?:-->)?\s*$")


@dataclass
class Expectation:
    path: Path
    status: str
    flags: list[str]
    maybe: list[str]
    problem: Path
    overrides: dict = field(default_factory=dict)
    device: str = "cpu"


def _value(v: str):
    try:
        return int(v)
    except ValueError:
        try:
            return float(v)
        except ValueError:
            return v


def read_expectation(path: Path) -> Expectation:
    status, flags, maybe, problem, overrides, device = None, [], [], None, {}, "cpu"
    for line in path.read_text().splitlines()[:8]:
        m = HEADER.match(line)
        if not m:
            continue
        key, val = m.groups()
        if key == "expect":
            parts = dict(p.split("=", 1) for p in val.split())
            status = parts["status"]
            flags = [f for f in parts.get("flags", "").split(",") if f]
            maybe = [f for f in parts.get("maybe", "").split(",") if f]
        elif key == "problem":
            problem = ROOT / val
        elif key == "config":
            for kv in val.split():
                k, v = kv.split("=", 1)
                overrides[k] = _value(v)
        elif key == "device":
            device = val
    assert status and problem, f"{path} lacks an '# expect:' or '# problem:' header"
    return Expectation(path, status, flags, maybe, problem, overrides, device)


def fixtures_in(*dirs: str) -> list[Path]:
    out = []
    for d in dirs:
        out += sorted(p for p in (TESTS / d).glob("*") if p.suffix in (".py", ".md", ".txt") and not p.name.startswith("_"))
    return out


def make_config(**overrides):
    from harness.config import load_config
    base = {
        "cache_dir": str(CACHE),
        "correctness.trials": 3,
        "timing.warmup": 1,
        "timing.min_calls": 10,
        "timing.cpu_min_calls": 10,
        "timing.max_calls": 40,
        "timing.round_calls": 5,
        "timing.budget_s": 0.5,
        "timing.compile_baseline": "off",
        "timeouts.compile_s": 400,
        "timeouts.load_s": 60,
        "timeouts.run_s": 60,
        # the suite's other workers load the reference's CPU too: what the fixtures pin is their
        # verdicts and flags, not this host's load (tests/test_cpus.py pins `reference_contended`)
        "timing.max_reference_wait_frac": 1.0,
    }
    if os.environ.get("HARNESS_TEST_SANDBOX"):  # the suite again with the sandbox forced on (or off)
        base["hardening.sandbox"] = os.environ["HARNESS_TEST_SANDBOX"]
    base.update(overrides)
    return load_config(None, base)


_results: dict = {}


def evaluate_fixture(exp: Expectation, device: str | None = None):
    """Evaluate once per session; several tests read the same record."""
    from harness.evaluation import evaluate
    key = (str(exp.path), device or exp.device)
    if key not in _results:
        cfg = make_config(device=device or exp.device, **exp.overrides)
        _results[key] = evaluate(exp.path, exp.problem, cfg)
    return _results[key]


def has_cuda() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except Exception:
        return False


gpu = pytest.mark.skipif(not has_cuda(), reason="needs a CUDA device")


def fake_measurement(cand: list[float], ref: list[float], **kw):
    """A Measurement of one round a side with these per-call times (its other samples made up from
    them): what test_stats.py and test_measure.py pool and budget."""
    from harness.timing.measure import Measurement, Side

    def side(xs):
        s = Side(times=list(xs), host=[x + 0.1 for x in xs], enqueue=[0.01] * len(xs), launch=[0.02] * len(xs),
                 span=[x - 0.001 for x in xs], launches=[2] * len(xs))
        s.rounds = [(sum(xs) + 1.0, sum(xs), len(xs), True)]
        return s
    return Measurement(cand=side(cand), ref=side(ref), spans=True, rounds=1, seconds=0.5, **kw)


# The fast subset (`pytest -m "not slow"`): everything that starts no evaluation, build or batch.
# These files start them in (nearly) every test; SLOW_TESTS are the rest that take a second or more
# (measured with --durations on a 2-core machine).
SLOW_FILES = {"test_verdicts.py", "test_sandbox.py", "test_memory.py", "test_build.py", "test_standby.py",
              "test_batch.py", "test_baselines.py", "test_cli.py", "test_evaluator.py", "test_processes.py",
              "test_forkserver.py", "test_executor.py", "test_worker.py", "test_runreport.py", "test_imports.py",
              "test_gpu.py", "test_ray_backend.py"}
SLOW_TESTS = ("test_problem_passes_linter_at_cpu_size", "test_problems_check_cli_exit_codes", "test_table_matches_problems",
              "test_problems_list_json", "test_a_busy_looping_forward_is_timed_out",
              "test_real_evaluations_share_a_slot", "test_the_kernelbench_bench_scores",
              "test_the_gpu_probe_is_not_waited_for")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.name in SLOW_FILES or item.name.startswith(SLOW_TESTS):
            item.add_marker(pytest.mark.slow)


def pytest_runtest_logreport(report):
    """With HARNESS_FAILURE_LOG set (bench/gpu_suite.sh), each failure's detail is written as it
    happens: a device call's time limit can kill pytest before its summary, and with it the reason
    a GPU test failed."""
    path = os.environ.get("HARNESS_FAILURE_LOG")
    if path and report.failed:
        with open(path, "a") as fh:
            fh.write(f"=== {report.nodeid} ({report.when})\n{report.longreprtext[-20000:]}\n")
