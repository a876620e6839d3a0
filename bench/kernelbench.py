"""The harness on the corpus its users score: KernelBench, through `harness batch`.

    python bench/kernelbench.py --levels 2                  # level 2's identity solutions, this GPU
    python bench/kernelbench.py --levels 1 2 3 --limit 10   # the first 10 problems of each level
    python bench/kernelbench.py --generations DIR --levels 2  # a folder of generations instead

An identity solution is the problem file with `class Model` renamed `ModelNew`: PyTorch only, nothing
to build, so every one should pass at a speedup of 1.00. Generations are files named as KernelBench
names them (`level_{L}_problem_{P}_sample_{S}_kernel.py`, or any layout `harness batch` matches).

The batch runs as a child process (`python -m harness.cli batch`); this script samples the resident
memory of the batch's whole process tree and the GPU's used memory while it runs, then reads the run
folder and prints (and writes to OUT/summary.md and OUT/summary.json):
- records per status, records per minute, the batch's wall time;
- the identity speedups: median, p5, p95, how many outside [0.97, 1.03], how many whose own
  interval excludes 1 (identity runs only);
- peak host memory of all the harness's processes (PSS), the host's lowest available memory, peak
  GPU memory used;
- each problem's reference time beside KernelBench's published eager time on an H100
  (baselines/H100_Modal, PyTorch 2.5: a table to read, not a target).
Copy the table into bench/results/kernelbench-<GPU>.md with the date and the code's commit.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Optional

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from harness.batch.health import LOSE_GPU_ENV  # noqa: E402
from harness.cpus import children_by_parent  # noqa: E402

CORPUS = (REPO.parent / "shared" / "kernelbench") if (REPO.parent / "shared" / "kernelbench").is_dir() \
    else REPO / "shared" / "kernelbench"
KB_FILE = re.compile(r"^(\d+)_(.+)\.py$")
MODEL = re.compile(r"\bModel\b")


def problem_files(corpus: Path, levels: list[int], limit: Optional[int], only: list[str]) -> list[tuple[int, int, Path]]:
    """(level, id, path) of the chosen problems, by level then id."""
    out = []
    for level in levels:
        found = []
        for p in sorted((corpus / f"level{level}").glob("*.py")):
            m = KB_FILE.match(p.name)
            if m and (not only or any(s.lower() in p.stem.lower() for s in only)):
                found.append((level, int(m.group(1)), p))
        found.sort(key=lambda t: t[1])
        out += found[:limit] if limit else found
    return out


def identity_source(problem_source: str) -> str:
    """The problem's own code with its model named ModelNew (and every use of the name with it)."""
    return MODEL.sub("ModelNew", problem_source)


def write_identities(problems: list[tuple[int, int, Path]], subs: Path) -> int:
    """One identity solution per problem, KernelBench-named, under subs/identity/."""
    folder = subs / "identity"
    folder.mkdir(parents=True, exist_ok=True)
    for level, pid, path in problems:
        (folder / f"level_{level}_problem_{pid}_sample_0_kernel.py").write_text(identity_source(path.read_text()))
    return len(problems)


def spinner_source(identity: str) -> str:
    """An identity whose forward first queues a one-thread GPU sleep of about 2^40 cycles (minutes):
    its process waits on it, and while a neighbour's timing stops that process the kernel runs on."""
    spin = identity.replace("super(ModelNew,", "super(_Spin,")
    return spin.replace("class ModelNew(", "_SPIN = __import__('torch').cuda._sleep\n\n\nclass _Spin(", 1) + (
        "\n\nclass ModelNew(_Spin):\n    def forward(self, *args):\n        _SPIN(1 << 40)\n"
        "        return super().forward(*args)\n")


def link_generations(src: Path, problems: list[tuple[int, int, Path]], subs: Path) -> int:
    """The generations of the chosen problems, linked under subs/ (their label folders kept)."""
    wanted = {(level, pid) for level, pid, _ in problems}
    n = 0
    for f in sorted(src.rglob("*")):
        m = re.match(r"^level_(\d+)_problem_(\d+)_sample_\d+_kernel$", f.stem)
        if f.is_file() and m and (int(m.group(1)), int(m.group(2))) in wanted:
            dest = subs / f.relative_to(src)
            dest.parent.mkdir(parents=True, exist_ok=True)
            if not dest.exists():
                dest.symlink_to(f.resolve())
            n += 1
    return n


