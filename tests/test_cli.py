"""The command line, as a user runs it."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import CACHE, ROOT

REQUIRED = {"problem", "solution", "status", "flags", "speedup", "runtime_ms", "ref_runtime_ms", "max_abs_diff",
            "max_rel_diff", "error", "env", "phases", "size"}


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
    assert rec["status"] == "passed" and rec["env"]["torch"] and rec["size"] == "small"
    assert rec["runtime_ms"] > 0 and rec["runtime_stats"]["count"] >= 5
    # the numerics the reference ran with, in every record (correctness.allow_tf32 = false)
    env = rec["env"]
    assert (env["cudnn_allow_tf32"], env["matmul_allow_tf32"], env["float32_matmul_precision"]) == (False, False, "highest")


def test_eval_problem_by_name_and_table_output():
    p = run_cli("eval", "tests/adversarial/cpu/nan_output.py",
                "--problem", "relu_add", "--problems", "tests/problems", "--device", "cpu")
    assert p.returncode == 1, p.stderr[-2000:]  # a verdict other than passed
    assert "incorrect" in p.stdout and "NaN" in p.stdout
    assert "CPU preset" in p.stdout  # what was run: not the problem's own shapes


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


def test_exit_codes_tell_a_verdict_from_a_usage_error_from_the_harness_failing(tmp_path):
    """eval: 0 passed, 1 any other verdict, 2 a usage error, 3 no verdict through the harness's or
    the problem's fault; batch: 0 once every matched item has its record, whatever its verdict."""
    passed = run_cli("eval", "tests/fixtures/cpu/honest_cpp.py", "--problem", "tests/problems/relu_add.py",
                     "--device", "cpu", "--json")
    assert passed.returncode == 0 and json.loads(passed.stdout)["status"] == "passed", passed.stderr[-2000:]
    wrong = run_cli("eval", "tests/adversarial/cpu/nan_output.py", "--problem", "tests/problems/relu_add.py",
                    "--device", "cpu", "--json")
    assert wrong.returncode == 1 and json.loads(wrong.stdout)["status"] == "incorrect", wrong.stderr[-2000:]
    unsupported = run_cli("eval", "tests/fixtures/cpu/needs_cuda.py", "--problem", "tests/problems/relu_add.py",
                          "--device", "cpu", "--json")
    assert unsupported.returncode == 1 and json.loads(unsupported.stdout)["status"] == "unsupported"
    assert run_cli("eval", "tests/fixtures/cpu/honest_cpp.py", "--problem", "no_such_problem").returncode == 2
    broken = tmp_path / "broken_problem.py"
    broken.write_text("import torch.nn as nn\n\n\nclass Model(nn.Module):\n    def __init__(self):\n"
                      "        super().__init__()\n        raise RuntimeError('this problem is broken')\n\n\n"
                      "def get_inputs():\n    return []\n\n\ndef get_init_inputs():\n    return []\n")
    p = run_cli("eval", "tests/fixtures/cpu/honest_cpp.py", "--problem", str(broken), "--device", "cpu")
    assert p.returncode == 3 and "this problem is broken" in p.stderr, (p.returncode, p.stderr[-2000:])
    subs = tmp_path / "subs"
    subs.mkdir()
    for f in ("honest_cpp.py", "needs_cuda.py"):
        (subs / f).write_text((ROOT / "tests/fixtures/cpu" / f).read_text())
    (subs / "wrong.py").write_text((ROOT / "tests/adversarial/cpu/nan_output.py").read_text())
    b = run_cli("batch", str(subs), "--problem", "tests/problems/relu_add.py", "--device", "cpu",
                "--out", str(tmp_path / "run"), timeout=300)
    assert b.returncode == 0, b.stderr[-2000:]
    assert "1 solution(s) need hardware this machine lacks" in b.stderr and "unsupported 1" in b.stderr


