# Fills its build folder, which the cache keeps after its evaluation (a helper's attack left 512 MiB
# there with posix_fallocate, owned by a uid that no longer exists): enough of them fill the disk the
# builds of every later solution need. Its own answer is right (passed); what counts is what is left.
# The parent empties a build folder over sandbox.BUILD_FOLDER_CAP when its jail is released.
# Run by tests/test_sandbox.py (ATTACK_FILL_MB: how much).
import os

import torch
import torch.nn as nn

_dir = os.environ.get("TORCH_EXTENSIONS_DIR")
if _dir:
    try:
        _fd = os.open(os.path.join(_dir, "ballast.bin"), os.O_WRONLY | os.O_CREAT, 0o660)
        os.posix_fallocate(_fd, 0, int(os.environ.get("ATTACK_FILL_MB", "512")) << 20)
        os.close(_fd)
    except OSError:
        pass


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.relu(a + b)
