"""Stage 4: correctness. Trial by trial, on fresh inputs from secret seeds: the reference's outputs
(in its own process, or from a batch's shared session), then the candidate's, judged (correctness.py)
and let go before the next trial: a GPU problem's outputs on the device, in the reference's process
(the candidate's read through CUDA IPC: cuda_ipc.py), the rest in the parent. The parent holds one trial of each side at a
time, never all of them: a KernelBench output is up to gigabytes. Also the re-check of a speedup
past the ceiling.

The reference goes first in each trial so that its output's size bounds what the candidate may send,
and its memory need, measured on the first trial, is admitted (memory.Hold.grow) before the
candidate's first forward. The reference runs in another process, whose freed memory a candidate
cannot inherit; the candidate's own memory is poisoned at its start (process/runner.py)."""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Optional

from ..memory import TooBig
from ..records.messages import TrialsCommand
from ..records.result import Status
from ..reference import ReferenceSession, ReferenceTooBig
from . import baseline
from .candidate import CandidateProcesses
from .context import Context, Failure, ask

@dataclass
class Checked:
    trials: int
    custom_calls: int  # calls into the solution's extensions during its first trial


def check(ctx: Context, cand: CandidateProcesses, ref: ReferenceSession) -> Checked:
    cfg, gate, res, phases = ctx.cfg, ctx.gate, ctx.res, ctx.phases
    t0 = ctx.clock()
    phases.trials_s = phases.reference_s = 0.0
    t1 = ctx.clock()
    try:
        with gate.stoppable() as phase:
            ref.start(on_worker=phase.add)
    except ReferenceTooBig as e:
        raise Failure(Status.too_big, str(e)) from None
    res.env = ref.env
    phases.reference_s += ctx.clock() - t1
    custom_calls, grow_wait, compiling0 = 0, 0.0, phases.processes_s
    for i in range(len(ref.plan.seeds)):
        r, allowed = reference_trial(ctx, ref, i)
        if i == 0 and ctx.hold is not None and ref.need is not None:
            ctx.hold.track(ref.worker.pid if ref.worker else None, cand.first.pid if cand.first else None)
            w0 = ctx.hold.waited_s
            try:
                if baseline.due(ctx, ref):  # compiled holding the reference's share only
                    ctx.hold.grow(ref.need.compiling())
                    if baseline.compile_ahead(ctx, ref):  # a new reference process: the trial from it
                        r, allowed = reference_trial(ctx, ref, i)
                        ctx.hold.track(ref.worker.pid if ref.worker else None)
                ctx.hold.grow(ref.need)
            except TooBig as e:
                raise Failure(Status.too_big, f"problem {ctx.problem.name} {e}") from None
            finally:
                grow_wait = ctx.hold.waited_s - w0  # memory_wait_s (batch/executor.py), in no phase
        t1 = ctx.clock()
        c = candidate_answer(ctx, cand, ref, i, r, allowed)
        phases.trials_s += ctx.clock() - t1
        if i == 0:
            # calls into its extensions, until (on a GPU) the kernel list, after timing, decides
            custom_calls = c.custom_calls or 0
            if not custom_calls:
                ctx.flag("no_custom_kernel")
        v = judge(ctx, cand, ref, i, c, r)
        del c, r
        res.trials.append(v.check)
        ctx.flag(*v.flags)
        if v.rejected:
            raise Failure(Status.rejected, v.check.reason)
        if not v.check.ok:
            break
    for key in ("max_abs_diff", "max_rel_diff", "rel_l2_diff"):  # the worst trial's
        vals = [getattr(t, key) for t in res.trials if getattr(t, key) is not None]
        setattr(res, key, max(vals) if vals else None)
    phases.correctness_s = ctx.clock() - t0 - grow_wait - (phases.processes_s - compiling0)
    phases.judge_s = phases.correctness_s - phases.trials_s - phases.reference_s
    failed = next((t for t in res.trials if not t.ok), None)
    if failed is not None:
        raise Failure(Status.incorrect, f"trial {failed.seed_index} ({failed.shape}): {failed.reason}")
    return Checked(trials=len(res.trials), custom_calls=custom_calls)


def candidate_answer(ctx: Context, cand: CandidateProcesses, ref: ReferenceSession, i: int, r, allowed: int,
                     seeds: Optional[list[int]] = None, what: str = "correctness trials",
                     wrong_count: Status = Status.runtime_error):
    """The candidate's trial `i` (of the plan, or of `seeds`) beside the reference's `r`, as TrialData
    with `custom_calls`: its device outputs exported where the reference's stayed on the device. Where
    it fails, `r`, kept on the device for a judging that will not come, is let go."""
    seed = (seeds or ref.plan.seeds)[i]
    shape = ref.plan.shapes[i] if i < len(ref.plan.shapes) else {}
    try:
        with ctx.gate.stoppable(ctx.cfg.batch.slow_phase_frees_lane_s) as phase:
            phase.add(cand.first)
            reply, _ = ask(cand.first, TrialsCommand(seeds=[seed], shapes=[shape] if shape else [], share=r.remote),
                           ctx.cfg.timeouts.run_s, what, max_bytes=allowed)
        c = candidate_trial(reply, wrong_count)
    except BaseException:
        ref.release(r)
        raise
    c.custom_calls = reply.custom_calls
    return c


