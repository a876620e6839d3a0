import math

import torch
import torch.nn as nn


class Model(nn.Module):
    """Two-layer LSTM over a sequence (zero initial state), then a Linear projection of every
    time step's hidden state. The LSTM weights are drawn with unit-variance gain (uniform, bound
    sqrt(3 / fan_in)), biases are zero except a forget-gate bias of 1, so the hidden state does not
    decay to near zero as it does with PyTorch's default initialisation."""

    def __init__(self, input_size, hidden_size, num_layers, output_size):
        super().__init__()
        self.lstm = nn.LSTM(input_size, hidden_size, num_layers=num_layers, batch_first=True)
        self.fc = nn.Linear(hidden_size, output_size)
        with torch.no_grad():
            for name, param in self.lstm.named_parameters():
                if name.startswith("weight"):
                    bound = math.sqrt(3.0 / param.shape[1])
                    param.uniform_(-bound, bound)
                else:
                    param.zero_()
                    if name.startswith("bias_ih"):
                        param[hidden_size:2 * hidden_size] = 1.0  # gate order: input, forget, cell, output

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.fc(out)


batch_size = 32
seq_len = 256
input_size = 256
hidden_size = 512
num_layers = 2
output_size = 128


def get_inputs():
    return [torch.randn(batch_size, seq_len, input_size)]


def get_init_inputs():
    return [input_size, hidden_size, num_layers, output_size]


HARNESS_META = {
    "level": 3,
    "dtype": "fp32",
    # flops = 2 * batch_size * seq_len * (4 * hidden_size * (input_size + hidden_size) + (num_layers - 1) * 4 * hidden_size * (2 * hidden_size) + hidden_size * output_size)
    "flops": 61_203_283_968,
    "small": {"batch_size": 2, "seq_len": 8, "input_size": 16, "hidden_size": 32, "output_size": 8},
    "extra_shapes": [{"batch_size": 3, "seq_len": 5}],
}
