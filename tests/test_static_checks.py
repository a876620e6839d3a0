"""harness/static_checks.py: the source rules (monkeypatching, introspection, processes, threads,
streams, try/except fallbacks) and the honest code they leave alone."""
from __future__ import annotations

import pytest

from harness.static_checks import check_source


@pytest.mark.parametrize("src,flag", [
    ("import torch\ntorch.allclose = lambda *a: True", "monkeypatch"),
    ("import time as t\nt.perf_counter = None", "monkeypatch"),
    ("import torch\ntorch.cuda.Event.elapsed_time = lambda s, e: 0.0", "monkeypatch"),
    ("import torch\nsetattr(torch, 'equal', None)", "monkeypatch"),
    ("import gc\nx = gc.get_objects()", "introspection"),
    ("import sys\nf = sys._getframe(1)", "introspection"),
    ("from harness import timing", "introspection"),
    ("import subprocess", "process_creation"),
    ("import os\nos.fork()", "process_creation"),
    ("import threading\nthreading.Thread(target=print).start()", "thread_creation"),
    ("import torch\ns = torch.cuda.Stream()", "stream_creation"),
    ("src = '#include <thread>\\nvoid f() { std::thread t([]{}); t.join(); }'", "thread_creation"),
    ("src = 'cudaStream_t s; cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);'", "stream_creation"),
    ("def f(x):\n    try:\n        return g(x)\n    except Exception:\n        return h(x)", "try_except_fallback"),
])
def test_static_rules(src, flag):
    assert flag in check_source(src).flags


@pytest.mark.parametrize("src", [
    "import torch\ntorch.backends.cudnn.benchmark = True",
    "import torch.nn as nn\nclass ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n        self.w = 1",
    "# torch.allclose = lambda: True  (a comment)\nx = 'torch.allclose = 1 in a string'",
])
def test_static_rules_leave_honest_code_alone(src):
    assert check_source(src).flags == []
