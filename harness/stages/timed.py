"""Stage 5: timing. Reference and candidate are timed in alternating rounds on the same device, each
process pair measured and held to every check on its own (timed outputs re-checked by fingerprint,
device times cross-checked against host clocks, a flagged measurement taken again). A short forward
of several launches is timed in further process pairs (timing.stats.processes_for), all kept calls
pooled. This is the parent's side: timing.measure.measure sends each round's TimeCommand, which the
child's Runner.time (process/runner.py) runs through the timing loop, timing.loop.time_calls."""
from __future__ import annotations

import statistics
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Optional

from .. import baselines, cpus
from ..process.worker import STOP_CREDIT_S, Worker, WorkerDied, WorkerProtocolError, WorkerTimeout, describe_exit
from ..records.result import Status
from ..reference import ReferenceError, ReferenceSession, out_of_memory
from ..timing.clocks import clock_checks
from ..timing.monitor import ask_quiet
from ..timing.measure import Measurement, gpu_summary, measure, pooled, span_choice
from ..timing.stats import host_bound, pairs_within_budget, process_offset_rel, processes_for, processes_needed, summarize
from . import baseline
from .candidate import CandidateProcesses
from .context import Context, Failure


@dataclass
class Timed:
    """The measurement the record reports: every pair's calls pooled."""

    measured: list[Measurement]      # each process pair's own measurement
    pooled: Measurement
    processes: dict[str, int]        # processes each side was timed in
    spans: bool                      # kernel spans (CUPTI) chose the reported times, not events
    pair_notes: dict[int, dict] = field(default_factory=dict)


