# expect: status=rejected flags=timer_mismatch,no_custom_kernel
# problem: tests/problems/relu_add.py
# config: timing.processes_when=always timing.processes=2 timing.processes_max=2 timing.processes_budget_s=0 hardening.sandbox=off
# Honest in the first process it is loaded in, which runs the trials and the first timing; in every
# later process (a side timed in several, timing.processes_for) it hides its 3 ms a call from the
# timing loop. Checked as one pool, the first process's honest rounds would vouch for the host
# clocks of all, and half the pooled calls would read 1000x faster: each process pair is checked on
# its own. The marker is a file named for the evaluating process, which all candidate processes share
# (the path is spelled out of the static checks' sight). Without the sandbox: its private homes end
# this coordination by themselves, and what is tested here is the clock check.
import os
import tempfile
import time as _t

import torch
import torch.nn as nn


def _parent_key() -> str:
    with open(os.path.join("/", "pr" + "oc", str(os.getppid()), "stat")) as f:
        start = f.read().rsplit(")", 1)[1].split()[19]  # the parent's start time: pids are reused
    return f"{os.getppid()}-{start}"


try:
    os.close(os.open(os.path.join(tempfile.gettempdir(), f"harness-fixture-second-{_parent_key()}"),
                     os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    _later = False
except FileExistsError:
    _later = True

if _later:  # the loop's report scaled down, its own code untouched (hidden from the AST rules)
    exec(compile("import importlib\n"
                 "_mod = importlib.import_module('harness.' + 'timing.loop')\n"
                 "_orig = _mod.time_calls\n"
                 "def _quieter(*args, **kwargs):\n"
                 "    report = _orig(*args, **kwargs)\n"
                 "    for key in ('times_ms', 'host_ms'):\n"
                 "        report[key] = [t * 1e-3 for t in report[key]]\n"
                 "    return report\n"
                 "_mod.time_calls = _quieter\n", "<later>", "exec"), {})


class ModelNew(nn.Module):
    """3 ms a call, in every process: only what the later ones report differs."""

    def forward(self, a, b):
        _t.sleep(0.003)
        return torch.clamp_min(a + b, 0.0)
