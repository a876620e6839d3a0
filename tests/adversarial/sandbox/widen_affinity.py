# problem: tests/problems/linear_relu.py
# more_threads.py, wider: the forward first gives its thread every CPU of the machine (a mask set by
# sched_setaffinity from outside is its own to undo), then asks torch for that many threads. Held
# by its jail's cpuset group, the kernel keeps it on the reference's CPUs whatever it asks for; held
# by affinity alone (no cpuset), it runs on every core.
import os

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        try:
            os.sched_setaffinity(0, range(os.cpu_count() or 1))
        except OSError:
            pass
        torch.set_num_threads(len(os.sched_getaffinity(0)))
        return torch.relu(self.linear(x))