class PairTimer:
    """Measures one process pair at a time under the gate's exclusive hold."""

    def __init__(self, ctx: Context, cand: CandidateProcesses, ref: ReferenceSession):
        self.ctx, self.cand, self.ref = ctx, cand, ref
        self.cfg = ctx.cfg               # a copy without CUDA graphs once a capture failed
        self.settled = 0.0               # waiting for standbys to finish starting: not timing
        self.quiet_flags: list[str] = []
        self.record_spans: Optional[list] = None  # the first pair's kernel-span decision
        self.first_hold: Optional[float] = None   # the first pair's launch hold, for further pairs
        self.first_clocked: Optional[bool] = None  # whether the first pair's rounds were clocked (CPU path)
        self.gpu = (ctx.env_extra or {}).get("CUDA_VISIBLE_DEVICES")  # the batch slot's GPU; else ours
        self.compiled = True  # the first pair times torch.compile(Model) too (unless its time is cached)
        # a GPU left busy by a stopped neighbour: when first seen, how long to wait for its own
        # timeout before timing beside it anyway (flagged device_not_quiet), and how often it was seen
        self.not_quiet_since: Optional[float] = None
        self.not_quiet_for = ctx.cfg.timeouts.run_s + STOP_CREDIT_S + ctx.cfg.batch.quiet_max_s
        self.quiet_retries = 0
        self.builds_stopped = 0  # the most build processes this pair's confirming measurements stopped
        self.cpus_held: Optional[str] = None  # CPU path: how the candidate was held to its CPUs (cpus.held_to)

    def _measure(self, c: Worker, r: Worker, pair: int, quiet_builds: bool = False) -> Measurement:
        ctx, cfg = self.ctx, self.ctx.cfg
        gate, standby = ctx.gate, ctx.standby
        # nothing else on this device or beside it while either side is timed (this evaluation's
        # other processes included), and on a GPU each side on its slot's host CPU for it (cpus.py)
        # on the CPU path each side on timing.cpu_threads CPUs of its own, the candidate's jail held
        # there by its cpuset: more threads than the reference's buy no more cores
        on_cpu = cpus.held_to(cfg.timing.cpu_threads, c.pid, c.groups, r.pid) if not ctx.cuda else nullcontext()
        placement = [(c.pid, gate.cand_cpu), (r.pid, gate.timing_cpu)] if ctx.cuda else []
        # the session's lock first: its reference process serves the problem's other evaluations
        # too, and one's request in flight when the gate was taken would run beside the rounds (the
        # process is kept, not stopped), its reply read from the pipe the rounds' are. Requests are
        # made in stoppable phases, which a timing does not wait for, so lock then gate is the one
        # order; where untimed phases are shared ones instead, the timing waits for them anyway,
        # and taking the lock first would wait for one waiting for it
        lock = self.ref.lock if gate.stop_untimed else nullcontext()
        # a measurement confirming a host-clock flag runs with the batch's builds stopped (cpus.Lender.quiet)
        quiet = gate.lender.quiet() if quiet_builds and gate.lender is not None else nullcontext(0)
        with lock, gate.exclusive(keep=(c, r)) as held, cpus.pinned(placement, gate.lender), on_cpu as how, \
                quiet as stopped:
            if stopped:
                self.builds_stopped = max(self.builds_stopped, stopped)
            if not ctx.cuda:
                self.cpus_held = how
            # neighbours stopped, in a phase or idle: what they left queued on the GPU runs on
            # (docs/timing.md), and would be taken for the candidate's by measure's probes
            busy = held.preempted or held.stopped or self.not_quiet_since is not None
            if busy and ctx.cuda and not _quiet(r, ctx, self.quiet_flags, final=self._late()):
                raise _NotQuiet()
            if standby is not None and not ctx.cuda:
                # timed CPU rounds would share cores and memory bandwidth with the next candidate's
                # start-up; on a GPU it goes on, off the device's critical path
                s0 = time.perf_counter()
                standby.settle(cfg.timeouts.load_s)
                self.settled += time.perf_counter() - s0
            # a further pair: kernel spans recorded or not as in the first (whose decision on them is
            # made again on the pooled calls, and noted), fewer rounds, a share of the budget
            further = {"compiled": self.compiled} if pair == 0 else {
                "compiled": False, "spans": self.record_spans, "min_rounds": cfg.timing.processes_rounds,
                "budget_s": cfg.timing.budget_s / max(cfg.timing.processes, cfg.timing.processes_max),
                "hold_us": self.first_hold, "clocked": self.first_clocked}
            return measure(c, r, self.cfg, self.ref.rng, cuda=ctx.cuda, tol=ctx.tol, timeout=cfg.timeouts.run_s,
                           ref_timeout=cfg.timeouts.problem_s, gpu=self.gpu,
                           gpu_quiet="device_not_quiet" not in self.quiet_flags, **further)

    def _late(self) -> bool:
        """Past waiting for a busy GPU: a runaway neighbour's own timeout has fired by now."""
        return self.not_quiet_since is not None and time.perf_counter() - self.not_quiet_since > self.not_quiet_for

    def _once(self, c: Worker, r: Worker, pair: int, quiet_builds: bool = False) -> Measurement:
        run_s = self.ctx.cfg.timeouts.run_s
        try:
            while True:
                try:
                    return self._measure(c, r, pair, quiet_builds)
                except _NotQuiet:
                    # the device stays busy with work of a process it stopped: a kernel that may never
                    # end. Nothing is timed beside it: the gate goes back to the others (whose
                    # requests time out in wall time, process.worker.STOP_CREDIT_S), and it is
                    # asked for again
                    if self.not_quiet_since is None:
                        self.not_quiet_since = time.perf_counter()
                    self.quiet_retries += 1
                    time.sleep(1.0)
        except WorkerTimeout:
            c.kill()
            raise Failure(Status.timeout, f"a timing round did not finish within {run_s:g} s") from None
        except WorkerDied as e:
            if r.returncode is not None and c.returncode is None:
                raise self._reference_died(r) from None
            raise Failure(Status.runtime_error, "the solution's process died while being timed: "
                          f"{describe_exit(e.returncode)}", log=c.log_tail()) from None
        except WorkerProtocolError as e:
            raise Failure(Status.runtime_error, f"timing: {e}", ["malformed_report"]) from None
        except RuntimeError as e:  # the reference's own failure: out of its memory, the neighbours' doing
            if out_of_memory(str(e)):  # until a run alone says otherwise (batch/executor.py)
                raise Failure(Status.too_big, f"problem {self.ctx.problem.name}: {e}"[:2000]) from None
            raise

    def _reference_died(self, r: Worker) -> Exception:
        """The reference's process, not the solution's, ended in a timing round: `too_big` where it ran
        out of memory or was killed outright (the neighbours' doing until a run alone says otherwise),
        else the problem's own failure. (Blamed on the solution before: "the solution's process died
        while being timed: exit code 0", KernelBench level1/42 on an H100.)"""
        tail = r.log_tail()[-1500:]
        what = f"problem {self.ctx.problem.name}: the reference's process died while timed: {describe_exit(r.returncode)}"
        if r.returncode == -9 or out_of_memory(tail):
            return Failure(Status.too_big, f"{what}\n{tail}")
        return ReferenceError(f"{what}\n{tail}")

    def checked(self, c: Worker, r: Worker, pair: int) -> tuple[Measurement, dict]:
        """One process pair measured and held to every check on its own. Returns the measurement
        reported for the pair and what its checks compared, if any flagged."""
        m = self._once(c, r, pair)
        if m.restart_candidate and pair == 0:
            # a capture that fails inside CUDA (a launch on the legacy stream, say) leaves torch half
            # in capture mode in that process: RNG offsets, allocator pool, current stream. Both
            # sides are timed eagerly instead, the candidate in a fresh process.
            c = self.cand.restart()
            self.cfg = self.ctx.cfg.model_copy(deep=True)
            self.cfg.timing.cuda_graph = False
            m = self._once(c, r, pair)
            m.flags.append("cuda_graph_unavailable")
        _sound(m, c)
        return self._confirmed(m, c, r, pair)

    def _confirmed(self, m: Measurement, c: Worker, r: Worker, pair: int) -> tuple[Measurement, dict]:
        """The host-clock checks: a flagged run is measured again (a cheat is flagged every time,
        noise is not). Only a measurement no check flags is reported, its outputs held to the same
        test as the first's (one that hid its time once and returned stale outputs the next would
        otherwise pass); flagged in every measurement: rejected."""
        cfg, cuda = self.ctx.cfg, self.ctx.cuda
        note: dict = {}
        first: dict = {}  # what the checks compared: kept in the record of a flagged run
        cheats = clock_checks(m, cfg, cuda, first)
        seen, measurements = list(cheats), 1
        if cheats:
            note["clock_check"] = first
        again: dict = {}
        self.builds_stopped = 0
        # a report longer than the parent's own wall around it is no noise: never measured again (a
        # helper's attack tripped it on purpose, to be given a second measurement to cheat in)
        while cheats and "impossible_timing" not in cheats and measurements <= cfg.hardening.clock_check_confirmations:
            again = {}
            m2 = self._once(c, r, pair, quiet_builds=True)
            measurements += 1
            if m2.error:
                break
            if m2.mismatched_calls:
                raise stale_outputs(m2.mismatched_calls)
            if "malformed_report" in m2.flags or "unfreezable" in m2.flags or "gpu_undrained" in m2.flags \
                    or "tensor_subclass" in m2.flags \
                    or m2.restart_candidate:
                _sound(m2, c)  # a measurement no check flags is adopted: it must be one to report at all
            cheats = clock_checks(m2, cfg, cuda, again) or (
                [] if len(m2.cand.times) >= 2 and len(m2.ref.times) >= 2 else list(seen))
            seen += [f for f in cheats if f not in seen]
            note["clock_check_confirm"] = again
            if not cheats:
                m = m2
                note["remeasured_after_clock_flag"] = True
        if measurements > 1:
            note["clock_check_measurements"] = measurements
            if self.builds_stopped:
                note["builds_stopped"] = self.builds_stopped
        # how near every record came to the wall test's flag, flagged or not: the honest margin over
        # a corpus is what the floor (hardening.wall_rel) can be set from
        stands = again if measurements > 1 else first
        if "wall_unexplained_ms" in stands or "clock_short_cand_ms" in stands:
            note["wall_check"] = {k: v for k, v in stands.items()
                                  if k.startswith(("wall_", "clock_")) or k in ("cand_median_ms", "rounds_compared", "calls_per_round")}
        if cheats:
            self.ctx.res.timing_method.update(check_notes({pair: note}), inputs_made_by=m.inputs)
            raise Failure(Status.rejected, "reported device times do not agree with the host clocks: "
                          + ", ".join(seen), seen, log=c.log_tail())
        return m, note


