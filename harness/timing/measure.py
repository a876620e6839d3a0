"""The parent's measurement: reference and candidate timed in alternating rounds.

Reference and candidate alternate in rounds on the same GPU, using the same secret seeds, so clock and
thermal drift cancel in the ratio; the candidate's process group is stopped while the reference is
timed. Sampling stops adaptively once the standard error of the mean is under a target for both sides
(or a budget runs out). Every timed output's fingerprint is compared with the reference's for the same
seed; rounds the parent's NVML readings show throttled are re-taken. The host-clock cross-checks of the
result are clocks.py's; the statistics, stats.py's.
"""
from __future__ import annotations

import contextlib
import os
import random
import secrets
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ..cgroups import cpu_ns
from .fingerprint import fingerprints_match
from .monitor import (POWER_CAP, SLOWDOWNS, GpuMonitor, ask_quiet, last_cpu, main_thread_ns, round_state, runqueue_wait_ns,
                      steal_jiffies)
from .stats import WALL_ROUNDS, quantile, summarize


def reply_spans(reply) -> list[float]:
    """A time reply's kernel spans, one per call: -1.0 each where it has none (not asked, or CUPTI
    could not be had)."""
    n = len(reply.times_ms)
    return reply.span_ms if len(reply.span_ms) == n else [-1.0] * n


@dataclass
class Side:
    """One side's kept calls (candidate, or reference) and the rounds they came in."""
    times: list[float] = field(default_factory=list)    # device ms per call (host ms on the CPU)
    host: list[float] = field(default_factory=list)     # host ms per whole call (hold, flush, forward, sync)
    enqueue: list[float] = field(default_factory=list)  # host ms launching the forward alone
    launch: list[float] = field(default_factory=list)   # host ms from the hold's launch to the forward enqueued
    leaked: int = 0  # calls whose interval opened before their forward was enqueued
    span: list[float] = field(default_factory=list)  # kernel span ms per call (-1.0: none), when asked
    launches: list[int] = field(default_factory=list)  # the latest round's launches per call (CUPTI), if counted
    # per round: (parent wall ms, sum of reported ms, calls, quiet: no wait for a CPU, ms the
    # candidate's timing thread waited for a CPU while nothing else of its jail ran: 0.0 for the
    # reference and where unread)
    rounds: list[tuple[float, float, int, bool, float]] = field(default_factory=list)
    # clocked rounds (clocked.py), per kept round: (the clock's ms summed, the side's own ms summed,
    # calls); and per kept call, the clock's interval less the side's own (its shortfall)
    clocked: list[tuple[float, float, int]] = field(default_factory=list)
    short: list[float] = field(default_factory=list)

    def keep(self, reply, wall_s: float, quiet: bool, waited_ms: float = 0.0) -> None:
        self.times.extend(reply.times_ms)
        self.host.extend(reply.host_ms)
        self.enqueue.extend(reply.enqueue_ms)
        self.launch.extend(reply.launch_ms)
        self.leaked += reply.launch_leaked
        self.span.extend(reply_spans(reply))
        self.rounds.append((wall_s * 1e3, sum(reply.times_ms), len(reply.times_ms), quiet, waited_ms))

    def median(self, what: str) -> Optional[float]:
        xs = getattr(self, what)
        return round(statistics.median(xs), 4) if xs else None

    def launch_count(self) -> Optional[int]:
        """The forward's kernels, copies and fills per call (the median call), where counted."""
        return int(statistics.median_low(self.launches)) if self.launches else None

    def timed(self, spans: bool) -> list[float]:
        """The samples the statistics are taken of: the kernel spans recorded, or the events."""
        return [x for x in self.span if x > 0] if spans else self.times


@dataclass
class Measurement:
    cand: Side = field(default_factory=Side)
    ref: Side = field(default_factory=Side)
    compiled: list[float] = field(default_factory=list)
    compiled_span: list[float] = field(default_factory=list)
    spans: bool = False  # the timed rounds asked for kernel spans (config.Timing.kernel_span)
    span_basis_ms: Optional[float] = None  # what kernel_span = "auto" compared with kernel_span_below_ms
    span_why: Optional[str] = None  # asked for and not had: which process, and why (its own word)
    hold_us: float = 0.0  # the launch hold of the timed rounds
    contended_rounds: int = 0
    restart_candidate: bool = False  # the candidate's capture failed: time it again, fresh and eager
    mismatched_calls: int = 0
    rounds: int = 0
    throttled: int = 0
    cuda_graph: bool = False
    l2_reset: bool = False
    max_clock_mhz: Optional[int] = None
    clocks_mhz: list[int] = field(default_factory=list)
    # the parent's NVML readings of the kept rounds (round_state), and why rounds were re-taken
    gpu_rounds: list[dict] = field(default_factory=list)
    retaken: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)
    # CPU path: which host CPUs each side's main thread was found on after its requests, and the
    # hypervisor's steal per CPU over the measurement (ms), for the record of the host's conditions
    host_cpus: dict = field(default_factory=dict)
    host_steal_ms: dict = field(default_factory=dict)
    # CPU path, jailed: the CPU time the candidate's whole jail used per second of each kept round's
    # wall (its threads and processes: more than timing.cpu_threads is more than the reference gets)
    cand_cpus: list[float] = field(default_factory=list)
    # the reference's kept rounds: how long its main thread waited for a CPU, and their walls (ms).
    # Its CPU is kept free of jails, not of the host's other processes: a busy one on it inflated a
    # CPU-path speedup 2.7x (bench/results/clock-checks.md)
    ref_waited_ms: float = 0.0
    ref_wall_ms: float = 0.0
    clocked: bool = False  # the kept rounds' calls timed by a clock process (clocked.py)
    clocked_why: Optional[str] = None  # asked for and not had: why
    clock_overhead_ms: Optional[float] = None  # what the clock adds to a call (_net_of_clock)
    clock_resolution_ms: Optional[float] = None  # and its spread: no call is put under it
    cand_waited_ms: float = 0.0  # the CPU path's kept rounds: the candidate's wait for a CPU (_cand_wait_ms)
    cand_wall_ms: float = 0.0
    # who made the timed rounds' inputs: "reference" (its process, for both sides: RoundFiles) or "own"
    # (each side its own), and why not the reference's where it was asked and could not
    inputs: str = "own"
    inputs_why: Optional[str] = None
    # GPU: how long the candidate's work took to drain at each pause for the reference's round
    # (process/gpulock.py: work it left queued, which would have run beside the reference's), and why
    # it could not be drained where the driver cannot
    drained_ms: list[float] = field(default_factory=list)
    drain_unavailable: Optional[str] = None
    gpu_left_checks: dict = field(default_factory=dict)  # pauses whose candidate was "locked", or "probed"
    undrained: list[str] = field(default_factory=list)  # why its GPU work could not be waited out (gpu_undrained)
    error: Optional[str] = None
    compile_error: Optional[str] = None
    seconds: float = 0.0


