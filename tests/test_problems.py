"""The problem library and the linter: every shipped problem loads, its full-size shapes (computed on
the meta device, nothing allocated) agree with the table in problems/TABLE.md, and it passes the
linter at CPU size; the deliberately degenerate problems earn exactly their flags."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ROOT, make_config
from harness.problems import discover, find_problem

SHIPPED = discover([ROOT / "problems"])
LINT_FIXTURES = sorted((ROOT / "tests" / "lint_problems").glob("*.py"))


def test_library_size_and_levels():
    from harness.catalog import level_of
    levels = [level_of(p) for p in SHIPPED]
    assert len(SHIPPED) >= 40
    assert {1, 2, 3} <= set(levels)
    assert {"level2/gemm_scale_batchnorm", "level2/gemm_batchnorm_scale_softmax"} <= {p.name for p in SHIPPED}


def test_table_matches_problems():
    """TABLE.md (the README's table) is what bench/problem_table.py computes from the files now."""
    p = subprocess.run([sys.executable, "bench/problem_table.py", "--no-write"], cwd=ROOT, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout == (ROOT / "problems" / "TABLE.md").read_text(), "rerun bench/problem_table.py"
    rows = "\n".join(line for line in p.stdout.splitlines() if line.startswith("|"))
    assert rows in (ROOT / "README.md").read_text(), "README's problem table is stale: rerun bench/problem_table.py"


@pytest.mark.parametrize("problem", SHIPPED, ids=lambda p: p.name)
def test_problem_passes_linter_at_cpu_size(problem):
    from harness.lint import lint_problem
    meta_small = "small" in problem.text
    assert meta_small, "every shipped problem has a small preset for CPUs and CI"
    report = lint_problem(problem, make_config(device="cpu"), "cpu", "small")
    assert report["flags"] == [], report["notes"]


@pytest.mark.parametrize("path", LINT_FIXTURES, ids=lambda p: p.stem)
def test_linter_flags_degenerate_problems(path):
    from harness.lint import lint_problem
    from harness.reference import read_meta
    problem = find_problem(path)
    report = lint_problem(problem, make_config(device="cpu"), "cpu", "full")
    assert report["flags"] == sorted(read_meta(problem)["expect_flags"]), report["notes"]


def test_meta_that_would_be_read_in_part_or_not_at_all_is_named(tmp_path):
    from harness.reference import meta_issues, read_meta
    cases = {
        "HARNESS_META = {'small': {'N': 8}, 'atol': 1e-3 * 2}\n": "not a literal",
        "HARNESS_META = [('small', {'N': 8})]\n": "not a dict",
        "HARNESS_META = {'smal': {'N': 8}}\n": "did you mean 'small'",
        "HARNESS_META = {'level': 4}\n": "'level' = 4",
        "batch_size = 64\nHARNESS_META = {'small': {'batchsize': 8}}\n": "did you mean 'batch_size'",
        "N: int = 64\nHARNESS_META = {'extra_shapes': [{'N': 3}, {'M': 3}]}\n": "sets 'M'",
    }
    for i, (text, why) in enumerate(cases.items()):
        path = tmp_path / f"p{i}.py"
        path.write_text(text)
        issues = meta_issues(find_problem(path))
        assert len(issues) == 1 and why in issues[0], issues
    assert read_meta(find_problem(tmp_path / "p0.py")) == {}  # what evaluating it would have read
    assert all(meta_issues(p) == [] for p in SHIPPED)


def test_a_dtype_without_tolerances_fails_the_problem_not_the_harness():
    from harness.reference import tolerance_for
    from harness.reference import ReferenceError
    with pytest.raises(ReferenceError, match="'float32' is not one of fp32, fp16, bf16"):
        tolerance_for(make_config(device="cpu"), None, {"dtype": "float32"})
    assert tolerance_for(make_config(device="cpu"), None, {"dtype": "fp16", "atol": 0.5}).atol == 0.5


def test_problems_check_cli_exit_codes():
    ok = subprocess.run([sys.executable, "-m", "harness.cli", "problems", "check", "--problems", "tests/problems",
                         "--device", "cpu", "--json"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert ok.returncode == 0, ok.stderr[-2000:]
    bad = subprocess.run([sys.executable, "-m", "harness.cli", "problems", "check", "tests/lint_problems/near_zero.py",
                          "--device", "cpu", "--size", "full", "--json"], cwd=ROOT, capture_output=True, text=True,
                         timeout=600)
    assert bad.returncode == 1 and '"near_zero"' in bad.stdout


def test_problems_list_json():
    import json
    p = subprocess.run([sys.executable, "-m", "harness.cli", "problems", "list", "--level", "2", "--json"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    rows = json.loads(p.stdout)
    assert rows and all(r["level"] == 2 for r in rows)
    assert any(r["name"] == "level2/gemm_scale_batchnorm" and r["inputs"] == ["1024x8192"] for r in rows)


def test_kernelbench_ids_resolve(tmp_path):
    kb = tmp_path / "level2"
    kb.mkdir()
    src = (ROOT / "problems/level2/gemm_scale_batchnorm.py").read_text()
    (kb / "33_Gemm_Scale_BatchNorm.py").write_text(src)
    assert find_problem("33", [tmp_path]).path.name == "33_Gemm_Scale_BatchNorm.py"
    assert find_problem("level2/33", [tmp_path]).path.name == "33_Gemm_Scale_BatchNorm.py"
    assert find_problem("33_Gemm_Scale_BatchNorm", [tmp_path]).kb_id == 33


def test_counting_flops_is_bounded_and_a_problem_past_the_bound_says_so(tmp_path):
    """A forward that dispatches for a long time on meta tensors (KernelBench's recurrent models
    took minutes each) is described without its FLOPs and bytes, within the bound, and says why;
    a quick one is counted as before."""
    import time

    from harness.catalog import describe
    slow = tmp_path / "slow_loop.py"
    slow.write_text(
        "import torch\nimport torch.nn as nn\n\n"
        "class Model(nn.Module):\n"
        "    def forward(self, x):\n"
        "        for _ in range(10 ** 7):\n"
        "            x = x + 1\n"
        "        return x\n\n"
        "def get_inputs():\n    return [torch.randn(4, 4)]\n\n"
        "def get_init_inputs():\n    return []\n")
    t0 = time.perf_counter()
    d = describe(find_problem(slow), count_s=0.5)
    assert time.perf_counter() - t0 < 5
    assert d["flops"] is None and d["bytes"] is None and "over 0.5 s" in d["count_note"]
    assert d["input_shapes"] == [[4, 4]]
    quick = describe(find_problem(ROOT / "tests/problems/linear_relu.py"), count_s=0.5)
    assert quick["flops"] > 0 and quick["bytes"] > 0 and "count_note" not in quick