# -- what the batch's processes hold ---------------------------------------------------------------

def tree_memory(root: int) -> dict[int, tuple[int, int]]:
    """Memory of `root` and every process under it, by pid, as (proportional set size, parent pid):
    pages that forked processes share (a fork server's torch) are counted once in all, not once a
    process."""
    kids, todo, out = children_by_parent(), [(root, 0)], {}
    while todo:
        pid, ppid = todo.pop()
        try:
            with open(f"/proc/{pid}/smaps_rollup") as fh:
                out[pid] = (next(int(ln.split()[1]) for ln in fh if ln.startswith("Pss:")) << 10, ppid)
        except (OSError, ValueError, IndexError, StopIteration):
            pass
        todo += [(k, pid) for k in kids.get(pid, [])]
    return out


def _role(pid: int, ppid: int, root: int) -> str:
    if pid == root:
        return "parent"
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "gone"
    if "process.child" in cmd:
        return "child"
    if "forkserver" in cmd:  # the server itself, or a child it forked (which keeps its command line)
        return "fork server" if ppid == root else "child"
    return "other"


def cpu_seconds(pid: int) -> Optional[float]:
    """User and system time of `pid` itself (all its threads), in seconds."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def machine_cpu() -> Optional[tuple[float, float]]:
    """The whole machine's busy and total CPU seconds so far (/proc/stat: every state but idle and
    iowait is busy; steal counts as busy, a VM's CPUs the host gave to others)."""
    try:
        with open("/proc/stat") as fh:
            vals = [int(x) for x in fh.readline().split()[1:]]
        tick = os.sysconf("SC_CLK_TCK")
        return (sum(vals) - vals[3] - vals[4]) / tick, sum(vals) / tick
    except (OSError, ValueError, IndexError):
        return None


def mem_available_bytes() -> Optional[int]:
    try:
        with open("/proc/meminfo") as fh:
            return next(int(ln.split()[1]) for ln in fh if ln.startswith("MemAvailable:")) << 10
    except (OSError, StopIteration, ValueError):
        return None


def gpu_used_bytes() -> Optional[int]:
    """Memory used on every GPU, summed (NVML, else nvidia-smi); None without either."""
    try:
        import pynvml
        pynvml.nvmlInit()
        return sum(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(i)).used
                   for i in range(pynvml.nvmlDeviceGetCount()))
    except Exception:  # noqa: BLE001 - no NVML here: ask nvidia-smi
        pass
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=10)
        return sum(int(x) for x in out.stdout.split()) << 20 if out.returncode == 0 else None
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return None


