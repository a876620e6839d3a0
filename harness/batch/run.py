"""`harness batch`: many solutions, many problems, every GPU busy.

Two stages overlap. Builds run on a pool of CPU workers (each an isolated child, no GPU visible) and
fill the content-addressed build cache; evaluations run on device slots, each slot pulling the next
built solution whenever it has room (`[batch] concurrent_evaluations` per GPU: untimed phases overlap,
timing is exclusive, see sharing.py), preferring the problems whose reference it already holds.
A failed build never reaches a GPU: its record is written as soon as the build ends.

The run directory (results/RUN):
  results.jsonl   one EvalResult per line, appended (flush + fsync) as each solution finishes
  config.json     the effective config (and its digest); env.json: the machine's fingerprint
  events.jsonl    the run's timeline: each build and each evaluation as it ends (seconds since the
                  start), and skipped solutions (matched no problem, or the problem itself failed)
  summary.json    counts and times of the run; leaderboard.csv, leaderboard_summary.csv
`--resume` skips the items that already have a record (same solution, problem and config digests)
and finishes the rest.
"""
from __future__ import annotations

import importlib
import json
import os
import secrets
import signal
import threading
import time
from pathlib import Path
from typing import Optional

from .. import cpus
from ..config import Config
from ..memory import Admission
from ..problems import DEFAULT_ROOTS, discover, find_problem
from .devices import GpuProbe, cuda_arch_list, fingerprint, make_slots
from .executor import DeviceSlot, Executor, LocalExecutor
from .pipeline import BatchSummary, Pipeline
from .plan import RULES, SOLUTION_SUFFIXES, BatchError, Item, Skipped, plan_items
from .runfolder import EventLog, ResultsFile, RunLock, default_run_dir, read_records, record_key, run_id


def kill_children() -> None:
    """Every worker is a child of this process leading its own process group: end them all."""
    me = os.getpid()
    for d in Path("/proc").glob("[0-9]*"):
        try:
            stat = (d / "stat").read_text()
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == me:
            for kill in (lambda p: os.killpg(p, signal.SIGKILL), lambda p: os.kill(p, signal.SIGKILL)):
                try:
                    kill(int(d.name))
                    break
                except (ProcessLookupError, PermissionError):
                    continue


def compile_plan(device: str, workers: Optional[int] = None, cores: Optional[int] = None) -> tuple[int, int]:
    """(parallel builds, compiler jobs per build). As many builds as cores, at SCHED_IDLE priority
    (build.idle_priority), so they only take CPU that evaluations leave idle. A CUDA extension
    compiles its .cpp and its .cu at once (2 jobs), but not for long: ninja's logs show the .cpp done
    in about a third of the .cu's time, which then compiles alone. Half as many builds as cores left
    half the cores idle for most of each build, in two slow waves (a cold batch 10-20% slower;
    bench/results/throughput-cuda.md). With a build per core the cores stay full and the builds end
    together, near the CPU floor."""
    if cores is None:
        cores = len(cpus.available()) or os.cpu_count() or 1
    jobs = max(1, int(os.environ.get("MAX_JOBS") or (2 if device == "cuda" else 1)))
    return workers or cores, jobs


