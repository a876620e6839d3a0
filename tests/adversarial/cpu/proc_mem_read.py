# expect: status=rejected flags=introspection
# problem: tests/problems/relu_add.py
# Opens the parent's /proc/<pid>/mem to look for the reference's outputs. (The parent is made
# non-dumpable, which stops this for a non-root user; root can read any process's memory, so the
# static rule is the defence that holds everywhere.)
import os

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        try:
            with open(f"/proc/{os.getppid()}/mem", "rb") as f:
                f.read(1)
        except OSError:
            pass
        return torch.zeros_like(a)
