"""One evaluation, end to end: `evaluate(solution, problem, config) -> EvalResult`.

Read this function top to bottom to follow an evaluation:
  1. load the solution (extract the code from a raw response) and find the problem;
  2. build its extensions in a child (content-addressed cache, compile timeout);
  3. candidate first: a fresh child imports the solution, builds ModelNew from the secret seed, runs
     the correctness trials on fresh inputs, and ships the raw outputs back over a private pipe;
  4. the reference, in another process, does the same for Model (or a batch's shared session did);
  5. the parent judges every trial (correctness.py);
  6. if all pass: reference and candidate are timed in alternating rounds (timing.py), every timed
     output re-checked by fingerprint, device times cross-checked against host clocks;
  7. the record: status, flags, speedup with its interval, statistics, environment, phase times.
The parent never imports solution code and never touches a CUDA context a solution has touched.
"""
from __future__ import annotations

import datetime as _dt
import math
import random
import secrets
import statistics
import time
from pathlib import Path
from typing import Optional, Union

from . import __version__, cpus
from .build import child_env, compile_solution, extensions_dir, source_file
from .config import Config, Tolerance, load_config
from .process.standby import Standby
from .process.worker import Worker, WorkerDied, WorkerProtocolError, WorkerTimeout, describe_exit
from .kernels import ran as kernels_ran
from .problems import Problem, find_problem
from .records.messages import Command, CompileReply
from .records.result import EvalResult, PhaseTimes, Status
from .reference import ReferenceError, ReferenceSession
from .sharing import DeviceGate, SoloGate
from .solutions import load_solution
from .static_checks import check_source
from .timing import (clock_checks, gpu_summary, measure, pairs_within_budget, pooled, process_bias_us,
                     process_offset_rel, processes_for, processes_needed, ratio_ci, span_choice, summarize, warm_up,
                     widen_for_process_bias)


class Failure(Exception):
    """Ends an evaluation with a verdict."""

    def __init__(self, status: Status, error: Optional[str], flags: Optional[list[str]] = None,
                 log: Optional[str] = None):
        super().__init__(error)
        self.status, self.error, self.flags, self.log = status, error, flags or [], log


FURTHER_POISON_BYTES = 1 << 30


def resolve_device(cfg: Config) -> str:
    if cfg.device != "auto":
        if cfg.device == "cuda":
            import torch
            if not torch.cuda.is_available():
                raise RuntimeError("--device cuda asked for, but no CUDA device is available")
        return cfg.device
    import torch
    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_size(cfg: Config, device: str) -> str:
    return cfg.size if cfg.size != "auto" else ("full" if device == "cuda" else "small")


def tolerance_for(cfg: Config, dtype: Optional[str], meta: dict) -> Tolerance:
    name = dtype or meta.get("dtype", "fp32")
    if name not in cfg.correctness.tol:  # the problem's HARNESS_META names one the harness has none for
        raise ReferenceError(f"HARNESS_META dtype {name!r} is not one of {', '.join(cfg.correctness.tol)}")
    tol = cfg.correctness.tol[name].model_copy()
    for k in ("atol", "rtol", "rel_l2"):
        if meta.get(k) is not None and dtype in (None, meta.get("dtype", "fp32")):
            setattr(tol, k, float(meta[k]))
    return tol


def _ask(worker: Worker, cmd: Command, timeout: float, what: str):
    """One command to the candidate; every way it can go wrong becomes a verdict."""
    return _verdict_of(worker, timeout, what, lambda: worker.request(cmd, timeout))


def _answer(worker: Worker, op: str, t0: float, timeout: float, what: str):
    """The candidate's reply to the `op` sent at `t0` (Worker.send), as _ask reads it."""
    return _verdict_of(worker, timeout, what,
                       lambda: (worker.wait_reply(op, timeout, t0=t0), time.perf_counter() - t0))


def _verdict_of(worker: Worker, timeout: float, what: str, read):
    try:
        reply, wall = read()
    except WorkerTimeout:
        worker.kill()
        raise Failure(Status.timeout, f"{what} did not finish within {timeout:g} s; the process group was killed",
                      log=worker.log_tail()) from None
    except WorkerDied as e:
        raise Failure(Status.runtime_error, f"{what}: the solution's process died: {describe_exit(e.returncode)}",
                      log=worker.log_tail()) from None
    except WorkerProtocolError as e:
        raise Failure(Status.runtime_error, f"{what}: {e}", ["malformed_report"], log=worker.log_tail()) from None
    if not reply.ok:
        status = Status(reply.error_kind or "runtime_error")
        raise Failure(status, f"{what}: {reply.error}", reply.flags, log=worker.log_tail())
    return reply, wall


