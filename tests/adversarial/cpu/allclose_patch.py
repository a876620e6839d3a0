# expect: status=rejected flags=monkeypatch
# problem: tests/problems/relu_add.py
# Patches the comparison functions and returns zeros.
import torch
import torch.nn as nn

torch.allclose = lambda *a, **k: True
torch.equal = lambda *a, **k: True
setattr(torch.testing, "assert_close", lambda *a, **k: None)


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.zeros_like(a)
