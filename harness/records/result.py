"""The record of one evaluation and its parts: every result row on disk is an `EvalResult`.

A result is data, not a dict assembled in five places.
"""
from __future__ import annotations

from enum import Enum
from typing import Any, Optional

from pydantic import BaseModel, Field


class Status(str, Enum):
    passed = "passed"
    incorrect = "incorrect"
    compile_error = "compile_error"
    runtime_error = "runtime_error"
    timeout = "timeout"
    no_code = "no_code"
    interface_error = "interface_error"
    rejected = "rejected"
    too_big = "too_big"  # the problem needs more memory than this machine has: no verdict on the solution
    # the solution needs hardware this evaluation lacks (CUDA kernels on the CPU path), read from its
    # source by the parent: no verdict on it, and kept out of solved and fast_p (leaderboard.py)
    unsupported = "unsupported"

    def __str__(self) -> str:  # print(record.status) shows "passed", not "Status.passed"
        return self.value


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
    # the numerics the reference ran with (correctness.allow_tf32): cuDNN's and cuBLAS's TF32
    # switches and torch.get_float32_matmul_precision(), as read in the reference's process
    cudnn_allow_tf32: Optional[bool] = None
    matmul_allow_tf32: Optional[bool] = None
    float32_matmul_precision: Optional[str] = None


class TrialCheck(BaseModel):
    """One correctness trial as judged (stages/check.py)."""

    seed_index: int
    shape: str = "default"
    ok: bool
    max_abs_diff: Optional[float] = None
    max_rel_diff: Optional[float] = None
    rel_l2_diff: Optional[float] = None
    reason: Optional[str] = None
    # where its output values were compared: "device" (in the reference's process, on the GPU) or
    # "parent" (on the host); with why, where a GPU trial could not be judged on the device
    judged_on: Optional[str] = None


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
    # (timing.measure.warm_up) on a GPU, and starting a candidate's and a problem's further processes, where
    # a side is timed in several (timing.stats.processes_for); in total_s, not in timing_s
    processes_s: float = 0.0
    # parts of load_s: the candidate's first process ready with the solution imported (a standby
    # taken, or a fresh interpreter where none was left), then ModelNew built and moved to the device
    load_process_s: Optional[float] = None
    load_build_s: Optional[float] = None
    # time waiting for memory (memory.Admission): before its start, and where its measured need, known
    # after the reference's first trial, was more than it held; in total_s, in none of the phases
    memory_wait_s: float = 0.0


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
    # what held the solution's code (sandbox.protections): "own_uid" where it ran as a uid of its own
    protections: list[str] = Field(default_factory=list)
    # its .cu built by nvcc with the light <torch/extension.h> (harness/light_header.py), or tried
    # with it and built with torch's own header (False); None: not tried
    light_cuda_header: Optional[bool] = None
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
    size: Optional[str] = None  # "full": the problem's own shapes; "small": its CPU preset (config.size)
    slot: Optional[str] = None  # the batch's device slot it ran on ("cuda:1"); env.gpu_uuid names the GPU
    harness_version: Optional[str] = None
    started_at: Optional[str] = None
