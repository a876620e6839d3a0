"""Where one evaluation's timing phase goes on a GPU (#3: 0.5-0.9 s per timed solution in a warm batch
of small problems, exclusive on the slot, 14-22 s of a 40 s run).

For each of the throughput bench's problems (tests/problems: relu_add, softmax_wide, linear_relu), an
identical torch solution is evaluated `--runs` times against one live reference (as a batch does), with
the parent's side of timing.measure instrumented: each request to a child (its wall time, and the
calls' own host time inside it), the NVML snapshots, the stops and resumes of the candidate, and the
phase as a whole. The first evaluation of each problem (the reference's first timing) is left out of
the means. A cProfile of the parent over all of them follows the table.

Usage: python bench/diag/timing_phase.py [--runs 5] [--set KEY=VALUE ...]"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

SOLUTIONS = {
    "relu_add": "class ModelNew(nn.Module):\n    def forward(self, a, b):\n        return torch.relu(a + b)\n",
    "softmax_wide": "class ModelNew(nn.Module):\n    def forward(self, x):\n        return torch.softmax(x, dim=1)\n",
    "linear_relu": ("class ModelNew(nn.Module):\n    def __init__(self, i, o):\n        super().__init__()\n"
                    "        self.linear = nn.Linear(i, o)\n\n    def forward(self, x):\n"
                    "        return torch.relu(self.linear(x))\n"),
}


class Clock:
    def __init__(self):
        self.t = defaultdict(float)
        self.n = defaultdict(int)

    def wrap(self, owner, name, key, extra=None):
        real = getattr(owner, name)

        def timed(*a, **k):
            t0 = time.perf_counter()
            try:
                out = real(*a, **k)
            finally:
                self.t[key] += time.perf_counter() - t0
                self.n[key] += 1
            if extra is not None:
                extra(self, a, out)
            return out
        setattr(owner, name, timed)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args()
    from harness import evaluation, timing
    from harness.process import worker
    from harness.config import load_config
    from harness.problems import find_problem
    from harness.reference import ReferenceSession

    over = {"device": "cuda", "timing.compile_baseline": "off"}
    for kv in args.set:
        k, v = kv.split("=", 1)
        over[k] = v
    cfg = load_config(None, over)
    clk = Clock()

    def on_request(c, a, out):
        cmd, (reply, _) = a[1], out
        if cmd.op == "time":
            c.t["time: calls' host ms"] += sum(reply.host_ms) / 1e3
            c.n["time: calls' host ms"] += len(reply.host_ms)

    clk.wrap(worker.Worker, "request", "request (all ops)", on_request)
    clk.wrap(worker.Worker, "pause", "candidate pause")
    clk.wrap(worker.Worker, "resume", "candidate resume")
    clk.wrap(timing.GpuMonitor, "snapshot", "NVML snapshot")
    clk.wrap(timing, "measure", "measure()")
    evaluation.measure = timing.measure
    clk.wrap(evaluation, "clock_checks", "clock_checks")
    clk.wrap(evaluation, "ratio_ci", "ratio_ci (bootstrap)")
    clk.wrap(evaluation, "_quiet", "_quiet")

    rows = []
    prof = cProfile.Profile()
    with tempfile.TemporaryDirectory() as tmp:
        for name, body in SOLUTIONS.items():
            sol = Path(tmp) / f"{name}_same.py"
            sol.write_text("import torch\nimport torch.nn as nn\n\n\n" + body)
            problem = find_problem(ROOT / "tests" / "problems" / f"{name}.py")
            dev = cfg.device if cfg.device != "auto" else "cuda"
            with ReferenceSession(problem, cfg, dev, "full" if dev == "cuda" else "small", None) as ref:
                for run in range(args.runs):
                    before = (dict(clk.t), dict(clk.n))
                    prof.enable()
                    r = evaluation.evaluate(sol, problem, cfg, reference=ref)
                    prof.disable()
                    d = {k: clk.t[k] - before[0].get(k, 0.0) for k in clk.t}
                    nd = {k: clk.n[k] - before[1].get(k, 0) for k in clk.n}
                    tm = r.timing_method or {}
                    row = {"problem": name, "run": run, "status": r.status.value, "timing_s": r.phases.timing_s,
                           "load_s": r.phases.load_s, "trials_s": r.phases.trials_s, "judge_s": r.phases.judge_s,
                           "total_s": r.phases.total_s, "rounds": tm.get("rounds"), "method": tm.get("method"),
                           "samples": (r.runtime_stats.count if r.runtime_stats else None),
                           "median_ms": r.runtime_ms, "hold_us": tm.get("launch_hold_us"),
                           "requests": nd.get("request (all ops)", 0), **{k: round(v, 4) for k, v in d.items()}}
                    rows.append(row)
                    print(row, r.error or "", file=sys.stderr, flush=True)

    keys = ["timing_s", "measure()", "request (all ops)", "time: calls' host ms", "NVML snapshot", "candidate pause",
            "candidate resume", "clock_checks", "ratio_ci (bootstrap)", "_quiet", "load_s", "trials_s", "judge_s", "total_s"]
    print("\n| problem | method | rounds | samples | median ms | hold us | requests | "
          + " | ".join(keys) + " |")
    print("|---|---|---:|---:|---:|---:|---:|" + "---:|" * len(keys))
    for name in SOLUTIONS:
        rs = [r for r in rows if r["problem"] == name and r["run"] > 0 and r["status"] == "passed"]
        if not rs:
            print(f"| {name} | no passing runs after the first |")
            continue
        m = lambda k: statistics.mean(r.get(k) or 0.0 for r in rs)  # noqa: E731
        print(f"| {name} | {rs[0]['method']} | {m('rounds'):.1f} | {m('samples'):.0f} | {m('median_ms'):.4f} | "
              f"{m('hold_us'):.0f} | {m('requests'):.1f} | " + " | ".join(f"{m(k):.3f}" for k in keys) + " |")
    s = io.StringIO()
    st = pstats.Stats(prof, stream=s)
    st.sort_stats("tottime").print_stats(25)
    print("\n## parent cProfile, by own time (all evaluations)\n")
    print("\n".join(s.getvalue().splitlines()[:60]))


if __name__ == "__main__":
    main()
