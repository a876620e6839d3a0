"""Stage 7: the speedup with its interval, and the record closed with its verdict."""
from __future__ import annotations

import math
import statistics
import time
from typing import Optional

from ..records.result import EvalResult, Status
from ..reference import ReferenceSession
from ..timing.stats import ratio_ci, side_offset_us, widen_for_process_bias
from .context import Context, Failure
from .timed import Timed, process_medians


def speedup(ctx: Context, timed: Timed, ref: ReferenceSession) -> None:
    """The reference's median over the candidate's, with a bootstrap interval over the calls. On a
    GPU the interval is widened by each side's process offset (the model's, at least a share of its
    median, or what its own processes showed where that is larger, averaged over the processes it
    was timed in), and a kernel so short that the offset is over 1% of it is flagged."""
    res, t, m, spans = ctx.res, ctx.cfg.timing, timed.pooled, timed.spans
    res.speedup = res.ref_runtime_ms / res.runtime_ms if res.runtime_ms else None
    res.speedup_ci = ratio_ci(m.ref.timed(spans), m.cand.timed(spans), seed=ref.rng.getrandbits(32))
    if not ctx.cuda and res.speedup and res.timing_method.get("clocked") and t.cpu_clocked_offset_us > 0:
        # clocked, the candidate's time is its clock interval less what the clock adds to the
        # reference's calls (16 us on the CI machine): what its own process adds beside that moves
        # from process to process by about a microsecond, a sixth of a 6 us forward (an identity on a
        # quiet 2-core VM: 0.76-1.22 over six evaluations, each interval a few percent wide), and the
        # reference's own median as much (one solution in two runs of a new user's: the reference 6.3
        # and 5.0 us, the candidate 36.5 and 37.0; 0.172x and 0.134x, intervals apart)
        res.timing_method["speedup_ci_calls"] = res.speedup_ci
        res.speedup_ci, bias_rel = widen_for_process_bias(res.speedup_ci, res.speedup, res.ref_runtime_ms,
                                                          res.runtime_ms, t.cpu_clocked_offset_us,
                                                          t.cpu_clocked_offset_us)
        res.timing_method["process_bias_rel"] = round(bias_rel, 5)
    if not (ctx.cuda and res.speedup):
        return
    tm = res.timing_method
    tm["speedup_ci_calls"] = res.speedup_ci  # before widening: these calls only
    launches = {"candidate": m.cand.launch_count(), "reference": m.ref.launch_count()}
    meds = {k: process_medians(timed.measured, k, timed.processes[k], spans) for k in launches}
    seen_sd = {k: statistics.stdev(v) * 1e3 if len(v) > 1 else 0.0 for k, v in meds.items()}
    median = {"candidate": res.runtime_ms, "reference": res.ref_runtime_ms}
    bias = {k: max(side_offset_us(t, spans, n, median[k]), seen_sd[k]) / math.sqrt(timed.processes[k])
            for k, n in launches.items()}
    if len(timed.measured) > 1:
        tm["process_sd_us"] = {k: round(v, 4) for k, v in seen_sd.items()}
    res.speedup_ci, bias_rel = widen_for_process_bias(res.speedup_ci, res.speedup, res.ref_runtime_ms,
                                                      res.runtime_ms, bias["reference"], bias["candidate"])
    tm["launches_per_call"] = launches
    tm["process_bias_us"] = {k: round(v, 4) for k, v in bias.items()}
    tm["process_bias_rel"] = round(bias_rel, 5)
    if 1.96 * tm["process_bias_rel"] > 0.01:  # the recorded value decides: a reader can recompute the flag
        res.flags.append("short_kernel")


def finish(ctx: Context, failure: Optional[Failure]) -> EvalResult:
    """The record as returned: the verdict of `failure` where there is one (no speedup then)."""
    res, phases = ctx.res, ctx.phases
    if failure is not None:
        res.status = failure.status
        res.error = failure.error
        ctx.flag(*failure.flags)
        res.log_tail = _tail_lines(failure.log)
        if failure.status != Status.passed:
            res.speedup = None
            res.speedup_ci = None
            res.speedup_compile = None
    phases.total_s = time.perf_counter() - ctx.t_start
    res.phases = phases
    return res


def _tail_lines(text: Optional[str], n: int = 30) -> Optional[str]:
    if not text:
        return None
    lines = text.rstrip().splitlines()
    return "\n".join(lines[-n:])
