# expect: status=rejected flags=malformed_report,no_custom_kernel
# problem: tests/problems/relu_add.py
# Wrong outputs (zeros) whose child sends an empty tree of values with a true description of one
# tensor (its own process's runner patched, hidden from the static checks behind importlib/exec).
# The parent checked only the descriptions' count and paired values with zip, which stops at the
# shorter list: no value was judged and every correctness trial passed.
import importlib

import torch
import torch.nn as nn

_runner = importlib.import_module("harness." + "process.runner")
exec("_runner._plain = lambda torch, obj: []")


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.zeros_like(a)