def test_user_errors_are_one_line_with_the_fix(tmp_path, monkeypatch):
    """A config file that is not TOML, a key one letter off, an option out of range and a problem name
    one letter off: each a usage error (2) in one line naming the fix, never a traceback."""
    from click.testing import CliRunner

    from harness.cli import main
    bad_toml, typo = tmp_path / "bad.toml", tmp_path / "typo.toml"
    table, loose = tmp_path / "table.toml", tmp_path / "loose.toml"
    bad_toml.write_text("[timing\nbudget_s = 1\n")
    typo.write_text("[timing]\nbuget_s = 1\n")
    table.write_text("[correctnes]\ntrials = 2\n")  # a table one letter off
    loose.write_text("trials = 2\n")  # a key outside its table
    sol = "tests/fixtures/cpu/honest_cpp.py"
    cases = [(["--problem", "relu_add", "--config", str(bad_toml)], "not valid TOML"),
             (["--problem", "relu_add", "--config", str(typo)], "did you mean timing.budget_s?"),
             (["--problem", "relu_add", "--config", str(table)], "did you mean [correctness]?"),
             (["--problem", "relu_add", "--config", str(loose)], "did you mean correctness.trials (under [correctness])?"),
             (["--problem", "relu_add", "--trials", "0"], "--trials (correctness.trials)"),
             (["--problem", "relu_ad"], "did you mean 'relu_add'?")]
    for args, says in cases:
        r = CliRunner().invoke(main, ["eval", sol, "--problems", "tests/problems", "--device", "cpu", *args])
        assert r.exit_code == 2, (args, r.exit_code, r.output)
        assert says in r.output and "Traceback" not in r.output, (args, r.output)
    # a problem left out of --problems (the README's relu_add lives in tests/problems): where it is
    monkeypatch.chdir(ROOT)
    r = CliRunner().invoke(main, ["eval", sol, "--problem", "relu_add", "--device", "cpu"])
    assert r.exit_code == 2 and "add --problems tests/problems" in r.output, r.output
    import torch
    if not torch.cuda.is_available():  # a GPU asked of a machine without one (a new user's trial)
        r = CliRunner().invoke(main, ["eval", sol, "--problem", "relu_add", "--problems", "tests/problems",
                                      "--device", "cuda"])
        assert r.exit_code == 2 and "no CUDA device" in r.output and "Traceback" not in r.output, r.output


def test_the_readmes_python_example_runs_as_written():
    """The README's `from harness import ...` block, exactly as a user would paste it (on CPU here)."""
    import re
    block = re.search(r"From Python.*?```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S).group(1)
    p = subprocess.run([sys.executable, "-c", block], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.split()[0] == "passed", p.stdout


def test_problem_names_are_listed_whole_when_piped():
    """`harness problems list` piped, or in a narrow terminal: names are what --problem takes, never cut."""
    from click.testing import CliRunner

    from harness.cli import main
    r = CliRunner().invoke(main, ["problems", "list", "--problems", "problems", "--filter", "conv2d_relu_bias"],
                           terminal_width=60)
    assert r.exit_code == 0, r.output
    assert "level2/01_conv2d_relu_bias_add" in r.output, r.output


def test_problems_list_shows_the_cpu_preset_when_asked():
    """A new user saw only full sizes (relu_add's 16M floats) where a CPU evaluation runs the small
    preset (4096): `--size small` lists those shapes, FLOPs and bytes counted at that size."""
    import json

    from click.testing import CliRunner

    from harness.cli import main
    rows = {}
    for size in ("full", "small"):
        r = CliRunner().invoke(main, ["problems", "list", "--problems", "tests/problems", "--filter", "relu_add",
                                      "--size", size, "--json"])
        assert r.exit_code == 0, r.output
        rows[size], = json.loads(r.output)
    assert rows["full"]["inputs"] != rows["small"]["inputs"] and "4096" in json.dumps(rows["small"]["inputs"])
    assert rows["small"]["bytes"] < rows["full"]["bytes"] / 1000


def test_help_names_a_commands_help():
    """`harness help batch` as `harness batch --help` (a new user's first try); an unknown one is a usage error."""
    from click.testing import CliRunner

    from harness.cli import main
    r = CliRunner().invoke(main, ["help", "batch"], prog_name="harness")
    assert r.exit_code == 0 and "Usage: harness batch" in r.output, r.output
    r = CliRunner().invoke(main, ["help", "problems", "check"], prog_name="harness")
    assert r.exit_code == 0 and "Usage: harness problems check" in r.output, r.output
    r = CliRunner().invoke(main, ["help", "nope"])
    assert r.exit_code == 2 and "harness help" in r.output, r.output