def _sound(m: Measurement, c: Worker) -> None:
    """A measurement that cannot be reported at all: an error, a forged report, too few samples,
    timed outputs that are not the reference's."""
    if m.error or m.restart_candidate:
        raise Failure(Status.runtime_error, f"while timing: {m.error or 'a CUDA graph capture failed'}",
                      log=c.log_tail())
    if "malformed_report" in m.flags:
        raise Failure(Status.runtime_error, "timing report does not match the calls made", ["malformed_report"])
    if "tensor_subclass" in m.flags:
        raise Failure(Status.rejected, "a timed call's output is not exactly torch.Tensor (a subclass)",
                      ["tensor_subclass"], log=c.log_tail())
    if "unfreezable" in m.flags:
        raise Failure(Status.rejected, "the solution's processes could not be stopped while the reference was "
                      "timed (still busy in the kernel after the freeze's wait)", ["unfreezable"], log=c.log_tail())
    if "gpu_undrained" in m.flags:
        raise Failure(Status.rejected, "the GPU work the solution left queued after its round could not be drained "
                      f"before the reference's (hardening.gpu_drain_s): {'; '.join(m.undrained)[:300]}",
                      ["gpu_undrained"], log=c.log_tail())
    if len(m.cand.times) < 2 or len(m.ref.times) < 2:
        raise Failure(Status.runtime_error, "too few timing samples survived (clock throttling?)", ["throttled"])
    if m.mismatched_calls:
        raise stale_outputs(m.mismatched_calls)


