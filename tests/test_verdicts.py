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


@pytest.mark.parametrize("name,problem", [("wrong_init_signature.py", "linear_relu"), ("forward_signature.py", "relu_add")])
def test_an_interface_error_asks_whether_the_problem_is_the_right_one(name, problem):
    """Scored against a problem it was not written for, a solution fails on its signatures first."""
    from conftest import TESTS
    r = evaluate_fixture(read_expectation(TESTS / "fixtures" / "cpu" / name))
    assert r.status.value == "interface_error"
    assert f"is {problem} the problem this solution was written for?" in (r.error or ""), r.error


def test_every_status_is_pinned():
    from harness.records.result import Status
    pinned = {read_expectation(p).status for p in CPU_FIXTURES}
    assert pinned == {s.value for s in Status}, f"statuses without a CPU fixture: {set(s.value for s in Status) - pinned}"


@pytest.mark.parametrize("flags_seen,confirmations,status,measurements", [
    ([["timer_mismatch"], ["timer_mismatch"], []], 2, "passed", 3),   # noise twice, then a clean one
    ([["timer_mismatch"], ["timer_mismatch"], []], 1, "rejected", 2),  # fewer confirmations allowed
    ([["timer_mismatch"]] * 3, 2, "rejected", 3),                       # flagged every time: a cheat
    ([["unsynced_stream"], ["timer_mismatch"], ["timer_mismatch"]], 2, "rejected", 3),  # no clean one
    ([["impossible_timing"], []], 2, "rejected", 1),  # no honest report outlasts the wall: no second chance
])
def test_a_flagged_measurement_is_taken_again_and_only_a_clean_one_is_reported(monkeypatch, flags_seen, confirmations,
                                                                              status, measurements):
    """A host-clock flag is confirmed on further measurements (hardening.clock_check_confirmations),
    and the record reports the first one no check flags; a run flagged in every measurement is
    rejected with every flag seen. What the checks say is scripted here, the evaluation is real.
    Each further measurement runs with the batch's builds stopped (cpus.Lender.quiet): a build
    process here, stopped for those and running again after."""
    import subprocess
    import sys

    from conftest import ROOT, make_config

    from harness import cpus, evaluation
    from harness.batch.sharing import SoloGate
    from harness.stages import timed
    seq = list(flags_seen)
    calls = []
    quiets = []

    class Lender(cpus.Lender):
        def quiet(self):
            quiets.append(len(calls))
            return super().quiet()

    build = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    lender = Lender(set(), {})
    lender.track(build.pid)

    def scripted(m, cfg, cuda, detail=None):
        calls.append(len(m.cand.times))
        return list(seq.pop(0)) if seq else []

    monkeypatch.setattr(timed, "clock_checks", scripted)
    cfg = make_config(device="cpu", **{"hardening.clock_check_confirmations": confirmations})
    try:
        r = evaluation.evaluate(ROOT / "tests/fixtures/cpu/honest_linear_torch.py", ROOT / "tests/problems/linear_relu.py",
                                cfg, gate=SoloGate(lender=lender))
        state = open(f"/proc/{build.pid}/stat").read().rsplit(")", 1)[1].split()[0]
    finally:
        build.kill()
        build.wait()
    assert r.status.value == status, (r.error, r.flags)
    assert len(calls) == measurements and all(n >= 2 for n in calls)
    assert r.timing_method.get("clock_check_measurements", 1) == measurements
    assert quiets == list(range(1, measurements)) and state != "T"
    if measurements > 1:
        assert r.timing_method["builds_stopped"] == 1
    if status == "passed":
        assert r.timing_method["remeasured_after_clock_flag"] and r.speedup
        # the CPU path records where each side ran and the hypervisor's steal over the measurement
        assert set(r.timing_method["host_cpus"]) == {"candidate", "reference"}
        assert isinstance(r.timing_method["host_steal_ms"], dict)
    else:
        seen = sorted({f for fl in flags_seen[:measurements] for f in fl})
        assert sorted(f for f in r.flags if f in ("timer_mismatch", "unsynced_stream", "impossible_timing")) == seen


def test_the_seeds_a_candidate_sees_say_nothing_of_the_next():
    """Every seed the parent draws for the processes (trial inputs, timed calls' inputs, re-checks)
    comes from the OS's generator. A Mersenne Twister seeded once, as before, is recovered from its
    outputs: a helper rebuilt its 128-bit key from 118 seeds and computed each later round's outputs
    between rounds, out of every clock (2.5-2.8x passed, 6 of 6). Shown here: from 624 of a seeded
    Random's 32-bit outputs, its next one follows."""
    import random

    from harness.reference import ReferenceSession

    def untemper(y):  # MT19937's output transform, undone
        y ^= y >> 18
        y ^= (y << 15) & 0xEFC60000
        t = y
        for _ in range(5):
            t = y ^ ((t << 7) & 0x9D2C5680)
        y, t = t & 0xFFFFFFFF, t & 0xFFFFFFFF
        for _ in range(2):
            t = y ^ (t >> 11)
        return t

    def predicts(rng) -> bool:
        seen = [rng.getrandbits(32) for _ in range(624)]
        clone = random.Random()
        clone.setstate((3, tuple(untemper(y) for y in seen) + (624,), None))
        return clone.getrandbits(32) == rng.getrandbits(32)

    assert predicts(random.Random(12345))  # what the harness used
    session = ReferenceSession.__dataclass_fields__["rng"].default_factory()
    assert not predicts(session)

