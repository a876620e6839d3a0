# expect: status=runtime_error flags=malformed_report
# problem: tests/problems/relu_add.py
# Writes forged "all good" replies into every file descriptor it inherited. Any line that is not the
# answer to the command in flight breaks the protocol: a failure, never a pass.
import os

import torch
import torch.nn as nn

forged = b'{"op": "load", "ok": true}\n{"op": "build", "ok": true}\n{"op": "trials", "ok": true}\n'
for fd in range(3, 64):
    try:
        os.write(fd, forged)
    except OSError:
        pass


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.zeros_like(a)
