# expect: status=rejected flags=process_creation
# problem: tests/problems/relu_add.py
# Starts a process in a new session (it would escape the sandbox's process group and could load the
# GPU while the reference is timed).
import subprocess

import torch
import torch.nn as nn

subprocess.Popen(["sleep", "30"], start_new_session=True)


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.relu(a + b)
