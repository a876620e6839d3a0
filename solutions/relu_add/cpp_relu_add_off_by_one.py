"""Deliberately broken CPU solution (expected verdict: incorrect): the loop skips the last element."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cpp_source = r"""
#include <torch/extension.h>
torch::Tensor relu_add(torch::Tensor a, torch::Tensor b) {
    auto ac = a.contiguous(), bc = b.contiguous();
    auto out = torch::zeros_like(ac);
    const float* pa = ac.data_ptr<float>(); const float* pb = bc.data_ptr<float>();
    float* po = out.data_ptr<float>();
    for (int64_t i = 0; i + 1 < ac.numel(); ++i) { float v = pa[i] + pb[i]; po[i] = v > 0.f ? v : 0.f; }
    out.data_ptr<float>()[ac.numel() - 1] = -1.f;
    return out;
}
"""

ext = load_inline(name="relu_add_off_by_one", cpp_sources=cpp_source, functions=["relu_add"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, a, b):
        return ext.relu_add(a, b)
