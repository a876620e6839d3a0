# expect: status=rejected flags=introspection
# problem: tests/problems/relu_add.py
# Walks the garbage collector for a tensor of the right shape, hoping to find the expected output.
import gc

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        for obj in gc.get_objects():
            if isinstance(obj, torch.Tensor) and obj.shape == a.shape and obj is not a and obj is not b:
                return obj
        return torch.zeros_like(a)
