"""Loading a solution: a `.py` file with `class ModelNew`, or a model's raw response (`.md`, `.txt`)
from which the code is extracted.

Drafts usually come first in a response and the final answer last, so the LAST fenced python block
that defines `ModelNew` wins (KernelBench takes the first). Prose is never run: a response without a
closed fenced block is `no_code`, with a reason that says which case it is.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

CODE_SUFFIXES = {".py"}
FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*([\w+-]*)\s*.*$")
PY_LANGS = {"", "python", "py", "python3", "py3"}
MODELNEW = re.compile(r"^\s*class\s+ModelNew\b", re.MULTILINE)


@dataclass
class Solution:
    path: Path
    code: Optional[str]
    reason: Optional[str] = None  # why there is no code
    extracted: bool = False

    @property
    def source_hash(self) -> str:
        return hashlib.sha256((self.code or "").encode()).hexdigest()[:16]


def extract_code(text: str) -> tuple[Optional[str], Optional[str]]:
    """Return (code, None) or (None, reason)."""
    blocks: list[tuple[str, str]] = []  # (lang, body)
    open_fence: Optional[tuple[str, str, int]] = None  # (marker, lang, start line)
    body: list[str] = []
    saw_fence = False
    for lineno, line in enumerate(text.splitlines()):
        m = FENCE.match(line)
        if open_fence is None:
            if m:
                saw_fence = True
                open_fence = (m.group(1), m.group(2).lower(), lineno)
                body = []
            continue
        marker = open_fence[0]
        # A closing fence is the same character, at least as long, and nothing after it.
        if line.strip().startswith(marker[0] * len(marker)) and line.strip().strip(marker[0]) == "":
            blocks.append((open_fence[1], "\n".join(body) + "\n"))
            open_fence = None
        else:
            body.append(line)
    candidates = [b for lang, b in blocks if lang in PY_LANGS and MODELNEW.search(b)]
    if candidates:
        return candidates[-1], None
    if not saw_fence:
        hint = ""
        if MODELNEW.search(text):
            hint = (" (the whole file is Python: name it .py to have it run as code)" if _parses(text)
                    else " (the prose mentions class ModelNew, but prose is never run)")
        return None, f"no fenced code block in the response{hint}"
    if open_fence is not None and MODELNEW.search("\n".join(body)):
        return None, f"the code fence opened on line {open_fence[2] + 1} is never closed (response cut off?)"
    if open_fence is not None and not blocks:
        return None, f"the only code fence (line {open_fence[2] + 1}) is never closed (response cut off?)"
    py_blocks = sum(1 for lang, _ in blocks if lang in PY_LANGS)
    return None, (f"{len(blocks)} fenced block(s) ({py_blocks} python), but none defines class ModelNew"
                  + ("; a later fence is never closed" if open_fence is not None else ""))


def _parses(text: str) -> bool:
    from .pyast import parse
    try:
        parse(text)
        return True
    except (SyntaxError, ValueError, RecursionError):
        return False


def load_solution(path: str | Path) -> Solution:
    path = Path(path)
    text = path.read_text(errors="replace")
    if path.suffix in CODE_SUFFIXES:
        return Solution(path=path, code=text)
    code, reason = extract_code(text)
    return Solution(path=path, code=code, reason=reason, extracted=code is not None)
