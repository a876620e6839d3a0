"""Code extraction from raw model responses."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from harness.solutions import extract_code, load_solution

SEEDS = sorted((Path(__file__).resolve().parent.parent.parent / "shared" / "seeds").glob("*.txt"))
FENCE = "`" * 3


def block(body: str, lang: str = "python") -> str:
    return f"{FENCE}{lang}\n{body}\n{FENCE}\n"


@pytest.mark.skipif(not SEEDS, reason="../shared/seeds not present")
@pytest.mark.parametrize("seed", SEEDS, ids=lambda p: p.name)
def test_seed_responses_are_no_code_quickly(seed):
    t0 = time.perf_counter()
    sol = load_solution(seed)
    assert time.perf_counter() - t0 < 0.5
    assert sol.code is None
    assert sol.reason.startswith("no fenced code block")


def test_seed_that_mentions_modelnew_in_prose_says_so():
    seed = [s for s in SEEDS if "002_" in s.name]
    if not seed:
        pytest.skip("seed 002 not present")
    assert "prose is never run" in load_solution(seed[0]).reason


def test_a_response_that_is_bare_code_says_to_name_it_py(tmp_path):
    """A .txt holding only Python (no fence) is no code, as KernelBench's extraction has it, and says
    how to have it run (a new user's trial: the prose hint was wrong for it)."""
    f = tmp_path / "answer.txt"
    f.write_text("import torch\n\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return x\n")
    sol = load_solution(f)
    assert sol.code is None and "name it .py" in sol.reason, sol.reason


def test_last_block_defining_modelnew_wins():
    text = ("draft:\n" + block("class ModelNew:\n    v = 1") + "final:\n" + block("class ModelNew:\n    v = 2")
            + "usage:\n" + block("m = ModelNew()"))
    code, reason = extract_code(text)
    assert reason is None and "v = 2" in code


@pytest.mark.parametrize("lang", ["python", "py", "", "Python3"])
def test_accepted_languages(lang):
    code, _ = extract_code(block("class ModelNew: pass", lang))
    assert code and "ModelNew" in code


def test_cpp_block_is_not_python():
    code, reason = extract_code(block("class ModelNew {};", "cpp"))
    assert code is None and "none defines class ModelNew" in reason


def test_unclosed_fence_is_reported():
    code, reason = extract_code("answer:\n" + f"{FENCE}python\nclass ModelNew:\n    pass\n")
    assert code is None and "never closed" in reason


def test_no_fence_at_all():
    code, reason = extract_code("I would write a kernel that fuses the ops.")
    assert code is None and reason == "no fenced code block in the response"


def test_longer_fence_holds_shorter_one():
    text = "````python\nclass ModelNew:\n    doc = '''\n```\n'''\n````\n"
    code, _ = extract_code(text)
    assert code and "doc" in code
