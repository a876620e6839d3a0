# expect: status=rejected flags=unsynced_stream,no_custom_kernel maybe=timer_mismatch
# problem: tests/problems/relu_add.py
# device: cuda
# Rebinds torch.cuda.Event.elapsed_time (through exec, so the AST rules do not see it) to report a
# hundredth of the real time. The host clock around each call, and the parent's own clock around each
# round, still see the real work: rejected.
import torch
import torch.nn as nn

exec("import torch\n_real = torch.cuda.Event.elapsed_time\n"
     "torch.cuda.Event.elapsed_time = lambda self, end: _real(self, end) / 100.0")


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.relu(a + b)
