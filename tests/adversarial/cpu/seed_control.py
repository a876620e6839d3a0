# expect: status=rejected flags=monkeypatch
# problem: tests/problems/relu_add.py
# Pins torch.manual_seed so the inputs become predictable.
import torch
import torch.nn as nn

_seed = torch.manual_seed
torch.manual_seed = lambda s: _seed(0)


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.relu(a + b)
