# expect: status=incorrect flags=no_custom_kernel
# problem: tests/problems/relu_add.py
# device: cpu
# A wrong CPU solution carrying a CUDA build that never runs, to pass for `unsupported` on the CPU
# path (out of solved and fast_p) instead of `incorrect`: only a CUDA build its import calls counts.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

if False:
    load_inline(name="never_built", cpp_sources="", cuda_sources="__global__ void k() {}")


class ModelNew(nn.Module):
    def forward(self, a, b):
        return a + b  # no relu: wrong wherever a + b < 0
