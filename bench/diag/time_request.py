"""Where a child's `time` request goes (#3). bench/diag/timing_phase.py (H100) found each request of a
timing round taking ~45 ms in the parent's clock for 10 calls whose own host time (hold, flush,
forward, synchronize) is ~7 ms. Here a reference-role runner.Runner runs in this process, as
child.serve does, and the same requests are profiled: per request, the wall time, the calls' own
host time, and the Reply's construction and JSON; then a cProfile of the requests by own time.

Usage: python bench/diag/time_request.py [--requests 12] [--hold-us 450]"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=12)
    ap.add_argument("--hold-us", type=float, default=450.0)
    ap.add_argument("--problems", nargs="*", default=["relu_add", "softmax_wide", "linear_relu"])
    ap.add_argument("--callers", action="store_true", help="also the cumulative profile and who takes stacks")
    args = ap.parse_args()
    from harness.config import load_config
    from harness.records.messages import Command, Reply
    from harness.process.runner import Runner

    cfg = load_config(None, {"device": "cuda"})
    t = cfg.timing
    rng = random.Random(1)
    for name in args.problems:
        setup = {"role": "reference", "problem_path": str(ROOT / "tests" / "problems" / f"{name}.py"),
                 "solution_path": None, "device": "cuda", "size": "full", "dtype": None, "cpu_threads": 1,
                 "allow_tf32": False}
        runner = Runner(setup)
        runner.build(1234)
        for spans in (False, True):
            def request(warm: bool) -> tuple[float, float, float]:
                cmd = Command(op="time", seeds=[rng.getrandbits(62) for _ in range(t.round_calls)],
                              warmup=t.warmup if warm else 0, flush_l2=True, flush_method=t.flush_method,
                              hold_us=args.hold_us, spans=spans)
                t0 = time.perf_counter()
                out = runner.time(cmd)
                t1 = time.perf_counter()
                Reply(op="time", ok=True, **out).model_dump_json()
                return t1 - t0, sum(out["host_ms"]) / 1e3, time.perf_counter() - t1

            request(True)  # the warm-up round
            prof = cProfile.Profile()
            walls, hosts, replies = [], [], []
            for _ in range(args.requests):
                prof.enable()
                w, h, r = request(False)
                prof.disable()
                walls.append(w)
                hosts.append(h)
                replies.append(r)
            print(f"\n## {name}, spans={spans}: per request of {t.round_calls} calls (ms): wall "
                  f"{1e3 * statistics.median(walls):.2f}, calls' host {1e3 * statistics.median(hosts):.2f}, "
                  f"reply JSON {1e3 * statistics.median(replies):.2f}", flush=True)
            s = io.StringIO()
            pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(18)
            print("\n".join(line[:160] for line in s.getvalue().splitlines()[6:30]), flush=True)
            if args.callers:
                s = io.StringIO()
                st = pstats.Stats(prof, stream=s)
                st.sort_stats("cumulative").print_stats(40)
                st.print_callers("extract_stack|walk_stack|_extract_from_extended")
                print("\n".join(line[:200] for line in s.getvalue().splitlines()[6:120]), flush=True)


if __name__ == "__main__":
    main()
