"""Messages between the parent and a child process (harness.process.child), one model each.

A child reads its `Setup` (or, while a standby, `Prime`), then commands (`Command`: one model per
op), from a private pipe, and writes one reply per command (`Reply`: one model per op; the compile
role writes one `CompileReply`) to another, as JSON lines; nothing it prints is ever parsed. The
parent reads a reply as the model of the op it asked for, so a field of another op's reply, or one
no model has, makes the reply malformed.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from .result import EnvInfo


class CompileReply(BaseModel):
    kind: Literal["compile"] = "compile"
    ok: bool
    category: Optional[Literal["compile_error", "import_error", "needs_cuda"]] = None
    error: Optional[str] = None
    extensions: list[str] = Field(default_factory=list)
    kernel_names: list[str] = Field(default_factory=list)
    seconds: float = 0.0
    # set by the parent (build.build_child): built with the light <torch/extension.h> for nvcc
    # (light_header.py), or tried with it and built again with torch's own (False); None: not tried
    light_header: Optional[bool] = None


class _Strict(BaseModel):
    # NaN and infinities cross as JSON's NaN/Infinity, not as null (which no float field takes): an
    # honest output holding them fingerprints so, and a reply that says it must not be malformed
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants")


class Jail(_Strict):
    """Where a process that runs solution code is held (sandbox.py): its own uid, its solution's
    group, its home, and the copy of the solution it imports."""

    uid: int
    gid: int
    home: str
    solution_path: Optional[str] = None
    cgroups: list[str] = Field(default_factory=list)  # its control groups, joined before the uid is (cgroups.py)
    # a view of the machine of its own (sandbox.views): everything read-only but `writable` (its home
    # and build folder), private temporary folders (with `readable` bound back into them read-only),
    # and (`hide_pids`) no other uid's processes in /proc
    views: bool = False
    hide_pids: bool = False
    own_pids: bool = False  # born in a PID namespace of its own (sandbox.born_apart), or refuses to run
    writable: list[str] = Field(default_factory=list)
    readable: list[str] = Field(default_factory=list)  # what it must still read where its view hides it (under /tmp)


class Setup(_Strict):
    """The first line a child reads: its role and what it runs."""

    role: Literal["compile", "candidate", "reference"]
    device: str
    solution_path: Optional[str] = None
    problem_path: Optional[str] = None
    # the problem's text as the parent read it (the record's problem_hash is its hash): the child runs
    # these bytes, so a file rewritten after discovery (by a solution not jailed) changes no verdict
    problem_source: Optional[str] = None
    size: Optional[str] = None
    dtype: Optional[str] = None
    cpu_threads: Optional[int] = None
    allow_tf32: bool = False
    # how much of the GPU's memory the process NaN-fills and keeps cached at its start (at most a
    # quarter of what is free): every candidate and reference process alike (process.runner._poison)
    poison_max_bytes: Optional[int] = None
    # environment a standby could not start with (process.standby.LATE_ENV), set before the role runs
    env: dict[str, str] = Field(default_factory=dict)
    jail: Optional[Jail] = None  # entered before the solution's first line runs (sandbox.enter)


class Prime(_Strict):
    """To a standby before its setup: make the CUDA context and pin the timing primitives now."""

    op: Literal["prime"] = "prime"
    device: str


# -- commands: one model per op ------------------------------------------------------------------

class BuildCommand(_Strict):
    op: Literal["build"] = "build"
    init_seed: int


class TrialsCommand(_Strict):
    """Each (seed, shape overrides) -> its outputs, sent back as binary frames."""

    op: Literal["trials"] = "trials"
    seeds: list[int]
    shapes: list[dict[str, Any]] = Field(default_factory=list)
    inputs: bool = False  # send the inputs after the call even where it left them unchanged
    # GPU outputs stay on the device (judged there: stages/check.py): a reference keeps them for a
    # JudgeCommand, a candidate exports them through CUDA IPC (cuda_ipc.py) and keeps them until its
    # next command
    share: bool = False


class JudgePair(_Strict):
    """One output to judge on the device: the reference's kept output `ref_index`, the candidate's
    exported one (`node`: its handle and offset, as the candidate sent them)."""

    ref_index: int
    node: dict[str, Any]
    dtype: str
    shape: list[int]
    nbytes: int


class JudgeCommand(_Strict):
    """Reference only: compare a kept trial's outputs (`token`) with a candidate's exported ones, on the
    device, by the tolerance given; `release`: then let the trial go (unless kept for later solutions)."""

    op: Literal["judge"] = "judge"
    token: int
    pairs: list[JudgePair]
    atol: float
    rtol: float
    rel_l2: float
    release: bool = True


class ReleaseCommand(_Strict):
    """Reference only: let a kept trial go that will not be judged (its candidate failed first)."""

    op: Literal["release"] = "release"
    token: int


class TimeCommand(_Strict):
    """One timed call per seed (timing.loop.time_calls)."""

    op: Literal["time"] = "time"
    seeds: list[int]
    warmup: int = 0
    flush_l2: bool = True
    flush_method: Literal["read", "write"] = "read"
    hold_us: float = 0.0
    sample_positions: int = 64
    variant: Literal["eager", "compiled"] = "eager"
    cuda_graph: bool = False
    spans: bool = False  # also each call's kernel span, from CUPTI's records (timing.loop.call_work)
    # the round's inputs, made by the reference's process (timing.inputs): None, each side makes its own
    inputs_path: Optional[str] = None
    # a clocked round (timing.clocked): the side's slots file, which a clock process fills and times;
    # to the reference, also the candidate's outputs the clock snapped, to fingerprint
    slots_path: Optional[str] = None
    prints_of: Optional[str] = None
    clock_timeout_s: float = 60.0


class ClockedFiles(_Strict):
    """A clocked round's files besides its inputs (timing.clocked.prepare): each side's slots, and
    where the clock leaves each side's outputs; the candidate's slots given to its jail's uid and gid."""

    cand_slots: str
    ref_slots: str
    cand_snap: str
    ref_snap: str
    cand_owner: Optional[tuple[int, int]] = None


