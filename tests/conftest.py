"""Shared test setup: fixtures carry their expected verdict in a header, evaluations are cached per
session, and builds go to one cache so each C++ fixture compiles once per machine."""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
CACHE = Path(os.environ.get("HARNESS_TEST_CACHE", ROOT / ".cache" / "test-harness"))

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
    }
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