def time_solution(ctx: Context, cand: CandidateProcesses, ref: ReferenceSession) -> Timed:
    """The first pair, then further pairs where a side's process offset is a sizeable share of its
    median (timing.stats.processes_for), then more, up to processes_max, where those processes' own
    medians lie further apart than the model says (timing.stats.processes_needed)."""
    cfg, phases = ctx.cfg, ctx.phases
    if ctx.cuda:
        cand.warm_up()
    timer = PairTimer(ctx, cand, ref)
    key, stack, cached = baseline.cached(ctx, ref)
    if baseline.due(ctx, ref):  # (stage 4 compiles it, where the reference's trial measured its memory)
        baseline.compile_ahead(ctx, ref)
    timer.compiled = cached is None and ctx.compile_error is None
    t0 = ctx.clock()
    m, note = timer.checked(cand.first, ref.worker, 0)
    if ctx.cuda:  # further pairs start under the first's launch hold, without a warm-up round
        timer.first_hold = m.hold_us
    else:  # and on the CPU path, clocked as the first was (no warm-up round to decide it on)
        timer.first_clocked = m.clocked
    pair_notes = {0: note} if note else {}
    spans1, _ = span_choice(m, cfg.timing)
    timer.record_spans = m.spans if ctx.cuda else None
    counts = {"candidate": m.cand.launch_count(), "reference": m.ref.launch_count()}
    first_median = {side: statistics.median(s.timed(spans1)) if s.timed(spans1) else None
                    for side, s in (("candidate", m.cand), ("reference", m.ref))}
    offset_rel = {side: process_offset_rel(cfg.timing, spans1, counts[side], first_median[side])
                  if ctx.cuda else 0.0 for side in counts}
    n_proc = {side: processes_for(cfg.timing, ctx.cuda, spans1, counts[side], first_median[side])
              for side in counts}
    # (a GPU side's: on the CPU no launch leaks, and the host's speed is what is timed anyway)
    bound = [side for side, s in (("candidate", m.cand), ("reference", m.ref))
             if cfg.timing.processes_when != "never" and host_bound(cfg.timing, s)]
    for side in bound:
        n_proc[side] = max(n_proc[side], cfg.timing.processes)
    # (a measurement a neighbour's GPU work or the clocks may have slowed is not kept)
    trusted = not {"device_not_quiet", "throttled"} & set(m.flags + timer.quiet_flags)
    modal = _process_modes(ctx, ref, spans1, first_median["reference"], offset_rel["reference"], keep=trusted)
    if modal is not None:  # its reference processes have timed it apart: every side in several
        n_proc = {side: max(n, cfg.timing.processes) for side, n in n_proc.items()}
    phases.timing_s = ctx.clock() - t0 - timer.settled
    measured = [m]
    have, wanted, procs_error = _more_pairs(ctx, timer, measured, n_proc, offset_rel, spans1, pair_notes,
                                            cfg.timing.host_bound_budget_s if bound else None)
    m = pooled(measured)
    ctx.res.timing_method = method_record(ctx, m)
    if timer.quiet_retries:  # times it gave the device back to a neighbour's unfinished GPU work
        ctx.res.timing_method["quiet_retries"] = timer.quiet_retries
    if ctx.compile_error:
        ctx.res.timing_method["compile_baseline_error"] = ctx.compile_error[:500]
    if not ctx.cuda:
        ctx.res.timing_method["cpus_held"] = timer.cpus_held
    if m.ref_wall_ms > 0:
        waited = m.ref_waited_ms / m.ref_wall_ms
        ctx.res.timing_method["ref_waited_frac"] = round(waited, 4)
        # on the CPU path the reference's waits are in its times: the host's other processes on its
        # CPU inflate the speedup. (A GPU's events do not count the host's waits, and a GPU round a
        # side waited in is taken again: timing.max_runqueue_frac)
        if not ctx.cuda and waited > cfg.timing.max_reference_wait_frac:
            ctx.flag("reference_contended")
    if m.cand_wall_ms > 0:  # the other side of it: the candidate's times inflated, its speedup understated
        waited = m.cand_waited_ms / m.cand_wall_ms
        ctx.res.timing_method["cand_waited_frac"] = round(waited, 4)
        if waited > cfg.timing.max_reference_wait_frac:
            ctx.flag("candidate_contended")
    if m.cand_cpus:  # CPU path, jailed: the candidate's CPUs at once, against the reference's cpu_threads
        used = statistics.median(m.cand_cpus)
        ctx.res.timing_method["cand_cpus_median"] = round(used, 2)
        if used > cfg.timing.cpu_threads + 0.5:
            ctx.flag("cpu_oversubscribed")
    from ..process.gpulock import LEFT_MS
    if m.drained_ms and max(m.drained_ms) > LEFT_MS:  # harmless once waited out, but no honest loop leaves it
        ctx.flag("gpu_work_after_round")
    for f in m.flags + timer.quiet_flags:
        if f in ("cuda_graph_unavailable", "throttled", "launch_hold_unavailable", "device_not_quiet"):
            ctx.flag(f)
    tm = ctx.res.timing_method
    tm.update(check_notes(pair_notes))
    tm["processes"] = have
    if bound:
        tm["host_bound"] = bound
    if modal is not None:
        tm["process_modes"] = modal
    if m.span_basis_ms is not None:  # what chose kernel spans or events (timing.kernel_span = "auto")
        tm["kernel_span_basis_ms"] = round(m.span_basis_ms, 4)
    if wanted:  # fewer than the offsets asked for: timing.processes_budget_s
        tm["processes_wanted"] = wanted
    if procs_error:
        tm["processes_error"] = procs_error
    spans = adopt(ctx, m)
    if len(measured) > 1:  # each pair's own medians: how far the processes' offsets lie apart
        tm["pair_medians_ms"] = [
            [round(statistics.median(x), 5) if x else None for x in (p.cand.timed(spans), p.ref.timed(spans))]
            for p in measured]
    baseline.report(ctx, m, spans, cached)
    if m.compiled and cached is None and cfg.timing.compile_baseline_cache:
        whole = m.spans and m.compiled_span and all(x > 0 for x in m.compiled_span)
        baselines.store(cfg, key, stack, ctx.problem.name, m.compiled, m.compiled_span if whole else None)
    return Timed(measured=measured, pooled=m, processes=have, spans=spans, pair_notes=pair_notes)


