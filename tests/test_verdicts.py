"""Every verdict the harness gives, pinned by a fixture that earns exactly that verdict (CPU part).
The expected status and flags stand in each fixture's header."""
from __future__ import annotations

import pytest

from conftest import evaluate_fixture, fixtures_in, read_expectation

CPU_FIXTURES = fixtures_in("fixtures/cpu", "adversarial/cpu")


@pytest.mark.parametrize("path", CPU_FIXTURES, ids=lambda p: f"{p.parent.parent.name}/{p.name}")
def test_fixture_verdict(path):
    exp = read_expectation(path)
    r = evaluate_fixture(exp)
    detail = f"error={r.error!r}\nlog={r.log_tail!r}"
    assert r.status.value == exp.status, detail
    # `maybe` flags depend on where a nondeterministic cheat is caught (trials or timing)
    assert sorted(f for f in r.flags if f not in exp.maybe) == sorted(exp.flags), detail
    if exp.status == "passed":
        assert r.speedup and r.speedup > 0 and r.runtime_stats.count >= 10
        assert r.env and r.env.torch and r.max_abs_diff is not None
    else:
        assert r.speedup is None
        assert r.error, "a failing verdict says why"


def test_every_status_is_pinned():
    from harness.records import Status
    pinned = {read_expectation(p).status for p in CPU_FIXTURES}
    assert pinned == {s.value for s in Status}, f"statuses without a CPU fixture: {set(s.value for s in Status) - pinned}"
