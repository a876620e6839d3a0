# problem: tests/problems/linear_relu.py
# Honest work on more cores than the reference gets: the harness gives every CPU process
# timing.cpu_threads torch threads (1), and this solution asks torch for every CPU there is, in its
# forward. On a host with idle cores that is a real wall-clock gain against a one-thread reference,
# from more hardware, not a faster kernel. Noted by a helper (its speedup on a 2-core machine was
# 0.2-0.35x: the cores were not idle); the record says so with `cpu_oversubscribed`.
import os

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        torch.set_num_threads(len(os.sched_getaffinity(0)))
        return torch.relu(self.linear(x))
