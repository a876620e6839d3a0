# expect: status=passed flags=no_custom_kernel
# problem: tests/problems/linear_relu.py
# config: size=full
# A report scaled by 0.87 on a forward of milliseconds (the reference's own linear + relu at full
# size): the harness's own timing loop, rebound past the static checks, takes 13% off every time it
# reports. The wall test's floor is a fifth of the reported call (and a tenth of the harness's
# overhead), so timed by its own clock it passed at about 1.15x. Clocked (timing/clocked.py), no time
# it reports counts: it passes at the speed it ran, about 1x (a 13% lie is under the report check's
# floor, which names only gross lies). tests/test_clocked.py runs it both ways.
import importlib

import torch
import torch.nn as nn
import torch.nn.functional as F

_timing = importlib.import_module("harness." + "timing.loop")
_real_loop = _timing.time_calls
exec("def _scaled(*a, **k):\n"
     "    r = _real_loop(*a, **k)\n"
     "    r['times_ms'] = [x * 0.87 for x in r['times_ms']]\n"
     "    r['host_ms'] = [x * 0.87 for x in r['host_ms']]\n"
     "    return r\n"
     "_timing.time_calls = _scaled")


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return F.relu(F.linear(x, self.linear.weight, self.linear.bias))
