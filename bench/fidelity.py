"""Timing fidelity benchmark (run on a GPU machine): does the harness report the right times?

For kernels spanning ~5 us to ~5 ms (launch-bound, memory-bound, compute-bound), with the harness's
defaults (cold L2, fresh inputs per call, interleaved rounds, adaptive stopping; the torch.compile
baseline off, since it measures something else), it reports:
  - repeat spread: max/min - 1 of the reported median over 5 independent evaluations (target <= 1%);
  - agreement with triton.testing.do_bench (median), same op and shapes, flush held equal: do_bench
    with its flush step swapped for the harness's read flush against the default, and do_bench as
    shipped (a 256 MB zero_) against one harness run with timing.flush_method = "write";
  - agreement with Nsight Compute's gpu__time_duration (--clock-control none, --cache-control all),
    summed over the kernels of one forward;
  - wall time spent timing one solution (candidate and reference together).
Usage: python bench/fidelity.py [--runs 5] [--fresh-reference] [--no-ncu] [--only NAME...] [--config FILE]
                               [--set KEY=VALUE] [--out bench/out]
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# name: (kind, module constants, forward body, inputs)
KERNELS = {
    "relu_64k":      ("launch-bound", "N = 1 << 16", "return torch.relu(x)", "[torch.randn(N)]"),
    "relu_add_4m":   ("memory-bound", "N = 1 << 22", "return torch.relu(x + y)", "[torch.randn(N), torch.randn(N)]"),
    "softmax_8k":    ("memory-bound", "R, C = 8192, 8192", "return torch.softmax(x, dim=1)", "[torch.randn(R, C)]"),
    "relu_add_64m":  ("memory-bound", "N = 1 << 26", "return torch.relu(x + y)", "[torch.randn(N), torch.randn(N)]"),
    "matmul_2k":     ("compute-bound", "M = K = N = 2048", "return x @ y", "[torch.randn(M, K), torch.randn(K, N)]"),
    "matmul_4k_8k":  ("compute-bound", "M, K, N = 4096, 8192, 4096", "return x @ y", "[torch.randn(M, K), torch.randn(K, N)]"),
}

PROBLEM = '''import torch
import torch.nn as nn

{consts}


class Model(nn.Module):
    def forward(self, x, y=None):
        {body}


def get_inputs():
    return {inputs}


def get_init_inputs():
    return []
'''
SOLUTION = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x, y=None):
        {body}
'''

NCU_TARGET = '''import sys, torch
sys.path.insert(0, sys.argv[2])
import importlib.util
spec = importlib.util.spec_from_file_location("p", sys.argv[1]); p = importlib.util.module_from_spec(spec); spec.loader.exec_module(p)
torch.backends.cudnn.allow_tf32 = False; torch.backends.cuda.matmul.allow_tf32 = False
m = p.Model().cuda()
sets = []
for s in range(int(sys.argv[3])):
    torch.manual_seed(s)
    with torch.device("cuda"):
        sets.append(p.get_inputs())
with torch.no_grad():
    for _ in range(3):
        m(*sets[0])
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    for inp in sets:
        m(*inp)
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()
'''


def write_files(tmp: Path) -> dict[str, tuple[Path, Path]]:
    out = {}
    for name, (_, consts, body, inputs) in KERNELS.items():
        prob = tmp / f"{name}.py"
        prob.write_text(PROBLEM.format(consts=consts, body=body, inputs=inputs))
        sol = tmp / f"{name}_solution.py"
        sol.write_text(SOLUTION.format(body=body))
        out[name] = (prob, sol)
    return out


FRESH_REFERENCE = False  # --fresh-reference: a reference session per run
OVERRIDES: dict = {}  # --set KEY=VALUE: harness config for every harness run (an A/B of a timing knob)
CONFIG = None  # --config FILE: a config file under the overrides, e.g. configs/fidelity.toml


def harness_runs(prob: Path, sol: Path, runs: int, flush: str = "read"):
    from harness.config import load_config
    from harness.evaluation import evaluate
    from harness.problems import find_problem
    from harness.reference import ReferenceSession
    # one correctness trial: this benchmark is about the timing, and full-size outputs are large
    cfg = load_config(CONFIG, {"device": "cuda", "timing.compile_baseline": "off", "correctness.trials": 1,
                             "timing.flush_method": flush, **OVERRIDES})
    meds, walls, refs, counts, tele = [], [], [], [], []
    problem = find_problem(prob)

    def run(ref):
        r = evaluate(sol, problem, cfg, reference=ref)
        assert r.status.value == "passed", (r.status, r.error, r.flags)
        meds.append(r.runtime_ms)
        refs.append(r.ref_runtime_ms)
        walls.append(r.phases.timing_s)
        counts.append(r.runtime_stats.count)
        tm = r.timing_method
        tele.append({"cand_ms": r.runtime_ms, "ref_ms": r.ref_runtime_ms, "temp_c": tm.get("temperature_c"),
                     "power_w_max": tm.get("power_w_max"), "power_capped_ms": tm.get("power_capped_ms"),
                     "thermal_ms": tm.get("thermal_limited_ms"), "reasons": tm.get("clock_event_reasons"),
                     "sm_mhz": tm.get("sm_clock_mhz_after_rounds"), "mem_mhz": tm.get("mem_clock_mhz"),
                     "retaken": len(tm.get("rounds_retaken") or []), "wall_s": tm.get("timing_wall_s"),
                     "hold_us": tm.get("launch_hold_us"), "method": tm.get("method"),
                     "events_ms": (tm.get("events_median_ms") or {}).get("candidate"),
                     "speedup": r.speedup, "ci": r.speedup_ci, "ci_calls": tm.get("speedup_ci_calls"),
                     "launch_ms": (tm.get("cand_launch_ms_median"), tm.get("ref_launch_ms_median")),
                     "leaked": (tm.get("cand_launch_leaked_calls"), tm.get("ref_launch_leaked_calls")),
                     "processes": tm.get("processes"), "pair_medians_ms": tm.get("pair_medians_ms"),
                     "span_basis_ms": tm.get("kernel_span_basis_ms"), "fallback": tm.get("kernel_span_fallback")})
        print(f"  {prob.stem} run {len(meds)} ({flush}): {tele[-1]}", file=sys.stderr, flush=True)
        return r

    # each run is a fresh candidate process; by default against one live reference (as a batch
    # does), with --fresh-reference each against its own (as separate `harness eval` calls are)
    if FRESH_REFERENCE:
        for _ in range(runs):
            with ReferenceSession(problem, cfg, "cuda", "full", None) as ref:
                r = run(ref)
    else:
        with ReferenceSession(problem, cfg, "cuda", "full", None) as ref:
            for _ in range(runs):
                r = run(ref)
    return meds, refs, walls, counts, r, tele


def do_bench(prob: Path, flush: str = "write") -> float | None:
    """triton's do_bench median. flush="write" is do_bench as shipped (its cache flush is a zero_()
    of 256 MB); "read" swaps that one step for a reduction over the same buffer, the harness's
    default, so the two methods can be compared with the flush held equal."""
    import importlib.util

    import torch
    import triton.testing
    spec = importlib.util.spec_from_file_location("p_" + prob.stem, prob)
    p = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(p)
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    m = p.Model().cuda()
    torch.manual_seed(0)
    with torch.device("cuda"):
        inputs = p.get_inputs()
    patched = None
    if flush == "read":
        from triton import runtime
        drv = runtime.driver.active
        if not hasattr(drv, "clear_cache"):
            return None  # an older triton that zeroes its buffer inline: nothing to swap
        patched = (drv, drv.clear_cache)
        drv.clear_cache = lambda cache: cache.sum()
    try:
        with torch.no_grad():
            return float(triton.testing.do_bench(lambda: m(*inputs), warmup=25, rep=100, return_mode="median"))
    finally:
        if patched:
            patched[0].clear_cache = patched[1]


def ncu_time(prob: Path, tmp: Path, calls: int = 3) -> float | None:
    ncu = shutil.which("ncu") or next((str(p) for p in Path("/opt/nvidia").glob("nsight-compute/*/ncu")), None) \
        or next((str(p) for p in Path("/usr/local/cuda/bin").glob("ncu")), None)
    if not ncu:
        return None
    target = tmp / "ncu_target.py"
    target.write_text(NCU_TARGET)
    cmd = [ncu, "--profile-from-start", "off", "--clock-control", "none", "--cache-control", "all",
           "--metrics", "gpu__time_duration.sum", "--csv", sys.executable, str(target), str(prob), str(ROOT), str(calls)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    rows = [r for r in csv.reader(io.StringIO("\n".join(l for l in p.stdout.splitlines() if l.startswith('"'))))]
    if not rows:
        print("ncu produced no rows:", p.stderr[-500:], p.stdout[-500:], file=sys.stderr)
        return None
    head = rows[0]
    iv, iu = head.index("Metric Value"), head.index("Metric Unit")
    total = 0.0
    for r in rows[1:]:
        v = float(r[iv].replace(",", ""))
        unit = r[iu]
        total += v * {"nsecond": 1e-6, "usecond": 1e-3, "msecond": 1.0, "second": 1e3}.get(unit, 1e-6)
    return total / calls


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--no-ncu", action="store_true")
    ap.add_argument("--only", nargs="*")
    # bench/out (ignored): bench/results holds the curated history, each run's table added by hand
    ap.add_argument("--out", default=str(ROOT / "bench" / "out"))
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="harness config override for the harness runs, e.g. timing.launch_hold_us=0")
    ap.add_argument("--config", default=None, help="a harness config file for the harness runs (default: the defaults)")
    ap.add_argument("--fresh-reference", action="store_true",
                    help="each run starts its own reference session, as separate `harness eval` calls do")
    args = ap.parse_args()
    global FRESH_REFERENCE, CONFIG
    FRESH_REFERENCE = args.fresh_reference
    CONFIG = args.config
    for kv in args.set:
        k, v = kv.split("=", 1)
        OVERRIDES[k] = json.loads(v) if v[:1].isdigit() or v in ("true", "false") else v
    import torch
    gpu = torch.cuda.get_device_name(0)
    tmp = Path(tempfile.mkdtemp(prefix="fidelity-"))
    files = write_files(tmp)
    rows = []
    for name, (prob, sol) in files.items():
        if args.only and name not in args.only:
            continue
        t0 = time.perf_counter()
        meds, refs, walls, counts, last, tele = harness_runs(prob, sol, args.runs)
        wmeds = harness_runs(prob, sol, 1, flush="write")[0]
        db_w, db_r = do_bench(prob, "write"), do_bench(prob, "read")
        nc = None if args.no_ncu else ncu_time(prob, tmp)
        med = statistics.median(meds)
        rows.append({
            "kernel": name, "kind": KERNELS[name][0], "harness_ms": med,
            "spread_pct": (max(meds) / min(meds) - 1) * 100,
            "ref_spread_pct": (max(refs) / min(refs) - 1) * 100,
            "do_bench_ms": db_w, "do_bench_read_ms": db_r, "harness_write_ms": wmeds[0],
            "vs_do_bench_pct": None if db_r is None else (med / db_r - 1) * 100,
            "write_vs_do_bench_pct": (wmeds[0] / db_w - 1) * 100,
            "ncu_ms": nc, "vs_ncu_pct": None if nc is None else (med / nc - 1) * 100,
            "timing_wall_s": max(walls), "samples": statistics.median(counts),
            "clock_mhz": last.timing_method.get("sm_clock_mhz_median"),
            "hold_us": statistics.median(t["hold_us"] or 0 for t in tele),
            "method": "/".join(sorted({str(t["method"]) for t in tele})),
        })
        rows[-1]["runs_ms"] = [round(x, 5) for x in meds]
        rows[-1]["ref_runs_ms"] = [round(x, 5) for x in refs]
        rows[-1]["telemetry"] = tele
        print(f"{name}: {rows[-1]}  ({time.perf_counter() - t0:.0f}s)", file=sys.stderr, flush=True)
    lines = [f"# Timing fidelity on {gpu}", "",
             *([f"Harness config file: {CONFIG}", ""] if CONFIG else []),
             *([f"Harness config overrides: {OVERRIDES}", ""] if OVERRIDES else []),
             *(["Each run against its own reference session (--fresh-reference).", ""] if FRESH_REFERENCE else []),
             f"torch {torch.__version__}; {args.runs} independent harness evaluations per kernel (candidate side, "
             "defaults: cold L2 by a read flush, fresh inputs per call, interleaved rounds, adaptive stopping). "
             "ncu: gpu__time_duration.sum per forward, --clock-control none --cache-control all. do_bench: "
             "triton.testing.do_bench median (warmup 25 ms, rep 100 ms), as shipped (write flush: zero_ of 256 MB) "
             "and with its flush step swapped for a read of the same buffer; 'vs do_bench' compares like with "
             "like: the harness default against do_bench with a read flush, and one harness run with "
             "`timing.flush_method = \"write\"` against do_bench as shipped.", "",
             "| kernel | kind | harness median ms | spread over runs | ref spread | ncu ms | vs ncu | do_bench (read flush) ms | vs do_bench | harness write-flush ms | do_bench as shipped ms | write vs do_bench | timing wall s | samples | SM MHz | hold us | method |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    fmt = lambda v, f: "-" if v is None else format(v, f)  # noqa: E731
    for r in rows:
        lines.append(f"| {r['kernel']} | {r['kind']} | {r['harness_ms']:.4f} | {r['spread_pct']:.2f}% | "
                     f"{r['ref_spread_pct']:.2f}% | {fmt(r['ncu_ms'], '.4f')} | {fmt(r['vs_ncu_pct'], '+.1f')}% | "
                     f"{fmt(r['do_bench_read_ms'], '.4f')} | {fmt(r['vs_do_bench_pct'], '+.1f')}% | "
                     f"{r['harness_write_ms']:.4f} | {r['do_bench_ms']:.4f} | {r['write_vs_do_bench_pct']:+.1f}% | "
                     f"{r['timing_wall_s']:.2f} | {r['samples']:.0f} | {r['clock_mhz']} | {r['hold_us']:.0f} | {r['method']} |")
    lines += ["", "Per run (the parent's NVML readings over the kept rounds: temperature range, peak power, time the "
              "GPU spent power-capped during those rounds, clock-event reasons seen after them, rounds re-taken):", "",
              "| kernel | run | candidate ms | reference ms | temp C | power W max | power-capped ms | reasons | SM / mem MHz | re-taken | hold us | launch ms cand/ref | leaked calls cand/ref | candidate's events ms | span basis ms | processes cand/ref | each pair's medians, cand/ref (us) |",
              "|---|---:|---:|---:|---|---:|---:|---|---|---:|---:|---|---|---:|---:|---|---|"]
    for r in rows:
        for i, t in enumerate(r["telemetry"], 1):
            lines.append(f"| {r['kernel']} | {i} | {t['cand_ms']:.4f} | {t['ref_ms']:.4f} | {t['temp_c']} | "
                         f"{t['power_w_max']} | {t['power_capped_ms']} | {','.join(t['reasons'] or []) or '-'} | "
                         f"{t['sm_mhz']} / {t['mem_mhz']} | {t['retaken']} | {t['hold_us']} | "
                         f"{t['launch_ms'][0]}/{t['launch_ms'][1]} | {t['leaked'][0]}/{t['leaked'][1]} | {t['events_ms'] or '-'} | "
                         f"{t['span_basis_ms'] or '-'} | {'/'.join(str(v) for v in (t['processes'] or {}).values()) or '-'} | "
                         f"{', '.join(f'{(c or 0) * 1e3:.2f}/{(r or 0) * 1e3:.2f}' for c, r in t['pair_medians_ms'] or []) or '-'} |")
    falls = [f"- {r['kernel']} run {i}: {t['fallback']}" for r in rows
             for i, t in enumerate(r["telemetry"], 1) if t.get("fallback")]
    if falls:  # why a run that asked for kernel spans reports events
        lines += ["", "Kernel spans asked for and not reported:", "", *falls]
    text = "\n".join(lines) + "\n"
    print(text)
    out = Path(os.environ.get("OUT") or args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"fidelity-{gpu.replace(' ', '_')}.md").write_text(text)


if __name__ == "__main__":
    main()
