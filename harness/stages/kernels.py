"""Stage 6, on a GPU: did a kernel the solution defines run? One forward with CUPTI's kernel
records on, in the candidate's process after its timing, never before: CUPTI slows every later
launch in its process (process/runner.py, Runner.kernels)."""
from __future__ import annotations

from ..process.worker import Worker
from ..kernels import ran as kernels_ran
from ..records.messages import KernelsCommand, ProfilerCommand
from ..reference import ReferenceSession
from .build import Built
from .candidate import CandidateProcesses
from .context import Context, ask


def list_kernels(ctx: Context, cand: CandidateProcesses, ref: ReferenceSession, built: Built) -> None:
    """Readying CUPTI (the `profiler` op) takes milliseconds when it is called directly (cupti.py);
    where only torch.profiler can list, its start-up takes seconds of host work and runs no solution
    code, so it is not a shared phase: a neighbour's timing need not wait for it, and it holds no
    lane. The candidate stays registered with the gate, so that timing still stops its process (and
    the start-up with it) while it runs; the timeout allows for those stops."""
    defined = built.reply.kernel_names
    if ctx.cuda and ctx.cfg.correctness.list_kernels and defined:
        run_listing(ctx, cand.first, defined, ref.rng.getrandbits(62))


def run_listing(ctx: Context, worker: Worker, defined: list[str], seed: int) -> None:
    """The listing in `worker`: the flag no_custom_kernel set or lifted by what ran."""
    cfg, res, gate = ctx.cfg, ctx.res, ctx.gate
    with gate.background():
        reply, _ = ask(worker, ProfilerCommand(kernel_list=cfg.correctness.kernel_list),
                       cfg.timeouts.load_s + cfg.timeouts.run_s, "starting the profiler")
    ctx.phases.profiler_start_s = reply.profile_s
    if "cupti_unavailable" in reply.notes:
        res.timing_method["cupti_unavailable"] = reply.notes["cupti_unavailable"]
    with gate.shared():
        reply, _ = ask(worker, KernelsCommand(seeds=[seed]), cfg.timeouts.run_s, "listing the kernels run")
    ctx.phases.profile_s = reply.profile_s
    res.timing_method["kernel_list"] = reply.notes.get("kernel_list")  # the method the listing used
    if not reply.kernels_seen:  # no GPU work seen at all (CUPTI unavailable): no evidence
        return
    ran = kernels_ran(defined, reply.kernels_seen)
    if ran and "no_custom_kernel" in res.flags:
        res.flags.remove("no_custom_kernel")
    elif not ran and "no_custom_kernel" not in res.flags:
        res.flags.append("no_custom_kernel")
