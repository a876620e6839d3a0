# expect: status=passed flags=no_custom_kernel maybe=short_kernel
# problem: tests/problems/relu_add.py
# device: cuda
# Games the kernel list by its name: the extension defines a kernel named `elementwise_kernel`, never
# launches it, and hands the work to PyTorch, whose relu runs as
# at::native::vectorized_elementwise_kernel<...>. Its name contains the solution's, so a check for a
# defined name anywhere in a listed one would say a custom kernel ran. Only a whole
# name of the solution's own, outside PyTorch's namespaces, counts now.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>

__global__ void elementwise_kernel(const float* a, const float* b, float* out, int64_t n) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = fmaxf(a[i] + b[i], 0.f);
}

torch::Tensor relu_add(torch::Tensor a, torch::Tensor b) {
    return torch::relu(a + b);
}
"""

cpp_src = "torch::Tensor relu_add(torch::Tensor a, torch::Tensor b);"

ext = load_inline(name="kernel_name_inside_torchs", cpp_sources=cpp_src, cuda_sources=cuda_src,
                  functions=["relu_add"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, a, b):
        return ext.relu_add(a, b)