class Peaks(threading.Thread):
    """Samples the batch's process tree and the GPUs every `every` seconds until stopped."""

    def __init__(self, pid: int, every: float = 0.5):
        super().__init__(daemon=True)
        self.pid, self.every = pid, every
        self.rss = 0
        self.at_peak: dict[str, float] = {}  # GB by role (parent, children, largest child) at the peak
        self.gpu: Optional[int] = None
        self.available: Optional[int] = None  # the host's lowest MemAvailable meanwhile
        # the parent's CPU time (its threads share one interpreter lock: near one core, it is the bound)
        self.parent_cpu_s: Optional[float] = None
        self.parent_busiest: float = 0.0  # the most of one core it used over any 5 s
        # the machine's busy cores in each 1 s window: a batch bound by the host's CPUs keeps them near
        # os.cpu_count(); one bound elsewhere (the driver, the GPU) leaves them idle
        self.busy_cores: list[float] = []
        self.done = threading.Event()

    def run(self) -> None:
        gpu_every, last_gpu = max(self.every, 2.0), 0.0
        window: list[tuple[float, float]] = []
        last_cpu, last_cpu_at = machine_cpu(), time.monotonic()
        while not self.done.is_set():
            if time.monotonic() - last_cpu_at >= 1.0:
                now_cpu = machine_cpu()
                if now_cpu is not None and last_cpu is not None and now_cpu[1] > last_cpu[1]:
                    share = (now_cpu[0] - last_cpu[0]) / (now_cpu[1] - last_cpu[1])
                    self.busy_cores.append(share * (os.cpu_count() or 1))
                last_cpu, last_cpu_at = now_cpu, time.monotonic()
            cpu = cpu_seconds(self.pid)
            if cpu is not None:
                self.parent_cpu_s = cpu
                window = [w for w in window if time.monotonic() - w[0] <= 5.0] + [(time.monotonic(), cpu)]
                if window[-1][0] - window[0][0] >= 4.0:
                    self.parent_busiest = max(self.parent_busiest,
                                              (window[-1][1] - window[0][1]) / (window[-1][0] - window[0][0]))
            tree = tree_memory(self.pid)
            by_pid = {pid: b for pid, (b, _) in tree.items()}
            total = sum(by_pid.values())
            if total > self.rss:
                self.rss = total
                roles = {pid: _role(pid, ppid, self.pid) for pid, (_, ppid) in tree.items()}
                kids = [b for pid, b in by_pid.items() if roles[pid] == "child"]
                self.at_peak = {"parent_gb": round(by_pid.get(self.pid, 0) / 2**30, 2),
                                "children_gb": round(sum(kids) / 2**30, 2), "children": len(kids),
                                "largest_child_gb": round(max(kids, default=0) / 2**30, 2)}
            avail = mem_available_bytes()
            if avail is not None:
                self.available = min(self.available if self.available is not None else avail, avail)
            if time.monotonic() - last_gpu >= gpu_every:
                last_gpu = time.monotonic()
                used = gpu_used_bytes()
                if used is not None:
                    self.gpu = max(self.gpu or 0, used)
            self.done.wait(self.every)


# -- the summary -------------------------------------------------------------------------------------

def _quantile(xs: list[float], q: float) -> Optional[float]:
    if not xs:
        return None
    xs = sorted(xs)
    i = q * (len(xs) - 1)
    lo = int(i)
    return xs[lo] + (xs[min(lo + 1, len(xs) - 1)] - xs[lo]) * (i - lo)


def kb_key(problem_name: str) -> Optional[tuple[str, str]]:
    """("level2", "12_Gemm_Multiply_LeakyReLU.py") for a KernelBench problem's name."""
    parts = problem_name.split("/")
    return (parts[-2], parts[-1] + ".py") if len(parts) >= 2 and parts[-2].startswith("level") else None


def steady_rate(events: Path) -> Optional[float]:
    """Records a minute between the tenth and the ninetieth percentile record (of the last call):
    the rate once the slots are full, without the batch's start (processes, the first references)
    and its tail (fewer evaluations in flight than the slots hold), which a short run weighs heavily."""
    ts = _ends(events)
    lo, hi = len(ts) // 10, len(ts) - 1 - len(ts) // 10
    return round((hi - lo) / (ts[hi] - ts[lo]) * 60, 2) if hi - lo >= 4 and ts[hi] > ts[lo] else None


def start_and_tail(events: Path) -> tuple[Optional[float], Optional[float]]:
    """(when the first record came, how long after the one before it the last came), of the last
    call: the batch's start, and a long evaluation ending it alone (pipeline._plan_order)."""
    ts = _ends(events)
    return (round(ts[0], 1) if ts else None), (round(ts[-1] - ts[-2], 1) if len(ts) > 1 else None)


def _ends(events: Path) -> list[float]:
    """When each evaluation of the last call ended (a resumed run's events hold every call's, each
    with its own clock)."""
    if not events.exists():
        return []
    evs = [json.loads(line) for line in events.read_text().splitlines() if line.strip()]
    last = max((i for i, e in enumerate(evs) if e.get("event") == "start"), default=0)
    return sorted(e["t"] for e in evs[last:] if e.get("event") == "evaluated" and e.get("t") is not None)


