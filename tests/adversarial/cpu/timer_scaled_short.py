# expect: status=rejected flags=timer_mismatch,no_custom_kernel
# problem: tests/problems/launch_chain.py
# Reports scaled by twenty on a short forward: the reference's own ops after a 0.3 ms spin, about
# 0.35 ms a call, reported as 0.02 (a fake 4x over the reference's 0.08 ms). The harness's own timing
# loop, rebound past the static checks, divides every time it reports. It hides 0.33 ms a call,
# under the CPU path's former absolute floor of 0.5 ms a call, which let any report under it pass
# whatever its factor (tests/test_verdicts.py runs it so). The floor's absolute part is now per
# round, and a short forward's rounds have many calls (timing.cpu_round_ms).
import importlib
import time as _t

import torch
import torch.nn as nn

_timing = importlib.import_module("harness." + "timing.loop")
_real_loop = _timing.time_calls
exec("def _scaled(*a, **k):\n"
     "    r = _real_loop(*a, **k)\n"
     "    r['times_ms'] = [x / 20.0 for x in r['times_ms']]\n"
     "    r['host_ms'] = [x / 20.0 for x in r['host_ms']]\n"
     "    return r\n"
     "_timing.time_calls = _scaled")


class ModelNew(nn.Module):
    def forward(self, x):
        end = _t.perf_counter() + 0.0003
        while _t.perf_counter() < end:
            pass
        for _ in range(8):
            x = torch.tanh(x * 1.01 + 0.1)
        return x
