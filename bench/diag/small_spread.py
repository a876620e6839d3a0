"""Why does the median of a small kernel move between evaluations? (#5: relu on 64K floats spread
12.7% over 5 fresh candidate processes, relu_add on 4M floats 1.7%, while one reference process spread
0.8% and 1.1%.)

Each of 6 fresh processes times both kernels with the harness's own child-side loop
(timing.loop.time_calls: hold, read flush, events, fresh inputs per call) for 4 blocks of 50 calls, and
prints every sample. The parent then compares estimators (median, mean, trimmed mean) between
processes and between blocks of one process: a per-process bias shows as a spread between processes
larger than between blocks.
--rotate: each call's inputs placed after a spacer of random size (0-48 MB), so that one process sees
many placements instead of one.
--fork: the processes forked from one that imported torch (no CUDA), as a batch's standbys are.
Usage: python bench/diag/small_spread.py [--procs 6] [--rotate] [--fork]

Its helpers (relu_runner, span_child, child_runs, entry) are chain_bias.py's too."""
import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

KERNELS = {"relu_64k": (1 << 16, 1), "relu_add_4m": (1 << 22, 2)}


def relu_runner(torch, n: int, k: int, spacer=None):
    """What timing.loop.time_calls needs of a worker's Runner, for relu(x) (k=1) or relu(x + y) (k=2) on n
    floats; `spacer()`: bytes to allocate (and hold until the next call) before each call's inputs."""

    class Runner:
        device, cache = "cuda", {}

        def __init__(self):
            self.torch = torch

        def timed_callable(self, variant):
            return (lambda x: torch.relu(x)) if k == 1 else (lambda x, y: torch.relu(x + y))

        def make_inputs(self, seed):
            g = torch.Generator(device="cuda").manual_seed(seed)
            if spacer is not None:  # the inputs land somewhere else in memory each call
                self.spacer = torch.empty(spacer(), dtype=torch.uint8, device="cuda")
            return [torch.randn(n, device="cuda", generator=g) for _ in range(k)]

    return Runner()


def span_child():
    """A child's start for timing by kernel spans: (torch, harness.timing.loop, a CUPTI recorder, an
    RNG), the timing primitives pinned; exits where CUPTI cannot be had."""
    import random

    import torch

    from harness import cupti
    from harness.timing import loop
    from harness.timing.hold import pin
    pin(torch)
    rec, why = cupti.KernelRecorder.open(torch)
    if rec is None:
        raise SystemExit(f"no CUPTI: {why}")
    return torch, loop, rec, random.Random()


def entry(child, main, procs: int) -> None:
    """`script --child` runs one child; `script [--procs N]` runs main(N) over N fresh children."""
    if "--child" in sys.argv:
        child()
    else:
        main(int(sys.argv[sys.argv.index("--procs") + 1]) if "--procs" in sys.argv else procs)


def child_runs(script: str, procs: int, args: list[str] = ()) -> list[dict]:
    """`script --child` in `procs` fresh processes, one after another: each one's last stdout line
    (JSON); a process that failed is reported and left out."""
    runs = []
    for _ in range(procs):
        p = subprocess.run([sys.executable, script, "--child", *args], capture_output=True, text=True, timeout=300)
        if p.returncode:
            print(p.stderr[-2000:])
            continue
        runs.append(json.loads(p.stdout.strip().splitlines()[-1]))
    return runs


def child() -> None:
    import random

    import torch

    from harness.timing import loop
    from harness.timing.hold import pin
    pin(torch)
    rng = random.Random()
    rotate = "--rotate" in sys.argv
    out = {}
    for name, (n, k) in KERNELS.items():
        r = relu_runner(torch, n, k, (lambda: rng.randrange(0, 48 << 20)) if rotate else None)
        blocks = []
        for b in range(4):
            rep = loop.time_calls(r, [rng.getrandbits(62) for _ in range(50)], warmup=5 if b == 0 else 0,
                                  flush_l2=True, npos=0, hold_us=300.0)
            blocks.append(rep["times_ms"])
        out[name] = blocks
    print(json.dumps(out))


