# expect: status=passed flags=no_custom_kernel
# problem: tests/problems/relu_add.py
# Rebinds time.perf_counter to run 1000x slow (hidden from the AST behind importlib/exec) around a
# forward that really takes 1 ms. The timing loop pinned its clock before this module was imported,
# so the patch reaches nothing: an honest, slow, correct solution. Without the pinning the reported
# times would shrink and the parent's wall clock would reject it (timer_mismatch).
import importlib

import torch
import torch.nn as nn

_clock = importlib.import_module("ti" + "me")
_real = _clock.perf_counter
exec("_clock.perf_counter = lambda: _real() / 1000.0")


class ModelNew(nn.Module):
    def forward(self, a, b):
        end = _real() + 0.001
        while _real() < end:
            pass
        return torch.relu(a + b)
