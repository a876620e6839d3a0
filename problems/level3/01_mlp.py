import torch
import torch.nn as nn


class Model(nn.Module):
    """Multi-layer perceptron: Linear -> ReLU for each hidden layer, then a Linear output layer.
    Weights use He (Kaiming) normal initialisation and zero biases, so activations keep unit scale."""

    def __init__(self, input_size, layer_sizes, output_size):
        super().__init__()
        layers = []
        prev = input_size
        for size in layer_sizes:
            layers.append(nn.Linear(prev, size))
            layers.append(nn.ReLU())
            prev = size
        layers.append(nn.Linear(prev, output_size))
        self.net = nn.Sequential(*layers)
        for layer in self.net:
            if isinstance(layer, nn.Linear):
                nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
                nn.init.zeros_(layer.bias)

    def forward(self, x):
        return self.net(x)


batch_size = 2048
input_size = 4096
layer_sizes = [4096, 4096, 2048]
output_size = 1024


def get_inputs():
    return [torch.randn(batch_size, input_size)]


def get_init_inputs():
    return [input_size, layer_sizes, output_size]


HARNESS_META = {
    "level": 3,
    "dtype": "fp32",
    # flops = 2 * batch_size * sum(a * b for a, b in zip([input_size] + layer_sizes, layer_sizes + [output_size]))
    "flops": 180_388_626_432,
    "small": {"batch_size": 8, "input_size": 64, "layer_sizes": [64, 48, 32], "output_size": 16},
    "extra_shapes": [{"batch_size": 3}],
}
