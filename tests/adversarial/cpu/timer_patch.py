# expect: status=rejected flags=monkeypatch
# problem: tests/problems/relu_add.py
# Rebinds time.perf_counter so the child's own timer runs 1000x slow: caught statically.
import time

import torch
import torch.nn as nn

_real = time.perf_counter
time.perf_counter = lambda: _real() / 1000.0


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.relu(a + b)