def _process_modes(ctx: Context, ref: ReferenceSession, spans: bool, median_ms: Optional[float],
                   offset_rel: float, keep: bool = True) -> Optional[dict]:
    """A GPU problem whose reference processes have timed its forward apart (timing/modes.py): this
    evaluation's reference process's median kept with theirs (where `keep`), and where they lie further
    apart than `timing.process_modes_rel` (or four times the modelled offset), what the record says of it."""
    t = ctx.cfg.timing
    if not ctx.cuda or t.process_modes_rel <= 0 or not median_ms or t.processes <= 1 or t.processes_when == "never":
        return None
    from ..build import torch_versions
    from ..timing import modes
    env = ctx.res.env
    key = modes.key_for(ctx.problem.source_hash, ctx.size, ctx.dtype, env.gpu_name if env else None,
                        torch_versions()[0], spans)
    seen = modes.load(ctx.cfg.cache_dir, key)
    mine = {modes.token(ref.worker): median_ms} if keep else {}
    if mine:
        modes.keep(ctx.cfg.cache_dir, key, ctx.problem.name, mine)
    medians = {**seen, **mine}
    spread = modes.spread(medians)
    if spread <= max(t.process_modes_rel, 4 * offset_rel):
        return None
    return {"spread_rel": round(spread, 4), "reference_processes": len(medians),
            "medians_ms": sorted(round(v, 5) for v in medians.values())}


