"""The light <torch/extension.h> for nvcc (harness/light_header.py): which solutions try it, that nvcc
takes it in place of torch's, and that a build the compiler refuses with it is built again with
torch's own (build.build_child), never remembered as failed."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT

from harness import build, light_header
from harness.records.messages import CompileReply

TYPICAL = (ROOT / "solutions/relu_add/cuda_relu_add.py").read_text()


def test_a_solution_that_names_only_tensors_tries_the_light_header_and_one_that_names_more_does_not():
    assert light_header.fits(TYPICAL)
    for needs in ("py::object o;", "torch::nn::functional::relu(x)", "#include <torch/python.h>",
                  "PyObject* p;", "THPVariable_Wrap(x)", "PYBIND11_MODULE(m, x) {}"):
        assert not light_header.fits(f"{TYPICAL}\n# {needs}\n"), needs
    assert not light_header.fits((ROOT / "solutions/relu_add/cpp_relu_add.py").read_text())  # no nvcc


_CUDA_COMMAND = """
import json, tempfile
from pathlib import Path
from harness.pch import compile_commands
cu = '#include <torch/extension.h>\\ntorch::Tensor f(torch::Tensor x) { return x; }\\n'
cmds = compile_commands(Path(tempfile.mkdtemp()), name="light_probe", cpp_sources="torch::Tensor f(torch::Tensor x);",
                        cuda_sources=cu, functions=["f"], with_cuda=True)
print(json.dumps(cmds["cuda.cuda.o"]))
"""


@pytest.mark.skipif(shutil.which("nvcc") is None or shutil.which("ninja") is None, reason="needs nvcc and ninja")
def test_nvcc_takes_the_light_header_for_torch_extension_h_and_the_command_stays_the_same():
    """The command torch writes for the .cu, preprocessed with and without the light header's
    environment: the same command line, and torch's Python bindings only without it."""
    cmd = json.loads(subprocess.run([sys.executable, "-c", _CUDA_COMMAND], cwd=ROOT, capture_output=True, text=True,
                                    check=True, env={**os.environ, "TORCH_CUDA_ARCH_LIST": "9.0"}
                                    ).stdout.splitlines()[-1])
    pre = cmd[:cmd.index("-c")] + ["-E", cmd[cmd.index("-c") + 1]]
    full = subprocess.run(pre, capture_output=True, text=True, check=True).stdout
    light = subprocess.run(pre, capture_output=True, text=True, check=True,
                           env={**os.environ, **light_header.env()}).stdout
    assert str(light_header.FOLDER / "torch" / "extension.h") in light
    for header in ("pybind11/pybind11.h", "/Python.h", "torch/nn/module.h"):
        assert header in full and header not in light, header


def _fake_builds(monkeypatch, replies):
    calls = []

    def once(module_path, ext_dir, device, timeout, extra_env, **kw):
        calls.append(dict(extra_env or {}))
        return replies[len(calls) - 1]

    monkeypatch.setattr(build, "_build_once", once)
    return calls


def test_a_build_the_compiler_refuses_with_the_light_header_is_built_again_with_torchs_own(tmp_path, monkeypatch):
    refused = CompileReply(ok=False, category="compile_error", error="error: namespace \"torch\" has no member \"nn\"")
    built = CompileReply(ok=True, extensions=["x"])
    calls = _fake_builds(monkeypatch, [(refused, None, "light log", 20.0), (built, None, "full log", 50.0)])
    reply, failure, log, cpu = build.build_child(tmp_path / "m.py", tmp_path, "cuda", 60, {"A": "1"}, light=True)
    assert reply.ok and reply.light_header is False and log == "full log" and cpu == 70.0
    assert calls == [{"A": "1", **light_header.env()}, {"A": "1"}]
    assert build.remembered_failure(tmp_path) is None  # the light try's refusal is not the source's
    assert build.remembered_build(tmp_path)[0].light_header is False


def test_a_build_that_compiles_with_the_light_header_is_built_once_and_says_so(tmp_path, monkeypatch):
    calls = _fake_builds(monkeypatch, [(CompileReply(ok=True), None, "log", 20.0)])
    reply, *_ = build.build_child(tmp_path / "m.py", tmp_path, "cuda", 60, None, light=True)
    assert reply.light_header is True and len(calls) == 1
    assert build.remembered_build(tmp_path)[0].light_header is True


def test_a_light_try_that_times_out_or_fails_to_import_is_not_tried_again(tmp_path, monkeypatch):
    for result in [(None, "timeout", "log", None),
                   (CompileReply(ok=False, category="import_error", error="NameError"), None, "log", 1.0)]:
        calls = _fake_builds(monkeypatch, [result])
        assert build.build_child(tmp_path / "m.py", tmp_path, "cuda", 60, None, light=True) == result
        assert len(calls) == 1
    # and a source both headers refuse is remembered as failed, as without the light header
    bad = CompileReply(ok=False, category="compile_error", error="error: expected a \";\"")
    calls = _fake_builds(monkeypatch, [(bad, None, "l1", 1.0), (bad, None, "l2", 2.0)])
    reply, *_ = build.build_child(tmp_path / "m.py", tmp_path, "cuda", 60, None, light=True)
    assert len(calls) == 2 and reply.light_header is False and build.remembered_failure(tmp_path) is not None
