# expect: status=incorrect flags=no_custom_kernel,timed_output_mismatch
# problem: tests/problems/relu_add.py
# Honest for its first 10 calls (every correctness trial), then returns the 10th answer forever: the
# cache a solution would use to look fast once the checking seems over. Every timed output is checked
# against the reference's for its own inputs, so the timing rounds catch it.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0
        self.saved = None

    def forward(self, a, b):
        self.calls += 1
        if self.calls <= 10 or self.saved is None or self.saved.shape != a.shape:
            self.saved = torch.relu(a + b)
        return self.saved
