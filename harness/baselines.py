"""torch.compile(Model)'s time, measured once per problem, device and software stack, and kept on disk.

Timing the compiled baseline beside every candidate costs each evaluation a third request per round
(and the reference process its inductor build); N solutions of a problem need it once. The first
evaluation of a problem measures it, interleaved with the candidate as before, and writes the median
here; later evaluations on the same GPU model, driver, torch and timing method read it and time only
reference and candidate. Written by the parent alone, under the build cache's folder.
"""
from __future__ import annotations

import datetime as _dt
import hashlib
import json
from pathlib import Path
from typing import Optional

from pydantic import BaseModel

from .cachefiles import read_keyed, write_whole
from .config import Config
from .records.result import EnvInfo


class CompiledBaseline(BaseModel):
    """One problem's torch.compile time on one device and stack (the medians of its calls, in ms)."""

    key: str
    problem: str
    events_ms: float                  # by CUDA events (perf_counter on the CPU path)
    span_ms: Optional[float] = None   # by kernel spans, where every call's spans were whole
    calls: int
    measured_at: str
    stack: dict[str, Optional[str]]


def key_for(problem_hash: str, size: str, dtype: Optional[str], env: Optional[EnvInfo], cfg: Config) -> tuple[str, dict]:
    """(key, what it is made of): the problem's bytes and size, the device model and driver, torch and
    CUDA, the numerics and the timing method's settings that move a time."""
    t = cfg.timing
    stack = {
        "problem": problem_hash, "size": size, "dtype": dtype,
        "device": (env.gpu_name or env.cpu) if env else None, "driver": env.driver if env else None,
        "torch": env.torch if env else None, "cuda": env.cuda if env else None,
        "allow_tf32": str(cfg.correctness.allow_tf32), "cpu_threads": str(t.cpu_threads),
        "flush": f"{t.flush_l2}:{t.flush_method}", "cuda_graph": str(t.cuda_graph),
    }
    return hashlib.sha256(json.dumps(stack, sort_keys=True).encode()).hexdigest()[:24], stack


def folder(cfg: Config) -> Path:
    return Path(cfg.cache_dir).resolve() / "baselines"


def load(cfg: Config, key: str) -> Optional[CompiledBaseline]:
    return read_keyed(folder(cfg) / f"{key}.json", CompiledBaseline, key)


def find(cfg: Config, problem_hash: str, size: str, dtype: Optional[str],
         env: Optional[EnvInfo]) -> tuple[str, dict, Optional[CompiledBaseline]]:
    """(key, what it is made of, the cached baseline or None: also where the cache is off)."""
    key, stack = key_for(problem_hash, size, dtype, env, cfg)
    return key, stack, load(cfg, key) if cfg.timing.compile_baseline_cache else None


def store(cfg: Config, key: str, stack: dict, problem: str, events: list[float], spans: Optional[list[float]]) -> None:
    import statistics
    rec = CompiledBaseline(key=key, problem=problem, events_ms=statistics.median(events),
                           span_ms=statistics.median(spans) if spans else None, calls=len(events), stack=stack,
                           measured_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    d = folder(cfg)
    d.mkdir(parents=True, exist_ok=True)
    write_whole(d / f"{key}.json", rec.model_dump_json(indent=1))
