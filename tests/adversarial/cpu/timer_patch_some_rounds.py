# expect: status=rejected flags=timer_mismatch,no_custom_kernel
# problem: tests/problems/relu_add.py
# The timer patch of timer_patch_hidden.py, made to pass a check that looks only at the quietest
# round: it hides its 3 ms a call in two rounds of every three and reports the third honestly. The
# honest rounds vouch for the host clock (their wall time matches what they report), while the median
# call, which the speedup is drawn from, comes from the doctored rounds.
import importlib
import time

import torch
import torch.nn as nn

_loop = importlib.import_module("harness." + "timing.loop")
_honest_loop = _loop.time_calls


class _EveryThirdHonest:
    """Reports a tenth of each time in two requests of every three."""

    def __init__(self):
        self.requests = 0

    def __call__(self, *args, **kwargs):
        reply = _honest_loop(*args, **kwargs)
        self.requests += 1
        if self.requests % 3:
            for key in ("times_ms", "host_ms"):
                reply[key] = [ms * 0.1 for ms in reply[key]]
        return reply


setattr(_loop, "time_" + "calls", _EveryThirdHonest())


class ModelNew(nn.Module):
    def forward(self, a, b):
        deadline = time.perf_counter_ns() + 3_000_000  # 3 ms of real work a call
        while time.perf_counter_ns() < deadline:
            pass
        return (a + b).clamp_min(0)