def judge(ctx: Context, cand: CandidateProcesses, ref: ReferenceSession, i: int, c, r,
          seeds: Optional[list[int]] = None, what: str = "correctness trials"):
    """One trial judged (correctness.judge_trial), against the reference's inputs after its call too
    where the candidate's call changed its own: outputs that stayed on the device in the
    reference's process (ReferenceSession.judge), the rest in the parent. Where the device could not
    judge (the candidate sent bytes it could not export, or the reference failed at it), the trial is
    asked of both again as bytes and judged in the parent; a candidate's handle that does not describe
    memory it exported is a forged report.
    Judged, the reference's outputs go (unless its session keeps them for the problem's later
    solutions): kept, a GB-sized output stayed on the device beside every later trial and the timing
    (KernelBench level 1: reference processes of 26 GB against the 13 GB their first trial measured,
    and out-of-memory errors in other evaluations' timing)."""
    box = [r]
    try:
        return _judge(ctx, cand, ref, i, c, box, seeds, what)
    finally:
        ref.release(box[0])


def _judge(ctx: Context, cand: CandidateProcesses, ref: ReferenceSession, i: int, c, box: list,
           seeds: Optional[list[int]], what: str):
    from ..correctness import NeedBytes, judge_trial
    from ..cuda_ipc import Refused
    from ..reference import JudgeFailed
    r = box[0]
    name = ref.plan.shape_names[i] if i < len(ref.plan.shape_names) else "default"
    if c.inputs_after is not None and r.inputs_after is None:
        ref.release(r)
        r, _ = reference_trial(ctx, ref, i, with_inputs=True, seeds=seeds)  # its yardstick for changed inputs
        box[0] = r
    if r.remote:
        def remote(pairs):
            with ctx.gate.stoppable() as phase:
                return ref.judge(r, pairs, ctx.tol, on_worker=phase.add)
        try:
            v = judge_trial(i, name, c, r, ctx.tol, remote=remote)
            v.check.judged_on = "device"
            return v
        except Refused as e:
            raise Failure(Status.rejected, f"trial {i}: {e}", ["malformed_report"]) from None
        except (NeedBytes, JudgeFailed) as e:
            why = str(e) or "the candidate sent an output's bytes"
            ref.release(r)
            with_inputs = r.inputs_after is not None
            r, allowed = reference_trial(ctx, ref, i, with_inputs=with_inputs, seeds=seeds, share=False)
            box[0] = r
            if c.remote:
                c = candidate_answer(ctx, cand, ref, i, r, allowed, seeds=seeds, what=what,
                                     wrong_count=Status.rejected)
    else:
        why = None
    with ctx.gate.shared():  # a timed neighbour must not share the host with the judging
        v = judge_trial(i, name, c, r, ctx.tol)
    v.check.judged_on = "parent" + (f" ({why[:200]})" if why else "")
    return v


def reference_trial(ctx: Context, ref: ReferenceSession, i: int, with_inputs: bool = False,
                    seeds: Optional[list[int]] = None, share: Optional[bool] = None):
    """The reference's trial `i` and what the candidate's may take (reference.frame_allowance); a reference too big for the machine ends the
    evaluation with `too_big` (any other failure of the reference is the problem's: ReferenceError)."""
    t1 = ctx.clock()
    try:
        with ctx.gate.stoppable() as phase:
            return ref.trial(i, with_inputs=with_inputs, seeds=seeds, on_worker=phase.add, share=share)
    except ReferenceTooBig as e:
        raise Failure(Status.too_big, str(e)) from None
    finally:
        ctx.phases.reference_s += ctx.clock() - t1


def candidate_trial(reply, wrong_count: Status):
    """The candidate's one trial output as plain tensors; a payload that is not plain tensors, or not
    exactly one, is a forged or corrupted report."""
    from ..correctness import load_trial
    if len(reply.blobs) != 1:
        raise Failure(wrong_count, f"the candidate returned {len(reply.blobs)} trial outputs for 1 trial",
                      ["malformed_report"])
    try:
        return load_trial(reply.blobs[0])
    except Exception as e:  # noqa: BLE001
        raise Failure(Status.rejected, f"trial output could not be read as plain tensors: {str(e)[:300]}",
                      ["malformed_report"]) from None


def recheck_excessive(ctx: Context, cand: CandidateProcesses, ref: ReferenceSession) -> None:
    """A speedup past the ceiling is re-checked on new inputs (and the extra shapes) before it is
    reported, and flagged either way."""
    res = ctx.res
    res.flags.append("excessive_speedup")
    rng = random.SystemRandom()  # unpredictable from the seeds seen before (ReferenceSession.rng)
    seeds = [rng.getrandbits(62) for _ in ref.plan.seeds]
    what = "re-check of an excessive speedup"
    for i in range(len(seeds)):
        r, allowed = reference_trial(ctx, ref, i, seeds=seeds)
        # the candidate answered once already: a different count now is a forged report
        c = candidate_answer(ctx, cand, ref, i, r, allowed, seeds=seeds, what=what, wrong_count=Status.rejected)
        v = judge(ctx, cand, ref, i, c, r, seeds=seeds, what=what)
        if v.rejected:
            raise Failure(Status.rejected, v.check.reason, v.flags)
        if not v.check.ok:
            raise Failure(Status.incorrect,
                          f"re-check after a {res.speedup:.1f}x speedup failed: {v.check.reason}",
                          ["excessive_speedup"])