class InputsCommand(_Strict):
    """To the reference's process: make inputs for `seeds`, in order, into a new file at `path`, until
    it holds `max_bytes` (timing.inputs.write_round); for a clocked round, its other files too."""

    op: Literal["inputs"] = "inputs"
    seeds: list[int]
    path: str
    max_bytes: int
    clocked: Optional[ClockedFiles] = None


class LintCommand(_Strict):
    """The problem linter's runs: two weight seeds, and the tolerance the outputs are compared with."""

    op: Literal["lint"] = "lint"
    init_seed: int
    init_seed_b: int
    seeds: list[int]
    atol: float
    rtol: float
    rel_l2: float


class QuietCommand(_Strict):
    """Probe until `probes` in a row take under `probe_us`, for at most `max_s`."""

    op: Literal["quiet"] = "quiet"
    probe_us: float = 200.0
    probes: int = 3
    max_s: float = 10.0


class ProfilerCommand(_Strict):
    op: Literal["profiler"] = "profiler"
    kernel_list: Optional[str] = None  # config.Correctness.kernel_list


class KernelsCommand(_Strict):
    op: Literal["kernels"] = "kernels"
    seeds: list[int]


class ExitCommand(_Strict):
    op: Literal["exit"] = "exit"


Command = Annotated[Union[BuildCommand, TrialsCommand, JudgeCommand, ReleaseCommand, TimeCommand, InputsCommand, LintCommand, QuietCommand, ProfilerCommand,
                          KernelsCommand, ExitCommand], Field(discriminator="op")]
COMMAND = TypeAdapter(Command)


# -- replies: one model per op -------------------------------------------------------------------

class Reply(_Strict):
    """What every reply has. `ok` false: `error_kind` and `error` say why (the op's fields empty)."""

    op: str
    ok: bool
    error_kind: Optional[Literal["interface_error", "runtime_error", "rejected"]] = None
    error: Optional[str] = None
    flags: list[str] = Field(default_factory=list)
    notes: dict[str, str] = Field(default_factory=dict)
    # sizes of the binary frames (harness.payload) that follow this line on the channel
    blob_sizes: list[int] = Field(default_factory=list)
    # the frames themselves: buffers to write in the child (payload.encode), bytearrays in the parent
    blobs: list[Any] = Field(default_factory=list, exclude=True)


class LoadReply(Reply):
    op: Literal["load"] = "load"
    env: Optional[EnvInfo] = None


class StandbyReply(Reply):
    """A standby's first line: its preload done."""

    op: Literal["standby"] = "standby"


class PrimeReply(Reply):
    op: Literal["prime"] = "prime"


class BuildReply(Reply):
    op: Literal["build"] = "build"
    param_count: Optional[int] = None  # how many parameter elements the model has


class TrialsReply(Reply):
    op: Literal["trials"] = "trials"
    custom_calls: Optional[int] = None  # calls into the solution's extensions in the first trial
    # what the trials took (the resident peak above the process's start; the GPU caching allocator's
    # peak): harness.memory's measured need
    work_rss_bytes: Optional[int] = None
    gpu_peak_bytes: Optional[int] = None
    inputs_bytes: Optional[int] = None  # the largest trial's inputs
    # a reference's outputs kept on the device (TrialsCommand.share): the trial's token for a
    # JudgeCommand, their bytes, and whether they stay for the problem's later solutions
    kept: Optional[int] = None
    kept_bytes: int = 0
    persisted: bool = False


class LeafJudgement(_Strict):
    ok: bool
    reason: Optional[str] = None
    stats: dict[str, float] = Field(default_factory=dict)


