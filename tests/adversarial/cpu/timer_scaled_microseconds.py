# expect: status=passed flags=no_custom_kernel
# problem: tests/problems/relu_add.py
# A report scaled by forty on a forward of a few microseconds (the reference's own relu(a + b) at the
# small size): the harness's own timing loop, rebound past the static checks, divides every time it
# reports. Timed by its own clock, as before clocked rounds, it passed at 38-44x: what it hides is far
# under the CPU wall test's 0.5 ms a call, the noise of the harness's per-call work. Clocked
# (timing/clocked.py), no time it reports counts: it passes at the speed it ran, about 1x (what it
# hides, some 20 us a call, is under the report check's floor, which names only gross lies).
# tests/test_clocked.py runs it both ways.
import importlib

import torch
import torch.nn as nn

_timing = importlib.import_module("harness." + "timing.loop")
_real_loop = _timing.time_calls
exec("def _scaled(*a, **k):\n"
     "    r = _real_loop(*a, **k)\n"
     "    r['times_ms'] = [x / 40.0 for x in r['times_ms']]\n"
     "    r['host_ms'] = [x / 40.0 for x in r['host_ms']]\n"
     "    return r\n"
     "_timing.time_calls = _scaled")


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.relu(a + b)
