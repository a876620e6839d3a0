"""The problem linter's rules, applied in the reference's child process to its own outputs
(`analyse`): output that does not depend on the inputs or the weights, is constant, or lies within
tolerance of zero. Child-safe: imports nothing of the parent's orchestration (lint.py runs the linter).
"""
from __future__ import annotations

import torch

from .config import Tolerance
from .correctness import compare_tensors


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
