"""Configuration: a pydantic model with defaults in configs/default.toml, overridable by a user file
and by command-line options. The effective config is written into every run."""
from __future__ import annotations

import hashlib
import json
import tomllib
from pathlib import Path
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_TOML = Path(__file__).resolve().parent.parent / "configs" / "default.toml"


class _Section(BaseModel):
    # a misspelt key in a config file or --set is an error, not a setting silently left at its default
    model_config = ConfigDict(extra="forbid")


class Timeouts(_Section):
    compile_s: float = Field(300, gt=0)
    load_s: float = Field(60, gt=0)
    run_s: float = Field(120, gt=0)
    problem_s: float = Field(120, gt=0)


class Tolerance(_Section):
    atol: float = Field(ge=0)
    rtol: float = Field(ge=0)
    rel_l2: float = Field(ge=0)


def _default_tols() -> dict[str, Tolerance]:
    return {
        "fp32": Tolerance(atol=1e-4, rtol=1e-4, rel_l2=1e-4),
        "fp16": Tolerance(atol=1e-2, rtol=1e-2, rel_l2=5e-3),
        "bf16": Tolerance(atol=2e-2, rtol=2e-2, rel_l2=2e-2),
    }


class Correctness(_Section):
    trials: int = Field(5, ge=1)  # a pass always rests on whole outputs compared, not only fingerprints
    allow_tf32: bool = False
    extra_shapes: bool = True
    # GPU: list the kernels of one forward, after timing (CUPTI slows the launches of its process),
    # to check that a kernel the solution defines ran; off, calls into its extensions are the
    # evidence
    list_kernels: bool = True
    # how: "cupti", CUPTI's activity records called directly (cupti.py: about 20 ms on an H200
    # machine), falling back to the profiler where that cannot be had; "profiler", torch.profiler
    # always (4-6 s of start-up per passing solution with extensions)
    kernel_list: Literal["cupti", "profiler"] = "cupti"
    tol: dict[str, Tolerance] = Field(default_factory=_default_tols)