class JudgeReply(Reply):
    op: Literal["judge"] = "judge"
    results: list[LeafJudgement] = Field(default_factory=list)  # per pair, in order
    refused: Optional[str] = None  # a candidate's node that does not describe memory it exported
    unmapped: Optional[str] = None  # a handle the driver would not open: judged from bytes instead
    gone: bool = False  # the trial is no longer kept (more evaluations of the problem in flight than kept)


class ReleaseReply(Reply):
    op: Literal["release"] = "release"


class TimeReply(Reply):
    op: Literal["time"] = "time"
    # per-call device time (ms), per-call host time to device-idle (ms), output fingerprints
    times_ms: list[float] = Field(default_factory=list)
    host_ms: list[float] = Field(default_factory=list)
    # GPU: per-call host time of the forward alone (its launching, and any wait inside it)
    enqueue_ms: list[float] = Field(default_factory=list)
    # GPU: per-call host time from the hold's launch to the forward enqueued (what hold and flush
    # must outlast on the device for the launching to stay outside the interval)
    launch_ms: list[float] = Field(default_factory=list)
    launch_leaked: int = 0  # calls whose interval opened before the forward was enqueued
    # GPU, when asked (TimeCommand.spans): per call, first start to last end of the forward's GPU
    # work (kernels, copies, fills) by CUPTI's timestamps, in ms; -1.0 for a call in which none was seen
    span_ms: list[float] = Field(default_factory=list)
    # with span_ms: per call, how many kernels, copies and fills the forward ran (the harness's own
    # left out): each one after the first waits on the GPU front end, at a per-process speed
    span_launches: list[int] = Field(default_factory=list)
    span_why: Optional[str] = None  # spans asked for and CUPTI not had: why (cupti.KernelRecorder.open)
    fingerprints: list[list[float]] = Field(default_factory=list)
    other_fingerprints: list[list[float]] = Field(default_factory=list)  # TimeCommand.prints_of's
    clocks_mhz: list[int] = Field(default_factory=list)
    max_clock_mhz: Optional[int] = None
    l2_reset: Optional[bool] = None


class LintReply(Reply):
    op: Literal["lint"] = "lint"  # flags, and in notes what each rests on


class QuietReply(Reply):
    """How long the GPU took to be quiet, in how many probes, and whether it was in the end."""

    op: Literal["quiet"] = "quiet"
    quiet_s: Optional[float] = None
    quiet_probes: Optional[int] = None
    quiet: Optional[bool] = None


class ProfilerReply(Reply):
    op: Literal["profiler"] = "profiler"
    profile_s: Optional[float] = None


class KernelsReply(Reply):
    op: Literal["kernels"] = "kernels"
    kernels_seen: list[str] = Field(default_factory=list)
    profile_s: Optional[float] = None


class InputsReply(Reply):
    op: Literal["inputs"] = "inputs"
    calls: int = 0  # the first `calls` seeds' inputs are in the file
    bytes: int = 0
    unservable: Optional[str] = None  # why not (timing.inputs.Unservable): each side makes its own
    unclockable: Optional[str] = None  # a clocked round asked for and why not (timing.clocked.Unclockable)


AnyReply = Annotated[Union[LoadReply, StandbyReply, PrimeReply, BuildReply, TrialsReply, JudgeReply, ReleaseReply, TimeReply, LintReply,
                           QuietReply, ProfilerReply, KernelsReply, InputsReply], Field(discriminator="op")]
REPLY = TypeAdapter(AnyReply)
REPLY_FOR = {cls.model_fields["op"].default: cls for cls in (LoadReply, StandbyReply, PrimeReply, BuildReply,
                                                            TrialsReply, JudgeReply, ReleaseReply, TimeReply, LintReply, QuietReply,
                                                            ProfilerReply, KernelsReply, InputsReply)}


def failed(op: str, error_kind: str, error: str) -> Reply:
    """The reply to `op` that says it failed."""
    return REPLY_FOR[op](ok=False, error_kind=error_kind, error=error)


class ClockCommand(_Strict):
    """To a clock process (timing.clocked.serve): clock `calls` calls of the side on `slots`."""

    source: str
    slots: str
    layout: str  # a file of the same layout as `slots` that no jail can write: the layout is read there
    snap: str
    calls: int
    pid: int  # the side's process, whose outputs the clock reads (process_vm_readv)
    cpu: Optional[int] = None
    timeout_s: float
    owner_uid: Optional[int] = None  # the slots file's owner (the candidate's jail); root's where None
    truncate_slots: bool = False  # empty the slots file at the end, through the descriptor opened


class ClockReply(_Strict):
    ok: bool
    opened: bool = False  # the files are open: the side may run (a first reply, before the times)
    times_ms: list[float] = Field(default_factory=list)
    ran_ms: float = 0.0  # the CPU time it used over the round (its side waits behind it)
    error: Optional[str] = None
    unreadable: bool = False  # the side's memory cannot be read here: clocked rounds are off
