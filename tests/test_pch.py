"""harness/pch.py and harness/pch_cxx.py: a precompiled <torch/extension.h> offered to a build's
main.cpp compile only for exactly the flags it was built with, and used by a real (jailed where the
sandbox is available) build of a C++ extension."""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest
from conftest import ROOT, make_config

MAIN = ["-MMD", "-MF", "main.o.d", "-DTORCH_EXTENSION_NAME=one", "-DTORCH_API_INCLUDE_EXTENSION_H",
        "-isystem", "/t/include", "-fPIC", "-std=c++17", "-c", "/b/one/main.cpp", "-o", "main.o"]


def test_a_header_is_offered_only_for_the_flags_it_was_built_with(tmp_path):
    """Another extension's name, dependency file and paths do not change the key; another -O level
    does (gcc would take an -O3 header for -O2 and the code would differ); only a main.cpp compile
    gets one, and only where it was built."""
    from harness.pch_cxx import flags, flags_key, header_dir
    other = [a.replace("one", "two") for a in MAIN]
    assert flags_key(MAIN) == flags_key(other)
    assert flags(MAIN) == ["-DTORCH_API_INCLUDE_EXTENSION_H", "-isystem", "/t/include", "-fPIC", "-std=c++17"]
    o2, o3 = MAIN[:-4] + ["-O2"] + MAIN[-4:], MAIN[:-4] + ["-O3"] + MAIN[-4:]
    assert len({flags_key(MAIN), flags_key(o2), flags_key(o3)}) == 3
    assert header_dir(str(tmp_path), MAIN) is None  # none built
    gch = tmp_path / flags_key(MAIN) / "torch" / "extension.h.gch"
    gch.mkdir(parents=True)
    (gch / "v.gch").write_bytes(b"")
    assert header_dir(str(tmp_path), MAIN) == str(tmp_path / flags_key(MAIN))
    assert header_dir(str(tmp_path), o2) is None
    assert header_dir(str(tmp_path), [a.replace("main.cpp", "cuda.cu") for a in MAIN]) is None


@pytest.fixture
def compiler_env(monkeypatch):
    """pch.enable sets the compiler for this process's later builds: put back after the test."""
    for k in ("CXX", "HARNESS_REAL_CXX", "HARNESS_PCH_ROOT", "HARNESS_PYTHON"):
        if k in os.environ:
            monkeypatch.setenv(k, os.environ[k])
        else:
            monkeypatch.delenv(k, raising=False)


@pytest.mark.skipif(shutil.which("ninja") is None, reason="needs ninja")
def test_a_build_uses_the_header_and_its_verdict_is_unchanged(compiler_env):
    """The header built as torch would compile main.cpp (no extra flags, no CUDA), then a C++
    extension's build with `[batch] precompiled_header` on: its main.o compile found the header
    (pch_cxx writes main.o.pch beside the object), and the solution passes as it does without."""
    from harness import pch
    from harness.evaluation import evaluate
    from harness.sandbox import available
    if pch.enable(Path(tempfile.gettempdir())) is None:
        pytest.skip("the compiler is not gcc")
    cache = Path(tempfile.mkdtemp(prefix="pch-test-"))
    os.chmod(cache, 0o755)  # a jailed build reaches it
    try:
        assert pch.build(cache, "cpu", variants=([],)) == ["default: built"]
        assert pch.build(cache, "cpu", variants=([],)) == ["default: ready"]
        cfg = make_config(device="cpu", cache_dir=str(cache), **{"batch.precompiled_header": True})
        r = evaluate(ROOT / "tests/fixtures/cpu/honest_cpp.py", ROOT / "tests/problems/relu_add.py", cfg)
        assert r.status.value == "passed", (r.error, r.log_tail)
        assert ("own_uid" in r.protections) == (available((str(cache),)) is None)
        used = list((cache / "ext").glob("*/fx_relu_add/main.o.pch"))
        assert len(used) == 1 and used[0].read_text().startswith(str(cache / "pch")), used
    finally:
        shutil.rmtree(cache, ignore_errors=True)