class RoundFiles:
    """The timed rounds' inputs, made by the reference's process before each round into a file both
    sides read (timing/inputs.py), named at random here and told to each side only in its round's
    command; removed after the round. The candidate stays frozen from the end of its round to the start
    of its next, while the reference is timed and makes the next inputs: running then, outside every
    wall, it could ready what its round will use or put off what it would pay there (a helper's
    attack faulted in its output buffers and freed its inputs in those gaps: 37-59x)."""

    def __init__(self, cand, ref, timeout: float, t, on: bool):
        self.cand, self.ref, self.timeout, self.on = cand, ref, timeout, on
        self.max_bytes = int(t.served_inputs_max_mb * (1 << 20))
        self.path: Optional[str] = None
        self.served = 0  # rounds served
        self.why: Optional[str] = None
        # clocked rounds (clocked.py): the round's inputs in a folder no jail reads, each side's
        # slots (the candidate's in its jail's home, given to its uid), where the clock leaves outputs
        self.clocked = False
        self.clocked_why: Optional[str] = None
        self.files: dict[str, str] = {}

    def make(self, seeds: list[int]) -> tuple[list[int], Optional[str]]:
        """The round's seeds (the first ones, as many as the file holds) and its file; or all the
        seeds and None, each side making its own."""
        from ..records.messages import ClockedFiles, InputsCommand
        from ..sandbox import JAILS
        self.drop()
        if not self.on:
            return seeds, None
        # named before it is asked for: a reference that fails or times out midway leaves no file
        name = secrets.token_hex(16)
        clocked = None
        if self.clocked:
            private = JAILS.private_folder()
            jail = getattr(self.cand, "jail", None)
            self.files = {"cand_slots": str((Path(jail.home) if jail is not None else private) / f"{name}.slots"),
                          "ref_slots": str(private / f"{name}.rslots"), "cand_snap": str(private / f"{name}.csnap"),
                          "ref_snap": str(private / f"{name}.rsnap")}
            clocked = ClockedFiles(**self.files, cand_owner=(jail.uid, jail.gid) if jail is not None else None)
            self.path = str(private / f"{name}.inputs")
        else:
            self.path = str(JAILS.shared_folder() / f"{name}.inputs")
        self.cand.pause()  # (resumed when its round starts: measure)
        reply, _ = self.ref.request(InputsCommand(seeds=seeds, path=self.path, max_bytes=self.max_bytes, clocked=clocked),
                                    self.timeout)
        if not reply.ok:
            raise RuntimeError(f"reference failed making a round's inputs: {reply.error}")
        if reply.unservable:
            self.on, self.why = False, reply.unservable
            self.drop()
            return seeds, None
        if reply.unclockable:
            self.clocked, self.clocked_why = False, reply.unclockable
            return self.make(seeds)
        self.served += 1
        return seeds[:reply.calls], self.path

    def drop(self) -> None:
        for name, path in [("inputs", self.path)] + list(self.files.items()):
            if path is None:
                continue
            # emptied first: a side that kept it open or mapped would keep its memory (in /dev/shm,
            # counted in no jail's cap) past the unlink. Not the candidate's slots file, which lies
            # in its home, where it may have put a link to any file in its place: the clock empties
            # it through the descriptor it opened (clocked.clock_round), and its name is only unlinked
            if name != "cand_slots":
                with contextlib.suppress(OSError):
                    os.truncate(path, 0)
            with contextlib.suppress(OSError):
                os.unlink(path)
        self.path, self.files = None, {}

    def said(self) -> tuple[str, Optional[str]]:
        return ("reference" if self.served and self.on else "own"), self.why


# Warm-up round under "auto": the shortest hold, so that the launch it measures includes the hold's
# own launcher
WARM_HOLD_US = 1.0


def auto_hold_us(ref_launch_ms: list[float], cap_us: float) -> float:
    """The launch hold for both sides: twice the reference's median launch time for one call (its
    own process, so a candidate cannot size the hold it is timed under: from the hold's launch
    through the flush's and the forward's) plus 50 us for jitter, at most `cap_us`. A candidate that
    launches for longer than this has the rest inside its interval, as without a hold; one that
    launches faster is covered."""
    med = statistics.median(ref_launch_ms) if ref_launch_ms else 0.0
    return round(min(cap_us, 2e3 * med + 50.0), 1)


def _contended(w0: Optional[int], w1: Optional[int], wall_s: float, frac: float) -> bool:
    """Whether a side waited for a CPU for over `frac` of its request's wall (run-queue waits in ns)."""
    return w0 is not None and w1 is not None and (w1 - w0) > frac * wall_s * 1e9


def _jail_state(worker) -> tuple:
    return main_thread_ns(worker), cpu_ns(getattr(worker, "groups", None) or [])


def _waited_alone_ms(before: tuple, after: tuple) -> float:
    """How long the candidate's timing thread waited for a CPU in a round while nothing else of its
    jail ran: its wait, less the CPU time the rest of the jail (its other threads, its processes)
    used meanwhile. A thread that waits while a helper of the solution's runs has hidden work, not
    contention: a helper's attack ran the forward on a thread pinned to the timing thread's CPU and
    had the whole call taken out of the wall, 5x and 20x faked. 0.0 where the jail's CPU time is not
    kept (no jail, no cpuacct): then no wait is taken out."""
    (t0, g0), (t1, g1) = before, after
    if t0 is None or t1 is None or g0 is None or g1 is None:
        return 0.0
    ran, waited = t1[0] - t0[0], t1[1] - t0[1]
    others = max(0, (g1 - g0) - ran)
    return max(0, waited - others) / 1e6


