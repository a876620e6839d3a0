"""The arguments of a solution's `load_inline` calls, read from its source without running it (#41).

A build today imports the solution, so its artifacts are the product of a process that ran the
solution's Python, and they are trusted only for that solution (the build folder is keyed by its
whole code). An extension whose sources, functions and flags are written in the file as constants
can be built by the harness alone from those, and the build shared by every solution that asks for
the same thing: generations that differ only in their Python, or their prose, then pay one build.
This module is the first half: what each call asks for, exactly as torch would receive it, or
None where any part of it is not a constant the source states.

What counts as a constant: a string, number, boolean or None; an f-string that formats constants;
strings joined with `+`; a list or tuple of constants; a name bound once in the whole module, at
its top level, to a constant. Anything else (a name bound twice, or inside a function, a call, a
subscript, a `**kwargs`, a keyword torch's `load_inline` has that changes where or how it builds)
makes the whole file unknown: a build that ran the solution is the only faithful one then.

It is a prediction, not a proof: a solution can still rebind a name through `globals()` or `exec`
before it calls. Whatever uses a build made from it must match it against the arguments of the
actual call, and build as today where they differ.
"""
from __future__ import annotations

import ast
import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any, Optional

from .pyast import parse

# load_inline's parameters in order (torch 2.x), for positional arguments
POSITIONAL = ("name", "cpp_sources", "cuda_sources", "functions", "extra_cflags", "extra_cuda_cflags",
              "extra_ldflags", "extra_include_paths")
# what the build depends on, and what only changes what it prints
SHAPING = set(POSITIONAL) | {"with_cuda"}
HARMLESS = {"verbose"}


@dataclass(frozen=True)
class InlineBuild:
    """One `load_inline` call's build, normalised as torch normalises it (a source string is a list of one)."""

    name: str
    cpp_sources: tuple[str, ...]
    cuda_sources: tuple[str, ...] = ()
    functions: Optional[tuple[str, ...]] = None
    extra_cflags: tuple[str, ...] = ()
    extra_cuda_cflags: tuple[str, ...] = ()
    extra_ldflags: tuple[str, ...] = ()
    extra_include_paths: tuple[str, ...] = ()
    with_cuda: Optional[bool] = None

    def key(self, *environment: str) -> str:
        """A content key: these arguments and whatever else the build depends on (`environment`:
        torch's version, the device, the architectures, the Python installation)."""
        body = json.dumps([asdict(self), list(environment)], sort_keys=True)
        return hashlib.sha256(body.encode()).hexdigest()[:24]


class _Unknown(Exception):
    """Some part of a call is not a constant the source states."""


def extract(code: str) -> Optional[list[InlineBuild]]:
    """Every `load_inline` call's build, in source order; [] where there is none; None where the
    source does not parse or any call is not wholly constant."""
    return read(code)[0]


def read(code: str) -> tuple[Optional[list[InlineBuild]], Optional[str]]:
    """(extract's answer, and where it is None, why: the first part found not to be a constant)."""
    try:
        tree = parse(code)
    except (SyntaxError, ValueError) as e:
        return None, f"does not parse: {e}"
    consts = _module_constants(tree)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and _is_load_inline(n.func)]
    calls.sort(key=lambda n: (n.lineno, n.col_offset))
    try:
        return [_build(call, consts) for call in calls], None
    except _Unknown as e:
        return None, str(e)


def _is_load_inline(func: ast.expr) -> bool:
    return (isinstance(func, ast.Name) and func.id == "load_inline") or \
        (isinstance(func, ast.Attribute) and func.attr == "load_inline")


def _module_constants(tree: ast.Module) -> dict[str, ast.expr]:
    """Names bound exactly once in the whole module, at its top level, by a plain `name = value`."""
    bound: dict[str, int] = {}
    for node in ast.walk(tree):
        for name in _bindings(node):
            bound[name] = bound.get(name, 0) + 1
    out = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            name = stmt.targets[0].id
            if bound.get(name) == 1:
                out[name] = stmt.value
    return out


def _bindings(node: ast.AST) -> list[str]:
    """The names `node` binds, however it binds them (assignment targets of every kind, `global`,
    imports, definitions, loop and `with` targets, walrus, deletion)."""
    if isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
        return [node.id]
    if isinstance(node, (ast.Global, ast.Nonlocal)):
        return list(node.names) * 2  # rebound from elsewhere: never a constant
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [(a.asname or a.name).split(".")[0] for a in node.names]
    if isinstance(node, ast.arg):
        return [node.arg]
    if isinstance(node, ast.ExceptHandler) and node.name:
        return [node.name]
    if isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
        return [node.name]
    return []


def _build(call: ast.Call, consts: dict[str, ast.expr]) -> InlineBuild:
    args: dict[str, Any] = {}
    if len(call.args) > len(POSITIONAL):
        raise _Unknown("more positional arguments than load_inline names")
    for name, value in zip(POSITIONAL, call.args):
        if isinstance(value, ast.Starred):
            raise _Unknown("*args")
        args[name] = _value(value, consts, set())
    for kw in call.keywords:
        if kw.arg is None:
            raise _Unknown("**kwargs")
        if kw.arg in HARMLESS:
            continue
        if kw.arg not in SHAPING:
            raise _Unknown(f"load_inline's {kw.arg}")  # build_directory, is_python_module, ...
        args[kw.arg] = _value(kw.value, consts, set())
    if not isinstance(args.get("name"), str) or "cpp_sources" not in args:
        raise _Unknown("no name or no cpp_sources")
    lists = {k: _strings(args[k]) for k in POSITIONAL[1:] if k in args and args[k] is not None}
    with_cuda = args.get("with_cuda")
    if with_cuda is not None and not isinstance(with_cuda, bool):
        raise _Unknown("with_cuda")
    return InlineBuild(name=args["name"], with_cuda=with_cuda, **lists)


def _strings(v) -> tuple[str, ...]:
    """torch takes a string or a list of strings for each of these."""
    if isinstance(v, str):
        return (v,)
    if isinstance(v, (list, tuple)) and all(isinstance(s, str) for s in v):
        return tuple(v)
    raise _Unknown("not strings")


def _value(node: ast.expr, consts: dict[str, ast.expr], seen: set[str]):
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, int, float, bool, type(None))):
        return node.value
    if isinstance(node, ast.JoinedStr):  # an f-string of constants (a block size a name holds)
        return "".join(v.value if isinstance(v, ast.Constant) else _formatted(v, consts, seen) for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _value(node.left, consts, seen), _value(node.right, consts, seen)
        if isinstance(left, str) and isinstance(right, str):
            return left + right
        if isinstance(left, list) and isinstance(right, list):
            return left + right
        raise _Unknown("+ of other than strings or lists")
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_value(e, consts, seen) for e in node.elts]
    if isinstance(node, ast.Name) and node.id in consts and node.id not in seen:
        return _value(consts[node.id], consts, seen | {node.id})
    raise _Unknown(ast.dump(node)[:80])


def _formatted(node: ast.expr, consts: dict[str, ast.expr], seen: set[str]) -> str:
    if not isinstance(node, ast.FormattedValue):
        raise _Unknown("an f-string part")
    v = _value(node.value, consts, seen)
    if not isinstance(v, (str, int, float, bool)):
        raise _Unknown("an f-string formats other than a string or a number")
    v = {-1: v, ord("s"): str(v), ord("r"): repr(v), ord("a"): ascii(v)}[node.conversion]
    spec = _value(node.format_spec, consts, seen) if node.format_spec is not None else ""
    return format(v, spec)

