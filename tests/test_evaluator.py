"""harness.Evaluator (evaluator.py): the batch's machinery kept warm between calls, for loops that
score many generations."""
from __future__ import annotations

import re
import subprocess
import sys

from conftest import ROOT


def test_the_readmes_evaluator_example_runs_as_written():
    block = re.search(r"an `Evaluator` keeps.*?```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    p = subprocess.run([sys.executable, "-c", block], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    lines = p.stdout.split("\n")
    assert lines[0] == "passed" and sorted(x.split()[0] for x in lines[1:3]) == ["no_code", "passed"], p.stdout


def test_an_evaluator_keeps_each_problems_reference_and_gives_batch_verdicts(tmp_path):
    """Three solutions of one problem start its reference once; the verdicts are those `harness eval`
    gives (a file, code as text, a raw response without code), and a generation's text is kept in
    the work folder."""
    from harness import Evaluator
    from harness.evaluator import EvaluationFailed
    honest = (ROOT / "tests/fixtures/cpu/honest_linear_torch.py").read_text()
    with Evaluator(device="cpu", problems=[ROOT / "tests/problems"], workdir=tmp_path) as ev:
        first = ev.evaluate(honest, "linear_relu", label="m")
        more = list(ev.evaluate_many([(ROOT / "tests/fixtures/cpu/bf16_downgrade.py", "linear_relu"),
                                      ("Here is my answer, no code.", "linear_relu")], ordered=True))
        assert ev.executor.references_started() == {"cpu": 1}
        try:
            ev.evaluate(honest, "no_such_problem")
            raise AssertionError("an unknown problem must raise")
        except (LookupError, EvaluationFailed) as e:
            assert "no_such_problem" in str(e)
    assert (first.status.value, first.label) == ("passed", "m") and first.speedup
    assert [r.status.value for r in more] == ["incorrect", "no_code"]
    assert sorted(p.suffix for p in tmp_path.glob("generation_*")) == [".md", ".py"]


def test_an_evaluator_moves_work_off_a_lost_gpu(tmp_path):
    """As a batch does (pipeline.py): an evaluation that failed on a slot whose GPU no longer answers
    runs again on another slot, once, and that slot gets no more work; with every slot lost, a call
    fails with the reason."""
    from test_batch import FakeExecutor

    from harness import Evaluator
    from harness.evaluator import EvaluationFailed
    code = (ROOT / "tests/fixtures/cpu/honest_linear_torch.py").read_text()
    with Evaluator(device="cpu", problems=[ROOT / "tests/problems"], workdir=tmp_path) as ev:
        real = ev.executor
        try:
            ev.executor = FakeExecutor(["g0", "g1"], lose=["g1"], after=0)
            ev._inflight = {"g0": 1, "g1": 0}  # the first evaluation goes to g1, whose GPU is gone
            first = ev.evaluate(code, "linear_relu")
            assert (first.status.value, first.slot) == ("passed", "g0")
            assert ev.executor.lost == ["g1"] and set(ev.lost) == {"g1"}
            assert [s for s, _ in ev.executor.evals] == ["g1", "g0"]
            assert ev.evaluate(code, "linear_relu").slot == "g0"  # g1 gets no more work
            ev.executor, ev.lost = FakeExecutor(["g0", "g1"], lose=["g0", "g1"], after=0), {}
            ev._inflight = {"g0": 0, "g1": 0}
            # moved once, and failing there too: its own verdict, as a batch records it
            assert ev.evaluate(code, "linear_relu").status.value == "runtime_error"
            assert set(ev.lost) == {"g0", "g1"}
            try:
                ev.evaluate(code, "linear_relu")
                raise AssertionError("with no device left a call must fail")
            except EvaluationFailed as e:
                assert "no device left" in str(e)
        finally:
            ev.executor = real
