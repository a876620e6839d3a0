"""Describing problems without running them: level, full-size input shapes, FLOPs and bytes, all
computed on the meta device (nothing is allocated), plus whatever HARNESS_META declares."""
from __future__ import annotations

import signal
import threading
from typing import Any, Callable, Optional

# A forward on meta tensors is Python dispatch only, yet a recurrent model's steps took 100-150 s
# each to count (KernelBench level 3, on a CPU): past this, a listing says "not counted" instead
COUNT_S = 2.0

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


def describe(problem: Problem, size: str = "full", count: bool = True,
             count_s: Optional[float] = COUNT_S) -> dict[str, Any]:
    """Imports the problem (trusted code) and runs it on meta tensors. FLOPs and bytes not declared
    in HARNESS_META are counted within `count_s` seconds (None: no limit), else left None with a
    `count_note` saying why."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    mod = import_file(problem.path, f"catalog_{abs(hash(str(problem.path)))}")
    m = meta(mod)
    if size == "small":
        apply_sizes(mod, m.get("small", {}))
    with torch.device("meta"):
        inputs = list(mod.get_inputs())
        init_inputs = list(mod.get_init_inputs())
    # what HARNESS_META declares is the full size's: a small preset's is counted
    small = size == "small" and bool(m.get("small"))
    flops, nbytes, note = (None, None, None) if small else (m.get("flops"), m.get("bytes"), None)

    def counted() -> tuple[int, int]:
        with torch.device("meta"):
            torch.manual_seed(0)
            model = mod.Model(*init_inputs)
            with FlopCounterMode(display=False) as counter:
                output = model(*inputs)
        tensors = list(_flatten(inputs)) + list(model.parameters()) + list(model.buffers()) + list(_flatten(output))
        return counter.get_total_flops(), sum(t.numel() * t.element_size() for t in tensors)

    if count and (flops is None or nbytes is None):
        # what the counter imports on first use (torch._dynamo, among others) is imported here,
        # unbounded: a module interrupted half-way through its import stays broken in this process
        with FlopCounterMode(display=False), torch.device("meta"):
            torch.ones(1) + 1
        got = within(count_s, counted)
        if got is None:
            note = f"FLOPs and bytes not counted: the forward on meta tensors took over {count_s:g} s"
        else:
            flops = got[0] if flops is None else flops
            nbytes = got[1] if nbytes is None else nbytes
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
        **({"count_note": note} if note else {}),
    }


class _Late(Exception):
    pass


def within(seconds: Optional[float], fn: Callable[[], Any]) -> Optional[Any]:
    """fn(), or None where it ran past `seconds` of wall time: an interval timer's signal interrupts
    it. Only the main thread receives signals: elsewhere (or with None) fn runs unbounded."""
    if seconds is None or threading.current_thread() is not threading.main_thread():
        return fn()

    def late(signum, frame):
        raise _Late()

    old = signal.signal(signal.SIGALRM, late)
    try:
        try:
            signal.setitimer(signal.ITIMER_REAL, seconds)
            return fn()
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except _Late:  # also where it fired between fn's return and the timer's reset
        return None
    finally:
        signal.signal(signal.SIGALRM, old)


def level_of(problem: Problem) -> Optional[int]:
    return read_meta(problem).get("level", problem.level)
