"""Messages between the parent and a child process (harness.process.child).

The child reads `Command`s from a private pipe and writes `Reply`s (the compile role: one
`CompileReply`) to another, as JSON lines; nothing it prints is ever parsed.
"""
from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from .result import EnvInfo


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
