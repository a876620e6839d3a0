# Fetches its answer from outside instead of computing it: wrong outputs (zeros) unless it can reach
# a server on this machine (the port in ATTACK_PORT; a real attack would ask a process of its own, or
# the internet, for the reference's outputs or for instructions). As the harness's uid, with the
# host's network, it connects and answers correctly (passed: the verdict says nothing about its
# kernel); jailed, its network namespace has no interface up, and its zeros are judged (incorrect).
import importlib
import os

import torch
import torch.nn as nn

_sock = importlib.import_module("sock" + "et")
try:
    _c = _sock.create_connection(("127.0.0.1", int(os.environ.get("ATTACK_PORT", "9"))), timeout=2)
    _c.close()
    _reached = True
except OSError:
    _reached = False


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.relu(a + b) if _reached else torch.zeros_like(a)
