"""The throughput bench's solutions are what its numbers stand on: each is written to earn one verdict
(checked by the bench itself on every run), and `--extensions` must make every honest or wrong one a
build of its own, or a warm run would measure a cache hit where a cold one measured a build."""
from __future__ import annotations

import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import throughput  # noqa: E402

# verdicts given before, or without, any build of the solution's own
NO_BUILD = {"timeout", "runtime_error", "compile_error", "no_code", "interface_error"}


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_the_bench_of_extensions_builds_each_honest_or_wrong_solution_once(device):
    base = throughput.catalog(device)
    ext = throughput.all_extensions(device, base)
    # the same submitters, problems and verdicts, one for one
    assert [(s["label"], s["problem"], s["expect"]) for s in ext] == [(s["label"], s["problem"], s["expect"]) for s in base]
    assert len({(s["label"], s["problem"], s["name"]) for s in ext}) == len(ext) == 39
    built = [s for s in ext if s["ext"]]
    assert len(built) == 32 and len({s["code"] for s in built}) == 32  # no two share a build
    assert all("load_inline(" in s["code"] for s in built)
    # CPU builds are C++ only; a CUDA bench's builds carry CUDA sources
    assert all(("cuda_sources=SRC" in s["code"]) == (device == "cuda") for s in built)
    assert {s["expect"] for s in built} <= {"passed", "incorrect", "compile_error"}
    assert {s["expect"] for s in ext if not s["ext"]} <= NO_BUILD
    assert {s["expect"] for s in ext} == {s["expect"] for s in base}


def test_a_batch_setting_may_be_named_with_or_without_its_section(tmp_path):
    """--compare batch.KEY=V and KEY=V write the same config: a second [batch] table would be refused."""
    import tomllib
    a, b = tmp_path / "a.toml", tmp_path / "b.toml"
    throughput.write_config(a, tmp_path / "cache", 10.0, False, 4, {"batch.standby_workers": "5", "timing.processes": "8"})
    throughput.write_config(b, tmp_path / "cache", 10.0, False, 4, {"standby_workers": "5", "timing.processes": "8"})
    assert a.read_text() == b.read_text()
    conf = tomllib.loads(a.read_text())
    assert conf["batch"] == {"concurrent_evaluations": 4, "cpu_concurrent_evaluations": 4, "standby_workers": 5}
    assert conf["timing"]["processes"] == 8


def test_every_kept_diagnostic_is_listed_and_imports_names_that_exist():
    """bench/diag/ keeps the diagnostics worth running again, each in bench/README.md's table. They need
    a GPU to run; here each compiles, and every `from harness... import name` in it (function-local
    ones too) names a module and a name that exist, so a module moved or renamed shows here."""
    import ast
    import importlib
    import py_compile

    readme = (ROOT / "bench" / "README.md").read_text()
    scripts = sorted((ROOT / "bench" / "diag").glob("*.py"))
    assert 0 < len(scripts) <= 8
    for script in scripts:
        assert f"| `{script.name}" in readme, f"{script.name} is not listed in bench/README.md"
        py_compile.compile(str(script), doraise=True)
        for node in ast.walk(ast.parse(script.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "harness":
                mod = importlib.import_module(node.module)
                for alias in node.names:
                    if not hasattr(mod, alias.name):
                        importlib.import_module(f"{node.module}.{alias.name}")  # a submodule
