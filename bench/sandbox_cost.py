"""What the sandbox costs (harness/sandbox.py): the parent's work per jailed process (a uid, a home,
the solution copied, its build folder handed to its group; then every process of the uid killed and
the home removed), the child's (its mount namespace and its view of the machine, its PID namespace
and a proc of its own), and whole
evaluations jailed (with and without the view) against unjailed on a warm build cache.

    python bench/sandbox_cost.py [--runs 3] [--solution tests/fixtures/cpu/honest_cpp.py]
    python bench/sandbox_cost.py --device cuda --solution identity --problem tests/problems/launch_chain.py

Needs root (the sandbox's own condition); prints a table, writes nothing."""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--solution", default=str(ROOT / "tests/fixtures/cpu/honest_cpp.py"))
    ap.add_argument("--problem", default=str(ROOT / "tests/problems/relu_add.py"))
    ap.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    a = ap.parse_args()
    from harness.config import load_config
    from harness.evaluation import evaluate
    from harness.sandbox import JAILS, available
    why = available()
    if why:
        print(f"no sandbox here: {why}")
        return 1
    cache = Path(tempfile.mkdtemp(prefix="sandbox-cost-"))
    os.chmod(cache, 0o755)
    if a.solution == "identity":  # the problem's own Model as ModelNew (bench/kernelbench.py): no build
        from kernelbench import identity_source
        a.solution = str(cache / "identity.py")
        Path(a.solution).write_text(identity_source(Path(a.problem).read_text()))
    cfg = {m: load_config(None, {"cache_dir": str(cache), "device": a.device, "hardening.sandbox": m})
           for m in ("on", "off", "auto")}
    first = evaluate(a.solution, a.problem, cfg["on"])  # builds (jailed) and warms the cache
    print(f"warm-up: {first.status.value}, protections {first.protections}")
    ext = next(p for p in (cache / "ext").iterdir() if not p.name.startswith("."))
    per = []
    for _ in range(20):
        t0 = time.perf_counter()
        jail = JAILS.make(ext, Path(a.solution))
        t1 = time.perf_counter()
        JAILS.release(jail)
        per.append((t1 - t0, time.perf_counter() - t1))
    view = _view_ms(ext, 20, apart=False)
    apart = _view_ms(ext, 20, apart=True)
    spawn = {k: _spawn_ms(20, k) for k in (False, True)}
    import harness.sandbox as sb
    rows = {"off": [], "on, no view": [], "on": []}
    for _ in range(a.runs):
        for mode in rows:
            kept = sb._VIEWS.copy()
            if mode == "on, no view":
                sb._VIEWS["v"] = None
            t0 = time.perf_counter()
            r = evaluate(a.solution, a.problem, cfg[{"off": "off", "on": "on"}.get(mode, "auto")])
            rows[mode].append((time.perf_counter() - t0, r.phases.load_s, r.status.value))
            sb._VIEWS.clear()
            sb._VIEWS.update(kept)
    print("| what | median | min | max |\n|---|---:|---:|---:|")
    for name, xs in (("jail made (ms)", [p[0] * 1e3 for p in per]), ("jail released (ms)", [p[1] * 1e3 for p in per]),
                     ("view made, in the child: mount namespace at birth (ms)", [v[0] for v in view]),
                     ("view made, in the child: read-only mounts, private tmp, own /proc (ms)", [v[1] for v in view]),
                     ("born apart, in the child: mount namespace and a proc of its own at birth (ms)", [v[0] for v in apart]),
                     ("born apart, in the child: the view after it (ms)", [v[1] for v in apart]),
                     ("a child started by the parent, in the harness's PID namespace (ms)", spawn[False]),
                     ("a child started by the parent, born apart (ms)", spawn[True])):
        print(f"| {name} | {statistics.median(xs):.2f} | {min(xs):.2f} | {max(xs):.2f} |")
    for mode in rows:
        wall = [x[0] for x in rows[mode]]
        load = [x[1] for x in rows[mode]]
        print(f"| evaluation, sandbox {mode} (s) | {statistics.median(wall):.2f} | {min(wall):.2f} | {max(wall):.2f} |")
        print(f"| candidate load, sandbox {mode} (s) | {statistics.median(load):.3f} | {min(load):.3f} | {max(load):.3f} |")
    print("statuses:", {m: [x[2] for x in rows[m]] for m in rows})
    return 0


def _spawn_ms(n: int, apart: bool) -> list[float]:
    """The parent's time to start a child (Popen returns once it has exec'd), born apart or not
    (sandbox.born_apart: the namespace made, the thread's own put back)."""
    import subprocess
    from harness.sandbox import born_apart
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        with born_apart(apart):
            p = subprocess.Popen(["/bin/true"])
        out.append((time.perf_counter() - t0) * 1e3)
        p.wait()
    return out


def _view_ms(ext: Path, n: int, apart: bool) -> list[tuple[float, float]]:
    """(namespace, view) in ms, each in a fresh process as a child makes them (sandbox.apart_at_birth,
    then make_view with a home and a build folder to bind back); `apart`: born in a PID namespace of
    its own, so that its birth also mounts a proc of its own."""
    import subprocess
    import harness.sandbox as sb
    if sb.views() is None or (apart and not sb.views()["own_pids"]):
        return [(float("nan"), float("nan"))]
    home = Path(tempfile.mkdtemp(prefix="view-cost-"))
    code = ("import time; t0 = time.perf_counter(); from harness import sandbox as s; t1 = time.perf_counter(); "
            "s.apart_at_birth(); t2 = time.perf_counter(); "
            f"s.make_view([{str(home)!r}, {str(ext)!r}], {sb.views()['hide_pids']}); t3 = time.perf_counter(); "
            "print((t2 - t1) * 1e3, (t3 - t2) * 1e3)")
    out = []
    for _ in range(n):
        with sb.born_apart(apart):
            r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(ROOT), check=True)
        out.append(tuple(float(x) for x in r.stdout.split()))
    os.rmdir(home)
    return out


if __name__ == "__main__":
    sys.exit(main())
