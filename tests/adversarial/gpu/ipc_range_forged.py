# expect: status=rejected flags=malformed_report,no_custom_kernel
# problem: tests/problems/relu_add.py
# device: cuda
# Outputs judged on the device are read by the reference's process through the CUDA IPC handle the
# candidate's process sends. This one exports a small allocation of its own (64 KB) and claims the
# output lies 1 GB into it, hoping the reference reads whatever lies there (or faults and the trial
# is judged some weaker way). The reference checks the claimed range against what the handle maps
# and refuses it unread (cuda_ipc.Mapped): rejected.
import importlib

import torch
import torch.nn as nn

_ipc = importlib.import_module("harness." + "cuda_ipc")
_keep = []


def _forged(t):
    small = torch.zeros(1 << 14, device="cuda")
    _keep.append(small)
    node = _real(small)
    node["offset"] = 1 << 30
    return node


_real = _ipc.export
exec("_ipc.export = _forged")


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.relu(a + b)
