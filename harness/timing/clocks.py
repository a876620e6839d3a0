"""The parent's host-clock cross-checks of a measurement (`clock_checks`).

The device times a child reports are held against clocks it cannot reach: each call's host time to
device-idle, and each round's wall time as the parent saw it. The reference, timed the same way,
calibrates the harness's own overhead per call.
"""
from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Optional

from .stats import WALL_ROUNDS, quantile

if TYPE_CHECKING:
    from .measure import Measurement, Side

def _calls_by_round(side: Side) -> list:
    """Pair each kept round with its calls' (host ms, device ms); rounds and samples are appended
    together (Side.keep), in order."""
    out, i = [], 0
    for r in side.rounds:
        n = r[2]
        out.append((r, list(zip(side.host[i:i + n], side.times[i:i + n]))))
        i += n
    return out


def _over(rounds: list, less_waits: bool) -> list[float]:
    """Per round, per call: the parent's wall time for the round less what the side reported: the
    harness's own overhead, plus whatever the report left out. `less_waits`: less also the time the
    side's timing thread waited for a CPU while nothing else of its jail ran (measure._waited_alone_ms:
    contention, not work). Part of that wait may fall inside the reported interval and so be taken
    out twice, which only ever lowers the result: right for the candidate (a cheat gains nothing by
    being contended: what it hides is still the difference between what it ran and what it
    reported), wrong for the reference, which calibrates."""
    return [(r[0] - (r[4] if less_waits and len(r) > 4 else 0.0) - r[1]) / r[2] for r, _ in rounds]


def report_check(m: Measurement, h, detail: Optional[dict] = None) -> list[str]:
    """Clocked rounds (clocked.py): each side's own timer against the clock's, per call. The clock's
    interval holds what the side's does not (the copy of its inputs, the reading of its outputs, two
    hand-offs), about the same on both sides, so the reference's shortfall calibrates it; a candidate whose timer
    falls short by more, past the larger of `cpu_clock_abs_ms` and `cpu_clock_rel` of its clocked
    call, reported less than it ran: `timer_mismatch`. What it reports is never used (its times are
    the clock's), so this only names a lie big enough to be told from noise: honest shortfalls
    differed by up to 7 us a call (the hand-offs cost a jailed process more: its system calls pass a
    filter), as much as a report scaled by forty hides on a 20 us call, which passes at its speed."""
    short_c, short_r = m.cand.short, m.ref.short  # per call
    if len(short_c) < 2 or len(short_r) < 2:
        return []
    ref = statistics.median(short_r)
    unexplained = statistics.median(short_c) - ref
    # (of the clock's whole call: the copies' noise grows with the bytes copied)
    floor = max(h.cpu_clock_abs_ms, h.cpu_clock_rel * statistics.median(clk / n for clk, _, n in m.cand.clocked if n))
    # and per round: a lie told in a third of the rounds or more is named too, where the median call
    # is one told true (timer_patch_some_rounds.py, lying in two rounds of three, passed so once,
    # on CI: rounds re-taken had left fewer than half its calls lied about). A round's median call,
    # not its mean: the clock put off its CPU inside one call (by another process on a loaded host)
    # lengthens that call's shortfall by the whole wait, and on CI an honest solution's rounds so
    # crossed the floor in four and five rounds of eight
    rounds, at = [], 0
    for _, _, n in m.cand.clocked:
        if n:
            rounds.append(statistics.median_low(short_c[at:at + n]) - ref)
        at += n
    lied = sum(x > floor for x in rounds)
    if detail is not None:
        detail.update(clock_short_cand_ms=round(statistics.median(short_c), 4),
                      clock_short_ref_ms=round(ref, 4), clock_floor_ms=round(floor, 4),
                      clock_rounds_short=[lied, len(rounds)])
    return ["timer_mismatch"] if unexplained > floor or (len(rounds) >= 3 and 3 * lied >= len(rounds)) else []


