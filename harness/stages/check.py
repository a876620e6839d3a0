"""Stage 4: correctness. Trial by trial, on fresh inputs from secret seeds: the reference's outputs
(in its own process, or from a batch's shared session), then the candidate's, judged in the parent
(correctness.py) and let go before the next trial. The parent holds one trial of each side at a
time, never all of them: a KernelBench output is up to gigabytes. Also the re-check of a speedup
past the ceiling.

The reference goes first in each trial so that its output's size bounds what the candidate may send,
and its memory need, measured on the first trial, is admitted (memory.Hold.grow) before the
candidate's first forward. The reference runs in another process, whose freed memory a candidate
cannot inherit; the candidate's own memory is poisoned at its start (process/runner.py)."""
from __future__ import annotations

import random
import secrets
from dataclasses import dataclass
from typing import Optional

from ..memory import TooBig
from ..records.messages import TrialsCommand
from ..records.result import Status
from ..reference import ReferenceSession, ReferenceTooBig
from .candidate import CandidateProcesses
from .context import Context, Failure, ask

@dataclass
class Checked:
    trials: int
    custom_calls: int  # calls into the solution's extensions during its first trial


def check(ctx: Context, cand: CandidateProcesses, ref: ReferenceSession) -> Checked:
    from ..correctness import judge_trial  # torch: imported once judging is near

    cfg, gate, res, phases = ctx.cfg, ctx.gate, ctx.res, ctx.phases
    t0 = ctx.clock()
    phases.trials_s = phases.reference_s = 0.0
    t1 = ctx.clock()
    with gate.stoppable() as phase:
        ref.start(on_worker=phase.add)
    res.env = ref.env
    phases.reference_s += ctx.clock() - t1
    custom_calls, grow_wait = 0, 0.0
    for i, (seed, shape_name) in enumerate(zip(ref.plan.seeds, ref.plan.shape_names)):
        r, allowed = reference_trial(ctx, ref, i)
        if i == 0 and ctx.hold is not None and ref.need is not None:
            w0 = ctx.hold.waited_s
            try:
                ctx.hold.grow(ref.need)
            except TooBig as e:
                raise Failure(Status.too_big, f"problem {ctx.problem.name} {e}") from None
            finally:
                grow_wait = ctx.hold.waited_s - w0  # memory_wait_s (batch/executor.py), in no phase
        t1 = ctx.clock()
        shape = ref.plan.shapes[i] if i < len(ref.plan.shapes) else {}
        with gate.stoppable(cfg.batch.slow_phase_frees_lane_s) as phase:
            phase.add(cand.first)
            reply, _ = ask(cand.first, TrialsCommand(seeds=[seed], shapes=[shape] if shape else []),
                           cfg.timeouts.run_s, "correctness trials", max_bytes=allowed)
        phases.trials_s += ctx.clock() - t1
        c = candidate_trial(reply, Status.runtime_error)
        if i == 0:
            # calls into its extensions, until (on a GPU) the kernel list, after timing, decides
            custom_calls = reply.custom_calls or 0
            if not custom_calls:
                ctx.flag("no_custom_kernel")
        if c.inputs_after is not None and r.inputs_after is None:
            r, _ = reference_trial(ctx, ref, i, with_inputs=True)  # its yardstick for changed inputs
        with gate.shared():  # a timed neighbour must not share the host with the judging
            v = judge_trial(i, shape_name, c, r, ctx.tol)
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
    phases.correctness_s = ctx.clock() - t0 - grow_wait
    phases.judge_s = phases.correctness_s - phases.trials_s - phases.reference_s
    failed = next((t for t in res.trials if not t.ok), None)
    if failed is not None:
        raise Failure(Status.incorrect, f"trial {failed.seed_index} ({failed.shape}): {failed.reason}")
    return Checked(trials=len(res.trials), custom_calls=custom_calls)


def reference_trial(ctx: Context, ref: ReferenceSession, i: int, with_inputs: bool = False,
                    seeds: Optional[list[int]] = None):
    """The reference's trial `i` and what the candidate's may take (reference.frame_allowance); a reference too big for the machine ends the
    evaluation with `too_big` (any other failure of the reference is the problem's: ReferenceError)."""
    t1 = ctx.clock()
    try:
        with ctx.gate.stoppable() as phase:
            return ref.trial(i, with_inputs=with_inputs, seeds=seeds, on_worker=phase.add)
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
    from ..correctness import judge_trial
    cfg, res = ctx.cfg, ctx.res
    res.flags.append("excessive_speedup")
    rng = random.Random(secrets.randbits(64))
    seeds = [rng.getrandbits(62) for _ in ref.plan.seeds]
    with ctx.gate.shared():
        for i, seed in enumerate(seeds):
            try:
                r, allowed = ref.trial(i, seeds=seeds)
            except ReferenceTooBig as e:
                raise Failure(Status.too_big, str(e)) from None
            shape = ref.plan.shapes[i] if i < len(ref.plan.shapes) else {}
            reply, _ = ask(cand.first, TrialsCommand(seeds=[seed], shapes=[shape] if shape else []),
                           cfg.timeouts.run_s, "re-check of an excessive speedup",
                           max_bytes=allowed)
            # the candidate answered once already: a different count now is a forged report
            c = candidate_trial(reply, Status.rejected)
            if c.inputs_after is not None and r.inputs_after is None:
                r, _ = ref.trial(i, with_inputs=True, seeds=seeds)
            v = judge_trial(i, ref.plan.shape_names[i], c, r, ctx.tol)
            if not v.check.ok:
                raise Failure(Status.incorrect,
                              f"re-check after a {res.speedup:.1f}x speedup failed: {v.check.reason}",
                              ["excessive_speedup"])