def _cand_wait_ms(before: tuple, after: tuple) -> Optional[float]:
    """The candidate's wait for a CPU in a round: while nothing else of its jail ran where the jail's
    CPU time is kept (_waited_alone_ms), else its timing thread's whole wait; None where unread."""
    (t0, g0), (t1, g1) = before, after
    if t0 is None or t1 is None:
        return None
    return _waited_alone_ms(before, after) if g0 is not None and g1 is not None else (t1[1] - t0[1]) / 1e6


def _told_seeds(rng: random.Random, seeds: list[int], served: bool) -> list[int]:
    """The seeds a round's command tells both sides. Where the inputs are served (made by the
    reference's process from `seeds`), other seeds drawn apart, for the forwards' random numbers and
    the fingerprints: told the inputs' own, a candidate rebuilt each call's inputs (make_inputs) and
    ran its forward before its clocked interval opened, 18-24x on a 70 us forward (a helper's attack,
    tests/adversarial/cpu/seed_precompute.py). Where each side makes its own, the inputs' seeds."""
    return [rng.getrandbits(62) for _ in seeds] if served else seeds


def _unclocked(m: Measurement, files: RoundFiles, reply) -> bool:
    """A clocked round the clock could not time. Where this machine refuses it the side's memory
    (process_vm_readv), the measurement goes on unclocked and says why (True: go on); any other
    failure is the candidate's round's (False: the measurement ends, in error)."""
    if reply.unreadable:
        files.clocked, files.clocked_why = False, reply.error
        m.cand, m.ref = Side(), Side()
        return True
    m.error = f"its clocked round did not complete: {reply.error}"
    m.flags.append("runtime_error")
    return False


def _net_of_clock(m: Measurement) -> None:
    """A clocked candidate's times less what the clock adds to a call (the copy of its inputs into
    their slot, the reading of its outputs, two hand-offs), as the reference's calls measured it:
    the lower quartile of its clock's interval less its own timer, whose process runs no solution
    code. The
    reference's times are its own timer's. Both sides' copies are of the same bytes; a jailed
    process's hand-offs cost it a few microseconds more (its system calls pass a filter), left in its
    times. No call is put under the spread of that overhead (its interquartile range, 1 us at
    least): a difference of two noisy numbers there is not a time, and a forward that fast reads as
    no faster (`clock_resolution_ms`)."""
    if not m.ref.short:
        return
    # the lower quartile, not the median: part of the overhead is the harness's own loop in the
    # side's process, which a candidate may run leaner (a helper's: 3.6 us a call under the median)
    cal = quantile(m.ref.short, 0.25)
    res = max(quantile(m.ref.short, 0.75) - cal, 0.001)
    m.clock_overhead_ms, m.clock_resolution_ms = cal, res
    m.cand.times = [max(x - cal, res) for x in m.cand.times]
    m.cand.host = [max(x - cal, res) for x in m.cand.host]
    m.cand.rounds = [(w, max(s - n * cal, n * res), n, q, wt) for w, s, n, q, wt in m.cand.rounds]


def _a_cpu_of(worker) -> Optional[int]:
    """One of the CPUs a side's process may run on now (its round's clock runs there: clocked.py);
    None where unknown."""
    try:
        return min(os.sched_getaffinity(worker.pid))
    except (OSError, AttributeError, TypeError, ValueError):
        return None


def _note_cpu(m: Measurement, side: str, worker, cuda: bool) -> None:
    """The CPU path's host conditions: the CPU `side`'s main thread was found on after its request
    (a GPU's sides are pinned)."""
    cpu = None if cuda else last_cpu(worker)
    if cpu is not None:
        seen = m.host_cpus.setdefault(side, {})
        seen[cpu] = seen.get(cpu, 0) + 1


def _candidate_failed(m: Measurement, c_reply, warm: bool) -> bool:
    """Whether the candidate's reply ends the measurement: its CUDA graph capture failed (it is to be
    restarted), or its request failed."""
    if warm and m.cuda_graph and (not c_reply.ok or "cuda_graph_unavailable" in c_reply.flags):
        # a capture that fails inside CUDA (a launch on the legacy stream, say) leaves torch half
        # in capture mode in that process (RNG offsets, allocator pool, current stream), and
        # may surface as an error of this first round: evaluate() times both sides again,
        # eagerly, with the candidate in a fresh process; an error that persists there is its own
        m.restart_candidate = True
        return True
    if not c_reply.ok:
        m.error = c_reply.error
        m.flags.append(c_reply.error_kind or "runtime_error")
        return True
    return False


def _tally(m: Measurement, c_reply, r_reply, tol) -> None:
    """A round's launch counts, fingerprint mismatches and the reference's word on its process, taken
    whether or not its samples are kept."""
    for side, reply in ((m.cand, c_reply), (m.ref, r_reply)):
        if reply.span_launches:
            side.launches = list(reply.span_launches)
    for cf, rf in zip(c_reply.fingerprints, r_reply.fingerprints):
        if not fingerprints_match(cf, rf, tol):
            m.mismatched_calls += 1
    m.rounds += 1
    m.l2_reset = bool(r_reply.l2_reset)
    m.max_clock_mhz = m.max_clock_mhz or r_reply.max_clock_mhz


def _hold_dropped(m: Measurement, r_reply) -> bool:
    """Whether the reference's process reports no working hold while the rounds hold both sides: then
    the samples so far are dropped and both sides go without, from a new warm-up round."""
    if "launch_hold_unavailable" in r_reply.flags and "launch_hold_unavailable" not in m.flags:
        m.flags.append("launch_hold_unavailable")  # the reference's process: its word can be taken
        if m.hold_us > 0:
            # a hold on one side only would leave the launching inside the reference's interval
            # and out of the candidate's: both sides without, from a new warm-up round (the
            # fingerprints' verdict on the calls made so far stands)
            m.hold_us = 0.0
            m.cand, m.ref, m.rounds = Side(), Side(), 0
            return True
    return False


