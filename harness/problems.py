"""Finding and loading problems (KernelBench-format files; see problems/FORMAT.md).

Discovery only reads paths and file text; modules are imported in worker processes, never by the CLI.
"""
from __future__ import annotations

import hashlib
import importlib.util
import re
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Optional

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_ROOTS = [REPO_ROOT / "problems"]
KB_NAME = re.compile(r"^(\d+)_(.+)$")  # KernelBench's "33_Gemm_Scale_BatchNorm.py"


@dataclass
class Problem:
    name: str
    path: Path
    root: Optional[Path] = None
    text: str = field(default="", repr=False)

    @property
    def source_hash(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()[:16]

    @property
    def kb_id(self) -> Optional[int]:
        m = KB_NAME.match(self.path.stem)
        return int(m.group(1)) if m else None

    @property
    def level(self) -> Optional[int]:
        for part in reversed(self.path.parts[:-1]):
            m = re.fullmatch(r"level_?(\d+)", part)
            if m:
                return int(m.group(1))
        return None


def _name_for(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).with_suffix("").as_posix()
    except ValueError:
        return path.stem


def discover(roots: Optional[Iterable[str | Path]] = None) -> list[Problem]:
    """Every problem file below the roots (any depth). A problem file defines `class Model` and
    `get_inputs`; helper modules and harness-only files are skipped."""
    out = []
    for root in [Path(r) for r in (roots or DEFAULT_ROOTS)]:
        if root.is_file():
            out.append(_make(root, root.parent))
            continue
        for p in sorted(root.rglob("*.py")):
            if p.name.startswith("_"):
                continue
            text = p.read_text(errors="replace")
            if re.search(r"^class\s+Model\b", text, re.M) and "def get_inputs" in text:
                out.append(Problem(name=_name_for(p, root), path=p, root=root, text=text))
    return out


def _make(path: Path, root: Optional[Path]) -> Problem:
    path = path.resolve()
    return Problem(name=_name_for(path, root) if root else path.stem, path=path, root=root,
                   text=path.read_text(errors="replace"))


def find_problem(ref: str | Path, roots: Optional[Iterable[str | Path]] = None) -> Problem:
    """Resolve a problem by path, by name (relative path without .py, or a unique file stem), or by
    KernelBench id ("level2/33", "33")."""
    p = Path(ref)
    if p.suffix == ".py" and p.exists():
        return _make(p, p.resolve().parent)
    problems = discover(roots)
    ref_s = str(ref).removesuffix(".py")
    exact = [q for q in problems if q.name == ref_s]
    if exact:
        return exact[0]
    by_stem = [q for q in problems if q.path.stem == ref_s or q.name.endswith("/" + ref_s)]
    if len(by_stem) == 1:
        return by_stem[0]
    m = re.fullmatch(r"(?:level_?(\d+)/)?(\d+)", ref_s)
    if m:
        level, pid = (int(m.group(1)) if m.group(1) else None), int(m.group(2))
        hits = [q for q in problems if q.kb_id == pid and (level is None or q.level == level)]
        if len(hits) == 1:
            return hits[0]
        by_stem = by_stem or hits
    if len(by_stem) > 1:
        names = ", ".join(q.name for q in by_stem[:8])
        raise LookupError(f"problem {ref!r} is ambiguous: {names}")
    import difflib
    names = [q.name for q in problems]
    near = difflib.get_close_matches(ref_s, names, n=3, cutoff=0.6) or difflib.get_close_matches(
        ref_s, [q.path.stem for q in problems], n=3, cutoff=0.6)
    elsewhere = [] if near else files_named(Path(ref_s).name + ".py")
    raise LookupError(f"no problem {ref!r} under {', '.join(str(r) for r in (roots or DEFAULT_ROOTS))}"
                      + (f"; did you mean {' or '.join(repr(n) for n in near)}?" if near else "")
                      + (f"; a file of that name is in {elsewhere[0].parent}: add --problems {elsewhere[0].parent}"
                         if elsewhere else ""))


def files_named(name: str, depth: int = 3) -> list[Path]:
    """Files called `name` under the current folder, a few levels down (hidden folders skipped): where
    a problem left out of --problems may be (tests/problems/relu_add.py)."""
    here, found = Path.cwd(), []
    for level in range(depth + 1):
        for f in here.glob("/".join(["*"] * level + [name])):
            if f.is_file() and not any(part.startswith(".") for part in f.relative_to(here).parts):
                found.append(f.relative_to(here))
        if found:
            break
    return found


# --------------------------------------------------------------------------------------------------
# Used inside worker processes.

def import_file(path: str | Path, module_name: str) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(module_name, str(path))
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = mod
    spec.loader.exec_module(mod)
    return mod


def import_source(text: str, path: str | Path, module_name: str) -> types.ModuleType:
    """A module run from `text` (what the parent read and hashed), named after `path` for tracebacks."""
    import linecache
    mod = types.ModuleType(module_name)
    mod.__file__ = str(path)
    sys.modules[module_name] = mod
    linecache.cache[str(path)] = (len(text), None, text.splitlines(True), str(path))  # tracebacks show what ran
    exec(compile(text, str(path), "exec"), mod.__dict__)
    return mod


def meta(mod: types.ModuleType) -> dict[str, Any]:
    m = getattr(mod, "HARNESS_META", None)
    return dict(m) if isinstance(m, dict) else {}


def apply_sizes(mod: types.ModuleType, overrides: dict[str, Any]) -> None:
    """Assign module constants that get_inputs / get_init_inputs read at call time."""
    for k, v in overrides.items():
        setattr(mod, k, v)