def summarize(run: Path, wall_s: float, peaks: Optional[Peaks], baseline: dict, identity: bool) -> dict:
    recs = [json.loads(line) for line in (run / "results.jsonl").read_text().splitlines() if line.strip()]
    statuses: dict[str, int] = {}
    for r in recs:
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1
    sp = [r["speedup"] for r in recs if r["status"] == "passed" and r.get("speedup")]
    out = {
        "records": len(recs), "statuses": statuses, "wall_s": round(wall_s, 1),
        "records_per_min": round(len(recs) / (wall_s / 60), 2) if wall_s > 0 else None,
        "peak_host_pss_gb": round(peaks.rss / 2**30, 2) if peaks else None,
        "peak_gpu_used_gb": round(peaks.gpu / 2**30, 2) if peaks and peaks.gpu is not None else None,
        "min_host_available_gb": round(peaks.available / 2**30, 2) if peaks and peaks.available is not None else None,
        "at_peak": peaks.at_peak if peaks else None,
        "parent_cpu_s": round(peaks.parent_cpu_s, 1) if peaks and peaks.parent_cpu_s is not None else None,
        "parent_busiest_5s": round(peaks.parent_busiest, 2) if peaks else None,
        "cores": os.cpu_count(),
        "busy_cores_mean": round(statistics.fmean(peaks.busy_cores), 1) if peaks and peaks.busy_cores else None,
        "busy_cores_p90": _round(_quantile(peaks.busy_cores, 0.9), 1) if peaks and peaks.busy_cores else None,
        "gpu": next((r["env"].get("gpu_name") for r in recs if r.get("env")), None),
    }
    if identity:
        excl = [r for r in recs if r["status"] == "passed" and r.get("speedup_ci")
                and not (r["speedup_ci"][0] <= 1.0 <= r["speedup_ci"][1])]
        out["identity"] = {
            "passed": len(sp), "median": _round(_quantile(sp, 0.5)), "p5": _round(_quantile(sp, 0.05)),
            "p95": _round(_quantile(sp, 0.95)), "outside_0.97_1.03": sum(not 0.97 <= s <= 1.03 for s in sp),
            "interval_excludes_1": len(excl)}
    # per device slot (a multi-GPU batch): records, and the identities' speedups on each
    by_slot: dict[str, list[dict]] = {}
    for r in recs:
        by_slot.setdefault(r.get("slot") or "-", []).append(r)
    out["slots"] = {name: {"records": len(rs), "gpus": sorted({(r.get("env") or {}).get("gpu_uuid") or "-" for r in rs}),
                           **({"identity_median": _round(_quantile([r["speedup"] for r in rs if r["status"] == "passed"
                                                                    and r.get("speedup")], 0.5)),
                               "identity_outside_0.97_1.03": sum(not 0.97 <= r["speedup"] <= 1.03 for r in rs
                                                                 if r["status"] == "passed" and r.get("speedup"))}
                              if identity else {})}
                    for name, rs in sorted(by_slot.items())}
    out["steady_records_per_min"] = steady_rate(run / "events.jsonl")
    out["first_record_s"], out["last_gap_s"] = start_and_tail(run / "events.jsonl")
    batch_summary = run / "summary.json"
    if batch_summary.exists():
        bs = json.loads(batch_summary.read_text())
        out["lost_slots"], out["moved"] = bs.get("lost_slots") or {}, bs.get("moved", 0)
        out["skipped"] = len(bs.get("skipped") or [])
        # each GPU's share of the batch's wall time held for timing: near 1, the slot is bound by its
        # timing; well under it, by what feeds the timing (process starts, trials, judging)
        bwall = bs.get("wall_s") or 0
        for name, held in (bs.get("device_timing_held_s") or {}).items():
            if name in out["slots"] and bwall:
                out["slots"][name]["timing_held_share"] = round(held / bwall, 3)
    # where an evaluation's time went: per phase, the sum over records and the median record's
    phases: dict[str, list[float]] = {}
    for r in recs:
        for k, v in (r.get("phases") or {}).items():
            if isinstance(v, (int, float)):
                phases.setdefault(k, []).append(float(v))
    out["phases"] = {k: {"sum_s": round(sum(v), 1), "median_s": _round(_quantile(v, 0.5), 3)}
                     for k, v in phases.items() if sum(v) > 0}
    judged: dict[str, int] = {}  # where trials were judged ("parent (why)": a GPU trial that fell back)
    for r in recs:
        for t in r.get("trials") or []:
            where = t.get("judged_on") or "unrecorded"
            judged[where] = judged.get(where, 0) + 1
    out["trials_judged_on"] = judged
    rows = []
    for r in sorted(recs, key=lambda r: r["problem"]):
        key = kb_key(r["problem"])
        kb = baseline.get(key[0], {}).get(key[1], {}).get("mean") if key else None
        rows.append({"problem": r["problem"], "status": r["status"], "ref_ms": _round(r.get("ref_runtime_ms"), 4),
                     "kb_eager_ms": kb, "ref_over_kb": _round(r["ref_runtime_ms"] / kb, 3)
                     if kb and r.get("ref_runtime_ms") else None,
                     "speedup": _round(r.get("speedup")), "error": (r.get("error") or "")[:120] or None})
    out["problems"] = rows
    return out


