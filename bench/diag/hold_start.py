"""What the launch hold costs a fresh process, built as a Triton kernel (until session 26) against the
PTX kernel loaded through the driver (timing._hold_kernel now). Every process a side is timed in pays
it once: session 24's bench/diag/further_start.py found a fresh further process's start alone at
about 1.1 s, mostly its CUDA context and the hold, and 2-5 s with 4 evaluations in flight.

Each child imports what a standby preloads, makes its CUDA context, then builds and checks the hold
one way (`--way triton` or `ptx`) and launches it 200 times (20 us each, synchronised every 10). It
prints the seconds of each step, its own CPU seconds, and the host microseconds per launch. The
parent runs `--procs` children per way one after another ("alone") and then all at once ("together",
the ways mixed), and prints the medians.
Usage: python bench/diag/hold_start.py [--procs 6]"""
import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _triton_hold(torch):
    """The hold as timing.py built it until session 26: a Triton kernel, launched as two 1024-thread
    blocks per SM."""
    import triton
    from triton.language.extra.cuda import globaltimer

    @triton.jit(do_not_specialize=["ns"])
    def harness_hold(ns):
        t0 = globaltimer()
        t = t0
        while t - t0 < ns:
            t = globaltimer()

    props = torch.cuda.get_device_properties(0)
    blocks = props.multi_processor_count * max(1, props.max_threads_per_multi_processor // 1024)
    return lambda ns: harness_hold[(blocks,)](int(ns), num_warps=32)


def child(way: str) -> None:
    sys.path.insert(0, str(ROOT))
    t = {}
    s = time.perf_counter()
    import torch
    import torch.profiler  # noqa: F401

    from harness import timing
    from harness.process.child import preload_imports
    preload_imports()
    if way == "triton":
        import triton.language  # noqa: F401  (the standby preloaded it until session 26)
    t["preload"] = time.perf_counter() - s
    cpu0 = time.process_time()
    s = time.perf_counter()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    t["context"] = time.perf_counter() - s
    s = time.perf_counter()
    if way == "ptx":
        timing.pin(torch)  # what a standby's priming does: the hold built and checked
        ok = timing.pinned("hold") is not None
        spin = timing.pinned("hold")
        launch = lambda ns: spin(ns / 1e3)  # noqa: E731
    else:
        launch = _triton_hold(torch)
        launch(1000)
        torch.cuda.synchronize()
        ok = True
    t["hold built"] = time.perf_counter() - s
    t["cpu after preload"] = time.process_time() - cpu0
    per = []
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    lens = []
    for i in range(200):
        if i % 10 == 0:
            torch.cuda.synchronize()
            ev[0].record()
        a = time.perf_counter()
        launch(20_000)
        per.append((time.perf_counter() - a) * 1e6)
        if i % 10 == 9:
            ev[1].record()
            torch.cuda.synchronize()
            lens.append(ev[0].elapsed_time(ev[1]) * 100)  # us per hold of 10
    print(json.dumps({"way": way, "ok": ok, **{k: round(v, 4) for k, v in t.items()},
                      "launch us": round(statistics.median(per), 2),
                      "hold us (20 asked)": round(statistics.median(lens), 2)}))


def run(ways: list[str]) -> list[dict]:
    procs = [subprocess.Popen([sys.executable, __file__, "--child", w], stdout=subprocess.PIPE, text=True)
             for w in ways]
    rows = []
    for p in procs:
        out, _ = p.communicate(timeout=300)
        rows.append(json.loads(out.strip().splitlines()[-1]))
    return rows


def main(n: int) -> None:
    keys = ["context", "hold built", "cpu after preload", "launch us", "hold us (20 asked)"]
    print(f"{'when':<9} {'way':<7} {'ok':>4} " + " ".join(f"{k:>18}" for k in keys))
    for when in ("alone", "together"):
        rows = []
        if when == "alone":
            for w in ["triton", "ptx"] * n:
                rows += run([w])
        else:
            rows = run(["triton", "ptx"] * n)
        for way in ("triton", "ptx"):
            rs = [r for r in rows if r["way"] == way]
            med = {k: statistics.median(r[k] for r in rs) for k in keys}
            print(f"{when:<9} {way:<7} {sum(r['ok'] for r in rs):>2}/{len(rs)} "
                  + " ".join(f"{med[k]:>18.4g}" for k in keys))
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(f"children's CPU in all: {r.ru_utime + r.ru_stime:.1f} s")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--procs", type=int, default=6)
    ap.add_argument("--child", default=None)
    a = ap.parse_args()
    if a.child:
        child(a.child)
    else:
        main(a.procs)
