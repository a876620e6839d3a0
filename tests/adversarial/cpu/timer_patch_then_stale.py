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

_timing = importlib.import_module("harness." + "timing")
_real_loop = _timing.time_calls
_state = {"measurements": 0, "cached": None}
exec("def _fake(*a, **k):\n"
     "    if k.get('warmup'):\n"
     "        _state['measurements'] += 1\n"
     "    r = _real_loop(*a, **k)\n"
     "    if _state['measurements'] == 1:\n"
     "        r['times_ms'] = [x / 1000.0 for x in r['times_ms']]\n"
     "        r['host_ms'] = [x / 1000.0 for x in r['host_ms']]\n"
     "    return r\n"
     "_timing.time_calls = _fake")


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
