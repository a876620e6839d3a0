"""The problem linter (`harness problems check`): flags problems that a cheat could pass without
computing anything, because their output is nearly constant, does not depend on the inputs or on the
weights, or lies within tolerance of zero. The reference runs in worker processes like any other."""
from __future__ import annotations

import random
import secrets
from typing import Any

import torch

from .config import Config
from .correctness import compare_tensors, load_trial
from .evaluation import tolerance_for
from .problems import Problem
from .records import Command
from .reference import ReferenceSession, read_meta


def _outputs(problem: Problem, cfg: Config, device: str, size: str,
             runs: list[tuple[int, list[int]]]) -> tuple[list, int]:
    """One reference worker; for each (init_seed, seeds): rebuild Model from that seed, run the seeds."""
    w = ReferenceSession(problem, cfg, device, size, None if cfg.dtype == "auto" else cfg.dtype).spawn_reference()
    outs: list = []
    params = 0
    try:
        to = cfg.timeouts.problem_s
        load = w.wait_reply("load", to)
        if not load.ok:
            raise RuntimeError(load.error)
        for init_seed, seeds in runs:
            for cmd in (Command(op="build", init_seed=init_seed), Command(op="trials", seeds=seeds, outputs_only=True)):
                reply, _ = w.request(cmd, to)
                if not reply.ok:
                    raise RuntimeError(reply.error)
                if cmd.op == "build":
                    params = reply.param_count or 0
            outs += [load_trial(b).out for b in reply.blobs]
        return outs, params
    finally:
        w.close()


def _tensors(out) -> list[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return [out]
    return [t for o in (out or []) for t in _tensors(o)] if isinstance(out, (list, tuple)) else []


def _same(a, b, tol) -> bool:
    ta, tb = _tensors(a), _tensors(b)
    return len(ta) == len(tb) and all(compare_tensors(x, y, tol)[0] for x, y in zip(ta, tb))


def lint_problem(problem: Problem, cfg: Config, device: str, size: str) -> dict[str, Any]:
    rng = random.Random(secrets.randbits(64))
    init_a, init_b = rng.getrandbits(62), rng.getrandbits(62)
    s1, s2 = rng.getrandbits(62), rng.getrandbits(62)
    meta = read_meta(problem)
    tol = tolerance_for(cfg, None if cfg.dtype == "auto" else cfg.dtype, meta)
    flags: list[str] = []
    notes: dict[str, str] = {}
    try:
        (o1, o2, o3), params = _outputs(problem, cfg, device, size, [(init_a, [s1, s2]), (init_b, [s1])])
    except Exception as e:  # noqa: BLE001
        return {"problem": problem.name, "flags": ["broken"], "notes": {"broken": str(e)[:500]}}
    if _same(o1, o2, tol):
        flags.append("input_independent")
        notes["input_independent"] = "two different inputs give the same output"
    if params and _same(o1, o3, tol):
        flags.append("weight_independent")
        notes["weight_independent"] = "two different weight seeds give the same output"
    for t in _tensors(o1):
        if not t.is_floating_point():
            continue
        d = t.float()  # full-size outputs can be GBs: no float64 copies, no temporaries of their size
        mean_abs, std, max_abs = float(d.abs().mean()), float(d.std()) if d.numel() > 1 else 0.0, float(d.abs().max())
        if d.numel() > 1 and std <= 1e-3 * mean_abs + 1e-12:
            flags.append("constant_output")
            notes["constant_output"] = f"std {std:.3g} vs mean |x| {mean_abs:.3g}"
        # zeros pass the elementwise test everywhere iff max|x| <= atol + rtol*max|x|
        if max_abs <= tol.atol / max(1e-12, 1 - tol.rtol):
            flags.append("near_zero")
            notes["near_zero"] = f"an all-zeros output is within atol={tol.atol:g} everywhere (max |x| {max_abs:.3g})"
    return {"problem": problem.name, "flags": sorted(set(flags)), "notes": notes}
