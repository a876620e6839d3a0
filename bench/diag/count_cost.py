"""What does counting each side's launches in the warm-up round cost a problem timed by events? (#5)

The count opens CUPTI in the candidate's process and records the warm-up round's calls
(timing.measure, `timing.process_bias_per_launch_us` > 0). Here, for softmax_8k and matmul_2k
(fidelity.py's problems, events-timed), fresh candidates are evaluated against one live reference,
alternating the count on and off (`process_bias_per_launch_us` 0.09 and 0), and the timing wall,
the launch hold and the median compared.
Usage: python bench/diag/count_cost.py [--runs 4]
"""
from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def main(runs: int) -> None:
    from fidelity import write_files

    from harness.config import load_config
    from harness.evaluation import evaluate
    from harness.problems import find_problem
    from harness.reference import ReferenceSession

    tmp = Path(tempfile.mkdtemp())
    probs = write_files(tmp)
    print(f"{'kernel':>11} {'count':>5} {'timing wall s':>14} {'timing_s':>9} {'hold us':>8} {'median ms':>10}  launches")
    for name in ("softmax_8k", "matmul_2k"):
        prob, sol = probs[name]
        base = {"device": "cuda", "timing.compile_baseline": "off", "correctness.trials": 1}
        cfgs = {on: load_config(None, {**base, "timing.process_bias_per_launch_us": 0.09 if on else 0.0})
                for on in (True, False)}
        problem = find_problem(prob)
        rows = {True: [], False: []}
        with ReferenceSession(problem, cfgs[True], "cuda", "full", None) as ref:
            for i in range(2 * runs):
                on = i % 2 == 0
                r = evaluate(sol, problem, cfgs[on], reference=ref)
                assert r.status.value == "passed", (r.status, r.error)
                tm = r.timing_method
                rows[on].append((tm["timing_wall_s"], r.phases.timing_s, tm["launch_hold_us"], r.runtime_ms,
                                 tm.get("launches_per_call")))
        for on in (True, False):
            xs = rows[on]
            med = lambda k: statistics.median(x[k] for x in xs)  # noqa: E731
            print(f"{name:>11} {'on' if on else 'off':>5} {med(0):14.3f} {med(1):9.3f} {med(2):8.1f} {med(3):10.4f}  "
                  f"{xs[0][4]}   walls: {' '.join(f'{x[0]:.2f}' for x in xs)}")


if __name__ == "__main__":
    main(int(sys.argv[sys.argv.index("--runs") + 1]) if "--runs" in sys.argv else 4)