def trimmed(xs, frac=0.1):
    xs = sorted(xs)
    k = int(len(xs) * frac)
    return statistics.fmean(xs[k:len(xs) - k])


def forked_runs(procs: int) -> list[dict]:
    """--fork: each process forked from this one after torch's import and before any CUDA (as the
    batch's standbys are, forkserver.py): one address-space layout for all, where fresh processes
    each draw their own (ASLR)."""
    import io
    import os

    import torch  # noqa: F401  (imported once here; CUDA is first touched in each child)
    from harness.timing import loop  # noqa: F401
    runs = []
    for _ in range(procs):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                buf = io.StringIO()
                sys.stdout = buf
                child()
                os.write(w, buf.getvalue().encode())
            finally:
                os._exit(0)
        os.close(w)
        with os.fdopen(r) as f:
            out = f.read()
        os.waitpid(pid, 0)
        runs.append(json.loads(out.strip().splitlines()[-1]))
    return runs


def main(procs: int = 6) -> None:
    runs = []
    if "--fork" in sys.argv:
        runs = forked_runs(procs)
    if not runs:
        runs = child_runs(__file__, procs, ["--rotate"] if "--rotate" in sys.argv else [])
    ests = {"median": statistics.median, "mean": statistics.fmean, "trim10": trimmed, "min": min,
            "p25": lambda xs: sorted(xs)[len(xs) // 4]}
    summary = {}
    for name in KERNELS:
        print(f"\n{name}: per process, all 200 calls (us); then the spread of each estimator")
        print(f"{'proc':>4} " + " ".join(f"{e:>8}" for e in ests) + "   block medians")
        per = {e: [] for e in ests}
        within = {e: [] for e in ests}
        for i, r in enumerate(runs):
            xs = [t for blk in r[name] for t in blk]
            vals = {e: f(xs) * 1e3 for e, f in ests.items()}
            for e in ests:
                per[e].append(vals[e])
                bl = [ests[e](blk) for blk in r[name]]
                within[e].append(max(bl) / min(bl) - 1)
            print(f"{i:4d} " + " ".join(f"{vals[e]:8.3f}" for e in ests) + "   "
                  + " ".join(f"{statistics.median(b) * 1e3:.3f}" for b in r[name]))
        row = {e: {"between_procs_200": max(v) / min(v) - 1, "within_proc_blocks_50": statistics.median(within[e])}
               for e, v in per.items()}
        summary[name] = row
        for e, v in row.items():
            print(f"  {e:>7}: spread between processes (200 calls each) {v['between_procs_200']:.2%}, "
                  f"between blocks of 50 in one process (median over processes) {v['within_proc_blocks_50']:.2%}")
        hist = sorted(round(t * 1e3, 3) for r in runs for blk in r[name] for t in blk)
        counts = {}
        for h in hist:
            counts[h] = counts.get(h, 0) + 1
        top = sorted(counts.items(), key=lambda kv: -kv[1])[:8]
        print("  most common values (us: count):", ", ".join(f"{k}: {c}" for k, c in sorted(top)))
    # one process-wide offset (the same for every kernel in a process) would show as process medians
    # that move together across kernels: a harness kernel timed beside a candidate's could then
    # measure it and take it out
    meds = {name: [statistics.median([t for blk in r[name] for t in blk]) for r in runs] for name in KERNELS}
    a, b = (meds[k] for k in KERNELS)
    if len(a) > 2:
        summary["cross_kernel_r"] = statistics.correlation(a, b)
        print(f"\ncorrelation of the process medians between {' and '.join(KERNELS)}: {summary['cross_kernel_r']:.2f}")
    print(json.dumps(summary))


if __name__ == "__main__":
    entry(child, main, 6)