def run_batch(paths: list[str], cfg: Config, *, problem: Optional[str] = None,
              problem_roots: Optional[list[str]] = None, out: Optional[str] = None, resume: bool = False,
              label: Optional[str] = None, gpus: Optional[str] = None, compile_workers: Optional[int] = None,
              console=None, quiet: bool = False, show_progress: bool = True, backend: str = "local",
              address: Optional[str] = None) -> BatchSummary:
    from rich.console import Console

    console = console or Console(stderr=True)
    t_start = time.perf_counter()
    _import_in_background()
    probe = GpuProbe() if cfg.device != "cpu" else None
    items, skipped = _plan(paths, problem, problem_roots, label, resume, console, probe)
    cfg, slots, gpu_info = resolve_devices(cfg, gpus, probe)
    device, size = cfg.device, cfg.size
    dtype = None if cfg.dtype == "auto" else cfg.dtype

    run_dir = Path(out) if out else default_run_dir()
    results_path = run_dir / "results.jsonl"
    lock = RunLock(run_dir)  # one writer: a second batch on this folder is refused, not interleaved
    try:
        _open_run_dir(run_dir, cfg, resume, device, slots, gpu_info)
        summary = BatchSummary(run_dir=run_dir, items=len(items), skipped=list(skipped))
        events = EventLog(run_dir / "events.jsonl")
        events.write("start", items=len(items), device=device, slots=[s.name for s in slots], resume=resume)
        for sk in skipped:
            events.write("skipped", **sk.__dict__)
        if resume:
            items = _still_to_do(items, cfg, results_path, summary, console)

        executor, lender, compile_env = make_executor(device, slots, cfg, compile_workers, size, dtype, backend,
                                                      address)
        results = ResultsFile(results_path, run_id(run_dir))
        # a line per finished solution, in a terminal too (above the progress display): its verdict
        # and, where it failed, why
        pipe = Pipeline(items, cfg, executor, device, size, dtype, results, events, summary, console,
                        not quiet, compile_env)
        summary.setup_s = time.perf_counter() - t_start
        if items and not quiet:  # before the first verdict, which can be a build's minute away
            builds = sum(it.builds for it in items)
            console.print(f"scoring {len(items)} solution(s) of {len({it.problem.name for it in items})} problem(s) on "
                          f"{', '.join(s.name for s in slots)} into {run_dir}"
                          + (f"; {builds} of them build{'s an extension' if builds == 1 else ' extensions'} first (each up "
                             "to about a CPU-minute; a CUDA one on a CPU run is turned away at once)"
                             + (", the rest are scored meanwhile" if builds < len(items) else "")
                             if builds else ""), highlight=False, soft_wrap=True)

        old_term = signal.getsignal(signal.SIGTERM)
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, _on_term)
        try:
            if items:
                _run_with_progress(pipe, console, show_progress and console.is_terminal)
            t_end = time.perf_counter()
            executor.shutdown()
            summary.shutdown_s = time.perf_counter() - t_end
        except KeyboardInterrupt:
            summary.interrupted = True
            executor.shutdown(cancel=True)
            kill_children()
            console.print(f"[red]interrupted[/]: {summary.records} record(s) written to {results_path}; "
                          "finish with --resume", highlight=False, soft_wrap=True)
        finally:
            results.close()
            cpus.CLAIMS.release(cpus.slots_cpus(slots))  # this batch's timing CPUs, for others
            if threading.current_thread() is threading.main_thread():
                signal.signal(signal.SIGTERM, old_term)
            _close_summary(summary, t_start, pipe, executor, lender, events)

        _write_leaderboard(run_dir, summary, console)
        if summary.interrupted:
            raise KeyboardInterrupt
    finally:
        lock.release()
    return summary


# --------------------------------------------------------------------------------------------------
# run_batch's steps, in the order it takes them

def _import_in_background() -> None:
    """The parent judges with torch (correctness.py): its import (2-5 s) runs beside the planning,
    the probe and the first candidates' start instead of before them; pandas (the leaderboard at
    the end, 0.6-0.8 s on an H200 machine) likewise."""
    for mod in ("torch", "pandas"):
        threading.Thread(target=importlib.import_module, args=(mod,), daemon=True, name=f"import-{mod}").start()