def _spans_chosen(m: Measurement, t, warm_spans: list[float], r_reply) -> bool:
    """Whether the rounds from here are timed by kernel spans (config.Timing.kernel_span), decided
    after the first warm-up round.

    A short problem is timed by kernel spans from here, after one more warm-up round, since CUPTI's
    first records in a process (its buffers; the hold resized for launches with CUPTI on) are not
    those of a steady call; this round's go. "Short" is the reference's GPU work, as the warm-up
    round's CUPTI records (launch counts) give it, else this first round under the full hold's
    events. Events also hold whatever launching outlasted the hold: a 24 us kernel timed by events
    read 2.7 us more than by spans, in the run with the most leaked launches."""
    m.span_basis_ms = statistics.median(warm_spans or r_reply.times_ms)
    if t.kernel_span == "on" or (t.kernel_span == "auto" and m.span_basis_ms < t.kernel_span_below_ms):
        m.spans = True
        return True
    return False


def _drop_unavailable_spans(m: Measurement, c_reply, r_reply) -> None:
    """Kernel spans off for both sides where either process could not record them."""
    if m.spans and any("kernel_span_unavailable" in r.flags for r in (c_reply, r_reply)):
        m.spans = False  # both sides or neither; the events of the calls so far stand
        m.flags.append("kernel_span_unavailable")
        m.span_why = "; ".join(f"{name}: {r.span_why or 'CUPTI could not be had'}"[:200]
                               for name, r in (("candidate", c_reply), ("reference", r_reply))
                               if "kernel_span_unavailable" in r.flags)


def _judge_rounds(m: Measurement, t, snaps: tuple, c_reply, r_reply, busy: Optional[str] = None) -> tuple[dict, dict]:
    """Each side's round_state from the parent's NVML snapshots (before the candidate, after it, after
    the reference); a `slow` side's samples are re-taken by the next rounds. `busy`: the GPU ran other
    work when the reference's round ended (_busy_after), which its round is re-taken for too."""
    s0, s1, s2 = snaps
    st_c = round_state(s0, s1, t.throttle_ratio, m.max_clock_mhz)
    st_r = round_state(s1, s2, t.throttle_ratio, m.max_clock_mhz)
    if busy:
        st_r = {**st_r, "slow": True, "why": list(st_r.get("why") or []) + [busy], "busy": True}
    for side, st, reply in (("candidate", st_c, c_reply), ("reference", st_r, r_reply)):
        if st.get("busy") and len(m.retaken) >= _retakes(t):
            # other work on the GPU round after round while the candidate is frozen: its own, left
            # to run beside the reference (neighbours are stopped and waited out before the
            # measurement). Never kept: kept, it bought a doubled speedup past the re-takes
            m.flags.append("gpu_undrained")
            m.undrained = [f"the GPU was busy when the reference's rounds ended, {len(m.retaken)} rounds re-taken "
                           f"({busy})"]
            return st_c, st_r
        if st["slow"] and len(m.retaken) >= _retakes(t):
            # a slowdown that persists is the machine's state, not an accident of one round:
            # measure under it, flagged, rather than never finish
            st["slow"] = False
            if "throttled" not in m.flags:
                m.flags.append("throttled")
        if st["slow"]:  # re-taken by the next rounds
            m.throttled += len(reply.times_ms)
            m.retaken.append(f"{side}: {', '.join(st['why'])}")
        elif st.get("sm") is not None:
            m.gpu_rounds.append(st)
    return st_c, st_r


def _leave_gpu_quiet(m: Measurement, cand, ref, cfg, gpu: bool, timeout: float, warm: bool = False) -> Optional[bool]:
    """Pause the candidate for the reference's round, on a GPU with nothing of its left running there
    (process/gpulock.py): its CUDA processes locked where the driver will (which waits for the work
    they queued; never, on the driver measured, a timed candidate: CUPTI is attached to it), then in
    every case the reference's process waits for a quiet GPU. None where the candidate is to be
    rejected (flagged), else whether the reference's round is to be checked after it (_busy_after).
    A warm-up round's wait is not counted for `gpu_work_after_round` (a reference's first probe may
    load its kernel)."""
    h = cfg.hardening
    drain = h.gpu_drain_s if gpu and h.gpu_drain_s > 0 else None
    n = len(getattr(cand, "drained_ms", []))
    cand.pause(drain_gpu_s=drain) if drain is not None else cand.pause()
    if not warm:
        m.drained_ms += getattr(cand, "drained_ms", [])[n:]
    m.drain_unavailable = getattr(cand, "drain_unavailable", None)
    if getattr(cand, "unfrozen", 0) or getattr(cand, "undrained", None):
        cand.resume()
        # its helpers were still running, or its GPU work: no reference round beside them
        m.flags.append("unfreezable" if getattr(cand, "unfrozen", 0) else "gpu_undrained")
        m.undrained = list(getattr(cand, "undrained", []))
        return None
    if drain is None:
        return False
    if getattr(cand, "drain_locked_all", False):
        m.gpu_left_checks["locked"] = m.gpu_left_checks.get("locked", 0) + 1
    m.gpu_left_checks["probed"] = m.gpu_left_checks.get("probed", 0) + 1
    q = ask_quiet(ref, cfg.batch, drain, drain + timeout)
    if not warm:
        m.drained_ms.append(q.quiet_s * 1e3)
    if not q.quiet:
        cand.resume()
        m.flags.append("gpu_undrained")
        m.undrained = [f"the GPU was still busy {drain} s after its round (quiet probes)"]
        return None
    return True


def _busy_after(m: Measurement, ref, cfg, timeout: float) -> Optional[str]:
    """Was the GPU running other work (the candidate's, queued behind a copy the probes before the
    round cannot see) when the reference's round ended? Then that round is re-taken (_judge_rounds).
    Busy: a second probe over `quiet_probe_us` (the first after a pause may be slow alone), or
    `gpulock.LEFT_MS` of probing in all."""
    from ..process.gpulock import LEFT_MS
    q = ask_quiet(ref, cfg.batch, cfg.hardening.gpu_drain_s, cfg.hardening.gpu_drain_s + timeout)
    ms = q.quiet_s * 1e3
    slow = (q.quiet_probes or 0) - cfg.batch.quiet_probes
    if q.quiet and ms <= LEFT_MS and slow <= 1:
        return None
    m.drained_ms.append(ms)
    return f"the GPU busy after the reference's round ({ms:.1f} ms, {max(slow, 0)} slow probes)"


def _retakes(t) -> int:
    """Rounds re-taken at most, whatever the cause: past it, a slowdown that persists is the
    machine's state, not an accident of one round, and is measured under, flagged."""
    return 2 * t.min_rounds + 10


