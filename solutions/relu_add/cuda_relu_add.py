"""relu(a + b) as one vectorized CUDA kernel (tests/problems/relu_add.py).

Memory-bound: 2 reads + 1 write per element, so the only thing that matters is moving bytes in wide,
coalesced transactions. Each thread handles one float4 (16-byte loads/stores) when all three pointers
are 16-byte aligned; the n % 4 leftover elements (and any misaligned case) take a scalar path.
Launched on PyTorch's current stream so it is ordered with the harness's own work and timers."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cstdint>

__global__ void relu_add_vec4(const float4* __restrict__ a, const float4* __restrict__ b,
                              float4* __restrict__ out, int64_t n4) {
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n4) {
        float4 x = a[i], y = b[i];
        out[i] = make_float4(fmaxf(x.x + y.x, 0.f), fmaxf(x.y + y.y, 0.f),
                             fmaxf(x.z + y.z, 0.f), fmaxf(x.w + y.w, 0.f));
    }
}

// Scalar kernel for elements [start, n): the tail after the float4 part, or everything if misaligned.
__global__ void relu_add_scalar(const float* __restrict__ a, const float* __restrict__ b,
                                float* __restrict__ out, int64_t start, int64_t n) {
    int64_t i = start + (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = fmaxf(a[i] + b[i], 0.f);
}

torch::Tensor relu_add(torch::Tensor a, torch::Tensor b) {
    TORCH_CHECK(a.is_cuda() && b.is_cuda(), "inputs must be CUDA tensors");
    TORCH_CHECK(a.scalar_type() == at::kFloat && b.scalar_type() == at::kFloat, "inputs must be float32");
    TORCH_CHECK(a.sizes() == b.sizes(), "shape mismatch");
    a = a.contiguous();
    b = b.contiguous();
    auto out = torch::empty_like(a);
    const int64_t n = a.numel();
    if (n == 0) return out;
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    const int threads = 256;
    const float* pa = a.data_ptr<float>();
    const float* pb = b.data_ptr<float>();
    float* po = out.data_ptr<float>();
    bool aligned = ((reinterpret_cast<uintptr_t>(pa) | reinterpret_cast<uintptr_t>(pb) |
                     reinterpret_cast<uintptr_t>(po)) & 15) == 0;
    int64_t n4 = aligned ? n / 4 : 0;
    if (n4 > 0) {
        relu_add_vec4<<<(unsigned)((n4 + threads - 1) / threads), threads, 0, stream>>>(
            reinterpret_cast<const float4*>(pa), reinterpret_cast<const float4*>(pb),
            reinterpret_cast<float4*>(po), n4);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    int64_t rest = n - 4 * n4;
    if (rest > 0) {
        relu_add_scalar<<<(unsigned)((rest + threads - 1) / threads), threads, 0, stream>>>(
            pa, pb, po, 4 * n4, n);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
    }
    return out;
}
"""

cpp_src = "torch::Tensor relu_add(torch::Tensor a, torch::Tensor b);"

ext = load_inline(name="sol_relu_add_vec4", cpp_sources=cpp_src, cuda_sources=cuda_src,
                  functions=["relu_add"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        return ext.relu_add(a, b)