def _plan(paths: list[str], problem: Optional[str], problem_roots: Optional[list[str]], label: Optional[str],
          resume: bool, console, probe: Optional[GpuProbe]) -> tuple[list[Item], list[Skipped]]:
    """The items to run and the files skipped; a usage error stops the GPU probe."""
    try:
        roots = [Path(r) for r in (problem_roots or DEFAULT_ROOTS)]
        roots_text = ", ".join(str(r) for r in roots)
        try:
            fixed = find_problem(problem, problem_roots or None) if problem else None
        except LookupError as e:
            raise BatchError(str(e)) from None
        problems = discover(roots)
        ignored: list[Path] = []
        items, skipped = plan_items(paths, problems, fixed, label, roots_text, ignored)
        for sk in skipped:
            console.print(f"[yellow]skipped[/] {sk.solution}: {sk.reason}", highlight=False, soft_wrap=True)
        if skipped:  # the rules once, not with every file
            console.print(f"The {RULES}. Problems searched: {roots_text} ({len(problems)} problems).",
                          highlight=False, soft_wrap=True)
        if ignored:
            console.print(f"not read as solutions ({len(ignored)}: only {', '.join(sorted(SOLUTION_SUFFIXES))} files, not "
                          f"README, LICENSE or notes): {_first(ignored)}", highlight=False, soft_wrap=True)
        if not items and not skipped and not resume:
            raise BatchError(f"no solution files under {', '.join(map(str, paths))} (a solution is a "
                             f"{', '.join(sorted(SOLUTION_SUFFIXES))} file)")
        if not items and not resume:
            raise BatchError(f"no solution matched a problem ({len(skipped)} file(s) skipped)")
    except BaseException:
        if probe is not None:
            probe.cancel()
        raise
    return items, skipped


def resolve_devices(cfg: Config, gpus: Optional[str], probe: Optional[GpuProbe] = None
                    ) -> tuple[Config, list[DeviceSlot], list[dict]]:
    """The slots (a GPU each, or the CPU) configured, and the config with its device and size
    resolved (`auto` no more): what a batch and an Evaluator run with."""
    from ..evaluation import resolve_size
    device, slots, gpu_info = make_slots(cfg.device, gpus, probe)
    _configure_slots(cfg, device, slots, gpu_info)
    return cfg.model_copy(update={"device": device, "size": resolve_size(cfg, device)}), slots, gpu_info


def _configure_slots(cfg: Config, device: str, slots: list[DeviceSlot], gpu_info: list[dict]) -> None:
    """Each slot's lanes, and the arch list that builds target."""
    for s in slots:
        s.concurrency = max(1, cfg.batch.concurrent_evaluations if s.device == "cuda"
                            else cfg.batch.cpu_concurrent_evaluations)
        s.stop_untimed = cfg.batch.stop_untimed_phases
        s.timing_cpus = cfg.hardening.timing_cpus
    if device == "cuda" and not os.environ.get("TORCH_CUDA_ARCH_LIST"):
        # one arch list for builds and evaluations alike: it is part of the build cache key, and the
        # build children see no GPU to ask
        os.environ["TORCH_CUDA_ARCH_LIST"] = cuda_arch_list(gpu_info)


def _open_run_dir(run_dir: Path, cfg: Config, resume: bool, device: str, slots: list[DeviceSlot],
                  gpu_info: list[dict]) -> None:
    """Refuse a folder that holds results (unless resumed with the same config); write config.json
    and env.json."""
    results_path = run_dir / "results.jsonl"
    # the run's own id, inside every record's MAC (records/signing.py): a signed line of another run
    # does not verify in this one
    cfg_json = {"digest": cfg.digest(), "run_id": secrets.token_hex(16), **cfg.model_dump()}
    if run_dir.exists() and results_path.exists() and not resume:
        raise BatchError(f"{run_dir} already holds results; use --resume to finish it, or another --out")
    if resume and (run_dir / "config.json").exists():
        kept = json.loads((run_dir / "config.json").read_text())
        old = kept.get("digest")
        cfg_json["run_id"] = str(kept.get("run_id") or cfg_json["run_id"])
        if old != cfg_json["digest"]:
            raise BatchError(f"{run_dir} was run with another config (digest {old}, now {cfg_json['digest']}): "
                             "its records would not be comparable; use another --out")
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(json.dumps(cfg_json, indent=2) + "\n")
    (run_dir / "env.json").write_text(json.dumps(fingerprint(device, slots, gpu_info), indent=2) + "\n")


