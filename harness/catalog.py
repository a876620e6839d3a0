"""Describing problems without running them: level, full-size input shapes, FLOPs and bytes, all
computed on the meta device (nothing is allocated), plus whatever HARNESS_META declares."""
from __future__ import annotations

from typing import Any, Optional

from .problems import Problem, apply_sizes, import_file, meta
from .reference import read_meta


def _flatten(obj):
    import torch
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for item in obj:
            yield from _flatten(item)
    elif isinstance(obj, dict):
        for item in obj.values():
            yield from _flatten(item)


def fmt_shape(t) -> str:
    import torch
    shape = "x".join(str(s) for s in t.shape) if t.dim() else "scalar"
    if t.dtype != torch.float32:
        shape += " " + str(t.dtype).replace("torch.", "")
    return shape


def describe(problem: Problem, size: str = "full", count: bool = True) -> dict[str, Any]:
    """Imports the problem (trusted code) and runs it on meta tensors."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    mod = import_file(problem.path, f"catalog_{abs(hash(str(problem.path)))}")
    m = meta(mod)
    if size == "small":
        apply_sizes(mod, m.get("small", {}))
    with torch.device("meta"):
        inputs = list(mod.get_inputs())
        init_inputs = list(mod.get_init_inputs())
    flops, nbytes = m.get("flops"), m.get("bytes")
    if count and (flops is None or nbytes is None):
        with torch.device("meta"):
            torch.manual_seed(0)
            model = mod.Model(*init_inputs)
            with FlopCounterMode(display=False) as counter:
                output = model(*inputs)
        if flops is None:
            flops = counter.get_total_flops()
        if nbytes is None:
            tensors = list(_flatten(inputs)) + list(model.parameters()) + list(model.buffers()) + list(_flatten(output))
            nbytes = sum(t.numel() * t.element_size() for t in tensors)
    return {
        "name": problem.name,
        "path": str(problem.path),
        "level": m.get("level", problem.level),
        "kb_id": problem.kb_id,
        "dtype": m.get("dtype", "fp32"),
        "inputs": [fmt_shape(t) for t in _flatten(inputs)],
        "input_shapes": [list(t.shape) for t in _flatten(inputs)],
        "init_inputs": [repr(x) for x in init_inputs],
        "flops": flops,
        "bytes": nbytes,
        "has_small": "small" in m,
    }


def level_of(problem: Problem) -> Optional[int]:
    return read_meta(problem).get("level", problem.level)
