"""Honest CPU solution for relu_add: one fused pass in C++ (load_inline, cpp_sources only)."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>

torch::Tensor relu_add(torch::Tensor a, torch::Tensor b) {
    TORCH_CHECK(a.sizes() == b.sizes(), "shape mismatch");
    auto ac = a.contiguous(), bc = b.contiguous();
    auto out = torch::empty_like(ac);
    const float* pa = ac.data_ptr<float>();
    const float* pb = bc.data_ptr<float>();
    float* po = out.data_ptr<float>();
    const int64_t n = ac.numel();
    at::parallel_for(0, n, 1 << 14, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
            float v = pa[i] + pb[i];
            po[i] = v > 0.f ? v : 0.f;
        }
    });
    return out;
}
"""

relu_add_ext = load_inline(name="relu_add_cpu", cpp_sources=cpp_source, functions=["relu_add"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return relu_add_ext.relu_add(a, b)
