"""Statistics of the timed calls, and the process-bias model.

`summarize` and `ratio_ci` (a bootstrap interval of the speedup) over the calls; the process-bias
model: each process adds an offset of its own to a side's median (`process_bias_us`,
`process_offset_rel`), which more calls do not shrink and more processes do, so a side is timed in
several processes where it matters (`processes_for`, `processes_needed`, `pairs_within_budget`) and the
interval is widened for what remains (`side_offset_us`, `widen_for_process_bias`).
"""
from __future__ import annotations

import math
import random
import statistics
from typing import Optional

def summarize(samples: list[float]):
    from ..records.result import Stats
    n = len(samples)
    mean = statistics.fmean(samples)
    std = statistics.stdev(samples) if n > 1 else 0.0
    return Stats(median=statistics.median(samples), mean=mean, std=std, min=min(samples), max=max(samples),
                 count=n, rel_sem=(std / math.sqrt(n) / mean) if n > 1 and mean > 0 else float("inf"))

# the candidate's kept rounds the wall test needs (clocks.clock_checks): on the CPU path every
# measurement keeps at least this many (measure), a further process pair's too, so that no pair
# escapes it by being short
WALL_ROUNDS = 5


def ratio_ci(ref: list[float], cand: list[float], iters: int = 400, seed: int = 0) -> tuple[float, float]:
    """95% bootstrap interval of median(ref) / median(cand)."""
    rng = random.Random(seed)
    ratios = []
    for _ in range(iters):
        r = statistics.median(rng.choices(ref, k=len(ref)))
        c = statistics.median(rng.choices(cand, k=len(cand)))
        ratios.append(r / c if c > 0 else float("inf"))
    ratios.sort()
    return ratios[int(0.025 * iters)], ratios[int(0.975 * iters) - 1]


def process_bias_us(t, spans: bool, launches: Optional[int]) -> float:
    """The standard deviation (us) of the offset a fresh process adds to one side's median: the
    measure's own for a forward of one kernel (config.Timing.process_bias_us, or
    kernel_span_process_bias_us), plus `process_bias_per_launch_us` for each kernel, copy or fill
    after the first. Every process starts each dependent launch at its own speed, the same for all
    of them, so the offsets of a forward's launches add up rather than average out. `launches`: the
    side's count per call (None: not counted, taken as one)."""
    base = t.kernel_span_process_bias_us if spans else t.process_bias_us
    return base + t.process_bias_per_launch_us * max(0, (launches or 1) - 1)


def side_offset_us(t, spans: bool, launches: Optional[int], median_ms: Optional[float]) -> float:
    """The offset a side's interval is widened for: the model's (process_bias_us), or
    `process_offset_floor_rel` of its median where that is larger: in a forward of milliseconds the
    process's memory layout and the GPU's state move the median by a share of it, not by microseconds."""
    return max(process_bias_us(t, spans, launches), t.process_offset_floor_rel * (median_ms or 0.0) * 1e3)


def process_offset_rel(t, spans: bool, launches: Optional[int], median_ms: Optional[float]) -> float:
    """One side's modelled process offset (process_bias_us) as a share of its median. Under spans the
    one-kernel part is a timestamp tick, the same in every process: left out, so a forward of one
    kernel timed by spans has none."""
    if not median_ms or median_ms <= 0:
        return 0.0
    offset = process_bias_us(t, spans, launches) - (t.kernel_span_process_bias_us if spans else 0.0)
    return max(0.0, offset) / (median_ms * 1e3)


def processes_for(t, cuda: bool, spans: bool, launches: Optional[int], median_ms: Optional[float]) -> int:
    """How many processes one side is timed in at first (config.Timing.processes): one, unless its
    process offset (process_offset_rel) is over `processes_above_rel` of its median, which more calls
    in one process do not shrink and more processes do, by the square root of their number."""
    if t.processes <= 1 or t.processes_when == "never":
        return 1
    if t.processes_when == "always":
        return t.processes
    if not cuda or not median_ms or median_ms <= 0:
        return 1
    return t.processes if process_offset_rel(t, spans, launches, median_ms) > t.processes_above_rel else 1