# clocked rounds of a reference's median call under this many ms are not judged on waits (above)
CLOCKED_WAITS_FROM_MS = 1.0


def _clocked_wait(side_ms: Optional[float], clock) -> Optional[float]:
    """A clocked round's wait for a CPU: the side's (`side_ms`: for the candidate, while nothing else
    of its jail ran, _cand_wait_ms) less the CPU time its clock used over the round. The two share one
    CPU and hand it to each other, and the side waits behind its clock at each hand-off: 20-50% of an
    honest round's wall on a microsecond forward, and every round was re-taken for it."""
    if side_ms is None:
        return None
    return max(0.0, side_ms - clock.ran_ms)


def _judge_waits(m: Measurement, t, waits: tuple) -> None:
    """The CPU path's times are host walls, and a side's wait for a CPU is in them: a round in which
    a side's timing thread waited for over `max_runqueue_frac` of its wall is re-taken by the next
    rounds (marked `slow`), on either side, so that neither is timed under the host's other
    processes while the other is not. A burner on the reference's CPU gave an honest speed 1.75x,
    on the candidate's 0.55x (2-core host); the suite's load did so to a test's attack at random.
    The candidate's wait is the one while nothing else of its jail ran (_waited_alone_ms): a wait
    behind its own helpers is its work, and it cannot choose which of its rounds the host delays.
    `waits`: (side, round_state, waited ms or None, wall s) per side. Past the re-takes, rounds are
    kept as they are: `ref_waited_frac` and `reference_contended` say so."""
    for side, st, waited_ms, wall_s in waits:
        if st["slow"] or waited_ms is None or waited_ms <= t.max_runqueue_frac * wall_s * 1e3:
            continue
        if len(m.retaken) >= _retakes(t):
            return
        st["slow"] = True
        m.retaken.append(f"{side}: waited for a CPU {waited_ms / (wall_s * 1e3):.0%} of the round")


def _enough(m: Measurement, t, min_calls: int, rounds_done: bool, over_budget: bool) -> bool:
    """Whether sampling stops: enough calls kept, in enough kept rounds (`rounds_done`), and both
    sides stable, or the calls or the budget spent."""
    c_t, r_t = m.cand.timed(m.spans), m.ref.timed(m.spans)
    n = min(len(c_t), len(r_t))
    if n >= min_calls and rounds_done:
        stable = summarize(c_t).rel_sem < t.target_rel_sem and summarize(r_t).rel_sem < t.target_rel_sem
        return stable or n >= t.max_calls or over_budget
    return False


def _steal_since(steal0: dict[int, int]) -> dict[int, float]:
    """The hypervisor's steal per CPU (ms) since `steal0` (steal_jiffies)."""
    tick_ms = 1e3 / os.sysconf("SC_CLK_TCK")
    return {c: round((v - steal0.get(c, v)) * tick_ms, 1) for c, v in steal_jiffies().items()}


