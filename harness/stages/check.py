"""Stage 4: correctness. The candidate runs its trials first, on fresh inputs from secret seeds; the
reference, in its own process, runs the same (or a batch's shared session already did); the parent
judges every trial (correctness.py). Also the re-check of a speedup past the ceiling."""
from __future__ import annotations

import random
import secrets
from dataclasses import dataclass

from ..records.messages import TrialsCommand
from ..records.result import Status
from ..reference import ReferenceSession
from .candidate import CandidateProcesses
from .context import Context, Failure, ask


@dataclass
class Checked:
    trials: int
    custom_calls: int  # calls into the solution's extensions during its trials


def check(ctx: Context, cand: CandidateProcesses, ref: ReferenceSession) -> Checked:
    from ..correctness import judge_trial  # torch: imported once judging is near

    cfg, gate, res, phases = ctx.cfg, ctx.gate, ctx.res, ctx.phases
    t0 = ctx.clock()
    with gate.stoppable(cfg.batch.slow_phase_frees_lane_s) as phase:
        phase.add(cand.first)
        reply, _ = ask(cand.first, TrialsCommand(seeds=ref.plan.seeds, shapes=ref.plan.shapes),
                       cfg.timeouts.run_s, "correctness trials")
    phases.trials_s = ctx.clock() - t0
    cand_trials = candidate_trials(reply, len(ref.plan.seeds), Status.runtime_error)

    # calls into its extensions, until (on a GPU) the kernel list, after timing, decides
    if not reply.custom_calls:
        res.flags.append("no_custom_kernel")

    # the reference, in its own process, after the candidate
    t1 = ctx.clock()
    with gate.stoppable() as phase:
        ref.start(on_worker=phase.add)
    res.env = ref.env
    phases.reference_s = ctx.clock() - t1

    # shared: a timed neighbour must not share the host with the judging
    all_ok = True
    with gate.shared():
        for i, (c, r) in enumerate(zip(cand_trials, ref.trials)):
            v = judge_trial(i, ref.plan.shape_names[i], c, r, ctx.tol)
            res.trials.append(v.check)
            ctx.flag(*v.flags)
            if v.rejected:
                raise Failure(Status.rejected, v.check.reason)
            all_ok &= v.check.ok
    for key in ("max_abs_diff", "max_rel_diff", "rel_l2_diff"):  # the worst trial's
        vals = [getattr(t, key) for t in res.trials if getattr(t, key) is not None]
        setattr(res, key, max(vals) if vals else None)
    phases.correctness_s = ctx.clock() - t0
    phases.judge_s = phases.correctness_s - phases.trials_s - phases.reference_s
    if not all_ok:
        first = next(t for t in res.trials if not t.ok)
        raise Failure(Status.incorrect, f"trial {first.seed_index} ({first.shape}): {first.reason}")
    return Checked(trials=len(cand_trials), custom_calls=reply.custom_calls or 0)


def candidate_trials(reply, expected: int, wrong_count: Status) -> list:
    """The candidate's trial outputs as plain tensors, `expected` of them; a payload that is not
    plain tensors is a forged or corrupted report."""
    from ..correctness import load_trial
    if len(reply.blobs) != expected:
        raise Failure(wrong_count, f"the candidate returned {len(reply.blobs)} trial outputs for {expected} trials",
                      ["malformed_report"])
    try:
        return [load_trial(b) for b in reply.blobs]
    except Exception as e:  # noqa: BLE001
        raise Failure(Status.rejected, f"trial output could not be read as plain tensors: {str(e)[:300]}",
                      ["malformed_report"]) from None


def recheck_excessive(ctx: Context, cand: CandidateProcesses, ref: ReferenceSession) -> None:
    """A speedup past the ceiling is re-checked on new inputs (and the extra shapes) before it is
    reported, and flagged either way."""
    from ..correctness import judge_trial, load_trial
    cfg, res = ctx.cfg, ctx.res
    res.flags.append("excessive_speedup")
    rng = random.Random(secrets.randbits(64))
    seeds = [rng.getrandbits(62) for _ in ref.plan.seeds]
    with ctx.gate.shared():
        reply, _ = ask(cand.first, TrialsCommand(seeds=seeds, shapes=ref.plan.shapes), cfg.timeouts.run_s,
                       "re-check of an excessive speedup")
        with ref.lock:  # the session may serve other evaluations' phases at the same time
            ref_reply, _ = ref.worker.request(TrialsCommand(seeds=seeds, shapes=ref.plan.shapes),
                                              cfg.timeouts.problem_s)
        if not ref_reply.ok or len(ref_reply.blobs) != len(seeds):
            raise RuntimeError(f"the reference failed the re-check's trials: {ref_reply.error}")
        # the candidate answered once already: a different count now is a forged report
        cand_trials = candidate_trials(reply, len(seeds), Status.rejected)
        for i, (c, rb) in enumerate(zip(cand_trials, ref_reply.blobs)):
            v = judge_trial(i, ref.plan.shape_names[i], c, load_trial(rb), ctx.tol)
            if not v.check.ok:
                raise Failure(Status.incorrect, f"re-check after a {res.speedup:.1f}x speedup failed: {v.check.reason}",
                              ["excessive_speedup"])
