"""gemm -> BatchNorm1d (training mode) -> * scale -> softmax(dim=1), epilogue in two CUDA kernels.

The GEMM stays on cuBLAS (F.linear with the module's weights, full fp32: no tf32). Then:
  1. col_stats: per-column batch mean / biased variance of y = x W^T + b (double accumulators;
     a warp reads 32 consecutive columns of a row, so loads are coalesced), folded with gamma, beta
     and the scale into z = (y - mean) * a + b2, a = scale*gamma/sqrt(var + eps), b2 = scale*beta.
     It also updates running_mean / running_var (unbiased) / num_batches_tracked like nn.BatchNorm1d.
  2. bn_softmax_rows: one block per row. Pass 1 keeps an online (max, sum of exp) per thread and
     merges them with warp shuffles and shared memory; pass 2 re-reads the row (L1/L2-resident)
     and writes exp(z - max) / sum. The normalized activations are never written to memory.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <cmath>

constexpr int TX = 32;   // columns per stats block (one warp wide)
constexpr int TY = 16;   // row lanes per stats block

__global__ void __launch_bounds__(TX * TY)
col_stats(const float* __restrict__ y, int R, int C,
          const float* __restrict__ gamma, const float* __restrict__ beta,
          const float* __restrict__ scale, int scale_per_col,
          float* __restrict__ running_mean, float* __restrict__ running_var,
          int64_t* __restrict__ num_batches_tracked, double momentum, double eps,
          float* __restrict__ mean_out, float* __restrict__ a_out, float* __restrict__ b_out) {
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
    const double mean = sum / R;
    const double var = fmax(sq / R - mean * mean, 0.0);   // biased: used to normalize
    const double s = scale[scale_per_col ? c : 0];
    mean_out[c] = (float)mean;
    a_out[c] = (float)(s * (double)gamma[c] / sqrt(var + eps));
    b_out[c] = (float)(s * (double)beta[c]);
    const double unbiased = R > 1 ? var * R / (R - 1) : var;
    running_mean[c] = (float)((1.0 - momentum) * running_mean[c] + momentum * mean);
    running_var[c] = (float)((1.0 - momentum) * running_var[c] + momentum * unbiased);
    if (c == 0) *num_batches_tracked += 1;
}

// Merge two (max, sum of exp(v - max)) pairs; an empty pair is (-inf, 0).
__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
    if (m2 == -INFINITY) return;
    if (m == -INFINITY) { m = m2; s = s2; return; }
    const float M = fmaxf(m, m2);
    s = s * expf(m - M) + s2 * expf(m2 - M);
    m = M;
}

__device__ __forceinline__ void add_value(float& m, float& s, float z) {
    if (z > m) { s = s * expf(m - z) + 1.f; m = z; }   // expf(-inf) = 0 covers the first value
    else s += expf(z - m);
}

template <bool VEC>
__global__ void bn_softmax_rows(const float* __restrict__ y, float* __restrict__ out, int C,
                                const float* __restrict__ mean, const float* __restrict__ a,
                                const float* __restrict__ b) {
    const size_t base = (size_t)blockIdx.x * C;
    const float* row = y + base;
    float* orow = out + base;
    float m = -INFINITY, s = 0.f;
    if (VEC) {
        const float4* r4 = reinterpret_cast<const float4*>(row);
        const float4* m4 = reinterpret_cast<const float4*>(mean);
        const float4* a4 = reinterpret_cast<const float4*>(a);
        const float4* b4 = reinterpret_cast<const float4*>(b);
        for (int j = threadIdx.x; j < C / 4; j += blockDim.x) {
            const float4 v = r4[j], mm = m4[j], aa = a4[j], bb = b4[j];
            add_value(m, s, fmaf(v.x - mm.x, aa.x, bb.x));
            add_value(m, s, fmaf(v.y - mm.y, aa.y, bb.y));
            add_value(m, s, fmaf(v.z - mm.z, aa.z, bb.z));
            add_value(m, s, fmaf(v.w - mm.w, aa.w, bb.w));
        }
    } else {
        for (int j = threadIdx.x; j < C; j += blockDim.x)
            add_value(m, s, fmaf(row[j] - mean[j], a[j], b[j]));
    }
    // Block-wide merge: warp shuffles, then the warp leaders through shared memory.
    for (int off = 16; off > 0; off >>= 1)
        merge(m, s, __shfl_xor_sync(0xffffffffu, m, off), __shfl_xor_sync(0xffffffffu, s, off));
    __shared__ float sm[32], ss[32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nwarps = blockDim.x / 32;
    if (lane == 0) { sm[warp] = m; ss[warp] = s; }
    __syncthreads();
    if (warp == 0) {
        m = lane < nwarps ? sm[lane] : -INFINITY;
        s = lane < nwarps ? ss[lane] : 0.f;
        for (int off = 16; off > 0; off >>= 1)
            merge(m, s, __shfl_xor_sync(0xffffffffu, m, off), __shfl_xor_sync(0xffffffffu, s, off));
        if (lane == 0) { sm[0] = m; ss[0] = s; }
    }
    __syncthreads();
    const float M = sm[0], inv = 1.f / ss[0];
    if (VEC) {
        const float4* r4 = reinterpret_cast<const float4*>(row);
        const float4* m4 = reinterpret_cast<const float4*>(mean);
        const float4* a4 = reinterpret_cast<const float4*>(a);
        const float4* b4 = reinterpret_cast<const float4*>(b);
        float4* o4 = reinterpret_cast<float4*>(orow);
        for (int j = threadIdx.x; j < C / 4; j += blockDim.x) {
            const float4 v = r4[j], mm = m4[j], aa = a4[j], bb = b4[j];
            o4[j] = make_float4(expf(fmaf(v.x - mm.x, aa.x, bb.x) - M) * inv,
                                expf(fmaf(v.y - mm.y, aa.y, bb.y) - M) * inv,
                                expf(fmaf(v.z - mm.z, aa.z, bb.z) - M) * inv,
                                expf(fmaf(v.w - mm.w, aa.w, bb.w) - M) * inv);
        }
    } else {
        for (int j = threadIdx.x; j < C; j += blockDim.x)
            orow[j] = expf(fmaf(row[j] - mean[j], a[j], b[j]) - M) * inv;
    }
}

torch::Tensor bn_scale_softmax_train(torch::Tensor y, torch::Tensor gamma, torch::Tensor beta,
                                     torch::Tensor scale, torch::Tensor running_mean,
                                     torch::Tensor running_var, torch::Tensor num_batches_tracked,
                                     double momentum, double eps) {
    TORCH_CHECK(y.is_cuda() && y.dim() == 2 && y.is_contiguous() && y.scalar_type() == at::kFloat);
    const int R = y.size(0), C = y.size(1);
    TORCH_CHECK(gamma.numel() == C && beta.numel() == C);
    TORCH_CHECK(scale.numel() == 1 || scale.numel() == C, "scale must broadcast along features");
    TORCH_CHECK(running_mean.is_contiguous() && running_var.is_contiguous());
    TORCH_CHECK(num_batches_tracked.scalar_type() == at::kLong);
    gamma = gamma.contiguous(); beta = beta.contiguous(); scale = scale.contiguous();
    auto mean = torch::empty({C}, y.options());
    auto a = torch::empty({C}, y.options());
    auto b = torch::empty({C}, y.options());
    auto out = torch::empty_like(y);
    cudaStream_t stream = at::cuda::getCurrentCUDAStream();

    col_stats<<<(C + TX - 1) / TX, dim3(TX, TY), 0, stream>>>(
        y.data_ptr<float>(), R, C, gamma.data_ptr<float>(), beta.data_ptr<float>(),
        scale.data_ptr<float>(), scale.numel() == C ? 1 : 0,
        running_mean.data_ptr<float>(), running_var.data_ptr<float>(),
        num_batches_tracked.data_ptr<int64_t>(), momentum, eps,
        mean.data_ptr<float>(), a.data_ptr<float>(), b.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();

    // 512 threads: a row of 8192 floats is 4 float4 per thread, and 4 blocks fit on an SM.
    const int threads = 512;
    if (C % 4 == 0)   // y, out, mean, a, b are fresh contiguous allocations: rows 16-byte aligned
        bn_softmax_rows<true><<<R, threads, 0, stream>>>(y.data_ptr<float>(), out.data_ptr<float>(), C,
            mean.data_ptr<float>(), a.data_ptr<float>(), b.data_ptr<float>());
    else
        bn_softmax_rows<false><<<R, threads, 0, stream>>>(y.data_ptr<float>(), out.data_ptr<float>(), C,
            mean.data_ptr<float>(), a.data_ptr<float>(), b.data_ptr<float>());
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

cpp_src = """
torch::Tensor bn_scale_softmax_train(torch::Tensor y, torch::Tensor gamma, torch::Tensor beta,
                                     torch::Tensor scale, torch::Tensor running_mean,
                                     torch::Tensor running_var, torch::Tensor num_batches_tracked,
                                     double momentum, double eps);
"""

ext = load_inline(name="sol_gemm_bn_scale_softmax", cpp_sources=cpp_src, cuda_sources=cuda_src,
                  functions=["bn_scale_softmax_train"], extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bn_eps=1e-5, bn_momentum=0.1, scale_shape=(1,)):
        super().__init__()
        # Same parameters, same order, same shapes as Model: the harness's seed gives equal weights.
        self.gemm = nn.Linear(in_features, out_features)
        self.bn = nn.BatchNorm1d(out_features, eps=bn_eps, momentum=bn_momentum)
        self.scale = nn.Parameter(torch.ones(scale_shape))
        self.softmax = nn.Softmax(dim=1)

    def forward(self, x):
        y = F.linear(x, self.gemm.weight, self.gemm.bias)   # cuBLAS, fp32
        bn = self.bn
        if not bn.training or bn.momentum is None or self.scale.numel() not in (1, y.shape[1]):
            return self.softmax(self.scale * bn(y))   # cases not fused here: plain PyTorch
        return ext.bn_scale_softmax_train(y, bn.weight, bn.bias, self.scale, bn.running_mean,
                                          bn.running_var, bn.num_batches_tracked, bn.momentum, bn.eps)
