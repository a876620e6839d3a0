"""`ast.parse` behind one lock. CPython 3.11 keeps the AST builder's recursion depth in state that
threads share, and parses running in several threads at once can fail with "AST constructor
recursion depth mismatch" (python/cpython#106905): a batch's build threads check solutions while its
evaluation threads read problems' HARNESS_META."""
from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    with _LOCK:
        return ast.parse(source, filename)
