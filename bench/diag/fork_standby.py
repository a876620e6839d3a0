"""How long does a standby take to be ready (torch imported) and primed (CUDA context, timing pinned),
forked from a fork server against started fresh? And how much CPU does it cost? (#3: a batch slot
starts one per evaluation; fresh ones paid 2-4 s of CPU each for the torch import.)

For each way, `--n` standbys are started at once on an otherwise idle machine, then primed one after
another (as a slot's gate lets them), and the wall times and the children's CPU are printed.
Usage: python bench/diag/fork_standby.py [--n 8] [--device cuda]"""
import argparse
import resource
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from harness.build import child_env  # noqa: E402
from harness.process.forkserver import ForkServer  # noqa: E402
from harness.process.worker import Worker  # noqa: E402


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run(n: int, device: str, fork: bool) -> dict:
    env = child_env(None, device)
    t0 = time.perf_counter()
    server = None
    if fork:
        server = ForkServer(env)
        assert server.ready(120), server.log_tail()
    t_server = time.perf_counter() - t0
    t1 = time.perf_counter()
    ws = [Worker(None, env=env, forkserver=server) for _ in range(n)]
    spawn = time.perf_counter() - t1
    ready = []
    for w in ws:
        assert w.ready(120), w.log_tail()
        ready.append(time.perf_counter() - t1)
    primed = []
    for w in ws:
        t = time.perf_counter()
        assert w.prime(device, 120), w.log_tail()
        primed.append(time.perf_counter() - t)
    total = time.perf_counter() - t0
    for w in ws:
        w.close()
    if server:
        server.close()
    return {"way": "forked" if fork else "fresh", "server_s": t_server, "spawn_s": spawn,
            "all_ready_s": max(ready), "first_ready_s": min(ready), "prime_p50_s": statistics.median(primed),
            "total_s": total, "forked": sum(w.forked for w in ws),
            "server": server.notes if server else {}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--device", default="cuda")
    a = ap.parse_args()
    rows = []
    for fork in (False, True, False, True):
        c0 = children_cpu()
        r = run(a.n, a.device, fork)
        r["children_cpu_s"] = children_cpu() - c0  # fresh workers only: forked ones are the server's
        rows.append(r)
        print(r, flush=True)
    print(f"\n{a.n} standbys at once, then primed one by one ({a.device}):")
    print(f"{'way':7} {'server':>7} {'first ready':>11} {'all ready':>9} {'prime p50':>9} {'total':>7} {'cpu (fresh)':>11}")
    for r in rows:
        print(f"{r['way']:7} {r['server_s']:7.2f} {r['first_ready_s']:11.2f} {r['all_ready_s']:9.2f} "
              f"{r['prime_p50_s']:9.2f} {r['total_s']:7.2f} {r['children_cpu_s']:11.1f}")


if __name__ == "__main__":
    main()
