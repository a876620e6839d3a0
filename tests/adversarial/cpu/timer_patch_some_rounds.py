# expect: status=rejected flags=timer_mismatch,no_custom_kernel
# problem: tests/problems/relu_add.py
# The timer patch of timer_patch_hidden.py, made to pass a check that looks only at the quietest
# round: it hides its 3 ms a call in two rounds of every three and reports the third honestly. The
# honest rounds vouch for the host clock (their wall time matches what they report), while the median
# call, which the speedup is drawn from, comes from the doctored rounds.
import importlib
import time as _t

import torch
import torch.nn as nn

_timing = importlib.import_module("harness." + "timing.loop")
_real_loop = _timing.time_calls
_rounds = [0]
exec("def _fake(*a, **k):\n"
     "    r = _real_loop(*a, **k)\n"
     "    _rounds[0] += 1\n"
     "    if _rounds[0] % 3:\n"
     "        r['times_ms'] = [x / 10.0 for x in r['times_ms']]\n"
     "        r['host_ms'] = [x / 10.0 for x in r['host_ms']]\n"
     "    return r\n"
     "_timing.time_calls = _fake")


class ModelNew(nn.Module):
    def forward(self, a, b):
        end = _t.perf_counter() + 0.003
        while _t.perf_counter() < end:
            pass
        return torch.relu(a + b)
