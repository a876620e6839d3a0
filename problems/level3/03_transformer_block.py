import math

import torch
import torch.nn as nn


class Model(nn.Module):
    """Pre-LayerNorm transformer decoder block: causal multi-head self-attention (written out with
    matmul + masked softmax) and a GELU MLP, each with a residual connection."""

    def __init__(self, d_model, num_heads, mlp_dim):
        super().__init__()
        assert d_model % num_heads == 0
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, mlp_dim)
        self.fc2 = nn.Linear(mlp_dim, d_model)

    def attention(self, x):
        b, s, d = x.shape
        qkv = self.qkv(x).view(b, s, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]  # (b, heads, s, head_dim)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        mask = torch.ones(s, s, dtype=torch.bool, device=x.device).triu(1)
        scores = scores.masked_fill(mask, float("-inf"))
        attn = torch.softmax(scores, dim=-1)
        out = torch.matmul(attn, v).transpose(1, 2).reshape(b, s, d)
        return self.proj(out)

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        x = x + self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))
        return x


batch_size = 4
seq_len = 1024
d_model = 1024
num_heads = 16
mlp_dim = 4096


def get_inputs():
    return [torch.randn(batch_size, seq_len, d_model)]


def get_init_inputs():
    return [d_model, num_heads, mlp_dim]


HARNESS_META = {
    "level": 3,
    "dtype": "fp32",
    # flops = 2 * batch_size * seq_len * (3 * d_model * d_model + d_model * d_model + 2 * d_model * mlp_dim) + 4 * batch_size * seq_len * seq_len * d_model
    "flops": 120_259_084_288,
    "small": {"batch_size": 2, "seq_len": 16, "d_model": 32, "num_heads": 4, "mlp_dim": 64},
    "extra_shapes": [{"batch_size": 3, "seq_len": 7}],
}
