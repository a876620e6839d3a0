"""Which problem each solution file is for: find the files under the paths given, match each to a
problem (--problem, a folder named after a problem, or KernelBench's file names), and its label (the
submitter: the top folder under the path)."""
from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

from ..problems import Problem
from .executor import problem_key

SOLUTION_SUFFIXES = {".py", ".md", ".txt"}
KB_SOLUTION = re.compile(r"^level_(\d+)_problem_(\d+)_sample_(\d+)_kernel$")
RULES = ("solutions are matched to problems by, in order: --problem for all; a folder named after a "
         "problem (solutions/<problem>/...); KernelBench's file name level_L_problem_P_sample_S_kernel.py "
         "against a problem file named P_<Name>.py in folder levelL under --problems")


class BatchError(RuntimeError):  # here, not in run.py: plan and devices raise it too, and run imports them
    """A usage error: nothing was run."""


@dataclass
class Item:
    index: int
    path: Path
    problem: Problem
    label: Optional[str]
    solution_hash: str = ""
    builds: bool = True  # defines extensions (load_inline / cpp_extension): goes through a build child

    @property
    def pkey(self) -> str:
        return problem_key(self.problem)

    def short(self) -> str:
        return "/".join(self.path.parts[-2:])


@dataclass
class Skipped:
    solution: str
    reason: str
    label: Optional[str] = None
    problem: Optional[str] = None


def collect_files(paths: Iterable[str | Path], ignored: Optional[list[Path]] = None) -> list[tuple[Path, Optional[Path]]]:
    """(file, the folder given on the command line or None for a file given directly). `ignored`
    gets the files of those folders not read as solutions (other suffixes, a README, notes), hidden
    and `_` paths aside, so that the user is told of them."""
    seen, out = set(), []
    for arg in paths:
        p = Path(arg)
        if not p.exists():
            raise BatchError(f"no such file or folder: {arg}")
        if p.is_file():
            cands = [(p, None)]
        else:
            # hidden, __pycache__, _helpers.py: never looked at
            files = [f for f in sorted(p.rglob("*")) if f.is_file()
                     and not any(part.startswith((".", "_")) for part in f.relative_to(p).parts)]
            cands = [(f, p) for f in files if _is_solution_file(f)]
            if ignored is not None:
                ignored += [f for f in files if not _is_solution_file(f)]
        for f, root in cands:
            key = f.resolve()
            if key not in seen:
                seen.add(key)
                out.append((f, root))
    return out


def _is_solution_file(f: Path) -> bool:
    return f.suffix in SOLUTION_SUFFIXES and f.stem.lower() not in ("readme", "license", "notes")


class Matcher:
    def __init__(self, problems: list[Problem], fixed: Optional[Problem] = None):
        self.problems, self.fixed = problems, fixed
        self._seen: dict[str, Optional[Path]] = {}  # folder name -> a problem file of that name elsewhere
        self.by_name: dict[str, list[Problem]] = defaultdict(list)
        self.by_stem: dict[str, list[Problem]] = defaultdict(list)
        for p in problems:
            self.by_name[p.name].append(p)
            self.by_stem[p.path.stem].append(p)

    def match(self, f: Path, root: Optional[Path]) -> tuple[Optional[Problem], Optional[int], str]:
        """(problem, index in the folder parts of the problem folder or None, reason if unmatched)."""
        parts = self._parts(f, root)
        if self.fixed is not None:
            return self.fixed, None, ""
        why = []
        # a folder named after a problem: the deepest one wins; a longer name ("level1/19_relu") is
        # more specific than a stem
        for i in range(len(parts) - 1, -1, -1):
            for j in range(0, i + 1):
                hits = self.by_name.get("/".join(parts[j:i + 1]), [])
                if len(hits) == 1:
                    return hits[0], j, ""
            hits = self.by_stem.get(parts[i], [])
            if len(hits) == 1:
                return hits[0], i, ""
            if len(hits) > 1:
                why.append(f"folder {parts[i]!r} names {len(hits)} problems: "
                           + ", ".join(h.name for h in hits[:4]))
        m = KB_SOLUTION.match(f.stem)
        if m:
            level, pid = int(m.group(1)), int(m.group(2))
            hits = [p for p in self.problems if p.kb_id == pid and p.level == level]
            if not hits:
                hits = [p for p in self.problems if p.kb_id == pid and p.level is None]
            if len(hits) == 1:
                return hits[0], None, ""
            why.append(f"KernelBench name: level {level} problem {pid} is "
                       + ("ambiguous: " + ", ".join(h.name for h in hits[:4]) if hits
                          else f"not among the problem files (no {pid}_<Name>.py in a level{level} folder)"))
        if not why:  # as `harness eval` says: a folder named after a problem left out of --problems
            for part in reversed(parts):
                found = self._elsewhere(part)
                if found:
                    why.append(f"a problem file {found.name} is in {found.parent}: add --problems {found.parent}")
                    break
        return None, None, "; ".join(why)

    def _elsewhere(self, part: str) -> Optional[Path]:
        if part not in self._seen:
            from ..problems import files_named
            hits = files_named(part + ".py") if part.isidentifier() else []
            self._seen[part] = hits[0] if hits else None
        return self._seen[part]

    @staticmethod
    def _parts(f: Path, root: Optional[Path]) -> list[str]:
        if root is None:  # a file given directly: its parent folders may name the problem
            return list(f.resolve().parent.parts[-3:])
        return [root.resolve().name] + list(f.relative_to(root).parent.parts)


def plan_items(paths, problems: list[Problem], fixed: Optional[Problem], label: Optional[str],
               roots_text: str, ignored: Optional[list[Path]] = None) -> tuple[list[Item], list[Skipped]]:
    from ..build import builds_extensions
    from ..solutions import load_solution
    matcher = Matcher(problems, fixed)
    items, skipped = [], []
    for f, root in collect_files(paths, ignored):
        prob, at, why = matcher.match(f, root)
        lab = label or _label_for(f, root, at)
        if prob is None:
            skipped.append(Skipped(str(f), f"matches no problem ({why or 'no rule applies'})", lab))
            continue
        sol = load_solution(f)
        items.append(Item(index=0, path=f.resolve(), problem=prob, label=lab, solution_hash=sol.source_hash,
                          builds=sol.code is not None and builds_extensions(sol.code)))
    items.sort(key=lambda it: (it.problem.name, it.pkey, it.label or "", str(it.path)))
    for i, it in enumerate(items):
        it.index = i
    return items, skipped


def _label_for(f: Path, root: Optional[Path], problem_at: Optional[int]) -> Optional[str]:
    """The submitter: the top folder under PATH (subs/modelA/<problem>/x.py -> modelA), else PATH's
    own name (solutions/<problem>/x.py -> solutions). None for a file given directly, and where PATH
    is the problem's own folder."""
    if root is None:
        return None
    rel = f.relative_to(root).parent.parts
    # problem_at indexes [PATH's name] + rel: rel[0] is at 1
    if rel and (problem_at is None or problem_at > 1):
        return rel[0]
    return root.resolve().name if problem_at != 0 else None
