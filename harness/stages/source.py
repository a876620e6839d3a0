"""Stage 1: the solution's code, extracted from a raw response and statically checked."""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from ..records.result import Status
from ..solutions import Solution, load_solution
from ..static_checks import check_source
from .context import Context, Failure


@dataclass
class Source:
    solution: Solution

    @property
    def code(self) -> str:
        return self.solution.code


def read_source(ctx: Context, path: str | Path) -> Source:
    t0 = time.perf_counter()
    sol = load_solution(path)
    ctx.res.solution_hash = sol.source_hash
    ctx.phases.extract_s = time.perf_counter() - t0
    if sol.code is None:
        raise Failure(Status.no_code, sol.reason)
    static = check_source(sol.code)
    ctx.res.flags += static.flags
    if static.rejected:
        why = "; ".join(f"{r}: {static.reasons[r]}" for r in static.rejected)
        raise Failure(Status.rejected, f"static check: {why}")
    return Source(sol)
