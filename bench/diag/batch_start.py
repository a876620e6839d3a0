"""What a warm batch's first seconds wait for (#3). The throughput bench's warm run on an H100 spent
6-8 s on its first four evaluations, whose own phases came to 1.5-3.2 s.

Runs `harness batch` in this process on the bench's solutions without extensions (no builds, so
every run is warm), with the steps of a slot's start-up traced: the parent's torch import, the
fork server, each standby's readiness and priming, each take, each reference start, and each
evaluate() call. Prints the trace (seconds since run_batch was called) up to --until.

Usage: python bench/diag/batch_start.py [--until 12] [--device cuda] [--set KEY=VALUE ...]"""
from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

T0 = time.perf_counter()
TRACE: list[tuple[float, str]] = []
LOCK = threading.Lock()


def note(what: str) -> None:
    with LOCK:
        TRACE.append((time.perf_counter() - T0, f"[{threading.current_thread().name[:18]}] {what}"))


def wrap(owner, name: str, label, once: bool = False):
    real = getattr(owner, name)
    seen = set()

    def traced(*a, **k):
        tag = label(a, k)
        if not (once and tag in seen):
            note(f"{tag} begins")
        out = real(*a, **k)
        if not (once and tag in seen):
            note(f"{tag} ends -> {str(out)[:40] if not hasattr(out, 'pid') else 'pid ' + str(out.pid)}")
            seen.add(tag)
        return out
    setattr(owner, name, traced)


def main() -> None:
    global T0
    ap = argparse.ArgumentParser()
    ap.add_argument("--until", type=float, default=12.0)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args()
    import throughput as tp

    from harness import evaluation, reference
    from harness.process import forkserver, standby, worker
    from harness.batch import run_batch
    from harness.config import load_config

    wid = lambda w: getattr(getattr(w, "proc", None), "pid", id(w))  # noqa: E731
    wrap(forkserver.ForkServer, "ready", lambda a, k: "fork server ready()", once=True)
    wrap(worker.Worker, "ready", lambda a, k: f"worker {wid(a[0])} ready()", once=True)
    wrap(worker.Worker, "prime", lambda a, k: f"worker {wid(a[0])} prime()")
    wrap(standby.Standby, "take", lambda a, k: f"take for {a[1].get('role')} {Path(a[1].get('solution_path') or '').name}")
    wrap(reference.ReferenceSession, "start", lambda a, k: f"reference {a[0].problem.name} start()")
    wrap(evaluation, "evaluate", lambda a, k: f"evaluate {Path(str(a[0])).name}")

    def parent_torch():
        import torch  # noqa: F401 - blocks on the batch's own import thread
        note("parent: torch imported")

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        sols = [s for s in tp.catalog(args.device) if not s["ext"]]
        tp.write_tree(work / "subs", sols)
        tp.write_config(work / "bench.toml", work / "cache", 10.0, False, None,
                        dict(kv.split("=", 1) for kv in args.set))
        cfg = load_config(work / "bench.toml", {"device": args.device})
        T0 = time.perf_counter()
        threading.Thread(target=parent_torch, daemon=True, name="probe-torch").start()
        summary = run_batch([str(work / "subs")], cfg, problem_roots=[str(tp.PROBLEMS)], out=str(work / "run"),
                            show_progress=False)
        wall = time.perf_counter() - T0
    print(f"{len(sols)} solutions, wall {wall:.1f} s, statuses {dict(summary.statuses)}")
    for t, what in sorted(TRACE):
        if t <= args.until:
            print(f"{t:7.3f}  {what}")


if __name__ == "__main__":
    main()