def _more_pairs(ctx: Context, timer: PairTimer, measured: list, n_proc: dict, offset_rel: dict, spans1: bool,
                pair_notes: dict, budget_s: Optional[float] = None) -> tuple[dict, Optional[dict], Optional[str]]:
    """Further pairs in at most two waves: the count processes_for asked for, then at most one more
    wave where their medians say so, within `budget_s` of timing wall (processes_budget_s). Returns
    the processes each side ended with, what was wanted where the budget allowed fewer, and why a
    reference's further processes failed to start."""
    cfg, phases, cand, ref = ctx.cfg, ctx.phases, timer.cand, timer.ref
    procs = {"candidate": [cand.first], "reference": [ref.worker]}
    have = {side: 1 for side in n_proc}
    wanted, procs_error = None, None
    for wave in range(2):
        if wave:
            n_proc = {side: processes_needed(cfg.timing, n, process_medians(measured, side, n, spans1),
                                             offset_rel[side]) for side, n in have.items()}
        fit = pairs_within_budget(cfg.timing, measured, budget_s)
        if fit is not None and max(n_proc.values()) > len(measured) + fit:
            wanted = dict(n_proc)  # what was wanted, for the record
            n_proc = {side: max(have[side], min(n, len(measured) + fit)) for side, n in n_proc.items()}
        if n_proc == have:
            break
        t1 = ctx.clock()
        if n_proc["candidate"] > have["candidate"]:
            procs["candidate"] = [cand.first] + cand.more(n_proc["candidate"] - have["candidate"],
                                                          bool(timer.record_spans))
        if n_proc["reference"] > have["reference"]:
            try:
                with ctx.gate.stoppable() as phase:
                    procs["reference"] = [ref.worker] + ref.more_workers(n_proc["reference"] - 1, on_worker=phase.add,
                                                                         spans=bool(timer.record_spans))
            except Exception as e:  # noqa: BLE001 - the problem's fault, not the solution's: fewer
                n_proc["reference"] = have["reference"]
                procs["reference"] = procs["reference"][:have["reference"]]
                procs_error = str(e)[:300]
        phases.processes_s += ctx.clock() - t1
        t0 = ctx.clock()
        timer.settled = 0.0
        for i in range(len(measured), max(n_proc.values())):
            mi, note = timer.checked(procs["candidate"][i % n_proc["candidate"]],
                                     procs["reference"][i % n_proc["reference"]], i)
            measured.append(mi)
            if note:
                pair_notes[i] = note
        phases.timing_s += ctx.clock() - t0 - timer.settled
        have = dict(n_proc)
    return have, wanted, procs_error


