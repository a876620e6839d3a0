// harness/light_header.py: what a solution's .cu gets for <torch/extension.h> in nvcc's first try.
// Tensors, ATen's operators and TORCH_CHECK, without the Python bindings and the C++ frontend (nn,
// optim, data) that cost nvcc over half its time. torch's load_inline includes <torch/types.h> at
// the top of every .cu itself.
#pragma once
#include <torch/types.h>
