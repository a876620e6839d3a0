"""The problem linter (`harness problems check`): flags problems that a cheat could pass without
computing anything, because their output is nearly constant, does not depend on the inputs or on the
weights, or lies within tolerance of zero; and problems whose HARNESS_META the harness would read in
part or not at all. The reference runs in worker processes like any other, and judges its own
outputs there (lint_rules.analyse)."""
from __future__ import annotations

import random
import secrets
from typing import Any

from .config import Config
from .problems import Problem
from .records.messages import LintCommand
from .reference import ReferenceError, ReferenceSession, meta_issues, read_meta, tolerance_for


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
