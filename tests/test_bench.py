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


@pytest.mark.slow
def test_the_kernelbench_bench_scores_identities_and_summarizes_them(tmp_path):
    """bench/kernelbench.py on a corpus laid out as KernelBench's (levelN/ID_Name.py, baselines/):
    an identity solution per problem (the model renamed, `super(Model, self)` included), one batch,
    and a summary with every record, the identity speedups and the published time beside ours."""
    import json
    import subprocess

    corpus = tmp_path / "kb"
    (corpus / "level1").mkdir(parents=True)
    body = ("import torch\nimport torch.nn as nn\n\n"
            "class Model(nn.Module):\n"
            "    def __init__(self):\n"
            "        super(Model, self).__init__()\n\n"
            "    def forward(self, x):\n"
            "        return {op}\n\n"
            "def get_inputs():\n    return [torch.randn(64, 256)]\n\n"
            "def get_init_inputs():\n    return []\n")
    (corpus / "level1" / "1_TinyRelu.py").write_text(body.format(op="torch.relu(x)"))
    (corpus / "level1" / "2_TinyTanh.py").write_text(body.format(op="torch.tanh(x)"))
    base = corpus / "baselines" / "H100_Modal"
    base.mkdir(parents=True)
    (base / "baseline_time_torch.json").write_text(json.dumps({"level1": {"1_TinyRelu.py": {"mean": 0.5}}}))
    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "bench/kernelbench.py", "--corpus", str(corpus), "--levels", "1",
                        "--device", "cpu", "--out", str(out)], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, (p.stdout[-2000:], p.stderr[-2000:], (out / "batch.log").read_text()[-3000:])
    assert "class ModelNew" in (out / "subs/identity/level_1_problem_1_sample_0_kernel.py").read_text()
    s = json.loads((out / "summary.json").read_text())
    assert s["records"] == 2 and s["statuses"] == {"passed": 2}
    assert s["identity"]["passed"] == 2 and s["identity"]["median"] > 0
    assert s["peak_host_pss_gb"] > 0 and s["records_per_min"] > 0
    rows = {r["problem"]: r for r in s["problems"]}
    assert rows["level1/1_TinyRelu"]["kb_eager_ms"] == 0.5 and rows["level1/1_TinyRelu"]["ref_over_kb"] > 0
    assert rows["level1/2_TinyTanh"]["kb_eager_ms"] is None
    assert "| level1/1_TinyRelu | passed |" in (out / "summary.md").read_text()


def test_the_steady_rate_leaves_out_the_start_and_the_tail_of_the_last_call(tmp_path):
    """bench/kernelbench.py's steady rate: records a minute between the 10th and 90th percentile
    record of the last call (a resumed run's events hold every call's, each with its own clock)."""
    import json
    import kernelbench
    ev = [{"event": "start"}, *({"event": "evaluated", "t": 500.0 + i} for i in range(5)),
          {"event": "start"}, *({"event": "evaluated", "t": t} for t in [30.0] + [40.0 + 2 * i for i in range(18)] + [200.0])]
    f = tmp_path / "events.jsonl"
    f.write_text("".join(json.dumps(e) + "\n" for e in ev))
    # 20 records: the 3rd (t=42) to the 18th (t=72), 15 intervals in 30 s
    assert kernelbench.steady_rate(f) == 30.0
    # the start and the tail, of the last call too: its first record at 30 s, its last 126 s after the one before (74)
    assert kernelbench.start_and_tail(f) == (30.0, 126.0)
    f.write_text("".join(json.dumps(e) + "\n" for e in ev[:5]))  # too few records for a rate
    assert kernelbench.steady_rate(f) is None