def measure(cand, ref, cfg, rng: random.Random, *, cuda: bool, tol, timeout: float,
            ref_timeout: float, gpu: Optional[str] = None, compiled: bool = True, spans: Optional[bool] = None,
            min_rounds: Optional[int] = None, budget_s: Optional[float] = None,
            hold_us: Optional[float] = None, clocked: Optional[bool] = None, gpu_quiet: bool = True) -> Measurement:
    """Alternate candidate and reference rounds (and the torch.compile baseline, when on) until both
    are stable or the budget is spent. `cand` and `ref` are process.worker.Worker objects with built models;
    `gpu` the CUDA_VISIBLE_DEVICES value their GPU is named by, for the parent's NVML readings.
    A side's further process pair (processes_for) passes what its first pair settled: `compiled`
    False (one torch.compile baseline is enough), `spans` (whether to record kernel spans, without
    the rounds that decide it; whether they are reported is decided on the pooled calls), and its own
    `min_rounds` and `budget_s`, since its calls are pooled with the others' and what more processes
    buy is their offsets averaged, not more calls; the first pair's `hold_us`, which also skips
    the warm-up round (its processes had theirs, warm_up) unless CUDA graphs are captured; and
    whether its rounds were clocked (`clocked`, clocked.py; None: decided on the warm-up round).
    `gpu_quiet` False: the GPU was busy with work none of the harness's when the timing began (timed
    anyway, flagged device_not_quiet), so a busy GPU between rounds is not the candidate's doing and
    its rounds are not checked for it (_leave_gpu_quiet)."""
    # Over 100 lines: one loop whose rounds share a dozen locals (warm-up, restarts, re-takes); the
    # steps that need none of them are the helpers above.
    from ..records.messages import TimeCommand
    t = cfg.timing
    m = Measurement(cuda_graph=cuda and t.cuda_graph, spans=bool(cuda and spans))
    min_rounds = t.min_rounds if min_rounds is None else min_rounds
    if not cuda:
        # never fewer than the wall test needs: a further pair (processes_rounds, 3) that met its
        # calls in three rounds was never wall-tested (tests/adversarial/cpu/timer_patch_second_process.py
        # passed so, with rounds of more calls). Not yet on a GPU: there it made an honest fixture's
        # further pairs wall-tested, and one was rejected (honest_atomics.py on an H200, session 43)
        min_rounds = max(WALL_ROUNDS, min_rounds)
    budget_s = t.budget_s if budget_s is None else budget_s
    mon = GpuMonitor(gpu) if cuda else None
    snap = mon.snapshot if mon is not None else (lambda: None)
    # a GPU's rounds are marked contended by their wait for a CPU (quiet: the per-call gap test's
    # filter); on the CPU path a round a side waited in is taken again (_judge_waits). The wall
    # test's own wait (the candidate's, while nothing else of its jail ran) is _waited_alone_ms, on
    # both paths
    rq = runqueue_wait_ns if cuda else (lambda w: None)
    steal0 = {} if cuda else steal_jiffies()
    t_start = time.perf_counter()
    round_calls = max(2, t.round_calls)
    min_calls = t.min_calls if cuda else t.cpu_min_calls
    with_compiled = compiled and (t.compile_baseline == "on" or (t.compile_baseline == "auto" and cuda))
    warm = True
    no_hold = False  # the reference's process has no working hold: neither side gets one
    span_decided = t.kernel_span == "off" or spans is not None
    # the warm-up round, whose samples are not kept, also counts each side's launches per call
    # from CUPTI's records (process_bias_us), where spans will not
    count_launches = cuda and t.process_bias_per_launch_us > 0
    # "auto": the warm-up round runs the shortest hold and measures how long the reference takes to
    # launch a call; every later round holds both sides for twice that, plus a margin
    m.hold_us = 0.0 if not cuda else (WARM_HOLD_US if t.launch_hold_us == "auto" else float(t.launch_hold_us))
    unkept = 0  # rounds whose samples were not kept: warm-up rounds, the one that chose kernel spans
    warm_spans: list[float] = []  # the reference's kernel spans in the warm-up round, where recorded
    if hold_us is not None:
        m.hold_us = hold_us
        if not m.cuda_graph:
            warm = False
            m.max_clock_mhz = mon.max_sm if mon is not None else None
    files = RoundFiles(cand, ref, ref_timeout, t, on=not cuda and t.cpu_served_inputs)
    files.clocked = bool(clocked) and files.on and not with_compiled
    clock = None  # the clock process of clocked rounds (clocked.Clock), started with the first
    try:
        while True:
            seeds, inputs_path = files.make([rng.getrandbits(62) for _ in range(round_calls)])
            ticked = bool(files.files) and inputs_path is not None  # this round clocked
            seeds = _told_seeds(rng, seeds, inputs_path is not None)
            cmd = TimeCommand(seeds=seeds, warmup=t.warmup if warm else 0, flush_l2=t.flush_l2, flush_method=t.flush_method,
                              hold_us=m.hold_us, cuda_graph=m.cuda_graph, spans=m.spans or (warm and count_launches),
                              inputs_path=None if ticked else inputs_path,
                              slots_path=files.files["cand_slots"] if ticked else None, clock_timeout_s=timeout)
            if ticked:
                if clock is None or not clock.alive():
                    from .clocked import Clock
                    clock = Clock()
                # the clock on the side's own CPU (clocked.py: each hands it to the other), its
                # files open before the candidate (held meanwhile) may touch them
                jail = getattr(cand, "jail", None)
                if not clock.start(inputs_path, files.files["cand_slots"], files.files["ref_slots"],
                                   files.files["cand_snap"], len(seeds), cand.pid, _a_cpu_of(cand), timeout,
                                   owner_uid=jail.uid if jail is not None else None, truncate_slots=True):
                    if _unclocked(m, files, clock.result):
                        continue
                    break
            cand.resume()  # held from its last round (RoundFiles), or running already
            s0, q0, j0 = snap(), rq(cand), _jail_state(cand)
            c_reply, c_wall = cand.request(cmd, timeout)
            j1 = _jail_state(cand)
            c_clock = clock.finish() if ticked else None
            _note_cpu(m, "candidate", cand, cuda)
            s1, q1 = snap(), rq(cand)
            if ticked and c_clock.unreadable and _unclocked(m, files, c_clock):
                continue
            if _candidate_failed(m, c_reply, warm):
                break
            if ticked and not c_clock.ok:
                _unclocked(m, files, c_clock)
                break
            # nothing of the candidate's runs while the reference is timed, on the GPU neither
            probe_after = _leave_gpu_quiet(m, cand, ref, cfg, cuda and gpu_quiet, timeout, warm)
            if probe_after is None:
                break
            try:
                r_cmd = cmd
                if ticked:
                    r_cmd = cmd.model_copy(update={"slots_path": files.files["ref_slots"],
                                                   "prints_of": files.files["cand_snap"], "clock_timeout_s": ref_timeout})
                    if not clock.start(inputs_path, files.files["ref_slots"], files.files["ref_slots"],
                                       files.files["ref_snap"], len(seeds), ref.pid, _a_cpu_of(ref), ref_timeout):
                        raise RuntimeError(f"the reference's round could not be clocked: {clock.result.error}")
                p0 = runqueue_wait_ns(ref)
                r_reply, r_wall = ref.request(r_cmd, ref_timeout)
                r_clock = clock.finish() if ticked else None
                _note_cpu(m, "reference", ref, cuda)
                s2, p1 = snap(), runqueue_wait_ns(ref)
                busy = _busy_after(m, ref, cfg, timeout) if probe_after and r_reply.ok else None
                if with_compiled:
                    k_reply, _ = ref.request(cmd.model_copy(update={"variant": "compiled", "cuda_graph": False}),
                                             ref_timeout + (600 if warm else 0))
                    if not k_reply.ok:
                        m.compile_error, with_compiled = k_reply.error, False
                        if ref.returncode is not None:
                            raise RuntimeError(f"reference died in torch.compile: {k_reply.error}")
            finally:
                if not files.on:  # (held otherwise until its next round starts)
                    cand.resume()
            if not r_reply.ok:
                raise RuntimeError(f"reference failed while timing: {r_reply.error}")
            own = None
            if ticked:
                if not r_clock.ok:
                    raise RuntimeError(f"the reference's clocked round did not complete: {r_clock.error}")
                # the candidate's times are the clock's (less, at the end, what the clock adds to a
                # call: _net_of_clock), its own kept for clocks.report_check; the reference's are its
                # own timer's, its process running no solution code; the candidate's outputs are
                # as the clock read them, fingerprinted by the reference
                own = (c_reply.times_ms, r_reply.times_ms)
                c_reply = c_reply.model_copy(update={"times_ms": c_clock.times_ms, "host_ms": c_clock.times_ms,
                                                     "fingerprints": r_reply.other_fingerprints})
            if warm and m.cuda_graph and "cuda_graph_unavailable" in r_reply.flags:
                m.cuda_graph = False  # both sides or neither: a fair comparison first
                m.flags.append("cuda_graph_unavailable")
                continue  # the warm-up round again, eagerly
            if len(c_reply.times_ms) != len(seeds) or len(c_reply.fingerprints) != len(seeds):
                m.flags.append("malformed_report")
                break
            if "tensor_subclass" in c_reply.flags:  # its timed outputs were not plain tensors: nothing to report
                m.flags.append("tensor_subclass")
                break
            _tally(m, c_reply, r_reply, tol)
            unkept += 1  # until the round is kept, below
            if _hold_dropped(m, r_reply):
                warm, no_hold, unkept = True, True, 0
                continue
            if warm:  # the first round's wall includes warm-up and captures; keep its samples out
                warm = False
                if clocked is None and files.on and not with_compiled and t.cpu_clocked != "off" and r_reply.times_ms:
                    # a forward under cpu_clocked_below_ms is clocked from the next round on (clocked.py)
                    files.clocked = t.cpu_clocked == "on" or statistics.median(r_reply.times_ms) < t.cpu_clocked_below_ms
                    if files.clocked and not ticked:
                        # and the first clocked round is a warm-up too: its calls ran 1.5-2.5x the
                        # next rounds' on both sides (cold hand-offs), and its spread set the clock's
                        # resolution, under which no candidate call is put (11 us on a 7 us forward)
                        clocked, warm = True, True
                        continue
                if not span_decided:
                    warm_spans = [x for x in reply_spans(r_reply) if x > 0]
                if cuda and t.launch_hold_us == "auto" and not no_hold and hold_us is None:
                    m.hold_us = auto_hold_us(r_reply.launch_ms + (k_reply.launch_ms if with_compiled else []),
                                             t.launch_hold_max_us)
                m.max_clock_mhz = (mon.max_sm if mon is not None else None) or r_reply.max_clock_mhz
                continue
            if cuda and not span_decided:
                span_decided = True
                if _spans_chosen(m, t, warm_spans, r_reply):
                    warm = True  # one more warm-up round, with CUPTI recording
                    continue
            _drop_unavailable_spans(m, c_reply, r_reply)
            st_c, st_r = _judge_rounds(m, t, (s0, s1, s2), c_reply, r_reply, busy)
            if "gpu_undrained" in m.flags:
                break
            c_wait = None if cuda else _cand_wait_ms(j0, j1)
            r_wait = None if p0 is None or p1 is None else (p1 - p0) / 1e6
            judged = True
            if ticked:
                c_wait, r_wait = _clocked_wait(c_wait, c_clock), _clocked_wait(r_wait, r_clock)
                if r_reply.times_ms and statistics.median(r_reply.times_ms) < CLOCKED_WAITS_FROM_MS:
                    # calls far shorter than a scheduler's slice: the few a host's other process
                    # lands in are left out by the median call (a busy loop on either side's CPU
                    # moved no clocked speedup of a 7 us forward: bench/results/clock-checks.md), and
                    # a jailed side's wait less its clock's is 5-15% of an honest round here: not
                    # re-taken. The reference's is still summed, for `reference_contended`: a build
                    # on its CPU slowed its 6 us calls by half, every call (a new user's batch)
                    judged, c_wait = False, None
            if not cuda and judged:
                _judge_waits(m, t, (("candidate", st_c, c_wait, c_wall), ("reference", st_r, r_wait, r_wall)))
            # A round in which a side waited for a CPU keeps its samples (dropping them would let a
            # solution pick its own rounds by making them contended) but is marked, and the host-clock
            # checks look at quiet rounds where there are enough: contention on one side looks like
            # hidden time on that side.
            quiet_c = not (cuda and _contended(q0, q1, c_wall, t.max_runqueue_frac))
            quiet_r = not (cuda and _contended(p0, p1, r_wall, t.max_runqueue_frac))
            if not st_r["slow"] and r_wait is not None:
                m.ref_waited_ms += r_wait
                m.ref_wall_ms += r_wall * 1e3
            m.contended_rounds += (not quiet_c) + (not quiet_r)
            if not st_c["slow"] and c_wait is not None:
                m.cand_waited_ms += c_wait
                m.cand_wall_ms += c_wall * 1e3
            if not st_c["slow"]:
                m.cand.keep(c_reply, c_wall, quiet_c, _waited_alone_ms(j0, j1))
                if own is not None:
                    m.cand.clocked.append((sum(c_reply.times_ms), sum(own[0]), len(own[0])))
                    m.cand.short += [c - o for c, o in zip(c_reply.times_ms, own[0])]
                if not cuda and j0[1] is not None and j1[1] is not None and c_wall > 0:
                    m.cand_cpus.append((j1[1] - j0[1]) / (c_wall * 1e9))
            if not st_r["slow"]:
                m.ref.keep(r_reply, r_wall, quiet_r)  # (its waits stay in its walls: clocks._over)
                if own is not None:
                    m.ref.clocked.append((sum(r_clock.times_ms), sum(own[1]), len(own[1])))
                    m.ref.short += [c - o for c, o in zip(r_clock.times_ms, own[1])]
                m.clocks_mhz += r_reply.clocks_mhz  # the reference's own per-call readings: trusted
            if with_compiled and k_reply.ok and not busy:
                m.compiled += k_reply.times_ms
                m.compiled_span += reply_spans(k_reply)
            unkept -= 1
            # each side's kept rounds: a round re-taken on one side (throttled, or waited in for a CPU)
            # is not one the clock checks can judge (the wall test needs stats.WALL_ROUNDS of the
            # candidate's; counting the round anyway left a cheat's measurement with four, untested)
            kept = min(len(m.cand.rounds), len(m.ref.rounds))
            if _enough(m, t, min_calls, m.rounds - unkept >= min_rounds and kept >= min_rounds,
                       time.perf_counter() - t_start > budget_s):
                break
            if m.rounds > 4 * (t.max_calls // round_calls + min_rounds) + 8:
                m.flags.append("throttled")  # clocks never recovered: report what we have, flagged
                break
    finally:
        files.drop()
        cand.resume()
        if clock is not None:
            clock.close()
    m.inputs, m.inputs_why = files.said()
    # clocked only where every kept round was (a round re-made unclocked, its outputs unclockable)
    m.clocked = bool(m.cand.clocked) and len(m.cand.clocked) == len(m.cand.rounds) and len(m.ref.clocked) == len(m.ref.rounds)
    m.clocked_why = files.clocked_why
    if m.clocked:
        _net_of_clock(m)
    m.seconds = time.perf_counter() - t_start
    if steal0:
        m.host_steal_ms = _steal_since(steal0)
    return m


def warm_up(t, rng: random.Random, spans: Optional[bool] = None):
    """The command for a process's first timing request (a further process's, and on a GPU the first
    reference's and candidate's), sent outside the timing phase, its samples discarded: what a
    process pays once (CUPTI's start, NVML, the flush buffer) made a fresh reference's first
    measurement 0.9-1.2 s longer than later ones on an H100. No hold:
    a request with one re-checks a hold that failed its check at pin() beside other processes' work,
    and must do so on a quiet GPU, in the timing phase (time_calls); run here, beside the other
    evaluations' phases, that check failed and left an identical solution timed without a hold."""
    from ..records.messages import TimeCommand
    if spans is None:  # a process's first request, before any pair settled spans: CUPTI started unless off
        spans = t.kernel_span != "off"
    return TimeCommand(seeds=[rng.getrandbits(62) for _ in range(2)], warmup=t.warmup, flush_l2=t.flush_l2,
                   flush_method=t.flush_method, hold_us=0.0, spans=spans)


def pooled(ms: list[Measurement]) -> Measurement:
    """Measurements of several process pairs (processes_for) as one: every kept call of each side,
    in order, each measurement having passed its own clock and fingerprint checks. The launch hold,
    clock maximum and L2 reset are the first's; the torch.compile baseline is timed in the first only."""
    if len(ms) == 1:
        return ms[0]
    first = ms[0]
    out = Measurement(compiled=list(first.compiled), compiled_span=list(first.compiled_span), spans=first.spans,
                      hold_us=first.hold_us, cuda_graph=first.cuda_graph, l2_reset=first.l2_reset,
                      max_clock_mhz=first.max_clock_mhz, compile_error=first.compile_error,
                      span_basis_ms=first.span_basis_ms,
                      inputs="reference" if all(m.inputs == "reference" for m in ms) else "own",
                      inputs_why=next((m.inputs_why for m in ms if m.inputs_why), None),
                      clocked=all(m.clocked for m in ms), clocked_why=next((m.clocked_why for m in ms if m.clocked_why), None),
                      clock_overhead_ms=first.clock_overhead_ms, clock_resolution_ms=first.clock_resolution_ms)
    for m in ms:
        for mine, theirs in ((out.cand, m.cand), (out.ref, m.ref)):
            for f in ("times", "host", "enqueue", "launch", "span", "rounds", "clocked", "short"):
                getattr(mine, f).extend(getattr(theirs, f))
            mine.leaked += theirs.leaked
            mine.launches = mine.launches or list(theirs.launches)
        for f in ("contended_rounds", "mismatched_calls", "rounds", "throttled"):
            setattr(out, f, getattr(out, f) + getattr(m, f))
        out.seconds += m.seconds
        out.spans = out.spans and m.spans
        out.span_why = out.span_why or m.span_why
        out.clocks_mhz += m.clocks_mhz
        out.gpu_rounds += m.gpu_rounds
        out.retaken += m.retaken
        out.flags += [f for f in m.flags if f not in out.flags]
        out.cand_cpus += m.cand_cpus
        out.drained_ms += m.drained_ms
        for k, v in m.gpu_left_checks.items():
            out.gpu_left_checks[k] = out.gpu_left_checks.get(k, 0) + v
        out.drain_unavailable = out.drain_unavailable or m.drain_unavailable
        out.ref_waited_ms += m.ref_waited_ms
        out.ref_wall_ms += m.ref_wall_ms
        out.cand_waited_ms += m.cand_waited_ms
        out.cand_wall_ms += m.cand_wall_ms
        for k, v in m.host_steal_ms.items():
            out.host_steal_ms[k] = round(out.host_steal_ms.get(k, 0.0) + v, 1)
        for side, seen in m.host_cpus.items():
            mine = out.host_cpus.setdefault(side, {})
            for c, n in seen.items():
                mine[c] = mine.get(c, 0) + n
    return out


def span_choice(m: Measurement, t) -> tuple[bool, dict]:
    """Whether the record reports kernel spans (config.Timing.kernel_span), and what that rests on."""
    if not m.spans:
        # asked for and not had: CUPTI could not be opened in one of the two processes
        why = f" ({m.span_why})" if m.span_why else ""
        return False, ({"kernel_span_fallback": f"CUPTI's records could not be had{why}"}
                       if "kernel_span_unavailable" in m.flags else {})
    note: dict = {}
    for name, side in (("candidate", m.cand), ("reference", m.ref)):
        if len(side.span) != len(side.times) or len(side.times) < 2 or any(x <= 0 for x in side.span):
            note["kernel_span_fallback"] = f"{name}: calls with no GPU work recorded by CUPTI"
            return False, note
    gap = {name: statistics.median(e - s for e, s in zip(side.times, side.span))
           for name, side in (("candidate", m.cand), ("reference", m.ref))}
    note["events_minus_span_us"] = {k: round(v * 1e3, 3) for k, v in gap.items()}
    allowed = max(t.kernel_span_slack_us / 1e3, t.kernel_span_slack_rel * statistics.median(m.ref.times))
    if gap["candidate"] > gap["reference"] + allowed:
        note["kernel_span_fallback"] = (f"the candidate's events exceed its recorded GPU work by "
                                        f"{(gap['candidate'] - gap['reference']) * 1e3:.2f} us more than the "
                                        f"reference's do (allowed {allowed * 1e3:.2f}): work no record shows")
        return False, note
    return True, note


def gpu_summary(m: Measurement) -> dict:
    """The GPU's state over the kept rounds, from the parent's readings, for the record."""
    g = m.gpu_rounds
    if not g:
        return {}
    med = lambda xs: sorted(xs)[len(xs) // 2] if xs else None  # noqa: E731
    vals = lambda k: [r[k] for r in g if r.get(k) is not None]  # noqa: E731
    temps = vals("temp")
    seen = 0
    for r in g:
        seen |= r.get("reasons") or 0
    return {"sm_clock_mhz_after_rounds": med(vals("sm")), "mem_clock_mhz": med(vals("mem")),
            "temperature_c": [min(temps), max(temps)] if temps else None,
            "power_w_max": round(max(vals("power_w")), 1) if vals("power_w") else None,
            "power_capped_ms": round(sum(vals("power_cap_ns")) / 1e6, 3),
            "thermal_limited_ms": round(sum(vals("thermal_ns")) / 1e6, 3),
            "clock_event_reasons": [n for b, n in {POWER_CAP: "sw_power_cap", **SLOWDOWNS}.items() if seen & b]}
