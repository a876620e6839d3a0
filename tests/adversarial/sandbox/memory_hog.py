# A correct answer that takes far more of the host's memory than its problem needs (here 2 GiB at
# every call, touched page by page): beside other evaluations it would take theirs, and a larger one
# the machine's. Jailed, its processes share a control group capped at `hardening.jail_memory_gb`
# (cgroups.py): the kernel kills it inside its group (runtime_error) and nothing else. Unjailed it
# passes. Run by tests/test_sandbox.py with a small cap.
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        hog = bytearray(2 << 30)
        for i in range(0, len(hog), 4096):
            hog[i] = 1
        return torch.relu(a + b)