def _still_to_do(items: list[Item], cfg: Config, results_path: Path, summary: BatchSummary,
                 console) -> list[Item]:
    """--resume: the items without a record yet."""
    digest = cfg.digest()
    records, passed_over = read_records(results_path, signed_only=True, run_id=run_id(summary.run_dir))
    if passed_over:  # a line the harness did not sign (or altered since) proves nothing: its item runs again
        summary.unsigned = passed_over
        console.print(f"[yellow]{passed_over} line(s) of {results_path} carry no valid signature of this "
                      "harness: passed over, their items run again[/]", highlight=False, soft_wrap=True)
    have = {record_key(r.get("label"), r.get("solution", ""), r.get("solution_hash"), r.get("problem_hash"),
                       r.get("config_hash")) for r in records}
    todo = [it for it in items if record_key(it.label, str(it.path), it.solution_hash, it.problem.source_hash,
                                             digest) not in have]
    summary.resumed = len(items) - len(todo)
    if summary.resumed:
        console.print(f"resuming {summary.run_dir}: {summary.resumed} item(s) already have a record, "
                      f"{len(todo)} to go", highlight=False, soft_wrap=True)
    return todo


def make_executor(device: str, slots: list[DeviceSlot], cfg: Config, compile_workers: Optional[int], size: str,
                  dtype: Optional[str], backend: str = "local",
                  address: Optional[str] = None) -> tuple[Executor, Optional[cpus.Lender], dict[str, str]]:
    """The slots' timing CPUs, the build workers, the executor; (executor, lender, the builds' env).
    `backend` "ray": builds and slots on a Ray cluster at `address` (a local one where None)."""
    if backend == "ray":
        from .ray_backend import RayExecutor, available
        why = available()
        if why:
            raise BatchError(why)
        workers, jobs = compile_plan(device, compile_workers)
        executor = RayExecutor(slots, workers, size, dtype, address, host_gb=cfg.memory.host_gb,
                               gpu_gb=cfg.memory.gpu_gb)
        return executor, None, {"CUDA_VISIBLE_DEVICES": "", "MAX_JOBS": str(jobs)}
    from ..sandbox import keep_off_references
    if cfg.batch.pch_for(device):  # before any build or standby takes its environment
        from .. import pch
        pch.start(Path(cfg.cache_dir), device)
    background, lender = None, None
    if device == "cuda":  # timing CPUs per GPU, kept free of builds and standbys (cpus.py)
        pairs, background = cpus.slot_cpus(len(slots), mode=cfg.hardening.timing_cpus, claim=True)
        for s, (ref, cand) in zip(slots, pairs):
            s.timing_cpu, s.cand_cpu, s.background_cpus = ref, cand, background
        if cfg.batch.lend_timing_cpus:  # ...but lent to the builds while nothing is timed there
            lender = cpus.Lender.plan(sorted({c for p in pairs for c in p if c is not None}, reverse=True),
                                      background)
        keep_off_references(True, cfg.timing.cpu_threads, pairs)
    else:
        keep_off_references(False, cfg.timing.cpu_threads)
    build_cpus = lender.mask() if lender else background
    workers, jobs = compile_plan(device, compile_workers, len(build_cpus) if build_cpus else None)
    executor = LocalExecutor(slots, workers, size, dtype, lender=lender,
                             admission=Admission(cfg.memory.host_gb, cfg.memory.gpu_gb))
    return executor, lender, {"CUDA_VISIBLE_DEVICES": "", "MAX_JOBS": str(jobs)}


def _on_term(*_):
    raise KeyboardInterrupt


