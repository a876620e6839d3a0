"""Static checks on a solution's source, before anything runs. Python is read through its AST (so
comments, strings and names in prose do not trigger rules); the C++/CUDA sources embedded as string
constants are scanned for a few calls.

Rules marked `reject` are definite cheats for a kernel solution (patching the library or harness,
walking the interpreter for other objects, spawning processes that escape the sandbox's process
group); the others are flags that describe the solution and cost it nothing by themselves.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field

from .pyast import parse

# modules a solution has no business rebinding attributes of
PROTECTED_ROOTS = {"torch", "time", "statistics", "numpy", "harness", "builtins", "math", "random",
                   "gc", "sys", "os", "triton"}
# settings, not patches: precision changes are judged by the tolerance instead
ALLOWED_PREFIXES = (("torch", "backends"),)
INTROSPECTION_CALLS = {("gc", "get_objects"), ("gc", "get_referrers"), ("gc", "get_referents"),
                       ("sys", "_getframe"), ("inspect", "stack"), ("inspect", "currentframe"),
                       ("inspect", "getouterframes"), ("sys", "settrace"), ("sys", "setprofile"),
                       ("threading", "settrace"), ("sys", "addaudithook")}
PROCESS_CALLS = {("os", "fork"), ("os", "forkpty"), ("os", "system"), ("os", "popen"), ("os", "setsid"),
                 ("os", "execv"), ("os", "execve"), ("os", "execvp"), ("os", "spawnv"), ("os", "posix_spawn"),
                 ("os", "kill"), ("os", "killpg")}
PROCESS_MODULES = {"subprocess", "multiprocessing", "pty", "signal"}
THREAD_MODULES = {"threading", "_thread", "concurrent"}
NATIVE_THREAD = re.compile(r"\bstd::thread\b|\bpthread_create\b|\bstd::async\b")
NATIVE_STREAM = re.compile(r"\bcudaStreamCreate\w*\b|\bgetStreamFromPool\b")
PROC_PEEK = re.compile(r"/proc/[^\s\"']*/(?:mem|maps|fd|environ|task)\b|/proc/\{|\bprocess_vm_readv\b|\bptrace\s*\(")
NATIVE_PROCESS = re.compile(r"\bfork\s*\(|\bsystem\s*\(|\bexecv\w*\s*\(|\bposix_spawn\b")

REJECT_RULES = {"monkeypatch", "introspection", "process_creation"}


@dataclass
class StaticReport:
    flags: list[str] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)

    def add(self, rule: str, why: str) -> None:
        if rule not in self.flags:
            self.flags.append(rule)
            self.reasons[rule] = why

    @property
    def rejected(self) -> list[str]:
        return [f for f in self.flags if f in REJECT_RULES]


def _dotted(node: ast.AST) -> list[str]:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return parts[::-1]
    return []


class _Visitor(ast.NodeVisitor):
    def __init__(self, report: StaticReport):
        self.r = report
        self.alias: dict[str, str] = {}  # local name -> module path

    def _root(self, name: str) -> str:
        return self.alias.get(name, name).split(".")[0]

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self.alias[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            self._module_used(a.name, node)
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        mod = node.module or ""
        for a in node.names:
            self.alias[a.asname or a.name] = f"{mod}.{a.name}"
        self._module_used(mod, node)
        self.generic_visit(node)

    def _module_used(self, mod: str, node: ast.AST) -> None:
        root = mod.split(".")[0]
        if root == "harness":
            self.r.add("introspection", f"line {node.lineno}: imports the harness")
        if root in PROCESS_MODULES:
            self.r.add("process_creation", f"line {node.lineno}: imports {mod}")
        if root in THREAD_MODULES:
            self.r.add("thread_creation", f"line {node.lineno}: imports {mod}")

    def _check_target(self, target: ast.AST, lineno: int) -> None:
        chain = _dotted(target)
        full = self.alias.get(chain[0], chain[0]).split(".") + chain[1:] if chain else []
        if any(tuple(full[:len(p)]) == p for p in ALLOWED_PREFIXES):
            return
        if len(chain) >= 2 and self._root(chain[0]) in PROTECTED_ROOTS:
            self.r.add("monkeypatch", f"line {lineno}: assigns {'.'.join(chain)}")
        if isinstance(target, ast.Subscript):
            base = _dotted(target.value)
            if base[-2:] == ["sys", "modules"] or base == ["sys", "modules"]:
                self.r.add("monkeypatch", f"line {lineno}: rebinds an entry of sys.modules")

    def visit_Assign(self, node: ast.Assign) -> None:
        for t in node.targets:
            for el in (t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t]):
                self._check_target(el, node.lineno)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._check_target(node.target, node.lineno)
        self.generic_visit(node)

    def visit_Delete(self, node: ast.Delete) -> None:
        for t in node.targets:
            self._check_target(t, node.lineno)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        chain = _dotted(node.func)
        if chain:
            resolved = self.alias.get(chain[0], chain[0]).split(".") + chain[1:]
            pair = tuple(resolved[-2:]) if len(resolved) >= 2 else None
            if chain[0] in ("setattr", "delattr") and node.args:
                obj = _dotted(node.args[0])
                if obj and self._root(obj[0]) in PROTECTED_ROOTS:
                    self.r.add("monkeypatch", f"line {node.lineno}: {chain[0]}() on {'.'.join(obj)}")
            if pair in INTROSPECTION_CALLS or resolved[:2] == ["sys", "_getframe"]:
                self.r.add("introspection", f"line {node.lineno}: calls {'.'.join(resolved)}")
            if pair in PROCESS_CALLS or resolved[0] in PROCESS_MODULES:
                self.r.add("process_creation", f"line {node.lineno}: calls {'.'.join(resolved)}")
            if resolved[0] in THREAD_MODULES:
                self.r.add("thread_creation", f"line {node.lineno}: calls {'.'.join(resolved)}")
            if resolved[:3] in (["torch", "cuda", "Stream"], ["torch", "cuda", "stream"]) or resolved[-1] == "ExternalStream":
                self.r.add("stream_creation", f"line {node.lineno}: creates a CUDA stream")
        self.generic_visit(node)

    def visit_Try(self, node: ast.Try) -> None:
        for h in node.handlers:
            if any(isinstance(n, (ast.Return, ast.Call)) for b in h.body for n in ast.walk(b)):
                self.r.add("try_except_fallback", f"line {node.lineno}: an except branch computes a result")
        self.generic_visit(node)

    visit_TryStar = visit_Try

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        text = "".join(v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else "{}" for v in node.values)
        self._proc(text, node.lineno)
        self.generic_visit(node)

    def _proc(self, text: str, lineno: int) -> None:
        if PROC_PEEK.search(text) or ("/proc/" in text and any(k in text for k in ("mem", "maps", "environ", "/fd"))):
            self.r.add("introspection", f"line {lineno}: reads another process's memory or descriptors")

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str):
            self._proc(node.value, node.lineno)
        if isinstance(node.value, str) and len(node.value) > 20:
            src = node.value
            if NATIVE_THREAD.search(src):
                self.r.add("thread_creation", f"line {node.lineno}: native thread in embedded source")
            if NATIVE_STREAM.search(src):
                self.r.add("stream_creation", f"line {node.lineno}: creates a CUDA stream in embedded source")
            if NATIVE_PROCESS.search(src) and "#include" in src:
                self.r.add("process_creation", f"line {node.lineno}: starts a process in embedded source")


def check_source(code: str) -> StaticReport:
    report = StaticReport()
    try:
        tree = parse(code)
    except SyntaxError:
        return report  # the build step reports it with its line
    _Visitor(report).visit(tree)
    return report
