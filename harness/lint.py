"""The problem linter (`harness problems check`): flags problems that a cheat could pass without
computing anything, because their output is nearly constant, does not depend on the inputs or on the
weights, or lies within tolerance of zero; and problems whose HARNESS_META the harness would read in
part or not at all. The reference runs in worker processes like any other."""
from __future__ import annotations

import random
import secrets
from typing import Any

import torch

from .config import Config, Tolerance
from .correctness import compare_tensors
from .problems import Problem
from .records.messages import LintCommand
from .reference import ReferenceError, ReferenceSession, meta_issues, read_meta, tolerance_for


def _tensors(out) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    return [t for o in (out or []) for t in _tensors(o)] if isinstance(out, (list, tuple)) else []


def _same(a, b, atol: float, rtol: float, rel_l2: float) -> bool:
    """Equal by the correctness test itself (elementwise and relative L2), on the outputs' device."""
    ta, tb = _tensors(a), _tensors(b)
    tol = Tolerance(atol=atol, rtol=rtol, rel_l2=rel_l2)
    return len(ta) == len(tb) and all(compare_tensors(x, y, tol)[0] for x, y in zip(ta, tb))


def analyse(o1, o2, o3, params: int, atol: float, rtol: float, rel_l2: float) -> tuple[list[str], dict[str, str]]:
    """o1, o2: one model on two inputs; o3: a model from another weight seed on o1's inputs. Runs
    wherever the tensors are (in the reference worker, on its device: nothing is shipped)."""
    flags: list[str] = []
    notes: dict[str, str] = {}
    if _same(o1, o2, atol, rtol, rel_l2):
        flags.append("input_independent")
        notes["input_independent"] = "two different inputs give the same output"
    if params and _same(o1, o3, atol, rtol, rel_l2):
        flags.append("weight_independent")
        notes["weight_independent"] = "two different weight seeds give the same output"
    for t in _tensors(o1):
        if not t.is_floating_point():
            continue
        d = t.float()
        mean_abs, max_abs = float(d.abs().mean()), float(d.abs().max())
        std = float(d.std()) if d.numel() > 1 else 0.0
        if d.numel() > 1 and std <= 1e-3 * mean_abs + 1e-12:
            flags.append("constant_output")
            notes["constant_output"] = f"std {std:.3g} vs mean |x| {mean_abs:.3g}"
        # zeros pass the elementwise test everywhere iff max|x| <= atol + rtol*max|x|
        if max_abs <= atol / max(1e-12, 1 - rtol):
            flags.append("near_zero")
            notes["near_zero"] = f"an all-zeros output is within atol={atol:g} everywhere (max |x| {max_abs:.3g})"
    return sorted(set(flags)), notes


def lint_problem(problem: Problem, cfg: Config, device: str, size: str) -> dict[str, Any]:
    """The problem's flags and their notes: what its outputs show (run in a reference worker), and
    `bad_meta` where its HARNESS_META would be read in part or not at all."""
    flags, notes = _outputs(problem, cfg, device, size)
    issues = meta_issues(problem)
    if issues:
        flags, notes = sorted({*flags, "bad_meta"}), {**notes, "bad_meta": "; ".join(issues)}
    return {"problem": problem.name, "flags": flags, "notes": notes}


def _outputs(problem: Problem, cfg: Config, device: str, size: str) -> tuple[list[str], dict[str, str]]:
    rng = random.Random(secrets.randbits(64))
    meta = read_meta(problem)
    try:
        tol = tolerance_for(cfg, None if cfg.dtype == "auto" else cfg.dtype, meta)
    except ReferenceError:  # a dtype it has no tolerance for: named by the meta check, nothing to run
        return [], {}
    cmd = LintCommand(init_seed=rng.getrandbits(62), init_seed_b=rng.getrandbits(62),
                  seeds=[rng.getrandbits(62), rng.getrandbits(62)], atol=tol.atol, rtol=tol.rtol,
                  rel_l2=tol.rel_l2)
    w = ReferenceSession(problem, cfg, device, size, None if cfg.dtype == "auto" else cfg.dtype).spawn_reference()
    try:
        load = w.wait_reply("load", cfg.timeouts.problem_s)
        if not load.ok:
            raise RuntimeError(load.error)
        reply, _ = w.request(cmd, cfg.timeouts.problem_s)
        if not reply.ok:
            raise RuntimeError(reply.error)
    except Exception as e:  # noqa: BLE001 - a problem that cannot run is reported, not raised
        return ["broken"], {"broken": str(e)[:500]}
    finally:
        w.close()
    return list(reply.flags), dict(reply.notes)
