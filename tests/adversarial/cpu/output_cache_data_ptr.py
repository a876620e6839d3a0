# expect: status=incorrect flags=no_custom_kernel maybe=timed_output_mismatch
# problem: tests/problems/relu_add.py
# Memoizes by data_ptr (KernelBench's timed loop reuses buffers, so this fakes a speedup there). New
# buffers and new values for every call, and outputs re-checked, defeat it.
import torch
import torch.nn as nn

_cache = {}


class ModelNew(nn.Module):
    def forward(self, a, b):
        key = (a.data_ptr() & ~0xFFFF, a.numel())
        if key not in _cache:
            _cache[key] = torch.relu(a + b)
        return _cache[key]
