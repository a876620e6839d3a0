"""The import graph of `harness/`: no cycle (function-local imports counted), no module taking another
module's private name, and a child process that imports only what the child needs.

Read from the source with `ast`, so an import inside a function counts as much as one at the top: a
cycle hidden in a function still makes the modules one tangle to read and to change.
"""
from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
HARNESS = ROOT / "harness"

# the parent's orchestration: never imported by a child process
PARENT_ONLY = ("harness.evaluation", "harness.stages", "harness.batch", "harness.lint", "harness.reference",
               "harness.cli", "harness.leaderboard")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES: dict[str, Path] = {_module_name(p): p for p in sorted(HARNESS.rglob("*.py"))}


def _package_of(module: str) -> str:
    """The package a relative import in `module` starts from."""
    return module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]


def _resolve(module: str, node: ast.ImportFrom) -> str:
    base = _package_of(module)
    for _ in range(node.level - 1 if node.level else 0):
        base = base.rpartition(".")[0]
    if not node.level:
        return node.module or ""
    return f"{base}.{node.module}" if node.module else base


def _imports(module: str, source: str | None = None) -> list[tuple[str, str, int]]:
    """(imported module, name taken from it or "", line) for every import of a harness module in
    `module` (its file, or `source`), anywhere in it. `from pkg import name` imports the submodule
    pkg.name where there is one, else the module pkg itself."""
    tree = ast.parse(MODULES[module].read_text() if source is None else source, str(MODULES[module]))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in MODULES:
                    found.append((alias.name, "", node.lineno))
        elif isinstance(node, ast.ImportFrom):
            source = _resolve(module, node)
            if source not in MODULES:
                continue
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                if sub in MODULES:
                    found.append((sub, "", node.lineno))
                else:
                    found.append((source, alias.name, node.lineno))
    return found


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for m in MODULES:
        for target, _, _ in _imports(m):
            if target != m:
                graph[m].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (a path back to its start) through each strongly connected component of more than
    one module (Tarjan's algorithm); see _components for all the modules of each."""
    return [_path_back(graph, comp) for comp in _components(graph)]


def _components(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module: each module in one can reach each
    other one."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                components.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph) + 100))
    for v in sorted(graph):
        if v not in index:
            connect(v)
    return components


def _path_back(graph: dict[str, set[str]], comp: list[str]) -> list[str]:
    """The shortest path from the component's first module back to itself, inside the component."""
    start, members = comp[0], set(comp)
    prev: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(graph[v] & members):
                if w == start:
                    chain = [v]
                    while chain[-1] != start:
                        chain.append(prev[chain[-1]])
                    return [*reversed(chain), start]
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return comp


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = {start}, [start]
    while todo:
        for w in graph[todo.pop()]:
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return seen


def test_the_graph_reads_every_kind_of_import():
    """The reader itself: relative imports at each level, submodules taken by name, packages'
    __init__.py files as their package, imports inside functions."""
    assert "harness.process" in MODULES and "harness.records" in MODULES
    assert _package_of("harness.process") == "harness.process"
    assert _package_of("harness.process.child") == "harness.process"
    source = ("import os\n"
              "import harness.cpus\n"
              "from .runner import Runner\n"
              "from . import forkserver, pipes\n"
              "from .. import __version__\n"
              "from ..records import messages\n"
              "from ..records.result import Status\n"
              "def f():\n"
              "    from ..payload import encode\n"
              "    from harness.problems import meta\n")
    got = {(t, n) for t, n, _ in _imports("harness.process.child", source)}
    assert got == {("harness.cpus", ""), ("harness.process.runner", "Runner"), ("harness.process.forkserver", ""),
                   ("harness.process.pipes", ""), ("harness", "__version__"), ("harness.records.messages", ""),
                   ("harness.records.result", "Status"), ("harness.payload", "encode"),
                   ("harness.problems", "meta")}
    # in a package's __init__.py, "." is the package itself
    got = {(t, n) for t, n, _ in _imports("harness.process", "from .worker import Worker\nfrom . import child\n")}
    assert got == {("harness.process.worker", "Worker"), ("harness.process.child", "")}
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    assert _cycles(graph) == [["a", "b", "c", "a"]]


def test_no_import_cycle():
    graph = _graph()
    tangles = _components(graph)
    assert not tangles, "import cycles in harness/ (function-local imports count):\n" + "\n".join(
        f"  {' -> '.join(_path_back(graph, comp))}\n    (modules in this tangle: {', '.join(comp)})"
        for comp in tangles)


def test_no_module_takes_another_modules_private_name():
    taken = set()
    for m in MODULES:
        tree = ast.parse(MODULES[m].read_text())
        modules_bound: dict[str, str] = {}  # local name -> harness module it is bound to
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name in MODULES and alias.asname:
                        modules_bound[alias.asname] = alias.name
            elif isinstance(node, ast.ImportFrom) and _resolve(m, node) in MODULES:
                for alias in node.names:
                    if f"{_resolve(m, node)}.{alias.name}" in MODULES:
                        modules_bound[alias.asname or alias.name] = f"{_resolve(m, node)}.{alias.name}"
        for target, name, _ in _imports(m):
            if target != m and _private(name):
                taken.add((m, f"{target}.{name}"))
        for node in ast.walk(tree):  # module.private_name, the module imported by name
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in modules_bound and _private(node.attr)
                    and modules_bound[node.value.id] != m):
                taken.add((m, f"{modules_bound[node.value.id]}.{node.attr}"))
    assert not taken, "private names taken across modules (make them public where shared):\n" + "\n".join(
        f"  {m} takes {n}" for m, n in sorted(taken))


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def test_the_child_reaches_none_of_the_parents_orchestration_by_its_imports():
    """Every harness module the child imports, at start-up or in any function, and all they import:
    none of the parent's orchestration."""
    reach = _reachable(_graph(), "harness.process.child")
    bad = sorted(m for m in reach if any(m == p or m.startswith(p + ".") for p in PARENT_ONLY))
    assert not bad, f"the child process (harness.process.child) reaches {bad}"


def test_the_child_imports_none_of_the_parents_orchestration():
    """A fresh interpreter that starts as a child does (`python -m harness.process.child` imports the
    module, a standby then preloads what a candidate needs): none of the parent's orchestration in
    sys.modules."""
    code = ("import json, sys\n"
            "import harness.process.child as child\n"
            "child.preload_imports()\n"
            "import harness.lint_rules, harness.process.runner\n"
            "print(json.dumps(sorted(m for m in sys.modules if m == 'harness' or m.startswith('harness.'))))\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    assert "harness.process.child" in loaded
    bad = [m for m in loaded if any(m == p or m.startswith(p + ".") for p in PARENT_ONLY)]
    assert not bad, f"a child process imports {bad}"



def test_every_parse_of_python_source_goes_through_the_lock():
    """The parent parses solutions and problems in several threads at once (a batch's build and
    evaluation threads), which CPython 3.11's ast module cannot take: every parse goes through
    pyast.parse and its lock, none straight to ast.parse or compile(..., PyCF_ONLY_AST)."""
    direct = []
    for m, path in MODULES.items():
        if m == "harness.pyast":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "parse"
                    and isinstance(node.func.value, ast.Name) and node.func.value.id == "ast"):
                direct.append(f"{m}:{node.lineno}")
    assert not direct, f"ast.parse outside harness/pyast.py: {direct}"
