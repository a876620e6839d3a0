"""One evaluation, end to end: `evaluate(solution, problem, config) -> EvalResult`.

`evaluate` is the list of the stages (harness/stages/, one module each):
  1. source      the solution's code, extracted from a raw response and statically checked;
  2. build       its extensions, built in a child (content-addressed cache, compile timeout);
  3. candidate   a fresh child imports the solution and builds ModelNew from the secret seed;
  4. check       correctness trials on fresh inputs, one at a time: the reference's (in another
                 process, or a batch's shared session's), the candidate's, judged here in the parent;
  5. timed       reference and candidate timed in alternating rounds, every timed output re-checked
                 by fingerprint, device times cross-checked against host clocks;
  6. kernels     on a GPU, whether a kernel the solution defines ran;
  7. record      the speedup with its interval; the record closed with its verdict.
A stage that reaches a verdict raises `Failure`; the record then carries it. The parent never
imports solution code and never touches a CUDA context a solution has touched.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Optional, Union

from . import cpus
from .config import Config, load_config
from .memory import Admission, Hold
from .process.standby import Standby
from .problems import Problem, find_problem
from .records.result import EvalResult, Status
from .reference import ReferenceSession, tolerance_for
from .batch.sharing import DeviceGate, SoloGate
from .stages.build import Prebuilt, build
from .stages.candidate import CandidateProcesses
from .stages.check import check, recheck_excessive
from .stages.context import Context, Failure
from .stages.kernels import list_kernels
from .stages.record import finish, speedup
from .stages.source import read_source
from .stages.timed import time_solution


def evaluate(solution: Union[str, Path], problem: Union[str, Path, Problem], config: Optional[Config] = None, *,
             problem_roots=None, label: Optional[str] = None,
             reference: Optional[ReferenceSession] = None, compiled: Optional[Prebuilt] = None,
             env_extra: Optional[dict[str, str]] = None, standby: Optional[Standby] = None,
             gate: Optional[DeviceGate] = None, hold: Optional[Hold] = None) -> EvalResult:
    """`reference`: a session shared by a batch's evaluations of the problem (else one of its own).
    `compiled`: the (reply, failure, log) of a build already made (a batch compiles ahead, on CPU
    workers). `env_extra`: environment overrides for every child (a batch pins each GPU's children
    with CUDA_VISIBLE_DEVICES). `standby`: where the candidate's processes come from, already
    started (a batch's device slot). `gate`: the device slot's gate when several evaluations share
    it (batch sharing): untimed phases run beside other evaluations' phases, timing has the device
    to itself. `hold`: its share of a batch's memory (memory.Admission), else it has the machine."""
    cfg = config or load_config()
    own_gate = gate is None
    if own_gate:
        gate = SoloGate()  # its timing CPUs once the device is known
    t_start = time.perf_counter()
    if cfg.hardening.protect_parent:
        from .process.child import set_dumpable
        set_dumpable(False)
    prob = problem if isinstance(problem, Problem) else find_problem(problem, problem_roots)
    ctx = Context.open(cfg, gate, prob, str(solution), label, reference is not None, env_extra, standby)
    ctx.t_start = t_start
    try:
        source = read_source(ctx, solution)
    except Failure as f:
        return finish(ctx, f)

    ctx.device = reference.device if reference else resolve_device(cfg)
    ctx.size = reference.size if reference else resolve_size(cfg, ctx.device)
    ctx.dtype = None if cfg.dtype == "auto" else cfg.dtype
    ctx.res.device, ctx.res.size = ctx.device, ctx.size
    if own_gate:  # on a GPU, claimed machine-wide: a batch or another eval may be timing beside this one.
        # Not where a batch judges a solution it cannot time (a build that failed, its idle reference)
        (gate.timing_cpu, gate.cand_cpu), = cpus.slot_cpus(1, mode=cfg.hardening.timing_cpus,
                                                           claim=ctx.device == "cuda" and reference is None)[0]
    from .sandbox import protections, wanted
    ctx.jailed = wanted(cfg.hardening.sandbox, ctx.device, cfg.cache_dir)  # "on" where it cannot be had: refuses
    ctx.res.protections = protections(ctx.jailed)
    if ctx.device == "cuda" and cfg.hardening.gpu_drain_s > 0:  # its GPU work waited out before each
        ctx.res.protections.append("gpu_checked_quiet_around_other_timed")  # reference round (process/gpulock.py)
    if cfg.batch.pch_for(ctx.device):  # builds through harness/pch_cxx.py (a batch has started it already)
        from . import pch
        pch.enable(Path(cfg.cache_dir))
    if ctx.jailed:  # no jail on the CPUs references are timed on (a batch has kept them off already)
        from .sandbox import keep_off_references
        keep_off_references(ctx.device == "cuda", cfg.timing.cpu_threads, [(gate.timing_cpu, gate.cand_cpu)])
    ref = reference or ReferenceSession(prob, cfg, ctx.device, ctx.size, ctx.dtype, env_extra=env_extra)
    ctx.tol = tolerance_for(cfg, ctx.dtype, ref.meta)
    ctx.hold = hold or Admission(cfg.memory.host_gb, cfg.memory.gpu_gb).hold()
    cand: Optional[CandidateProcesses] = None
    try:
        built = build(ctx, source, compiled)
        t0 = ctx.clock()
        cand = CandidateProcesses(ctx, ref, built)
        cand.start()
        ctx.phases.load_s = ctx.clock() - t0
        check(ctx, cand, ref)
        timed = time_solution(ctx, cand, ref)
        list_kernels(ctx, cand, ref, built)
        speedup(ctx, timed, ref)
        ctx.res.status = Status.passed
        if ctx.res.speedup and ctx.res.speedup > cfg.hardening.max_speedup:
            recheck_excessive(ctx, cand, ref)
    except Failure as f:
        return finish(ctx, f)
    finally:
        if cand is not None:
            cand.close()
        ctx.phases.wait_s = gate.waited - ctx.waited0
        if reference is None:
            ref.close()
        if hold is None:
            ctx.hold.release()
    return finish(ctx, None)


class DeviceUnavailable(RuntimeError):
    """The device asked for is not on this machine: the user's to change, not a verdict."""


def resolve_device(cfg: Config) -> str:
    if cfg.device != "auto":
        if cfg.device == "cuda":
            import torch
            if not torch.cuda.is_available():
                raise DeviceUnavailable("--device cuda asked for, but no CUDA device is available "
                                        "(leave --device out for this machine's CPU)")
        return cfg.device
    import torch
    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_size(cfg: Config, device: str) -> str:
    return cfg.size if cfg.size != "auto" else ("full" if device == "cuda" else "small")
