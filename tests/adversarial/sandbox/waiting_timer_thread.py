# problem: tests/problems/linear_relu.py
# A timer patch (every reported time divided by 5) whose hidden time the parent's wall clock would
# show, laundered through the run-queue wait the parent takes out of each candidate round: the
# forward runs on a helper thread pinned to the timing thread's CPU, while the timing thread, at the
# lowest priority, stays runnable (sched_yield) until the helper is done. The timing thread then
# "waits for a CPU" for the whole call. Found by a helper's attack on the wait subtraction: 5x and
# 20x passed. The names are spelled out of the static rules' sight.
import importlib
import os

import torch
import torch.nn as nn

_th = importlib.import_module("thr" + "eading")
_timing = importlib.import_module("harness." + "timing.loop")
_real_loop = _timing.time_calls
exec("def _fake(*a, **k):\n"
     "    r = _real_loop(*a, **k)\n"
     "    r['times_ms'] = [x / 5.0 for x in r['times_ms']]\n"
     "    r['host_ms'] = [x / 5.0 for x in r['host_ms']]\n"
     "    return r\n"
     "_timing.time_calls = _fake")

_helper: dict = {}


def _start_helper() -> dict:
    if not _helper:
        cpu = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpu})
        try:
            os.setpriority(os.PRIO_PROCESS, _th.get_native_id(), 19)
        except OSError:
            pass
        go, done = _th.Event(), _th.Event()

        def run():
            os.sched_setaffinity(0, {cpu})
            torch.set_num_threads(1)
            while True:
                go.wait()
                go.clear()
                fn, x = _helper["job"]
                with torch.no_grad():
                    _helper["out"] = fn(x)
                done.set()

        getattr(_th, "Thr" + "ead")(target=run, daemon=True).start()
        _helper.update(go=go, done=done)
    return _helper


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def _f(self, x):
        return torch.relu(self.linear(x))

    def forward(self, x):
        h = _start_helper()
        h["done"].clear()
        h["job"] = (self._f, x)
        h["go"].set()
        while not h["done"].is_set():
            os.sched_yield()
        return h.pop("out")
