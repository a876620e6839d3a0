"""Typed records: everything that crosses a process boundary or is written to disk.

The child processes speak to the parent only through these models (JSON over a private pipe), and
every result row on disk is an `EvalResult`. A result is data, not a dict assembled in five places.
"""
from __future__ import annotations

from enum import Enum
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field


class Status(str, Enum):
    passed = "passed"
    incorrect = "incorrect"
    compile_error = "compile_error"
    runtime_error = "runtime_error"
    timeout = "timeout"
    no_code = "no_code"
    interface_error = "interface_error"
    rejected = "rejected"


class Stats(BaseModel):
    """Summary of timing samples, in milliseconds."""

    median: float
    mean: float
    std: float
    min: float
    max: float
    count: int
    rel_sem: float = Field(description="standard error of the mean over the mean")


class EnvInfo(BaseModel):
    """Hardware and software fingerprint written beside every number."""

    device: str
    gpu_name: Optional[str] = None
    gpu_uuid: Optional[str] = None
    compute_capability: Optional[str] = None
    driver: Optional[str] = None
    cuda: Optional[str] = None
    torch: str
    python: str
    harness: str
    hostname: str
    cpu: Optional[str] = None
    sm_clock_mhz: Optional[int] = None
    mem_clock_mhz: Optional[int] = None
    temperature_c: Optional[int] = None


class TrialCheck(BaseModel):
    """One correctness trial as judged by the parent."""

    seed_index: int
    shape: str = "default"
    ok: bool
    max_abs_diff: Optional[float] = None
    max_rel_diff: Optional[float] = None
    rel_l2_diff: Optional[float] = None
    reason: Optional[str] = None


class PhaseTimes(BaseModel):
    extract_s: float = 0.0
    compile_s: float = 0.0
    load_s: float = 0.0
    correctness_s: float = 0.0
    timing_s: float = 0.0
    total_s: float = 0.0
    # parts of correctness_s: the candidate's trials and their transfer, the reference's start (the
    # first solution of a problem pays it), judging in the parent. profile_s: the profiled forward
    # that lists the candidate's GPU kernels, after timing (in total_s, not in correctness_s), and
    # profiler_start_s readying CUPTI before it (cupti.py; torch.profiler's start-up where CUPTI
    # cannot be called directly), outside the device slot's gate
    trials_s: float = 0.0
    reference_s: float = 0.0
    judge_s: float = 0.0
    profiler_start_s: Optional[float] = None
    profile_s: Optional[float] = None
    # time spent waiting at the device slot's gate (evaluations sharing a GPU: another one being
    # timed); in total_s, in none of the phases above
    wait_s: float = 0.0
    # time this evaluation's timing waited for the GPU to be quiet of stopped neighbours' work
    # (sharing.DeviceGate.stoppable); in timing_s
    quiet_s: float = 0.0
    # readying processes for timing, outside the timing phase: the candidate's first timing request
    # (timing.warm_up) on a GPU, and starting a candidate's and a problem's further processes, where
    # a side is timed in several (timing.processes_for); in total_s, not in timing_s
    processes_s: float = 0.0


class EvalResult(BaseModel):
    """The record of one evaluation: printed by `harness eval --json`, one line of results.jsonl."""

    problem: str
    solution: str
    status: Status
    flags: list[str] = Field(default_factory=list)
    speedup: Optional[float] = None
    speedup_ci: Optional[tuple[float, float]] = None
    speedup_compile: Optional[float] = None
    compile_runtime_ms: Optional[float] = None
    runtime_ms: Optional[float] = None
    ref_runtime_ms: Optional[float] = None
    runtime_stats: Optional[Stats] = None
    ref_runtime_stats: Optional[Stats] = None
    max_abs_diff: Optional[float] = None
    max_rel_diff: Optional[float] = None
    rel_l2_diff: Optional[float] = None
    trials: list[TrialCheck] = Field(default_factory=list)
    error: Optional[str] = None
    log_tail: Optional[str] = None
    env: Optional[EnvInfo] = None
    phases: PhaseTimes = Field(default_factory=PhaseTimes)
    timing_method: dict[str, Any] = Field(default_factory=dict)
    label: Optional[str] = None
    solution_hash: Optional[str] = None
    problem_hash: Optional[str] = None
    config_hash: Optional[str] = None
    config: Optional[dict[str, Any]] = None  # the effective config (harness eval; a batch writes config.json)
    device: Optional[str] = None
    harness_version: Optional[str] = None
    started_at: Optional[str] = None


