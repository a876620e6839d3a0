# expect: status=rejected flags=timer_mismatch,no_custom_kernel
# problem: tests/problems/relu_add.py
# A timer patch hidden from the static checks behind importlib/exec, and a forward that really takes
# 3 ms. Rebinding time.perf_counter no longer reaches the timing loop (it pins its primitives before
# the solution is imported), so this one wraps the harness's own child-side loop and divides every
# time it reports, host times included, by 1000. The parent's wall clock, which the child cannot
# touch, gives it away.
import importlib
import time as _t

import torch
import torch.nn as nn

_timing = importlib.import_module("harness." + "timing.loop")
_real_loop = _timing.time_calls
exec("def _fake(*a, **k):\n"
     "    r = _real_loop(*a, **k)\n"
     "    r['times_ms'] = [x / 1000.0 for x in r['times_ms']]\n"
     "    r['host_ms'] = [x / 1000.0 for x in r['host_ms']]\n"
     "    return r\n"
     "_timing.time_calls = _fake")


class ModelNew(nn.Module):
    def forward(self, a, b):
        end = _t.perf_counter() + 0.003
        while _t.perf_counter() < end:
            pass
        return torch.relu(a + b)
