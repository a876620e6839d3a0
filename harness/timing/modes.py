"""Problems whose forward runs at different speeds in different processes.

A few problems' forwards take one of two times depending on the process, either side, whatever the
number of calls: `level2/77_ConvTranspose3d_Scale_BatchNorm_GlobalAvgPool` 4.9-5.0 ms in some
processes and 6.4-6.5 ms in others on an H200, so an identity came out at 1.32, 0.77 and 0.77 in
three of six runs, each interval excluding 1 (bench/results/multigpu-NVIDIA_H200.md, session 46);
`level2/61` by 6-8% (diagnostics.md, probe61: where a process's buffers land). The process-offset
model (stats.processes_for) sees nothing there: one process a side is timed for a long forward.

So the parent keeps, per problem and device model, the median its reference processes timed the
forward at (a few, under `cache_dir/modes/`); once they lie further apart than
`timing.process_modes_rel`, each side of every later evaluation of the problem is timed in
`timing.processes` processes at least, whose own medians then set how many more (processes_needed)
and how wide the interval is. The reference's processes are the harness's own, so what they say is
trusted; a problem's first evaluations on a machine, before two reference processes have disagreed,
are timed as before.
"""
from __future__ import annotations

import secrets
from pathlib import Path
from typing import Optional

from pydantic import BaseModel

from ..cachefiles import read_keyed, write_whole

KEEP = 8  # reference processes remembered a problem, the latest


class KeptModes(BaseModel):
    key: str
    problem: str
    medians_ms: dict[str, float]  # a reference process's token -> its median call, in the order seen


def key_for(problem_hash: str, size: str, dtype: Optional[str], device_name: Optional[str], torch_version: str,
            spans: bool) -> str:
    """Whose medians may be compared: the same problem text, size, dtype, device model, torch, and
    timing basis (kernel spans or events time the same forward differently)."""
    from ..memory import need_key
    return need_key(problem_hash, size, dtype, "cuda", device_name, torch_version) + ("-spans" if spans else "-events")


def token(worker) -> str:
    """A name for a reference process, the same for its whole life."""
    t = getattr(worker, "mode_token", None)
    if t is None:
        t = secrets.token_hex(6)
        try:
            worker.mode_token = t
        except AttributeError:
            pass
    return t


def _file(cache_dir: str, key: str) -> Path:
    return Path(cache_dir).resolve() / "modes" / f"{key}.json"


def load(cache_dir: str, key: str) -> dict[str, float]:
    kept = read_keyed(_file(cache_dir, key), KeptModes, key)
    return dict(kept.medians_ms) if kept is not None else {}


def spread(medians: dict[str, float]) -> float:
    """How far apart the processes' medians lie: the largest over the smallest, less 1."""
    vals = [v for v in medians.values() if v and v > 0]
    return max(vals) / min(vals) - 1 if len(vals) > 1 else 0.0


def keep(cache_dir: str, key: str, problem: str, medians: dict[str, float]) -> None:
    """`medians` (token -> ms) added to what is kept for `key`, the latest KEEP processes."""
    path = _file(cache_dir, key)
    try:
        merged = load(cache_dir, key)
        for t, v in medians.items():
            if v and v > 0:
                merged.pop(t, None)
                merged[t] = float(v)
        merged = dict(list(merged.items())[-KEEP:])
        path.parent.mkdir(parents=True, exist_ok=True)
        write_whole(path, KeptModes(key=key, problem=problem, medians_ms=merged).model_dump_json())
    except OSError:
        pass  # a cache: later evaluations learn it again
