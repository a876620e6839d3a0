"""Is an identical candidate's per-call overhead on the CPU path its reference's? (the host-clock check,
timing.clocks.clock_checks: a systematic difference reads as hidden time). Evaluates one solution N times
against one live reference (the throughput bench's softmax_wide copy by default) and prints each
verdict and, per measurement, the candidate's minimum per-call wall overhead less the reference's (ms),
with the reference's. Session 19: glibc's heap trimming made it 0.6-3 ms (10 of 12 rejected); with
MALLOC_TRIM_THRESHOLD_ fixed (build.child_env), within 0.07 ms.
Usage: python bench/diag/cpu_clock_asymmetry.py N [PROBLEM SOLUTION] (a bench work folder: /tmp/tpcpu)"""
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from harness import evaluation  # noqa: E402
from harness.config import load_config  # noqa: E402
from harness.problems import find_problem  # noqa: E402
from harness.reference import ReferenceSession  # noqa: E402
from harness.timing.clocks import clock_checks  # noqa: E402

WORK = Path(os.environ.get("BENCH_WORK", "/tmp/tpcpu"))  # a throughput bench's --out folder (CPU)


def main() -> None:
    diffs = []
    real = clock_checks

    def spy(m, cfg, cuda, detail=None):
        d = {} if detail is None else detail
        out = real(m, cfg, cuda, d)
        if "wall_over_cand_ms" in d:
            diffs.append((round(d["wall_over_cand_ms"] - d["wall_over_ref_ms"], 3), round(d["wall_over_ref_ms"], 2)))
        return out

    evaluation.clock_checks = spy
    cfg = load_config(WORK / "bench.toml", {"device": "cpu", "cache_dir": str(WORK / "cache")})
    prob = find_problem(sys.argv[2] if len(sys.argv) > 2 else ROOT / "tests/problems/softmax_wide.py")
    sol = sys.argv[3] if len(sys.argv) > 3 else WORK / "subs/modelA/softmax_wide/torch_0.py"
    verdicts = []
    with ReferenceSession(prob, cfg, "cpu", "small", None) as ref:
        for _ in range(int(sys.argv[1])):
            verdicts.append(evaluation.evaluate(sol, prob, cfg, reference=ref).status.value[0])
    print("".join(verdicts), "(p passed, r rejected); candidate less reference per-call overhead, ms "
          "(and the reference's), per measurement:", diffs)


if __name__ == "__main__":
    main()