# --------------------------------------------------------------------------------------------------
# Messages between the parent and a worker process. The worker reads `Command`s on stdin and writes
# `Reply`s to a private pipe; nothing it prints is ever parsed.


class CompileReply(BaseModel):
    kind: Literal["compile"] = "compile"
    ok: bool
    category: Optional[Literal["compile_error", "import_error", "needs_cuda"]] = None
    error: Optional[str] = None
    extensions: list[str] = Field(default_factory=list)
    kernel_names: list[str] = Field(default_factory=list)
    seconds: float = 0.0


class Command(BaseModel):
    """One request from the parent to a worker."""

    model_config = ConfigDict(extra="forbid")
    op: Literal["load", "build", "trials", "time", "kernels", "profiler", "lint", "quiet", "exit"]
    # build
    init_seed: Optional[int] = None
    # lint: a second weight seed, and the tolerance the outputs are compared with
    init_seed_b: Optional[int] = None
    atol: float = 0.0
    rtol: float = 0.0
    rel_l2: float = 0.0
    # trials: each (seed, shape overrides) -> outputs sent back as binary frames
    seeds: list[int] = Field(default_factory=list)
    shapes: list[dict[str, Any]] = Field(default_factory=list)
    # time
    warmup: int = 0
    kernel_list: Optional[str] = None  # op "profiler": config.Correctness.kernel_list
    calls: int = 0
    flush_l2: bool = True
    flush_method: Literal["read", "write"] = "read"
    hold_us: float = 0.0
    sample_positions: int = 64
    variant: Literal["eager", "compiled"] = "eager"
    cuda_graph: bool = False
    spans: bool = False  # also each call's kernel span, from CUPTI's records (timing.call_work)
    # quiet: probe until `probes` in a row take under `probe_us`, for at most `max_s`
    probe_us: float = 200.0
    probes: int = 3
    max_s: float = 10.0


class Reply(BaseModel):
    """A worker's answer to one command."""

    op: str
    ok: bool
    error_kind: Optional[Literal["interface_error", "runtime_error", "rejected"]] = None
    error: Optional[str] = None
    flags: list[str] = Field(default_factory=list)
    # load
    env: Optional[EnvInfo] = None
    # time: per-call device time (ms), per-call host time to device-idle (ms), output fingerprints
    times_ms: list[float] = Field(default_factory=list)
    host_ms: list[float] = Field(default_factory=list)
    # GPU: per-call host time of the forward alone (its launching, and any wait inside it)
    enqueue_ms: list[float] = Field(default_factory=list)
    # GPU: per-call host time from the hold's launch to the forward enqueued (what hold and flush
    # must outlast on the device for the launching to stay outside the interval)
    launch_ms: list[float] = Field(default_factory=list)
    launch_leaked: int = 0  # calls whose interval opened before the forward was enqueued
    # GPU, when asked (Command.spans): per call, first start to last end of the forward's GPU work
    # (kernels, copies, fills) by CUPTI's timestamps, in ms; -1.0 for a call in which none was seen
    span_ms: list[float] = Field(default_factory=list)
    # with span_ms: per call, how many kernels, copies and fills the forward ran (the harness's own
    # left out): each one after the first waits on the GPU front end, at a per-process speed
    span_launches: list[int] = Field(default_factory=list)
    span_why: Optional[str] = None  # spans asked for and CUPTI not had: why (cupti.KernelRecorder.open)
    fingerprints: list[list[float]] = Field(default_factory=list)
    clocks_mhz: list[int] = Field(default_factory=list)
    max_clock_mhz: Optional[int] = None
    l2_reset: Optional[bool] = None
    kernels_seen: list[str] = Field(default_factory=list)
    profile_s: Optional[float] = None
    # quiet: how long the GPU took to be quiet, in how many probes, and whether it was in the end
    quiet_s: Optional[float] = None
    quiet_probes: Optional[int] = None
    quiet: Optional[bool] = None
    # calls into the solution's own extensions during the first trial (None: not counted)
    custom_calls: Optional[int] = None
    # build: how many parameter elements the model has
    param_count: Optional[int] = None
    # lint: what each flag rests on
    notes: dict[str, str] = Field(default_factory=dict)
    # sizes of the binary frames (harness.payload) that follow this line on the channel
    blob_sizes: list[int] = Field(default_factory=list)
    # the frames themselves: buffers to write in the child (payload.encode), bytearrays in the parent
    blobs: list[Any] = Field(default_factory=list, exclude=True)
