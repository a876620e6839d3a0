# expect: status=rejected flags=timer_mismatch,no_custom_kernel
# problem: tests/problems/costly_inputs.py
# config: timing.cpu_clocked=off
# No timer touched: the forward is done where this process is handed its inputs, and the timed
# forward returns it after a short spin. Whichever way the inputs arrive (made here by the problem's
# get_inputs, or read from the round's file the reference's process made), the work stays inside the
# parent's wall for the round and outside the reported interval. Where each side makes its own
# inputs, that making (85 ms a call here) dwarfs the 2.5 ms forward and hides it; read from the
# reference's file, the overhead is a copy, and the forward shows
# (tests/test_inputs.py runs it both ways). Timed unclocked, as a forward over
# timing.cpu_clocked_below_ms is: clocked, its inputs reach it only inside each call's interval.
import importlib
import time as _t

import torch
import torch.nn as nn

_PRE = {}


def _stash(inputs):
    if len(inputs) == 2 and isinstance(inputs[0], torch.Tensor):
        with torch.no_grad():
            _PRE[inputs[0].data_ptr()] = (inputs[0], torch.relu(inputs[0] @ inputs[1]))
    return inputs


for _mod, _cls, _fn in (("process.runner", "Runner", "make_inputs"), ("timing.inputs", "RoundInputs", "take")):
    _c = getattr(importlib.import_module("harness." + _mod), _cls)
    _orig = getattr(_c, _fn)
    setattr(_c, _fn, (lambda orig: lambda self, *a, **k: _stash(orig(self, *a, **k)))(_orig))


class ModelNew(nn.Module):
    def forward(self, a, b):
        hit = _PRE.pop(a.data_ptr(), None)
        _PRE.clear()
        if hit is not None and hit[0] is a:
            end = _t.perf_counter() + 0.0002
            while _t.perf_counter() < end:
                pass
            return hit[1]
        return torch.relu(a @ b)
