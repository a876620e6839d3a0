# expect: status=rejected flags=timer_mismatch,no_custom_kernel
# problem: tests/problems/relu_add.py
# The same timer patch, hidden from the static checks behind getattr/exec, and a forward that really
# takes 3 ms. The parent's own wall clock, which the child cannot touch, gives it away.
import importlib
import time as _t

import torch
import torch.nn as nn

_clock = importlib.import_module("ti" + "me")
_real = _clock.perf_counter
exec("_clock.perf_counter = lambda: _real() / 1000.0")


class ModelNew(nn.Module):
    def forward(self, a, b):
        end = _real() + 0.003
        while _real() < end:
            pass
        return torch.relu(a + b)
