"""Do processes started together share their offset on a short forward? (#5, session 22)

In the fidelity sets a side timed in 4 processes (started at once, after its first) still moved by
about 1% between evaluations, on both sides, while the two sides of one evaluation moved apart: the
processes of one evaluation seemed to share part of their offset. Here `--groups` groups of `--size`
processes are started, a group at a time (all of a group at once, the next group once the previous one
is ready), and all are kept alive. Then each process times relu(x + y) on 4M floats (harness loop:
300 us hold, read flush, fresh inputs, kernel spans, `--calls` calls) one at a time, in an order that
interleaves the groups, twice. If the group means lie further apart than the spread within a group
allows (sd within / sqrt(size)), the offset follows when a process was started, not only the process.
Usage: python bench/diag/group_offset.py [--groups 4] [--size 4] [--calls 200]
"""
from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "diag"))

from small_spread import arg, relu_add_4m_child  # noqa: E402


def child() -> None:
    _, loop, runner, rng, _ = relu_add_4m_child()

    def med(calls: int) -> float:
        rep = loop.time_calls(runner, [rng.getrandbits(62) for _ in range(calls)], warmup=5, flush_l2=True,
                              npos=0, hold_us=300.0, spans=True)
        return statistics.median(x for x in rep["span_ms"] if x > 0) * 1e3

    med(50)  # the first request's calls run slower (stream_offset.py); as the harness's warm-up round
    print("ready", flush=True)
    for line in sys.stdin:
        if line.strip() != "go":
            break
        print(json.dumps({"span_us": round(med(int(sys.argv[sys.argv.index("--calls") + 1])), 3)}), flush=True)


def main() -> None:
    groups, size, calls = arg("--groups", 4), arg("--size", 4), arg("--calls", 200)
    procs: list[list[subprocess.Popen]] = []
    for _ in range(groups):
        g = [subprocess.Popen([sys.executable, __file__, "--child", "--calls", str(calls)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True) for _ in range(size)]
        for p in g:
            assert p.stdout.readline().strip() == "ready"
        procs.append(g)
    meds = [[[] for _ in range(size)] for _ in range(groups)]
    try:
        for _ in range(2):
            for j in range(size):
                for i in range(groups):
                    p = procs[i][j]
                    p.stdin.write("go\n")
                    p.stdin.flush()
                    meds[i][j].append(json.loads(p.stdout.readline())["span_us"])
    finally:
        for g in procs:
            for p in g:
                p.stdin.close()
                p.wait(timeout=60)
    print("group  each process's median, two passes (us)                                   group mean")
    means, within = [], []
    for i, g in enumerate(meds):
        per = [statistics.mean(x) for x in g]
        means.append(statistics.mean(per))
        within.append(statistics.stdev(per))
        print(f"{i:5d}  " + "  ".join(f"{a:6.2f}/{b:6.2f}" for a, b in g) + f"   {means[-1]:6.2f}")
    sd_within = statistics.mean(within)
    passes = statistics.mean(abs(a - b) for g in meds for a, b in g) * (3.1416 / 4) ** 0.5  # sd from mean |diff| / sqrt(2)
    print(f"sd within a group: {sd_within:.3f} us; sd of the group means: {statistics.stdev(means):.3f} us, "
          f"against {sd_within / size ** 0.5:.3f} us if the processes were independent; sd of one process's "
          f"two passes: {passes:.3f} us")
    print(json.dumps(meds))


if __name__ == "__main__":
    if "--child" in sys.argv:
        child()
    else:
        main()