def _records(run: Path) -> int:
    f = run / "results.jsonl"
    return sum(1 for line in f.read_text().splitlines() if line.strip()) if f.exists() else 0


def _round(x: Optional[float], n: int = 4) -> Optional[float]:
    return None if x is None else round(x, n)


def markdown(s: dict) -> str:
    lines = [f"records {s['records']} in {s['wall_s']} s ({s['records_per_min']} a minute, {s.get('steady_records_per_min')} between the 10th and 90th percentile record) on {s['gpu']}; "
             f"statuses {s['statuses']}; peak host memory (PSS) {s['peak_host_pss_gb']} GB, lowest available "
             f"{s['min_host_available_gb']} GB, peak GPU used {s['peak_gpu_used_gb']} GB; at the peak {s['at_peak']}; "
             f"the parent's CPU {s.get('parent_cpu_s')} s (busiest 5 s: {s.get('parent_busiest_5s')} of a core); "
             f"the machine's busy cores {s.get('busy_cores_mean')} on average, p90 {s.get('busy_cores_p90')}, of {s.get('cores')}; "
             f"first record at {s.get('first_record_s')} s, the last {s.get('last_gap_s')} s after the one before it",
             ""]
    if "identity" in s:
        lines += ["identity speedups: " + ", ".join(f"{k} {v}" for k, v in s["identity"].items()), ""]
    if s.get("slots"):
        lines += ["per slot: " + "; ".join(f"{k} {v}" for k, v in s["slots"].items())
                  + f"; lost {s.get('lost_slots')}, moved {s.get('moved')}, skipped {s.get('skipped')}", ""]
    if s.get("phases"):
        lines += ["phases (sum over records / median record, s): " + ", ".join(
            f"{k} {v['sum_s']}/{v['median_s']}" for k, v in s["phases"].items()), ""]
    if s.get("trials_judged_on"):
        lines += ["trials judged on: " + ", ".join(f"{k} {v}" for k, v in s["trials_judged_on"].items()), ""]
    lines += ["| problem | status | ref ms | KernelBench eager ms | ratio | speedup | error |",
              "|---|---|---:|---:|---:|---:|---|"]
    for r in s["problems"]:
        lines.append(f"| {r['problem']} | {r['status']} | {r['ref_ms'] if r['ref_ms'] is not None else '-'} | "
                     f"{r['kb_eager_ms'] if r['kb_eager_ms'] is not None else '-'} | "
                     f"{r['ref_over_kb'] if r['ref_over_kb'] is not None else '-'} | "
                     f"{r['speedup'] if r['speedup'] is not None else '-'} | {r['error'] or ''} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--levels", type=int, nargs="+", default=[2])
    ap.add_argument("--limit", type=int, default=None, help="the first N problems of each level (by id)")
    ap.add_argument("--only", action="append", default=[], help="problems whose file name holds this text")
    ap.add_argument("--generations", type=Path, default=None, help="score this folder's files, not identities")
    ap.add_argument("--corpus", type=Path, default=CORPUS)
    ap.add_argument("--baseline", type=Path, default=None,
                    help="KernelBench timings JSON (default: the corpus's baselines/H100_Modal eager file)")
    ap.add_argument("--out", type=Path, default=None, help="work folder (default bench/out/kernelbench-<time>)")
    ap.add_argument("--config", type=Path, default=None, help="a harness config file for the batch")
    ap.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    ap.add_argument("--timeout", type=float, default=None, help="stop the batch after this many seconds")
    ap.add_argument("--spinner", type=int, default=None, metavar="ID",
                    help="problem ID's identity also launches a GPU kernel that never ends (a runaway beside "
                         "honest solutions: it should get timeout within timeouts.run_s + 10 s)")
    ap.add_argument("--lose-gpu", default=None, metavar="SLOT@S",
                    help="take SLOT's GPU (cuda:1) away from the harness S seconds in (harness/batch/health.py): "
                         "its work should move to the other slots")
    ap.add_argument("--resume", action="store_true",
                    help="finish the batch in --out (one batch over several calls: the summary adds their wall times)")
    ap.add_argument("batch_args", nargs="*", help="after --: more options for `harness batch`")
    args = ap.parse_args()

    out = args.out or REPO / "bench" / "out" / f"kernelbench-{time.strftime('%Y%m%d-%H%M%S')}"
    subs, run = out / "subs", out / "run"
    problems = problem_files(args.corpus, args.levels, args.limit, args.only)
    if not problems:
        print(f"no problems of levels {args.levels} under {args.corpus}", file=sys.stderr)
        return 2
    n = (link_generations(args.generations, problems, subs) if args.generations
         else write_identities(problems, subs))
    if args.spinner is not None and not args.generations:
        spin = next(subs.glob(f"identity/level_*_problem_{args.spinner}_sample_0_kernel.py"))
        spin.write_text(spinner_source(spin.read_text()))
    print(f"{n} solutions for {len(problems)} problems in {subs}", file=sys.stderr)
    seg_file = out / "segments.json"
    segments = json.loads(seg_file.read_text()) if args.resume and seg_file.exists() else []
    before = _records(run) if args.resume else 0
    cmd = [sys.executable, "-m", "harness.cli", "batch", str(subs), "--problems", str(args.corpus),
           "--out", str(run), "--device", args.device, *(["--config", str(args.config)] if args.config else []),
           *(["--resume"] if args.resume and (run / "results.jsonl").exists() else []), *args.batch_args]
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with open(out / "batch.log", "w") as log:
        env = {**os.environ, **({LOSE_GPU_ENV: args.lose_gpu} if args.lose_gpu else {})}
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env)
        peaks = Peaks(proc.pid)
        peaks.start()
        try:
            rc = proc.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGUSR1)  # the batch's threads' stacks into batch.log, then stop it
            time.sleep(1.0)
            proc.terminate()
            rc = proc.wait()
            print(f"stopped after {args.timeout:g} s", file=sys.stderr)
        peaks.done.set()
        peaks.join()
    wall = time.perf_counter() - t0
    base_file = args.baseline or args.corpus / "baselines" / "H100_Modal" / "baseline_time_torch.json"
    baseline = json.loads(base_file.read_text()) if base_file.exists() else {}
    if not (run / "results.jsonl").exists():
        print(f"the batch wrote no records (rc {rc}); see {out / 'batch.log'}", file=sys.stderr)
        return 1
    segments.append({"wall_s": round(wall, 1), "records_before": before, "records_after": _records(run), "rc": rc,
                     "peak_host_pss_gb": round(peaks.rss / 2**30, 2),
                     "peak_gpu_used_gb": round(peaks.gpu / 2**30, 2) if peaks.gpu is not None else None,
                     "parent_cpu_s": round(peaks.parent_cpu_s, 1) if peaks.parent_cpu_s is not None else None,
                     "parent_busiest_5s": round(peaks.parent_busiest, 2),
                     "busy_cores_mean": round(statistics.fmean(peaks.busy_cores), 1) if peaks.busy_cores else None})
    seg_file.write_text(json.dumps(segments, indent=2) + "\n")
    # over several calls: the records of all, in the sum of their wall times (an evaluation cut off by a
    # call's end is done again by the next, so that time counts too)
    s = summarize(run, sum(g["wall_s"] for g in segments), peaks, baseline, identity=args.generations is None)
    s["batch_rc"], s["command"], s["segments"] = rc, " ".join(cmd), segments
    (out / "summary.json").write_text(json.dumps(s, indent=2) + "\n")
    md = markdown(s)
    (out / "summary.md").write_text(md)
    print(md)
    return 0 if rc == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
