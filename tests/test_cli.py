"""The command line, as a user runs it."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import CACHE, ROOT

REQUIRED = {"problem", "solution", "status", "flags", "speedup", "runtime_ms", "ref_runtime_ms", "max_abs_diff",
            "max_rel_diff", "error", "env", "phases"}


def run_cli(*args, timeout=600):
    cfg = CACHE / "cli.toml"
    cfg.parent.mkdir(parents=True, exist_ok=True)
    cfg.write_text(f'cache_dir = "{CACHE}"\n[timing]\nbudget_s = 0.5\nmax_calls = 30\nround_calls = 5\n'
                   "[correctness]\ntrials = 2\n")
    return subprocess.run([sys.executable, "-m", "harness.cli", *args, "--config", str(cfg)], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)


def test_eval_json_is_one_object_on_stdout():
    p = run_cli("eval", "tests/fixtures/cpu/print_flood.py", "--problem", "tests/problems/relu_add.py",
                "--device", "cpu", "--json")
    assert p.returncode == 0, p.stderr[-2000:]
    lines = p.stdout.strip().splitlines()
    assert len(lines) == 1, "exactly one JSON object, nothing else, on stdout (the solution printed 100 MB)"
    rec = json.loads(lines[0])
    assert REQUIRED <= rec.keys()
    assert rec["status"] == "passed" and rec["env"]["torch"]
    assert rec["runtime_ms"] > 0 and rec["runtime_stats"]["count"] >= 5
    # the numerics the reference ran with, in every record (correctness.allow_tf32 = false)
    env = rec["env"]
    assert (env["cudnn_allow_tf32"], env["matmul_allow_tf32"], env["float32_matmul_precision"]) == (False, False, "highest")


def test_eval_problem_by_name_and_table_output():
    p = run_cli("eval", "tests/adversarial/cpu/nan_output.py",
                "--problem", "relu_add", "--problems", "tests/problems", "--device", "cpu")
    assert p.returncode == 0, p.stderr[-2000:]
    assert "incorrect" in p.stdout and "NaN" in p.stdout


def test_raw_seed_response_is_no_code():
    seed = next((ROOT.parent / "shared" / "seeds").glob("*.txt"), None)
    if seed is None:
        return
    p = run_cli("eval", str(seed), "--problem", "tests/problems/relu_add.py", "--json")
    rec = json.loads(p.stdout)
    assert rec["status"] == "no_code" and "no fenced code block" in rec["error"]


def test_unknown_problem_is_a_usage_error():
    p = run_cli("eval", "tests/adversarial/cpu/nan_output.py", "--problem", "no_such_problem")
    assert p.returncode != 0 and "no problem" in p.stderr


def test_a_misspelt_config_key_is_a_usage_error_naming_it(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[timing]\nproceses = 8\n")  # one s short: must not time with the default instead
    p = subprocess.run([sys.executable, "-m", "harness.cli", "eval", "tests/fixtures/cpu/honest_cpp.py",
                        "--problem", "tests/problems/relu_add.py", "--device", "cpu", "--config", str(bad)],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 2, p.stderr[-2000:]
    assert "timing.proceses" in p.stderr and "Traceback" not in p.stderr
    assert p.stdout == ""


def test_help_is_fast_and_imports_no_torch():
    p = subprocess.run([sys.executable, "-c", "import sys, harness.cli; print('torch' in sys.modules)"],
                       cwd=ROOT, capture_output=True, text=True)
    assert p.stdout.strip() == "False"


def test_kernelbench_numerics_leave_pytorchs_defaults_and_the_record_says_so(tmp_path):
    """configs/kernelbench.toml: the reference keeps PyTorch's TF32 defaults (cuDNN on, cuBLAS off)
    and fp32 outputs pass within 1e-2; the record's env shows the switches as the reference had them."""
    from harness.config import load_config
    kb = load_config(ROOT / "configs/kernelbench.toml")
    assert kb.correctness.allow_tf32 and kb.correctness.tol["fp32"].rel_l2 == 1e-2
    cfg = tmp_path / "kb.toml"
    cfg.write_text((ROOT / "configs/kernelbench.toml").read_text() + f'\n[timing]\nbudget_s = 0.5\n')
    p = subprocess.run([sys.executable, "-m", "harness.cli", "eval", "tests/fixtures/cpu/honest_linear_torch.py",
                        "--problem", "tests/problems/linear_relu.py", "--device", "cpu", "--json", "--config", str(cfg)],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    rec = json.loads(p.stdout.strip().splitlines()[-1])
    assert rec["status"] == "passed", (rec["error"], p.stderr[-2000:])
    assert (rec["env"]["cudnn_allow_tf32"], rec["env"]["matmul_allow_tf32"]) == (True, False)
