"""Where the timing wall of a side timed in several processes goes (#5: relu_add_4m with 8 processes
a side took up to 3.05 s of timing wall on an H100 in session 22).

Evaluates fidelity.py's relu_add_4m (fresh candidate each run, one live reference) with the given
config, and records every `timing.measure` call (one per process pair) and every timing request in
it: the pair's seconds and kept rounds, its requests' walls in the parent's clock, and how much of
each request the child spent in its calls (hold, flush, forward, synchronize: the reply's host_ms).
Printed per pair: seconds, rounds, requests, the median and the slowest request wall per side, their
sum, and what the pair spent outside its requests (gate, CPU pinning, NVML snapshots, pausing).

Usage: python bench/diag/pair_cost.py [--runs 3] [--config FILE] [--set KEY=VALUE]"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--config", default=None)
    ap.add_argument("--set", action="append", default=[])
    args = ap.parse_args()
    import fidelity
    from harness import evaluation
    from harness.process import worker
    from harness.stages import timed
    from harness.config import load_config
    from harness.problems import find_problem
    from harness.reference import ReferenceSession

    overrides = {"device": "cuda", "timing.compile_baseline": "off", "correctness.trials": 1}
    for kv in args.set:
        k, v = kv.split("=", 1)
        overrides[k] = v
    cfg = load_config(args.config, overrides)
    pairs: list[dict] = []
    current: list[dict] = []  # the pair being measured: its requests

    real_measure, real_request = timed.measure, worker.Worker.request

    def measure(cand, ref, *a, **k):
        current.clear()
        t0 = time.perf_counter()
        m = real_measure(cand, ref, *a, **k)
        pairs.append({"s": time.perf_counter() - t0, "rounds": m.rounds, "reqs": list(current),
                      "cand": cand.pid, "ref": ref.pid})
        return m

    def request(self, cmd, timeout):
        reply, wall = real_request(self, cmd, timeout)
        if cmd.op == "time":
            current.append({"pid": self.pid, "wall": wall, "host": sum(reply.host_ms or []) / 1e3,
                            "calls": len(cmd.seeds), "spans": cmd.spans, "warm": cmd.warmup > 0})
        return reply, wall

    timed.measure, worker.Worker.request = measure, request
    tmp = Path(tempfile.mkdtemp())
    prob, sol = fidelity.write_files(tmp)["relu_add_4m"]
    problem = find_problem(prob)
    with ReferenceSession(problem, cfg, "cuda", "full", None) as ref:
        for run in range(args.runs):
            pairs.clear()
            r = evaluation.evaluate(sol, problem, cfg, reference=ref)
            tm = r.timing_method
            print(f"\n## run {run + 1}: {r.status.value}, cand {r.runtime_ms * 1e3:.2f} us, timing_s "
                  f"{r.phases.timing_s:.3f}, processes_s {r.phases.processes_s:.3f}, processes {tm.get('processes')}")
            print("| pair | s | rounds | requests | cand req ms | ref req ms | slowest cand / ref ms | req sum s | child calls s | outside req s |")
            print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
            for i, p in enumerate(pairs):
                c = [q["wall"] for q in p["reqs"] if q["pid"] == p["cand"]]
                rr = [q["wall"] for q in p["reqs"] if q["pid"] == p["ref"]]
                tot = sum(q["wall"] for q in p["reqs"])
                host = sum(q["host"] for q in p["reqs"])
                print(f"| {i} | {p['s']:.3f} | {p['rounds']} | {len(p['reqs'])} | "
                      f"{1e3 * statistics.median(c):.1f} | {1e3 * statistics.median(rr):.1f} | "
                      f"{1e3 * max(c):.0f} / {1e3 * max(rr):.0f} | {tot:.3f} | "
                      f"{host:.3f} | {p['s'] - tot:.3f} |")


if __name__ == "__main__":
    main()
