"""The torch.compile(Model) baseline of stage 5: read from the cache (baselines.py), or compiled in
the reference's process ahead of timing and timed there beside the reference.

Where it is compiled, it is compiled in stage 4, right after the reference's first trial has measured
the problem's memory and before the candidate's first forward: the evaluation then holds only the
reference's share of that memory for Inductor's 10-30 s of host work (`Need.compiling`), not the
candidate's too. On KernelBench level 1 (13-25 GB per evaluation) the compile, done after the trials,
held both sides' memory and most of each record's time went to waiting for it."""
from __future__ import annotations

import statistics
from typing import Optional

from .. import baselines
from ..baselines import CompiledBaseline
from ..process.worker import WorkerTimeout
from ..records.result import Status
from ..reference import ReferenceSession, ReferenceTooBig
from ..timing.measure import Measurement
from ..timing.stats import summarize
from .context import Context, Failure


def cached(ctx: Context, ref: ReferenceSession) -> tuple[str, dict, Optional[CompiledBaseline]]:
    """(key, what it is made of, the cached baseline or None) for this problem on `ref`'s device and stack."""
    return baselines.find(ctx.cfg, ctx.problem.source_hash, ctx.size, ctx.dtype, ref.env)


def due(ctx: Context, ref: ReferenceSession) -> bool:
    """Whether this evaluation compiles torch.compile(Model) ahead of its timing: on a GPU, with the
    baseline on, not cached, not compiled yet."""
    return (ctx.cuda and ctx.cfg.timing.compile_baseline != "off" and not ctx.compiled_ahead
            and cached(ctx, ref)[2] is None)


def compile_ahead(ctx: Context, ref: ReferenceSession) -> bool:
    """torch.compile(Model) compiled in the reference's process before the timing phase, in a phase
    that timing elsewhere on the device stops: compiled in its first timed round instead, its 10-20 s
    of Inductor held the device exclusively, and every other evaluation on it waited (KernelBench
    level 2 on an H100: timing_s 15-21 s a record on a fresh cache, against 0.6 s with the baseline
    cached). Where it fails, why goes to `ctx.compile_error` (for the record) and the solution is
    timed without the baseline; where the compile outlasted its time (or took the process with it),
    the reference is started again. Returns whether it was (what it kept is gone)."""
    from ..timing.measure import warm_up
    t0 = ctx.clock()
    to = ctx.cfg.timeouts.problem_s + 600  # as the first compiled round allowed
    cmd = warm_up(ctx.cfg.timing, ref.rng).model_copy(update={"variant": "compiled", "spans": False})
    ctx.compiled_ahead = True
    try:
        # host work in the reference's process (Inductor), minutes of it on a cold cache for a large
        # model: the lane goes to another evaluation meanwhile, as for the profiler's start-up
        with ctx.gate.background(), ctx.gate.stoppable() as phase, ref.lock:
            phase.add(ref.worker)
            try:
                reply, _ = ref.worker.request(cmd, to)
                error = None if reply.ok else reply.error or "failed"
                still_running = False
            except WorkerTimeout:
                error = f"torch.compile(Model) did not finish within {to:g} s"
                still_running = True
            ctx.compile_error = error
            if error is None or (not still_running and ref.worker.returncode is None):
                return False  # (a reference goes on after a failed compile: process/child.py)
            ref.close()
            try:
                ref.start(on_worker=phase.add)
            except ReferenceTooBig as e:  # Inductor's memory may be why; alone it may fit (a batch reruns it)
                raise Failure(Status.too_big, str(e)) from None
            return True
    finally:
        ctx.phases.processes_s += ctx.clock() - t0


def report(ctx: Context, m: Measurement, spans: bool, cached: Optional[CompiledBaseline]) -> None:
    """torch.compile(Model) into the record: timed in the same measurement, or its median from an
    earlier one of the problem on this device and stack (baselines.py); by spans where the
    baseline's are whole, else events."""
    res = ctx.res
    if cached is not None:
        by_spans = spans and cached.span_ms is not None
        res.compile_runtime_ms = cached.span_ms if by_spans else cached.events_ms
        res.speedup_compile = res.compile_runtime_ms / statistics.median(m.cand.timed(True) if by_spans else m.cand.times)
        res.timing_method["compile_baseline"] = {"cached": cached.key, "measured_at": cached.measured_at,
                                                 "calls": cached.calls}
    elif m.compiled:
        res.timing_method["compile_baseline"] = "measured"
        both = spans and all(x > 0 for x in m.compiled_span)
        base, cand_t = (m.compiled_span, m.cand.timed(True)) if both else (m.compiled, m.cand.times)
        res.compile_runtime_ms = summarize(base).median
        res.speedup_compile = res.compile_runtime_ms / statistics.median(cand_t)
    elif m.compile_error:
        res.timing_method["compile_baseline_error"] = m.compile_error[:500]