def host_bound(t, side) -> bool:
    """A GPU side timed by its process's host speed: over `host_bound_share` of its kept calls opened
    their interval before the forward was enqueued (its launching outlasted the launch hold), so
    what the interval holds is how fast that process launched, not the GPU's work. One batch on an
    H100 timed identical code 20-47% apart in two processes this way (level1/71, level3/15, 16), the
    same problems alone within 1%: such a side needs several processes as a short one does."""
    return bool(side.times) and side.leaked > t.host_bound_share * len(side.times)


def processes_needed(t, n: int, medians: list[float], offset_rel: float = 0.0) -> int:
    """How many processes a side already timed in `n` (> 1) needs, from its processes' own medians:
    enough that the standard error of their mean, the larger of their observed spread and the
    modelled offset (`offset_rel`) over the square root of their number, is under
    `processes_target_rel`, and at most `processes_max`. The model is a mean over many processes;
    one problem's offsets can be twice it (relu(x + y) at 24 us: 0.7% of sd between processes on an
    H100 against 0.375% modelled), and only its own processes show that."""
    cap = max(t.processes, t.processes_max)
    if n <= 1 or n >= cap or len(medians) < 2 or t.processes_target_rel <= 0:
        return n
    mean = statistics.fmean(medians)
    if mean <= 0:
        return n
    sd = max(statistics.stdev(medians) / mean, offset_rel)
    return max(n, min(cap, math.ceil((sd / t.processes_target_rel) ** 2 - 1e-9)))


def pairs_within_budget(t, measured: list, budget_s: Optional[float] = None) -> Optional[int]:
    """How many more process pairs fit into `budget_s` (`processes_budget_s`) of timing wall, all
    pairs together: at the cost of the further pairs measured so far, or before any, of a warm-up round and
    `processes_rounds` at the first pair's kept rounds' wall (its own wall also holds what a process
    and a reference session pay once, and the torch.compile baseline). None: no limit."""
    budget_s = t.processes_budget_s if budget_s is None else budget_s
    if budget_s <= 0:
        return None
    spent = sum(m.seconds for m in measured)
    further = [m.seconds for m in measured[1:]]
    if further:
        per = statistics.fmean(further)
    else:
        first = measured[0]
        walls = [statistics.median(r[0] for r in s.rounds) / 1e3 for s in (first.cand, first.ref) if s.rounds]
        per = sum(walls) * (t.processes_rounds + 1) if len(walls) == 2 else first.seconds
    return max(0, int((budget_s - spent) / per)) if per > 0 else None


def widen_for_process_bias(ci: tuple[float, float], speedup: float, ref_ms: float, cand_ms: float,
                           ref_bias_us: float, cand_bias_us: float) -> tuple[tuple[float, float], float]:
    """`ci` (which covers the calls of these two processes only) widened for the offset each process
    adds to its median, whatever the number of calls (process_bias_us): several percent at 4 us,
    under 0.1% from 0.3 ms up for a forward of a few kernels. Each side's median carries one such
    offset; they add to the log ratio in quadrature, and to each end of the bootstrap interval in
    quadrature too. Returns the interval and the ratio's relative standard deviation from the offsets."""
    if (ref_bias_us <= 0 and cand_bias_us <= 0) or not speedup or ref_ms <= 0 or cand_ms <= 0:
        return ci, 0.0
    rel = math.hypot(ref_bias_us / (ref_ms * 1e3), cand_bias_us / (cand_ms * 1e3))
    z, ls = 1.96 * rel, math.log(speedup)
    lo, hi = ci
    return (math.exp(ls - math.hypot(max(0.0, ls - math.log(lo)), z)),
            math.exp(ls + math.hypot(max(0.0, math.log(hi) - ls), z))), rel


def quantile(xs: list[float], q: float) -> float:
    """The `q` quantile of `xs`: the sample at that rank, no interpolation."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]
