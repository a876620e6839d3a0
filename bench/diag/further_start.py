"""Where a candidate's further processes spend their start (#3: in a warm throughput run on an H100,
`phases.processes_s` was 2.6-5.7 s per solution timed in 4 processes, about 25 s of the run's 111 s
of lane time).

Runs `harness batch` in this process on the throughput bench's linear_relu and softmax_wide solutions
(built first into a fresh cache, then a measured warm run, and with `--also KEY=VALUE` one more warm
run with that [batch] setting too), with the worker channel instrumented. For every further process
(every candidate setup taken from the pool, each solution's first too) it prints, in seconds from its take: what the standby
pool held (done: primed), when its load, build and first timing request were answered, and how long
it had been stopped (others' timing) by then. Loads are read one after another, so a process's load
time includes waiting for the ones before it.

Found on an H100 (session 24, bench/results/throughput-cuda.md): alone (one evaluation at a time) 3
further processes start in 1.3-1.6 s, a fresh fork's CUDA context and launch hold (about 1.1 s) being
most of it; with 4 lanes 2.2-5.3 s, stopped 0.2-2.4 s of it, while the pool's standbys sit in the
middle of priming. Taking the rest fresh from the fork server instead of waiting for those
(Standby.take_many, tried) was no faster with 4 lanes: 2.9-5.3 s.

Usage: python bench/diag/further_start.py [--set KEY=VALUE ...] [--also KEY=VALUE ...]"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--set", action="append", default=[])
    ap.add_argument("--also", action="append", default=[], metavar="KEY=VALUE",
                    help="a further warm run with this setting as well (e.g. concurrent_evaluations=1)")
    args = ap.parse_args()
    import throughput
    from harness.process import standby, worker
    from harness.batch.run import run_batch
    from harness.config import load_config

    lock = threading.Lock()
    procs: dict[int, dict] = {}  # id(worker) -> its events

    real_take, real_wait = standby.Standby.take, worker.Worker.wait_reply

    def take(self, setup, env, timeout, on_worker=None):
        t0 = time.perf_counter()
        with self._cv:  # what the pool held: primed (done), priming, queued or starting
            states = [self._state.get(id(w), "unprimed") for w in self.pool]
        w = real_take(self, setup, env, timeout, on_worker)
        if setup.get("role") == "candidate":
            with lock:
                procs[id(w)] = {"t0": t0, "take": time.perf_counter() - t0, "pooled": ",".join(states) or "empty"}
        return w

    def wait_reply(self, op, timeout, t0=None):
        reply = real_wait(self, op, timeout, t0=t0)
        e = procs.get(id(self))
        if e is not None and op not in e:
            e[op] = time.perf_counter() - e["t0"]
            e[f"stopped_{op}"] = self.stopped_for()
            if op == "load":  # the child's own steps (worker.Runner), and when it began them
                n = dict(reply.notes)
                n["began"] = f"{float(n.get('began', 'nan')) - (time.time() - time.perf_counter() + e['t0']):.2f}"
                e["steps"] = " ".join(f"{k[:-2] if k.endswith('_s') else k}={v}" for k, v in n.items())
        return reply

    standby.Standby.take, worker.Worker.wait_reply = take, wait_reply

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        sols = [s for s in throughput.catalog("cuda") if s["problem"] in ("linear_relu", "softmax_wide")]
        throughput.write_tree(work / "subs", sols)
        cfg_path = work / "bench.toml"
        throughput.write_config(cfg_path, work / "cache", 10.0, False, None, dict(kv.split("=", 1) for kv in args.set))
        runs = [("cold", cfg_path), ("warm", cfg_path)]
        if args.also:
            also = work / "also.toml"
            throughput.write_config(also, work / "cache", 10.0, False, None,
                                    dict(kv.split("=", 1) for kv in args.set + args.also))
            runs.append(("warm, " + " ".join(args.also), also))
        for i, (name, path) in enumerate(runs):
            cfg = load_config(str(path), {"device": "cuda"})
            procs.clear()
            t0 = time.perf_counter()
            run_batch([str(work / "subs")], cfg, problem_roots=[str(throughput.PROBLEMS)],
                            out=str(work / f"run{i}"), show_progress=False)
            print(f"{name}: {time.perf_counter() - t0:.1f} s, {len(procs)} further processes", flush=True)
            if name != "cold":
                report(procs)


def report(procs: dict) -> None:
    rows = sorted(procs.values(), key=lambda e: e["t0"])
    print(f"{'pool before':>24} {'take':>6} {'load':>6} {'build':>6} {'warm-up':>7}   stopped by then: load build warm-up")
    for e in rows:
        print(f"{e['pooled']:>24} {e['take']:6.2f} {e.get('load', float('nan')):6.2f} "
              f"{e.get('build', float('nan')):6.2f} {e.get('time', float('nan')):7.2f}   "
              + " ".join(f"{e.get('stopped_' + k, float('nan')):5.2f}" for k in ("load", "build", "time"))
              + "   " + e.get("steps", ""))
    for k in ("take", "load", "build", "time"):
        v = [e[k] for e in rows if k in e]
        if v:
            print(f"{k}: median {statistics.median(v):.2f} s, max {max(v):.2f} s over {len(v)}")


if __name__ == "__main__":
    main()