def _close_summary(summary: BatchSummary, t_start: float, pipe: Pipeline, executor: Executor,
                   lender: Optional[cpus.Lender], events: EventLog) -> None:
    """The run's times and counts into the summary, the end event and summary.json."""
    summary.wall_s = time.perf_counter() - t_start
    summary.device_s = {s.slot.name: s.busy_s for s in pipe.slots}
    summary.occupied_s = {s.slot.name: s.occupied_s for s in pipe.slots}
    summary.references = executor.references_started()
    summary.overdue = executor.overdue_phases()
    summary.held_s = executor.held_seconds()
    if lender is not None:
        summary.reclaims, summary.reclaim_s = lender.reclaims, lender.reclaim_s
    events.write("end", **{k: v for k, v in summary.to_json().items() if k != "skipped"})
    events.close()
    (summary.run_dir / "summary.json").write_text(json.dumps(summary.to_json(), indent=2) + "\n")


def _write_leaderboard(run_dir: Path, summary: BatchSummary, console) -> None:
    from ..leaderboard import CAVEATS, caveated, label_summary, load_records, measured_on, per_problem, render_summary, write_csv
    df = load_records([run_dir], signed_only=True)
    if not df.empty:
        pp, ls = per_problem(df), label_summary(df)
        write_csv(pp, ls, run_dir / "leaderboard.csv")
        render_summary(ls, console, title=f"{run_dir}  ({summary.records} new records, {summary.resumed} earlier, "
                                          f"{len(summary.skipped)} skipped, {summary.wall_s:.0f}s)")
        console.print(measured_on(df), highlight=False, soft_wrap=True)
        marked = int(df["flags"].map(caveated).sum())
        # what a flag on a line above means, where the terminal is all a user reads (a new user's trial)
        console.print((f"{marked} record(s) with a flag that puts its speedup in question ({', '.join(CAVEATS)}); "
                       if marked else "") + "every verdict and flag: docs/record.md", highlight=False, soft_wrap=True)
        unsupported = df[df.status == "unsupported"]
        if not unsupported.empty:  # not failures, and out of `solved`: say why they are not counted
            console.print(f"{len(unsupported)} solution(s) need hardware this machine lacks (`unsupported`, "
                          f"not counted in solved or fast_p): "
                          f"{_first(sorted(os.path.relpath(f) for f in unsupported.solution))}",
                          highlight=False, soft_wrap=True)
        try:  # tables and plots to look at; the records are written, so nothing here may fail the run
            from ..runreport import write
            made = write([run_dir], run_dir)
            if made is not None:
                console.print(f"report: {made[1]}", highlight=False, soft_wrap=True)
        except Exception as e:  # noqa: BLE001
            console.print(f"[yellow]no report[/]: {type(e).__name__}: {e}", highlight=False, soft_wrap=True)


def _first(things: list, n: int = 5) -> str:
    """The first `n`, and "..." where there are more."""
    return ", ".join(str(t) for t in things[:n]) + (" ..." if len(things) > n else "")


def _run_with_progress(pipe: Pipeline, console, live: bool) -> None:
    """An overall bar (done of total, elapsed, remaining), the build and evaluation counts, and what
    each device slot is doing, on stderr."""
    if not live:
        pipe.run()
        return
    from rich.console import Group
    from rich.live import Live
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)
    from rich.text import Text

    bar = Progress(TextColumn("[bold]batch"), BarColumn(), MofNCompleteColumn(), TextColumn("elapsed"),
                   TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn(), console=console)
    task = bar.add_task("batch", total=pipe.total)

    status = Text("\n".join(pipe.status_lines()))

    class Status:  # rendered by Live's thread from text the pipeline's thread wrote: no shared locks
        def __rich__(self):
            return status

    def tick():
        nonlocal status
        bar.update(task, completed=pipe.done + pipe.skipped)
        status = Text("\n".join(pipe.status_lines()))

    with Live(Group(bar, Status()), console=console, refresh_per_second=4, transient=False):
        pipe.run(progress=tick)
        tick()