class Timing(_Section):
    warmup: int = Field(3, ge=0)
    min_calls: int = Field(20, ge=2)
    max_calls: int = Field(200, ge=2)
    target_rel_sem: float = Field(0.005, ge=0)
    budget_s: float = Field(2.5, ge=0)
    flush_l2: bool = True
    # read: a reduction over the flush buffer leaves L2 holding clean lines, as after Nsight Compute's
    # cache control; write (do_bench's zero_()) leaves ~L2-size of dirty lines whose write-back lands
    # inside the next timed call and adds ~10 us to memory-bound kernels
    flush_method: Literal["read", "write"] = "read"
    # GPU: before the flush, hold the stream with a kernel that fills the GPU, so that the host has
    # launched the whole forward before the interval opens (as in steady use, where the host runs
    # ahead of the GPU; nvbench holds the stream with a blocking kernel for the same reason). The
    # flush alone (~55 us on an H200) is too short a shield: a slow first launch (cuBLAS through a
    # module's forward) leaked into the interval and spread a 0.34 ms matmul's median 4.2% over 5
    # runs, and a fixed hold shorter than a forward's launching leaves a remainder of it inside the
    # interval, different on each side (bench/results/fidelity-NVIDIA_H200.md, sessions 5-6).
    # "auto": twice the reference's launch time for one call (hold, flush and forward launched),
    # measured in the warm-up round, + 50 us; a number: that many us; 0: none.
    launch_hold_us: Union[Literal["auto"], float] = "auto"
    launch_hold_max_us: float = 5000.0
    cpu_min_calls: int = Field(5, ge=2)
    cpu_threads: int = Field(1, ge=1)
    round_calls: int = Field(10, ge=1)
    cuda_graph: bool = False
    compile_baseline: Literal["auto", "on", "off"] = "auto"
    throttle_ratio: float = Field(0.75, ge=0, le=1)
    # a GPU round in which a side's process waited this fraction of the round's wall time for a CPU
    # (runnable, not running: /proc/<pid>/schedstat) is re-taken: host contention stretches launch
    # gaps into the events and overhead into the host clocks, on one side only
    max_runqueue_frac: float = Field(0.05, ge=0, le=1)
    min_rounds: int = Field(5, ge=1)
    # GPU: the standard deviation of the offset a process adds to a kernel's median, in us, whatever
    # the number of calls (a fresh process's GPU context; not its streams, flush buffer, code
    # placement, CPU or NaN poison: bench/diag/process_bias.py, poison_effect.py). Measured on an
    # H200 between fresh processes: 0.06-0.10 us at 4 us, 0.15 us at 23 us, at most ~0.2 us at 0.27 ms;
    # but one reference process of a 4 us kernel drew 0.45 us above its 5 identical candidates
    # (session 10), which 0.15 did not cover (3 of 5 widened intervals excluded 1.0): 0.25 covers it.
    # More calls in one process do not shrink it, so speedup_ci is widened by it, and `short_kernel`
    # flags a speedup whose interval it widens by more than 1% (both sides under ~70 us). 0: off.
    process_bias_us: float = 0.25
    # GPU: where that offset lives (bench/diag/offset_source.py, 8 fresh processes on an H200): not in
    # the kernel. CUPTI's own start and end of a 4 us relu's kernel were 1.536 us in all 8 processes
    # while their events' medians spread 4.0-4.7 us; the rest of the interval is the GPU front end
    # starting the kernel after the start event. Problems whose reference's events median is under
    # `kernel_span_below_ms` are timed instead by each call's kernel span (timing.call_work: first
    # start to last end of the forward's kernels, copies and fills, on any stream), on both sides,
    # with the events still taken beside it for the host-clock checks. "on": every GPU problem;
    # "off": events only. Falls back to events, noted in the record, where CUPTI cannot be had, a
    # call recorded no GPU work, or the candidate's events exceed its spans by more than the
    # reference's do, by max(slack_us, slack_rel x the reference's median): GPU time no record
    # shows (a host function in the stream, say).
    kernel_span: Literal["auto", "on", "off"] = "auto"
    kernel_span_below_ms: float = 0.05
    kernel_span_slack_us: float = 1.0
    kernel_span_slack_rel: float = 0.05
    # the process offset of spans: CUPTI's timestamps tick in 32 ns, and the 8 processes' medians
    # above differed by at most one tick
    kernel_span_process_bias_us: float = 0.03
    # GPU: added to either of the two above for each kernel, copy or fill of a forward after its
    # first (counted from CUPTI's records in the warm-up round, or in every round under spans). Each
    # dependent launch waits on the GPU front end, at a speed of the process's own that is the same
    # for all its launches: over 8 fresh processes on an H100, chains of k relus spread in proportion
    # to k - 1, with a standard deviation of 0.085-0.093 us per launch by events and by spans alike,
    # at 64K and 1M floats (1.3-1.4 us at 16 kernels, against 0.01 us for one kernel's span);
    # bench/diag/chain_bias.py, span_parts.py. 0: a forward counts as one kernel.
    process_bias_per_launch_us: float = 0.09
    # GPU: more calls do not shrink that offset, more processes do. A side whose offset (sd, the
    # three above for its launches, less the spans' tick) is over `processes_above_rel` of its median
    # is timed in `processes` processes: its first, plus fresh ones that load the solution (or Model)
    # and are each measured, clock-checked and fingerprint-checked against a reference process on
    # their own, with all their kept calls pooled. 5 runs spread about 2.3 sd: over 0.35% leaves too
    # little of the 1% that a repeat should stay within. relu(x + y) on 4M floats (24 us by spans,
    # two launches: 0.375%) spread 1.35-1.84% over 5 single-process runs (H100, H200); a forward of
    # one kernel timed by spans, or of two by events from ~0.1 ms, stays at one. "always": every
    # side, on any device (the CPU's processes differ too); "never": one each.
    processes: int = Field(4, ge=1)
    processes_when: Literal["auto", "always", "never"] = "auto"
    processes_above_rel: float = 0.0035
    # A side timed in several processes gets more, up to `processes_max`, until the standard error of
    # its process medians' mean (their observed sd, or the model's where that is larger, over the
    # square root of their number) is under `processes_target_rel`. relu(x + y) at 24 us drew about
    # 0.5-0.7% of sd between processes (H100), up to twice the model: with 4 its 5-run spread was
    # 0.39-1.67%, with up to 8 0.40-0.94% in six sets. Up to 8 is the default since the further
    # processes start faster (session 26: the hold's kernel loaded without Triton, a group of them
    # primed at once): the throughput bench's warm run at 0.22-0.25 of its cold run with it on three
    # machines and 0.32 on a fourth, against 0.27-0.29 before (bench/results/fidelity-NVIDIA_H100_80GB_HBM3.md,
    # throughput-cuda.md).
    processes_max: int = Field(8, ge=1)
    processes_target_rel: float = Field(0.0025, ge=0)
    # a further pair's timed rounds at least (min_rounds is the first's), under the first pair's
    # hold and without a warm-up round (its processes had one when they started, timing.warm_up);
    # it records kernel spans where the first pair did, without the rounds that decide that
    processes_rounds: int = Field(3, ge=1)
    # no more pairs are started than fit, at the pairs' cost so far, into this much timing wall for
    # all of them together (the fidelity target: 3 s for a solution up to 1 ms); 0: no limit
    processes_budget_s: float = Field(2.5, ge=0)


