# expect: status=passed flags=no_custom_kernel
# problem: tests/problems/relu_add.py
# Honest look-alike: assigns torch.backends settings (configuration, not patching) and keeps state.
import torch
import torch.nn as nn

torch.backends.cudnn.benchmark = True


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, a, b):
        self.calls += 1
        return (a + b).clamp_min(0)