def method_record(ctx: Context, m: Measurement) -> dict:
    """How the times were taken, for the record's `timing_method`."""
    cfg, cuda, t = ctx.cfg, ctx.cuda, ctx.cfg.timing
    return {
        "device": ctx.device, "method": "cuda_events" if cuda else "perf_counter",
        "l2_flush": (t.flush_method if t.flush_l2 and cuda else None), "persisting_l2_reset": m.l2_reset,
        "launch_hold": t.launch_hold_us if cuda else None,
        "launch_hold_us": m.hold_us if cuda else None,
        # calls whose launching outlasted hold and flush, so part of it is inside their interval
        "cand_launch_leaked_calls": m.cand.leaked if cuda else None,
        "ref_launch_leaked_calls": m.ref.leaked if cuda else None,
        "timing_cpu": ctx.gate.timing_cpu if cuda else None,  # the reference's host CPU (cpus.py)
        "cand_timing_cpu": ctx.gate.cand_cpu if cuda else None,  # the candidate's
        "cuda_graph": m.cuda_graph, "rounds": m.rounds,
        # the kept rounds' calls (a round of large CPU inputs holds fewer: timing.served_inputs_max_mb)
        "round_calls": int(statistics.median(r[2] for r in m.cand.rounds)) if m.cand.rounds else t.round_calls,
        "interleaved": True, "fresh_inputs_per_call": True, "warmup": t.warmup,
        # who made the timed calls' inputs: the reference's process for both sides, or each its own
        "inputs_made_by": m.inputs, **({"inputs_why_own": m.inputs_why} if m.inputs_why else {}),
        # CPU path: each call timed by a clock process, not by the side (timing/clocked.py)
        **({"clocked": m.clocked} if not cuda else {}), **({"clocked_why_not": m.clocked_why} if m.clocked_why else {}),
        **({"clock_overhead_ms": round(m.clock_overhead_ms, 4), "clock_resolution_ms": round(m.clock_resolution_ms, 4)}
           if m.clock_overhead_ms is not None else {}),
        "target_rel_sem": t.target_rel_sem, "budget_s": t.budget_s,
        "throttle_ratio": t.throttle_ratio, "throttled_samples_dropped": m.throttled,
        "max_sm_clock_mhz": m.max_clock_mhz, "timing_wall_s": round(m.seconds, 3),
        "host_contended_rounds": m.contended_rounds,
        # GPU: the candidate's work waited out before each reference round (process/gpulock.py): the
        # longest wait, what it had left running (an honest one's timing loop leaves none), and how
        # many pauses locked its processes or had the reference probe for a quiet GPU
        **({"cand_gpu_left_ms_max": round(max(m.drained_ms), 2), "cand_gpu_left_checks": dict(m.gpu_left_checks)}
           if cuda and m.drained_ms else {}),
        **({"cand_lock_unavailable": m.drain_unavailable[:200]} if cuda and m.drain_unavailable else {}),
        "rounds_retaken": m.retaken[:10],  # (throttled on a GPU, waited in for a CPU on the CPU path)
        **({"host_cpus": m.host_cpus, "host_steal_ms": m.host_steal_ms} if not cuda else {}),
        # per call on the host: the whole call (hold, flush, forward, synchronize), the forward's
        # launching alone (enqueue), and hold, flush and forward launched (launch)
        **{f"{side}_{what}_ms_median": getattr(m, side).median(what)
           for what in ("host", "enqueue", "launch") for side in ("cand", "ref")},
        "sm_clock_mhz_median": (sorted(m.clocks_mhz)[len(m.clocks_mhz) // 2] if m.clocks_mhz else None),
        **gpu_summary(m),
    }


def adopt(ctx: Context, m: Measurement) -> bool:
    """The pooled measurement into the record: kernel spans or events (span_choice), each side's
    statistics and median. Returns whether spans were chosen."""
    res, tm = ctx.res, ctx.res.timing_method
    spans, note = span_choice(m, ctx.cfg.timing)
    for k in ("kernel_span_fallback", "events_minus_span_us", "events_median_ms"):
        tm.pop(k, None)
    tm.update(note)
    if m.spans:
        tm["events_median_ms"] = {"candidate": m.cand.median("times"), "reference": m.ref.median("times")}
    if ctx.cuda:
        tm["method"] = "kernel_span" if spans else "cuda_events"
    res.runtime_stats, res.ref_runtime_stats = summarize(m.cand.timed(spans)), summarize(m.ref.timed(spans))
    res.runtime_ms, res.ref_runtime_ms = res.runtime_stats.median, res.ref_runtime_stats.median
    return spans


def process_medians(measured: list, side: str, n: int, spans: bool) -> list[float]:
    """A side's own median in each of its `n` processes, by kernel spans or events (`spans`): pair i
    timed its process i % n, so the first n pairs hold one each."""
    return [statistics.median(x) for p in measured[:n]
            for x in (getattr(p, "cand" if side == "candidate" else "ref").timed(spans and p.spans),) if x]


def check_notes(notes: dict[int, dict]) -> dict:
    """What the clock checks compared, for a record, where they flagged: the first process pair's
    under its own keys, further pairs' by pair; and every pair's wall test (`wall_check`), flagged
    or not."""
    notes = {i: dict(n) for i, n in notes.items()}
    walls = {str(i): n.pop("wall_check") for i, n in sorted(notes.items()) if "wall_check" in n}
    out = dict(notes.get(0, {}))
    more = {str(i): n for i, n in notes.items() if i and n}
    if more:
        out["clock_check_pairs"] = more
    if walls:
        out["wall_check"] = walls
    return out


def stale_outputs(calls: int) -> Failure:
    return Failure(Status.incorrect, f"{calls} timed call(s) returned outputs that do not match the reference "
                   "for their inputs (cached or stale results?)", ["timed_output_mismatch"])


class _NotQuiet(Exception):
    pass


def _quiet(ref: Worker, ctx: Context, flags: list[str], final: bool) -> bool:
    """Before timing, when the gate stopped neighbours mid-phase: wait until the GPU has run the
    work they had queued (the reference's process probes it). Whether it is quiet within
    `quiet_max_s`; `final`: it is timed anyway if not (flagged device_not_quiet)."""
    b = ctx.cfg.batch
    reply = ask_quiet(ref, b, b.quiet_max_s, ctx.cfg.timeouts.problem_s)
    ctx.phases.quiet_s += reply.quiet_s or 0.0
    if not reply.quiet and final and "device_not_quiet" not in flags:
        flags.append("device_not_quiet")
    return bool(reply.quiet) or final