class Hardening(_Section):
    max_speedup: float = Field(50.0, gt=0)
    # make the evaluating process non-dumpable (Linux): a solution, though a descendant, can then not
    # read the reference's outputs out of its memory through /proc or ptrace
    protect_parent: bool = True
    # host-clock cross-checks (see timing.clock_checks): thresholds on the extra time per call that
    # the candidate's events do not account for, relative to the reference's
    gap_abs_ms: float = 0.02
    gap_rel: float = 0.25
    wall_abs_ms: float = 0.05
    cpu_wall_abs_ms: float = 0.5
    wall_rel: float = 0.5
    # a flagged measurement is taken again up to this many times, and the first that no check flags
    # is reported; flagged every time: rejected. A cheat hides its time in every measurement, while
    # a busy host flags one now and then (2 of 25 honest evaluations on a 2-core machine under 4 test
    # workers; one of them was flagged twice in a row in 6 runs of the suite)
    clock_check_confirmations: int = Field(2, ge=1)


class Batch(_Section):
    # each GPU slot keeps this many candidate children started ahead (interpreter and torch import
    # done while earlier solutions run), taking 1-3 s per solution off the device's critical path;
    # 0: off. A CPU slot keeps at most one (it would compete with the evaluation for cores).
    standby_workers: int = Field(2, ge=0)
    # a GPU slot's standbys also make their CUDA context and build the launch hold (child._prime:
    # 0.7 s of each candidate's load on an H200 machine), in the slot's untimed phases
    prime_standbys: bool = True
    # standbys are forked from one process per slot that imported torch once (forkserver.py), in
    # milliseconds each instead of 2-4 s of CPU; false: each starts its own interpreter
    fork_standbys: bool = True
    # evaluations in flight per GPU slot: their untimed phases (start, trials, judging, kernel
    # listing: mostly host latency) overlap; timing has the GPU to itself (sharing.py)
    concurrent_evaluations: int = Field(4, ge=1)
    # an evaluation readying its kernel list after its timing (milliseconds through CUPTI, seconds
    # of host work in torch.profiler's start-up) leaves its lane to another, up to twice
    # `concurrent_evaluations` in flight (sharing.DeviceGate.background)
    background_frees_lane: bool = True
    # a candidate's start or correctness trials running longer than this (a hang waiting out its
    # timeout, 120 s by default) counts as a background phase too, so that another evaluation takes
    # its lane meanwhile; 0: never. Not lower: at 3 s it also freed the lanes of starts slowed by the
    # builds beside them (10 in a cold run of the throughput bench on an H100), and the extra
    # evaluations in flight slowed every start
    slow_phase_frees_lane_s: float = 10.0
    # a GPU slot starts a problem's reference as the problem's first evaluation begins, beside the
    # candidate's start and trials (in its own process, as always); false: after them
    early_reference: bool = True
    # a timing phase stops (SIGSTOP) the untimed phases of the others that run in child processes (a
    # candidate's start and trials, a reference's start, a standby's priming) instead of waiting for
    # them to end, then waits for the GPU to be quiet of the work they had queued (`quiet_*`)
    stop_untimed_phases: bool = True
    # the quiet wait: a tiny kernel launched and waited for from the reference's process, until
    # `quiet_probes` in a row take under `quiet_probe_us` (another context's queued work makes the GPU
    # time-slice, and a probe then waits for it); at most `quiet_max_s`, then timed anyway, flagged
    quiet_probe_us: float = 200.0
    quiet_probes: int = Field(3, ge=1)
    quiet_max_s: float = 10.0
    # the same on the CPU slot: 1, since there every phase competes with timing for the same cores
    cpu_concurrent_evaluations: int = Field(1, ge=1)
    # builds also run on the GPU slots' timing CPUs while no timing phase holds them, and are moved
    # off before one starts (cpus.Lender); false: they never run there
    lend_timing_cpus: bool = True


class Config(_Section):
    device: Literal["auto", "cuda", "cpu"] = "auto"
    size: Literal["auto", "full", "small"] = "auto"
    dtype: Literal["auto", "fp32", "fp16", "bf16"] = "auto"
    cache_dir: str = ".cache/harness"
    timeouts: Timeouts = Field(default_factory=Timeouts)
    correctness: Correctness = Field(default_factory=Correctness)
    timing: Timing = Field(default_factory=Timing)
    hardening: Hardening = Field(default_factory=Hardening)
    batch: Batch = Field(default_factory=Batch)

    def digest(self) -> str:
        """Hash of everything that changes a verdict or a number (not paths, nor how a batch is run)."""
        d = self.model_dump(exclude={"cache_dir", "timeouts", "batch"})
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def load_config(path: Optional[str | Path] = None, overrides: Optional[dict[str, Any]] = None) -> Config:
    """Defaults from configs/default.toml (when present), then `path`, then `overrides` (dotted keys
    allowed: {"timing.budget_s": 1})."""
    data: dict[str, Any] = {}
    if DEFAULT_TOML.exists():
        data = tomllib.loads(DEFAULT_TOML.read_text())
    if path:
        data = _merge(data, tomllib.loads(Path(path).read_text()))
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        node = data
        *parents, leaf = key.split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return Config.model_validate(data)