def clock_checks(m: Measurement, cfg, cuda: bool = True, detail: Optional[dict] = None) -> list[str]:
    """Reported device times against host clocks. Reference and candidate pay the same harness
    overhead per call (input generation, flush, fingerprint), so the reference calibrates it.

    Contention on a busy host (compilers running beside the evaluation) only ever adds time, and
    adds it at random; a cheat's hidden time is there in every call it doctors. The per-call gap
    test compares low quantiles (the quietest calls), which contention rarely reaches. The per-round
    wall test takes the candidate's waits for a CPU out of its rounds' walls and compares both the
    quietest round and the median round with the reference's: a cheat that reports some rounds
    honestly is judged by those in the quietest, while the speedup comes from the median call, so it
    must doctor most rounds, and the median round then holds its hidden time. A flag is then
    confirmed by further measurements before it becomes a verdict (hardening.clock_check_confirmations,
    evaluation.py). `detail`, when given, receives the numbers each test compared (ms per call)."""
    flags = []
    if len(m.cand.times) < 2 or len(m.ref.times) < 2:
        return flags
    h = cfg.hardening
    med_c = statistics.median(m.cand.times)
    # quiet rounds (no wait for a CPU on that side) where there are enough of both; else all rounds,
    # so a solution cannot escape the checks by keeping its own process contended
    c_all, r_all = _calls_by_round(m.cand), _calls_by_round(m.ref)
    c_rounds, r_rounds = c_all, r_all
    if sum(r[3] for r in m.cand.rounds) >= 5 and sum(r[3] for r in m.ref.rounds) >= 5:
        c_rounds, r_rounds = [r for r in c_all if r[0][3]], [r for r in r_all if r[0][3]]
    cand_pairs = [p for _, pairs in c_rounds for p in pairs]
    ref_pairs = [p for _, pairs in r_rounds for p in pairs]
    # per call: host time to device-idle minus device time; side-stream work and work finished by
    # threads after forward returns show up here, not in the events
    gap_c = quantile([hh - tt for hh, tt in cand_pairs], 0.25)
    gap_r = quantile([hh - tt for hh, tt in ref_pairs], 0.25)
    gap_floor = max(h.gap_abs_ms, h.gap_rel * med_c)
    if gap_c - gap_r > gap_floor:
        flags.append("unsynced_stream")
    if detail is not None:
        detail.update(gap_cand_ms=round(gap_c, 4), gap_ref_ms=round(gap_r, 4), gap_floor_ms=round(gap_floor, 4))
    if m.clocked:
        flags += report_check(m, h, detail)
    # per round: the parent's own wall clock, which the candidate cannot reach. Every round of the
    # candidate's, not only the quiet ones (a filter would let a solution pick which rounds are
    # judged by making those contended), with its waits for a CPU taken out; the reference's quiet
    # rounds where there are enough, as they are
    over_c, over_r = _over(c_all, True), _over(r_rounds, False)
    if any(r[1] > r[0] for r in m.cand.rounds):
        flags.append("impossible_timing")
    elif len(over_c) >= WALL_ROUNDS and len(over_r) >= 2:
        low_r = min(over_r)
        unexplained = max(min(over_c) - low_r, statistics.median(over_c) - statistics.median(over_r))
        # Two processes' walls for the same work differ by a share of the whole per-call wall, the
        # forward's and the harness's own overhead (input generation, flush, fingerprint) together:
        # honest identities on an H200 reached a tenth of it (bench/results/clock-checks.md). On the
        # CPU the overhead is host work, and on a loaded host it differs by tenths of a millisecond
        calls = statistics.median(r[2] for r in m.cand.rounds)
        floor = (max(h.wall_abs_ms, h.wall_rel * med_c + h.wall_overhead_share * low_r) if cuda else
                 max(h.cpu_wall_abs_ms, h.cpu_wall_rel * med_c + h.cpu_wall_overhead_share * low_r))
        if unexplained > floor and "timer_mismatch" not in flags:
            flags.append("timer_mismatch")
        if detail is not None:
            detail.update(wall_over_cand_ms=round(min(over_c), 4), wall_over_ref_ms=round(low_r, 4),
                          wall_over_cand_median_ms=round(statistics.median(over_c), 4),
                          wall_over_ref_median_ms=round(statistics.median(over_r), 4),
                          wall_unexplained_ms=round(unexplained, 4), wall_floor_ms=round(floor, 4),
                          cand_median_ms=round(med_c, 4), calls_per_round=calls,
                          rounds_compared=[len(over_c), len(over_r)])
    return flags
