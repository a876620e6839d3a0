# expect: status=incorrect flags=timed_output_mismatch,no_custom_kernel
# problem: tests/problems/relu_add.py
# Two faces, one per measurement. In the first it hides 3 ms a call from the timing loop (as
# timer_patch_hidden.py does), which the host-clock checks flag. A flagged run is measured again,
# and there it reports honest times but returns the answer of its first call, which takes no time at
# all. Reporting the first measurement because the second was clean of clock flags would have passed
# it at the hidden speed: the second measurement's outputs are held to the reference like the first's.
import importlib
import time as _t

import torch
import torch.nn as nn

_timing = importlib.import_module("harness." + "timing.loop")
_real_loop = _timing.time_calls
_state = {"measurements": 0, "cached": None}
# a measurement starts with its warm-up round, the only one with warm-up calls
exec("def _two_faced(*a, **k):\n"
     "    _state['measurements'] += bool(k.get('warmup'))\n"
     "    out = _real_loop(*a, **k)\n"
     "    scale = 1e-3 if _state['measurements'] == 1 else 1.0\n"
     "    return {**out, **{key: [v * scale for v in out[key]] for key in ('times_ms', 'host_ms')}}\n"
     "_timing.time_calls = _two_faced")


class ModelNew(nn.Module):
    def forward(self, a, b):
        if _state["measurements"] >= 2 and _state["cached"] is not None:
            return _state["cached"]
        end = _t.perf_counter() + 0.003
        while _t.perf_counter() < end:
            pass
        out = torch.relu(a + b)
        if _state["measurements"] >= 1:
            _state["cached"] = out.clone()
        return out
