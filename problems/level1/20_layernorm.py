import torch
import torch.nn as nn


class Model(nn.Module):
    """LayerNorm over the hidden dimension of a (batch, seq, hidden) activation, with affine."""

    def __init__(self, hidden: int, eps: float = 1e-5):
        super().__init__()
        self.ln = nn.LayerNorm(hidden, eps=eps)
        # Random affine parameters: with the default ones (weight 1, bias 0) a kernel that
        # ignores them would pass. Drawn after construction, from the same seeded stream.
        with torch.no_grad():
            self.ln.weight.normal_(1.0, 0.2)
            self.ln.bias.normal_(0.0, 0.2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


batch_size = 32
seq_len = 2048
hidden = 4096


def get_inputs():
    x = torch.randn(batch_size, seq_len, hidden) * 2.0 + 0.5
    return [x]


def get_init_inputs():
    return [hidden]


HARNESS_META = {
    "level": 1,
    "dtype": "fp32",
    # bytes = (2 * batch_size * seq_len * hidden + 2 * hidden) * 4
    "bytes": 2_147_516_416,
    "small": {"batch_size": 2, "seq_len": 16, "hidden": 64},
    "extra_shapes": [{"batch_size": 3, "seq_len": 5}],
}