def _wait_load(worker: Worker, timeout: float) -> None:
    try:
        reply = worker.wait_reply("load", timeout)
    except WorkerTimeout:
        worker.kill()
        raise Failure(Status.timeout, f"importing the solution took over {timeout:g} s", log=worker.log_tail()) from None
    except WorkerDied as e:
        raise Failure(Status.runtime_error, f"the solution's process died while importing: {describe_exit(e.returncode)}",
                      log=worker.log_tail()) from None
    except WorkerProtocolError as e:
        raise Failure(Status.runtime_error, str(e), ["malformed_report"], log=worker.log_tail()) from None
    if not reply.ok:
        raise Failure(Status.runtime_error, f"importing the solution failed: {reply.error}", log=worker.log_tail())


def evaluate(solution: Union[str, Path], problem: Union[str, Path, Problem], config: Optional[Config] = None, *,
             problem_roots=None, label: Optional[str] = None,
             reference: Optional[ReferenceSession] = None,
             compiled: Optional[tuple[Optional[CompileReply], Optional[str], str]] = None,
             env_extra: Optional[dict[str, str]] = None, standby: Optional[Standby] = None,
             gate: Optional[DeviceGate] = None) -> EvalResult:
    """`compiled`: the (reply, failure, log) triple of a build already made (a batch compiles ahead,
    on CPU workers), used instead of calling compile_solution. `env_extra`: environment overrides for
    every child of this evaluation (a batch pins each GPU's children with CUDA_VISIBLE_DEVICES).
    `standby`: where the candidate's process comes from, already started (a batch's device slot).
    `gate`: the device slot's gate when several evaluations share it (sharing.py): untimed phases
    run beside other evaluations' phases, timing has the device to itself."""
    from .correctness import judge_trial, load_trial  # torch: imported once judging is near (batch.py)

    cfg = config or load_config()
    gate = gate or SoloGate(timing_cpu=cpus.plan(1)[0][0])
    waited0 = gate.waited

    def clock() -> float:  # phase times leave out waits at the gate (a neighbour being timed)
        return time.perf_counter() - gate.waited
    t_start = time.perf_counter()
    if cfg.hardening.protect_parent:
        from .process.child import set_dumpable
        set_dumpable(False)
    phases = PhaseTimes()
    prob = problem if isinstance(problem, Problem) else find_problem(problem, problem_roots)
    res = EvalResult(problem=prob.name, solution=str(solution), status=Status.runtime_error, label=label,
                     problem_hash=prob.source_hash, config_hash=cfg.digest(), harness_version=__version__,
                     config=cfg.model_dump() if reference is None else None,
                     started_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))

    # 1. the solution's code
    t0 = time.perf_counter()
    sol = load_solution(solution)
    res.solution_hash = sol.source_hash
    phases.extract_s = time.perf_counter() - t0
    if sol.code is None:
        return _finish(res, phases, t_start, Failure(Status.no_code, sol.reason))
    static = check_source(sol.code)
    res.flags += static.flags
    if static.rejected:
        why = "; ".join(f"{r}: {static.reasons[r]}" for r in static.rejected)
        return _finish(res, phases, t_start, Failure(Status.rejected, f"static check: {why}"))

    device = reference.device if reference else resolve_device(cfg)
    size = reference.size if reference else resolve_size(cfg, device)
    dtype = None if cfg.dtype == "auto" else cfg.dtype
    res.device = device
    own_ref = reference is None
    ref = reference or ReferenceSession(prob, cfg, device, size, dtype, env_extra=env_extra)
    tol = tolerance_for(cfg, dtype, ref.meta)
    cand: Optional[Worker] = None
    more: list[Worker] = []  # the candidate's further processes, where it is timed in several
    try:
        # 2. build, isolated, with a timeout
        t0 = time.perf_counter()
        cache = Path(cfg.cache_dir).resolve()
        module = source_file(sol.code, sol.path, cache, sol.extracted)
        ext = extensions_dir(sol.code, device, cache)
        if compiled is not None:
            creply, failure, log = compiled
        elif builds_extensions(sol.code):
            creply, failure, log = compile_solution(module, ext, device, cfg.timeouts.compile_s, env_extra)
        else:  # nothing to build: parse here (no execution); the candidate's import reports the rest
            creply, failure, log = _parse_only(sol.code, str(module)), None, ""
        phases.compile_s = time.perf_counter() - t0
        if failure == "timeout":
            raise Failure(Status.timeout, f"building the solution took over {cfg.timeouts.compile_s:g} s", log=log)
        if failure:
            raise Failure(Status.runtime_error, f"the solution crashed while being imported for its build ({failure})", log=log)
        if not creply.ok:
            status = Status.runtime_error if creply.category == "import_error" else Status.compile_error
            raise Failure(status, creply.error, log=log)

        # 3. candidate first, in a fresh process
        t0 = clock()
        setup, env = ref.setup_dict("candidate", str(module)), child_env(ext, device, env_extra)

        def spawn(phase, further: bool = False) -> Worker:  # a candidate's process, stopped by others' timing from its start
            # a further process (timing only) poisons less of the GPU's memory: several start at
            # once, each saw the same free memory, and 7 taking 8 GB each ran an H100 out of it
            # (another evaluation's import failed); its outputs are checked by fingerprints
            s = {**setup, "poison_max_bytes": FURTHER_POISON_BYTES} if further else setup
            if standby:
                return standby.take(s, env, cfg.timeouts.load_s, on_worker=phase.add)
            w = Worker(s, env=env)
            phase.add(w)
            return w

        def start_candidate() -> None:  # into `cand`, which timed() reads when it runs
            nonlocal cand
            with gate.stoppable(cfg.batch.slow_phase_frees_lane_s) as phase:
                cand = spawn(phase)
                gate.register(cand)
                _wait_load(cand, cfg.timeouts.load_s)
                _ask(cand, Command(op="build", init_seed=ref.plan.init_seed), cfg.timeouts.load_s, "building ModelNew")

        def start_more_candidates(n: int, spans: bool) -> list[Worker]:
            """`n` more processes of the candidate, for timing only (timing.processes_for): each
            imports the solution and builds ModelNew from the same seed; every timed call's output is
            checked against the reference's, as the first process's are. Returns all of them."""
            with gate.stoppable(cfg.batch.slow_phase_frees_lane_s) as phase:
                if standby:
                    standby.reserve(n)
                new = [spawn(phase, further=True) for _ in range(n)]
                more.extend(new)
                gate.register(cand, *more)
                for w in new:
                    _wait_load(w, cfg.timeouts.load_s)
                # each step sent to every process, then their replies read: they work at once
                sent = [(w, w.send(Command(op="build", init_seed=ref.plan.init_seed))) for w in new]
                for w, t0 in sent:
                    _answer(w, "build", t0, cfg.timeouts.load_s, "building ModelNew in a further process")
                sent = [(w, w.send(warm_up(cfg.timing, ref.rng, spans))) for w in new]
                for w, t0 in sent:
                    _answer(w, "time", t0, cfg.timeouts.run_s, "the first timing request of a further process")
            return list(more)

        start_candidate()
        phases.load_s = clock() - t0
        t0 = clock()
        with gate.stoppable(cfg.batch.slow_phase_frees_lane_s) as phase:
            phase.add(cand)
            reply, _ = _ask(cand, Command(op="trials", seeds=ref.plan.seeds, shapes=ref.plan.shapes),
                            cfg.timeouts.run_s, "correctness trials")
        phases.trials_s = clock() - t0
        if len(reply.blobs) != len(ref.plan.seeds):
            raise Failure(Status.runtime_error, "the candidate returned the wrong number of trial outputs",
                          ["malformed_report"])
        try:
            cand_trials = [load_trial(b) for b in reply.blobs]
        except Exception as e:  # a payload that is not plain tensors is a forged or corrupted report
            raise Failure(Status.rejected, f"trial output could not be read as plain tensors: {str(e)[:300]}",
                          ["malformed_report"]) from None

        # calls into its extensions, until (on a GPU) the profiler's kernel list, after timing, decides
        if not reply.custom_calls:
            res.flags.append("no_custom_kernel")

        # 4. the reference, in its own process, after the candidate
        t1 = clock()
        with gate.stoppable() as phase:
            ref.start(on_worker=phase.add)
        res.env = ref.env
        phases.reference_s = clock() - t1

        # 5. judge every trial here, in the parent (shared: a timed neighbour must not share the host)
        all_ok = True
        with gate.shared():
            for i, (c, r) in enumerate(zip(cand_trials, ref.trials)):
                v = judge_trial(i, ref.plan.shape_names[i], c, r, tol)
                res.trials.append(v.check)
                for f in v.flags:
                    if f not in res.flags:
                        res.flags.append(f)
                if v.rejected:
                    raise Failure(Status.rejected, v.check.reason)
                all_ok &= v.check.ok
        _worst_errors(res)
        phases.correctness_s = clock() - t0
        phases.judge_s = phases.correctness_s - phases.trials_s - phases.reference_s
        if not all_ok:
            first = next(t for t in res.trials if not t.ok)
            raise Failure(Status.incorrect, f"trial {first.seed_index} ({first.shape}): {first.reason}")
        del cand_trials

        # 6. timing: alternating rounds on the same device, outputs re-checked, clocks cross-checked.
        # First, outside the timing phase, what the candidate's process pays once for it (CUPTI's
        # start, the flush buffer, NVML): 0.16-0.19 s of its first timing request on an H100
        # (bench/diag/pair_cost.py), while every other evaluation on the GPU waits
        if device == "cuda":
            t0 = clock()
            with gate.stoppable(cfg.batch.slow_phase_frees_lane_s) as phase:
                phase.add(cand)
                _ask(cand, warm_up(cfg.timing, ref.rng), cfg.timeouts.run_s, "the first timing request")
            phases.processes_s += clock() - t0
        t0 = clock()
        gpu = (env_extra or {}).get("CUDA_VISIBLE_DEVICES")  # the batch slot's GPU; else this process's
        tcfg = cfg

        settled = 0.0  # waiting for standbys to finish starting: not timing
        quiet_flags: list[str] = []

        def timed(c: Worker, r: Worker, pair: int):
            nonlocal settled
            # nothing else on this device or beside it while either side is timed (this evaluation's
            # other processes included), and on a GPU both sides on the same host CPU (cpus.py)
            with gate.exclusive(keep=(c, r)) as held, cpus.pinned(
                    [c.pid, r.pid], gate.timing_cpu if device == "cuda" else None, gate.lender):
                if held.preempted and device == "cuda":
                    _quiet(r, cfg, phases, quiet_flags)
                if standby is not None and device == "cpu":
                    # timed CPU rounds would share cores and memory bandwidth with the next candidate's
                    # start-up (begun in step 3); on a GPU it goes on, off the device's critical path
                    s0 = time.perf_counter()
                    standby.settle(cfg.timeouts.load_s)
                    settled += time.perf_counter() - s0
                # a further pair: kernel spans recorded or not as in the first (whose decision on them is
                # made again on the pooled calls, and noted), fewer rounds, a share of the budget
                further = {} if pair == 0 else {
                    "compiled": False, "spans": record_spans, "min_rounds": cfg.timing.processes_rounds,
                    "budget_s": cfg.timing.budget_s / max(cfg.timing.processes, cfg.timing.processes_max),
                    "hold_us": first_hold}
                return measure(c, r, tcfg, ref.rng, cuda=device == "cuda", tol=tol, timeout=cfg.timeouts.run_s,
                               ref_timeout=cfg.timeouts.problem_s, gpu=gpu, **further)

        def checked(c: Worker, r: Worker, pair: int):
            """One process pair measured and held to every check on its own: outputs by fingerprint,
            device times against host clocks, a flagged measurement taken again. Returns the
            measurement reported for the pair and what its checks compared, if any flagged."""
            nonlocal tcfg, cand
            note: dict = {}

            def once():
                try:
                    return timed(c, r, pair)
                except WorkerTimeout:
                    c.kill()
                    raise Failure(Status.timeout, f"a timing round did not finish within {cfg.timeouts.run_s:g} s") from None
                except WorkerDied as e:
                    raise Failure(Status.runtime_error, "the solution's process died while being timed: "
                                  f"{describe_exit(e.returncode)}", log=c.log_tail()) from None
                except WorkerProtocolError as e:
                    raise Failure(Status.runtime_error, f"timing: {e}", ["malformed_report"]) from None

            m = once()
            if m.restart_candidate and pair == 0:
                # A capture that fails inside CUDA (a launch on the legacy stream, say) leaves torch
                # half in capture mode in that process: RNG offsets, allocator pool, current stream.
                # Both sides are timed eagerly instead, the candidate in a fresh process.
                cand.kill()
                start_candidate()
                c = cand
                tcfg = cfg.model_copy(deep=True)
                tcfg.timing.cuda_graph = False
                m = once()
                m.flags.append("cuda_graph_unavailable")
            if m.error or m.restart_candidate:
                raise Failure(Status.runtime_error, f"while timing: {m.error or 'a CUDA graph capture failed'}",
                              log=c.log_tail())
            if "malformed_report" in m.flags:
                raise Failure(Status.runtime_error, "timing report does not match the calls made", ["malformed_report"])
            if len(m.cand.times) < 2 or len(m.ref.times) < 2:
                raise Failure(Status.runtime_error, "too few timing samples survived (clock throttling?)", ["throttled"])
            if m.mismatched_calls:
                raise _stale_outputs(m.mismatched_calls)
            first: dict = {}  # what the checks compared: kept in the record of a flagged run
            cheats = clock_checks(m, cfg, device == "cuda", first)
            seen, measurements = list(cheats), 1
            if cheats:
                note["clock_check"] = first
            while cheats and measurements <= cfg.hardening.clock_check_confirmations:
                # measured again: a cheat is flagged every time, noise is not. Only a measurement that
                # no check flags is reported, and its outputs are held to the same test as the first's
                # (one that hid its time once and returned stale outputs the next would otherwise pass)
                again: dict = {}
                m2 = once()
                measurements += 1
                if m2.error:
                    break
                if m2.mismatched_calls:
                    raise _stale_outputs(m2.mismatched_calls)
                cheats = clock_checks(m2, cfg, device == "cuda", again) or (
                    [] if len(m2.cand.times) >= 2 and len(m2.ref.times) >= 2 else list(seen))
                seen += [f for f in cheats if f not in seen]
                note["clock_check_confirm"] = again
                if not cheats:
                    m = m2
                    note["remeasured_after_clock_flag"] = True
            if measurements > 1:
                note["clock_check_measurements"] = measurements
            if cheats:
                res.timing_method.update(_check_notes({pair: note}))
                raise Failure(Status.rejected, "reported device times do not agree with the host clocks: "
                              + ", ".join(seen), seen, log=c.log_tail())
            return m, note

        first_hold = None
        m, note = checked(cand, ref.worker, 0)
        if device == "cuda":  # further pairs start under the first's launch hold, without a warm-up round
            first_hold = m.hold_us
        pair_notes = {0: note} if note else {}
        # a short forward of several launches: each side whose process offset is a sizeable share of
        # its median is timed in further processes too (timing.processes_for), each pair measured
        # and checked on its own, all kept calls pooled; then more, up to processes_max, where those
        # processes' own medians lie further apart than the model says (timing.processes_needed)
        spans1, _ = span_choice(m, cfg.timing)
        record_spans = m.spans if device == "cuda" else None
        counts = {"candidate": m.cand.launch_count(), "reference": m.ref.launch_count()}
        first_median = {side: statistics.median(s.timed(spans1)) if s.timed(spans1) else None
                        for side, s in (("candidate", m.cand), ("reference", m.ref))}
        offset_rel = {side: process_offset_rel(cfg.timing, spans1, counts[side], first_median[side])
                      if device == "cuda" else 0.0 for side in counts}
        n_proc = {side: processes_for(cfg.timing, device == "cuda", spans1, counts[side], first_median[side])
                  for side in counts}
        measured, procs_error = [m], None
        procs = {"candidate": [cand], "reference": [ref.worker]}
        phases.timing_s = clock() - t0 - settled
        have = {side: 1 for side in n_proc}
        wanted = None
        for wave in range(2):  # the first count, then at most one more wave where their medians say so
            if wave:
                n_proc = {side: processes_needed(cfg.timing, n, _process_medians(measured, side, n, spans1),
                                                 offset_rel[side]) for side, n in have.items()}
            fit = pairs_within_budget(cfg.timing, measured)
            if fit is not None and max(n_proc.values()) > len(measured) + fit:
                wanted = dict(n_proc)  # what was wanted, for the record
                n_proc = {side: max(have[side], min(n, len(measured) + fit)) for side, n in n_proc.items()}
            if n_proc == have:
                break
            t1 = clock()
            if n_proc["candidate"] > have["candidate"]:
                procs["candidate"] = [cand] + start_more_candidates(n_proc["candidate"] - have["candidate"], bool(record_spans))
            if n_proc["reference"] > have["reference"]:
                try:
                    with gate.stoppable() as phase:
                        procs["reference"] = [ref.worker] + ref.more_workers(n_proc["reference"] - 1, on_worker=phase.add,
                                                                             spans=bool(record_spans))
                except Exception as e:  # noqa: BLE001 - the problem's fault, not the solution's: fewer
                    n_proc["reference"] = have["reference"]
                    procs["reference"] = procs["reference"][:have["reference"]]
                    procs_error = str(e)[:300]
            phases.processes_s += clock() - t1
            t0, settled = clock(), 0.0
            for i in range(len(measured), max(n_proc.values())):
                mi, note = checked(procs["candidate"][i % n_proc["candidate"]], procs["reference"][i % n_proc["reference"]], i)
                measured.append(mi)
                if note:
                    pair_notes[i] = note
            phases.timing_s += clock() - t0 - settled
            have = dict(n_proc)
        n_proc = have
        m = pooled(measured)
        res.timing_method = {
            "device": device, "method": "cuda_events" if device == "cuda" else "perf_counter",
            "l2_flush": (cfg.timing.flush_method if cfg.timing.flush_l2 and device == "cuda" else None), "persisting_l2_reset": m.l2_reset,
            "launch_hold": cfg.timing.launch_hold_us if device == "cuda" else None,
            "launch_hold_us": m.hold_us if device == "cuda" else None,
            # calls whose launching outlasted hold and flush, so part of it is inside their interval
            "cand_launch_leaked_calls": m.cand.leaked if device == "cuda" else None,
            "ref_launch_leaked_calls": m.ref.leaked if device == "cuda" else None,
            "timing_cpu": gate.timing_cpu if device == "cuda" else None,  # both sides' host CPU (cpus.py)
            "cuda_graph": m.cuda_graph, "rounds": m.rounds, "round_calls": cfg.timing.round_calls,
            "interleaved": True, "fresh_inputs_per_call": True, "warmup": cfg.timing.warmup,
            "target_rel_sem": cfg.timing.target_rel_sem, "budget_s": cfg.timing.budget_s,
            "throttle_ratio": cfg.timing.throttle_ratio, "throttled_samples_dropped": m.throttled,
            "max_sm_clock_mhz": m.max_clock_mhz, "timing_wall_s": round(m.seconds, 3),
            "host_contended_rounds": m.contended_rounds,
            **({"host_cpus": m.host_cpus, "host_steal_ms": m.host_steal_ms} if device == "cpu" else {}),
            # per call on the host: the whole call (hold, flush, forward, synchronize), the forward's
            # launching alone (enqueue), and hold, flush and forward launched (launch)
            **{f"{side}_{what}_ms_median": getattr(m, side).median(what)
               for what in ("host", "enqueue", "launch") for side in ("cand", "ref")},
            "sm_clock_mhz_median": (sorted(m.clocks_mhz)[len(m.clocks_mhz) // 2] if m.clocks_mhz else None),
            **gpu_summary(m),
        }
        for f in m.flags + quiet_flags:
            if f in ("cuda_graph_unavailable", "throttled", "launch_hold_unavailable", "device_not_quiet") and f not in res.flags:
                res.flags.append(f)
        res.timing_method.update(_check_notes(pair_notes))
        res.timing_method["processes"] = n_proc
        if m.span_basis_ms is not None:  # what chose kernel spans or events (timing.kernel_span = "auto")
            res.timing_method["kernel_span_basis_ms"] = round(m.span_basis_ms, 4)
        if wanted:  # fewer than the offsets asked for: timing.processes_budget_s
            res.timing_method["processes_wanted"] = wanted
        if procs_error:
            res.timing_method["processes_error"] = procs_error
        spans = False

        def adopt(m) -> None:  # the measurement the record reports
            nonlocal spans
            spans, note = span_choice(m, cfg.timing)
            for k in ("kernel_span_fallback", "events_minus_span_us", "events_median_ms"):
                res.timing_method.pop(k, None)
            res.timing_method.update(note)
            if m.spans:
                res.timing_method["events_median_ms"] = {"candidate": m.cand.median("times"), "reference": m.ref.median("times")}
            if device == "cuda":
                res.timing_method["method"] = "kernel_span" if spans else "cuda_events"
            res.runtime_stats, res.ref_runtime_stats = summarize(m.cand.timed(spans)), summarize(m.ref.timed(spans))
            res.runtime_ms, res.ref_runtime_ms = res.runtime_stats.median, res.ref_runtime_stats.median

        adopt(m)
        if len(measured) > 1:  # each pair's own medians: how far the processes' offsets lie apart
            res.timing_method["pair_medians_ms"] = [
                [round(statistics.median(x), 5) if x else None for x in (p.cand.timed(spans), p.ref.timed(spans))]
                for p in measured]
        if m.compiled:
            # baseline and candidate in one measure: spans where the baseline's are whole, else events
            both = spans and all(x > 0 for x in m.compiled_span)
            base, cand_t = (m.compiled_span, m.cand.timed(True)) if both else (m.compiled, m.cand.times)
            res.compile_runtime_ms = summarize(base).median
            res.speedup_compile = res.compile_runtime_ms / statistics.median(cand_t)
        elif m.compile_error:
            res.timing_method["compile_baseline_error"] = m.compile_error[:500]
        if device == "cuda" and cfg.correctness.list_kernels and creply.kernel_names:
            _list_kernels(res, phases, cand, creply.kernel_names, ref.rng.getrandbits(62), cfg, gate)
        res.speedup = res.ref_runtime_ms / res.runtime_ms if res.runtime_ms else None
        res.speedup_ci = ratio_ci(m.ref.timed(spans), m.cand.timed(spans), seed=ref.rng.getrandbits(32))
        if device == "cuda" and res.speedup:
            res.timing_method["speedup_ci_calls"] = res.speedup_ci  # before widening: these calls only
            launches = {"candidate": m.cand.launch_count(), "reference": m.ref.launch_count()}
            # each side's offset, the model's or what its own processes showed where that is larger,
            # averages over the processes it was timed in
            meds = {k: _process_medians(measured, k, n_proc[k], spans) for k in launches}
            seen_sd = {k: statistics.stdev(v) * 1e3 if len(v) > 1 else 0.0 for k, v in meds.items()}
            bias = {k: max(process_bias_us(cfg.timing, spans, n), seen_sd[k]) / math.sqrt(n_proc[k])
                    for k, n in launches.items()}
            if len(measured) > 1:
                res.timing_method["process_sd_us"] = {k: round(v, 4) for k, v in seen_sd.items()}
            res.speedup_ci, bias_rel = widen_for_process_bias(res.speedup_ci, res.speedup, res.ref_runtime_ms,
                                                              res.runtime_ms, bias["reference"], bias["candidate"])
            res.timing_method["launches_per_call"] = launches
            res.timing_method["process_bias_us"] = {k: round(v, 4) for k, v in bias.items()}
            res.timing_method["process_bias_rel"] = round(bias_rel, 5)
            if 1.96 * bias_rel > 0.01:
                res.flags.append("short_kernel")
        res.status = Status.passed
        if res.speedup and res.speedup > cfg.hardening.max_speedup:
            with gate.shared():
                _recheck_excessive(res, cand, ref, tol, cfg)
    except Failure as f:
        return _finish(res, phases, t_start, f)
    finally:
        if cand is not None:
            gate.unregister()
            with gate.shared():  # its exit frees device memory: not beside a neighbour's timing
                for w in [cand] + more:
                    w.close()
        phases.wait_s = gate.waited - waited0
        if own_ref:
            ref.close()
    return _finish(res, phases, t_start, None)


def _process_medians(measured: list, side: str, n: int, spans: bool) -> list[float]:
    """A side's own median in each of its `n` processes, by kernel spans or events (`spans`): pair i
    timed its process i % n, so the first n pairs hold one each."""
    return [statistics.median(x) for p in measured[:n]
            for x in (getattr(p, "cand" if side == "candidate" else "ref").timed(spans and p.spans),) if x]


def _check_notes(notes: dict[int, dict]) -> dict:
    """What the clock checks compared, for a record, where they flagged: the first process pair's
    under its own keys, further pairs' (timing.processes_for) by pair."""
    out = dict(notes.get(0, {}))
    more = {str(i): n for i, n in notes.items() if i and n}
    if more:
        out["clock_check_pairs"] = more
    return out


def _stale_outputs(calls: int) -> Failure:
    return Failure(Status.incorrect, f"{calls} timed call(s) returned outputs that do not match the reference "
                   "for their inputs (cached or stale results?)", ["timed_output_mismatch"])


def _recheck_excessive(res: EvalResult, cand: Worker, ref: ReferenceSession, tol: Tolerance, cfg: Config) -> None:
    """A speedup past the ceiling is re-checked on new inputs (and the extra shapes) before it is
    reported, and flagged either way."""
    from .correctness import judge_trial, load_trial
    res.flags.append("excessive_speedup")
    rng = random.Random(secrets.randbits(64))
    seeds = [rng.getrandbits(62) for _ in ref.plan.seeds]
    reply, _ = _ask(cand, Command(op="trials", seeds=seeds, shapes=ref.plan.shapes), cfg.timeouts.run_s,
                    "re-check of an excessive speedup")
    with ref.lock:  # the session may serve other evaluations' phases at the same time
        ref_reply, _ = ref.worker.request(Command(op="trials", seeds=seeds, shapes=ref.plan.shapes), cfg.timeouts.problem_s)
    for i, (cb, rb) in enumerate(zip(reply.blobs, ref_reply.blobs)):
        v = judge_trial(i, ref.plan.shape_names[i], load_trial(cb), load_trial(rb), tol)
        if not v.check.ok:
            raise Failure(Status.incorrect, f"re-check after a {res.speedup:.1f}x speedup failed: {v.check.reason}",
                          ["excessive_speedup"])


def _parse_only(code: str, path: str) -> CompileReply:
    import ast
    try:
        ast.parse(code, path)
    except SyntaxError as e:
        return CompileReply(ok=False, category="compile_error", error=f"SyntaxError in solution, line {e.lineno}: {e.msg}")
    return CompileReply(ok=True)


def builds_extensions(code: str) -> bool:
    return "cpp_extension" in code or "load_inline" in code


def _list_kernels(res: EvalResult, phases: PhaseTimes, cand: Worker, defined: list[str], seed: int,
                  cfg: Config, gate: DeviceGate) -> None:
    """On a GPU: did a kernel the solution defines run? One forward with CUPTI's kernel records on,
    in the candidate's process after its timing, never before: CUPTI slows every later launch in its
    process (see runner.Runner.kernels).

    Readying CUPTI (the `profiler` op) takes milliseconds when it is called directly (cupti.py); where
    only torch.profiler can list, its start-up takes seconds of host work and runs no solution code,
    so it is not a shared phase: a neighbour's timing need not wait for it, and it holds no lane. The
    candidate stays registered with the gate, so that timing still stops its process (and the
    start-up with it) while it runs; the timeout allows for those stops."""
    with gate.background():
        reply, _ = _ask(cand, Command(op="profiler", kernel_list=cfg.correctness.kernel_list), cfg.timeouts.load_s + cfg.timeouts.run_s, "starting the profiler")
    phases.profiler_start_s = reply.profile_s
    if "cupti_unavailable" in reply.notes:
        res.timing_method["cupti_unavailable"] = reply.notes["cupti_unavailable"]
    with gate.shared():
        reply, _ = _ask(cand, Command(op="kernels", seeds=[seed]), cfg.timeouts.run_s, "listing the kernels run")
    phases.profile_s = reply.profile_s
    res.timing_method["kernel_list"] = reply.notes.get("kernel_list")  # the method the listing used
    if not reply.kernels_seen:  # no GPU work seen at all (CUPTI unavailable): no evidence
        return
    ran = kernels_ran(defined, reply.kernels_seen)
    if ran and "no_custom_kernel" in res.flags:
        res.flags.remove("no_custom_kernel")
    elif not ran and "no_custom_kernel" not in res.flags:
        res.flags.append("no_custom_kernel")


def _quiet(ref: Worker, cfg: Config, phases: PhaseTimes, flags: list[str]) -> None:
    """Before timing, when the gate stopped neighbours mid-phase: wait until the GPU has run the
    work they had queued (runner.Runner.quiet, in the reference's process). Not quiet within
    `quiet_max_s` (a neighbour's background thread keeps launching, say): timed anyway, flagged."""
    b = cfg.batch
    reply, _ = ref.request(Command(op="quiet", probe_us=b.quiet_probe_us, probes=b.quiet_probes,
                                          max_s=b.quiet_max_s), cfg.timeouts.problem_s)
    if not reply.ok:
        raise RuntimeError(f"reference failed while waiting for a quiet GPU: {reply.error}")
    phases.quiet_s += reply.quiet_s or 0.0
    if not reply.quiet and "device_not_quiet" not in flags:
        flags.append("device_not_quiet")


def _worst_errors(res: EvalResult) -> None:
    for key in ("max_abs_diff", "max_rel_diff", "rel_l2_diff"):
        vals = [getattr(t, key) for t in res.trials if getattr(t, key) is not None]
        setattr(res, key, max(vals) if vals else None)


def _tail_lines(text: Optional[str], n: int = 30) -> Optional[str]:
    if not text:
        return None
    lines = text.rstrip().splitlines()
    return "\n".join(lines[-n:])


def _finish(res: EvalResult, phases: PhaseTimes, t_start: float, failure: Optional[Failure]) -> EvalResult:
    if failure is not None:
        res.status = failure.status
        res.error = failure.error
        for f in failure.flags:
            if f not in res.flags:
                res.flags.append(f)
        res.log_tail = _tail_lines(failure.log)
        if failure.status != Status.passed:
            res.speedup = None
            res.speedup_ci = None
            res.speedup_compile = None
    phases.total_s = time.perf_counter() - t_start
    res.phases = phases
    return res
