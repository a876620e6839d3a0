"""gemm -> * scale -> BatchNorm1d (training mode), with the epilogue fused into two CUDA kernels.

The GEMM stays on cuBLAS (F.linear with the module's own weights, full fp32: no tf32). What eager
PyTorch then does in three passes over the 1024 x 8192 activation (mul, BN statistics, BN normalize)
is done here in two:
  1. col_stats: per-column sum and sum of squares of y = x W^T + b (double accumulators, coalesced:
     a warp reads 32 consecutive columns of one row). The scale is folded in analytically:
     mean(y*s) = s*mean(y), var(y*s) = s^2*var(y), so y*s is never materialized. The same kernel
     turns the stats into per-column coefficients and updates running_mean / running_var /
     num_batches_tracked exactly as nn.BatchNorm1d does (running_var uses the unbiased variance).
  2. bn_apply: out = (y - mean_y) * a + beta, a = s*gamma/sqrt(s^2 var_y + eps), float4 wide when
     the row length allows it.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>

constexpr int TX = 32;   // columns per block (one warp wide: 128-byte coalesced row segments)
constexpr int TY = 16;   // row lanes per block; 8192 columns -> 256 blocks of 512 threads, one wave

__global__ void __launch_bounds__(TX * TY)
col_stats(const float* __restrict__ y, int R, int C,
          const float* __restrict__ scale, const float* __restrict__ gamma,
          float* __restrict__ running_mean, float* __restrict__ running_var,
          int64_t* __restrict__ num_batches_tracked, double momentum, double eps,
          float* __restrict__ mean_out, float* __restrict__ a_out) {
    __shared__ double s_sum[TY][TX + 1], s_sq[TY][TX + 1];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int c = blockIdx.x * TX + tx;
    double sum = 0.0, sq = 0.0;
    if (c < C) {
        #pragma unroll 8
        for (int r = ty; r < R; r += TY) {
            double v = y[(size_t)r * C + c];
            sum += v;
            sq += v * v;
        }
    }
    s_sum[ty][tx] = sum;
    s_sq[ty][tx] = sq;
    __syncthreads();
    if (ty != 0 || c >= C) return;
    for (int k = 1; k < TY; ++k) { sum += s_sum[k][tx]; sq += s_sq[k][tx]; }
    const double mean_y = sum / R;
    const double var_y = fmax(sq / R - mean_y * mean_y, 0.0);     // biased: used to normalize
    const double s = scale[c];
    const double mean_z = s * mean_y, var_z = s * s * var_y;         // stats of z = y * s
    mean_out[c] = (float)mean_y;
    a_out[c] = (float)(s * (double)gamma[c] / sqrt(var_z + eps));
    // nn.BatchNorm1d's running-stat update (momentum form); running_var gets the unbiased variance.
    const double unbiased = R > 1 ? var_z * R / (R - 1) : var_z;
    running_mean[c] = (float)((1.0 - momentum) * running_mean[c] + momentum * mean_z);
    running_var[c] = (float)((1.0 - momentum) * running_var[c] + momentum * unbiased);
    if (c == 0) *num_batches_tracked += 1;
}

// out[r, c] = (y[r, c] - mean[c]) * a[c] + beta[c]; grid = (column tiles, rows): no index division.
template <bool VEC>
__global__ void bn_apply(const float* __restrict__ y, float* __restrict__ out, int C,
                         const float* __restrict__ mean, const float* __restrict__ a,
                         const float* __restrict__ beta) {
    const int r = blockIdx.y;
    const int j = blockIdx.x * blockDim.x + threadIdx.x;
    if (VEC) {
        if (j >= C / 4) return;
        float4 v = reinterpret_cast<const float4*>(y + (size_t)r * C)[j];
        const float4 m = reinterpret_cast<const float4*>(mean)[j];
        const float4 k = reinterpret_cast<const float4*>(a)[j];
        const float4 b = reinterpret_cast<const float4*>(beta)[j];
        v.x = fmaf(v.x - m.x, k.x, b.x);
        v.y = fmaf(v.y - m.y, k.y, b.y);
        v.z = fmaf(v.z - m.z, k.z, b.z);
        v.w = fmaf(v.w - m.w, k.w, b.w);
        reinterpret_cast<float4*>(out + (size_t)r * C)[j] = v;
    } else {
        if (j >= C) return;
        const size_t i = (size_t)r * C + j;
        out[i] = fmaf(y[i] - mean[j], a[j], beta[j]);
    }
}

// y: the GEMM output (R x C); returns the normalized tensor (running stats updated in place).
torch::Tensor scale_bn_train(torch::Tensor y, torch::Tensor scale, torch::Tensor gamma,
                             torch::Tensor beta, torch::Tensor running_mean,
                             torch::Tensor running_var, torch::Tensor num_batches_tracked,
                             double momentum, double eps) {
    TORCH_CHECK(y.is_cuda() && y.dim() == 2 && y.is_contiguous() && y.scalar_type() == at::kFloat);
    const int R = y.size(0), C = y.size(1);
    TORCH_CHECK(R <= 65535, "bn_apply puts rows on grid.y");
    TORCH_CHECK(scale.numel() == C && gamma.numel() == C && beta.numel() == C);
    TORCH_CHECK(running_mean.is_contiguous() && running_var.is_contiguous());
    TORCH_CHECK(num_batches_tracked.scalar_type() == at::kLong);
    scale = scale.contiguous(); gamma = gamma.contiguous(); beta = beta.contiguous();
    auto mean = torch::empty({C}, y.options());
    auto a = torch::empty({C}, y.options());
    auto out = torch::empty_like(y);
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();

    col_stats<<<(C + TX - 1) / TX, dim3(TX, TY), 0, stream>>>(
        y.data_ptr<float>(), R, C, scale.data_ptr<float>(), gamma.data_ptr<float>(),
        running_mean.data_ptr<float>(), running_var.data_ptr<float>(),
        num_batches_tracked.data_ptr<int64_t>(), momentum, eps,
        mean.data_ptr<float>(), a.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();

    const int threads = 256;
    // float4 path: needs every row start and beta 16-byte aligned (y, out, mean, a are fresh allocations)
    if (C % 4 == 0 && reinterpret_cast<uintptr_t>(beta.data_ptr<float>()) % 16 == 0) {
        dim3 grid((C / 4 + threads - 1) / threads, R);
        bn_apply<true><<<grid, threads, 0, stream>>>(y.data_ptr<float>(), out.data_ptr<float>(), C,
            mean.data_ptr<float>(), a.data_ptr<float>(), beta.data_ptr<float>());
    } else {
        dim3 grid((C + threads - 1) / threads, R);
        bn_apply<false><<<grid, threads, 0, stream>>>(y.data_ptr<float>(), out.data_ptr<float>(), C,
            mean.data_ptr<float>(), a.data_ptr<float>(), beta.data_ptr<float>());
    }
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

cpp_src = """
torch::Tensor scale_bn_train(torch::Tensor y, torch::Tensor scale, torch::Tensor gamma,
                             torch::Tensor beta, torch::Tensor running_mean,
                             torch::Tensor running_var, torch::Tensor num_batches_tracked,
                             double momentum, double eps);
"""

ext = load_inline(name="sol_gemm_scale_bn_epilogue", cpp_sources=cpp_src, cuda_sources=cuda_src,
                  functions=["scale_bn_train"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, scale_shape, eps=1e-5, momentum=0.1):
        super().__init__()
        # Same parameters, same order, same shapes as Model: the harness's seed gives equal weights.
        self.gemm = nn.Linear(in_features, out_features)
        self.scale = nn.Parameter(torch.randn(scale_shape))
        self.bn = nn.BatchNorm1d(out_features, eps=eps, momentum=momentum)

    def forward(self, x):
        y = F.linear(x, self.gemm.weight, self.gemm.bias)   # cuBLAS, fp32
        if not self.bn.training or self.bn.momentum is None:
            return self.bn(y * self.scale)   # eval mode / cumulative averaging: plain PyTorch
        bn = self.bn
        return ext.scale_bn_train(y, self.scale.expand(y.shape[1]), bn.weight, bn.bias,
                                  bn.running_mean, bn.running_var, bn.num_batches_tracked,
                                  bn.momentum, bn.eps)
