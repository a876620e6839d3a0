# expect: status=rejected flags=timer_mismatch,no_custom_kernel
# problem: tests/problems/relu_add.py
# device: cuda
# A report scaled by 1.35 on a 20 ms forward, past the static rules: time_calls is rebound in the
# process's own copy of the timing loop, and every call's event and host times are divided, so the
# per-call host-vs-device gap agrees. Only the parent's wall clock sees the 5 ms a call hidden. Under
# a floor of half the candidate's median call (7.4 ms here) it passed as a 1.35x faster solution;
# the floor is now a fifth of the median call plus a fifth of the harness's own per-call overhead.
import importlib

import torch
import torch.nn as nn

FACTOR = 1.35
_loop = importlib.import_module("harness." + "timing.loop")
_honest = _loop.time_calls


def _scaled(*args, **kwargs):
    reply = _honest(*args, **kwargs)
    for key in ("times_ms", "host_ms", "span_ms"):
        if isinstance(reply.get(key), list):
            reply[key] = [ms / FACTOR if isinstance(ms, float) else ms for ms in reply[key]]
    return reply


setattr(_loop, "time_" + "calls", _scaled)


class ModelNew(nn.Module):
    def forward(self, a, b):
        torch.cuda._sleep(40_000_000)  # about 20 ms of one spinning thread at 2 GHz
        return (a + b).clamp_min(0)
