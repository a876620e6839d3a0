"""Configuration: a pydantic model that holds every default and bound, overridable by a user file
(`--config FILE`) and by command-line options. The effective config is written into every run.

What each key means, and why its default is what it is: configs/default.toml (the few keys a user is
likely to change) and configs/advanced.toml (the rest, same tables). Every run loads them over the
defaults below, and tests/test_config.py keeps the three equal. A user file may hold any subset of the keys of
either, in the same tables. A key the model does not know is an error (`extra="forbid"`), unless
RENAMED maps it to its new name: it then loads, with a RenamedKeyWarning naming the new key."""
from __future__ import annotations

import hashlib
import json
import os
import tomllib
import warnings
from pathlib import Path
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, field_validator

# a key's old dotted path -> its new one (a leaf or a whole table). A config written with the old
# name loads as with the new one, with a RenamedKeyWarning; the record shows only the new name.
RENAMED: dict[str, str] = {}

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
SHIPPED = (CONFIGS / "advanced.toml", CONFIGS / "default.toml")


class RenamedKeyWarning(DeprecationWarning):
    """A config used a key's old name (RENAMED)."""


# shown to the user wherever it is raised: Python shows DeprecationWarning by default only in __main__
warnings.filterwarnings("default", category=RenamedKeyWarning)


class _Section(BaseModel):
    # a misspelt key in a config file or --set is an error, not a setting silently left at its default
    model_config = ConfigDict(extra="forbid")


class Timeouts(_Section):
    compile_s: float = Field(300, gt=0)
    load_s: float = Field(60, gt=0)
    run_s: float = Field(120, gt=0)
    problem_s: float = Field(120, gt=0)


class Tolerance(_Section):
    atol: float = Field(ge=0)
    rtol: float = Field(ge=0)
    rel_l2: float = Field(ge=0)


def _default_tols() -> dict[str, Tolerance]:
    return {
        "fp32": Tolerance(atol=1e-4, rtol=1e-4, rel_l2=1e-4),
        "fp16": Tolerance(atol=1e-2, rtol=1e-2, rel_l2=5e-3),
        "bf16": Tolerance(atol=2e-2, rtol=2e-2, rel_l2=2e-2),
    }


class Correctness(_Section):
    trials: int = Field(5, ge=1)  # a pass always rests on whole outputs compared, not only fingerprints
    allow_tf32: bool = False
    extra_shapes: bool = True
    list_kernels: bool = True
    kernel_list: Literal["cupti", "profiler"] = "cupti"
    judge: Literal["device", "parent"] = "device"
    tol: dict[str, Tolerance] = Field(default_factory=_default_tols)


class Timing(_Section):
    warmup: int = Field(3, ge=0)
    min_calls: int = Field(20, ge=2)
    max_calls: int = Field(200, ge=2)
    target_rel_sem: float = Field(0.005, ge=0)
    budget_s: float = Field(2.5, ge=0)
    flush_l2: bool = True
    flush_method: Literal["read", "write"] = "read"
    launch_hold_us: Union[Literal["auto"], float] = "auto"
    launch_hold_max_us: float = 5000.0
    cpu_min_calls: int = Field(5, ge=2)
    cpu_threads: int = Field(1, ge=1)
    round_calls: int = Field(10, ge=1)
    cuda_graph: bool = False
    compile_baseline: Literal["auto", "on", "off"] = "auto"
    compile_baseline_cache: bool = True
    throttle_ratio: float = Field(0.75, ge=0, le=1)
    max_runqueue_frac: float = Field(0.05, ge=0, le=1)
    max_reference_wait_frac: float = Field(0.1, ge=0, le=1)
    cpu_served_inputs: bool = True
    served_inputs_max_mb: float = Field(1024.0, gt=0)
    cpu_clocked: Literal["auto", "on", "off"] = "auto"
    cpu_clocked_below_ms: float = Field(20.0, ge=0)
    # a clocked candidate's offset from process to process (its interval less the reference's
    # overhead), widening its speedup's interval as process_bias_us does on a GPU; 0: off
    cpu_clocked_offset_us: float = Field(1.0, ge=0)
    min_rounds: int = Field(5, ge=1)
    # the process-bias model (timing.process_bias_us, processes_for): configs/advanced.toml says
    # what each term is and where its value was measured
    process_bias_us: float = 0.25
    kernel_span: Literal["auto", "on", "off"] = "auto"
    kernel_span_below_ms: float = 0.05
    kernel_span_slack_us: float = 1.0
    kernel_span_slack_rel: float = 0.05
    kernel_span_process_bias_us: float = 0.03
    process_bias_per_launch_us: float = 0.09
    process_offset_floor_rel: float = Field(0.0007, ge=0)
    # a GPU problem whose reference processes timed it this far apart is timed in `processes` a
    # side from then on (timing/modes.py); 0: never
    process_modes_rel: float = Field(0.03, ge=0)
    processes: int = Field(4, ge=1)
    processes_when: Literal["auto", "always", "never"] = "auto"
    processes_above_rel: float = 0.0035
    processes_max: int = Field(8, ge=1)
    processes_target_rel: float = Field(0.0025, ge=0)
    processes_rounds: int = Field(3, ge=1)
    processes_budget_s: float = Field(2.5, ge=0)
    host_bound_share: float = Field(0.5, ge=0, le=1)
    host_bound_budget_s: float = Field(8.0, ge=0)


class Hardening(_Section):
    max_speedup: float = Field(50.0, gt=0)
    protect_parent: bool = True
    sandbox: Literal["auto", "on", "off"] = "auto"
    timing_cpus: Literal["apart", "shared"] = "apart"
    # on a GPU, how long a pause between rounds waits for the GPU work a candidate left queued
    # (process/gpulock.py); 0: not drained
    gpu_drain_s: float = Field(10.0, ge=0)
    # what a jailed process and everything it starts may take of the host's memory (cgroups.py);
    # 0: half the host's
    jail_memory_gb: float = Field(0.0, ge=0)
    gap_abs_ms: float = 0.02
    gap_rel: float = 0.25
    wall_abs_ms: float = 0.05
    cpu_wall_abs_ms: float = 0.5
    wall_rel: float = 0.2
    wall_overhead_share: float = 0.2
    cpu_wall_rel: float = 0.2
    cpu_wall_overhead_share: float = 0.1
    cpu_clock_abs_ms: float = 0.05
    cpu_clock_rel: float = 0.5
    clock_check_confirmations: int = Field(2, ge=1)


class Batch(_Section):
    standby_workers: int = Field(2, ge=0)
    prime_standbys: bool = True
    fork_standbys: bool = True
    concurrent_evaluations: int = Field(4, ge=1)
    stall_report_s: float = Field(600, ge=0)
    background_frees_lane: bool = True
    slow_phase_frees_lane_s: float = 10.0
    early_reference: bool = True
    stop_untimed_phases: bool = True
    quiet_probe_us: float = 200.0
    quiet_probes: int = Field(3, ge=1)
    quiet_max_s: float = 10.0
    cpu_concurrent_evaluations: int = Field(1, ge=1)
    lend_timing_cpus: bool = True
    # "auto": on for a GPU's batches, whose builds are many and CUDA's; off on the CPU path, whose
    # builds are few and whose timing shares the cores with the header's own build
    precompiled_header: Union[bool, Literal["auto"]] = False
    light_cuda_header: bool = True

    def pch_for(self, device: str) -> bool:
        return device == "cuda" if self.precompiled_header == "auto" else bool(self.precompiled_header)


class Memory(_Section):
    host_gb: float = Field(0.0, ge=0)
    gpu_gb: float = Field(0.0, ge=0)


class Config(_Section):
    device: Literal["auto", "cuda", "cpu"] = "auto"
    size: Literal["auto", "full", "small"] = "auto"
    dtype: Literal["auto", "fp32", "fp16", "bf16"] = "auto"
    cache_dir: str = Field("", validate_default=True)  # "": default_cache_dir()
    timeouts: Timeouts = Field(default_factory=Timeouts)
    correctness: Correctness = Field(default_factory=Correctness)
    timing: Timing = Field(default_factory=Timing)
    hardening: Hardening = Field(default_factory=Hardening)
    batch: Batch = Field(default_factory=Batch)
    memory: Memory = Field(default_factory=Memory)

    @field_validator("cache_dir")
    @classmethod
    def _cache_dir(cls, v: str) -> str:
        return v or default_cache_dir()

    def digest(self) -> str:
        """Hash of everything that changes a verdict or a number (not paths, nor how a batch is run,
        nor where outputs are judged: the same code judges them wherever they are, nor the sandbox,
        which every record lists in `protections`)."""
        d = self.model_dump(exclude={"cache_dir": True, "timeouts": True, "batch": True, "memory": True,
                                     "correctness": {"judge"}, "hardening": {"sandbox", "jail_memory_gb"}})
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]


def default_cache_dir() -> str:
    """Where builds, baselines and memory needs are kept when the config names no `cache_dir`: one
    place per user, not the current folder. $HARNESS_CACHE_DIR where set; as root /var/cache/harness,
    which the sandbox's uids can reach (a jailed build writes its extension there, and a root's home
    is closed to other users); else $XDG_CACHE_HOME/harness, ~/.cache/harness by default."""
    if os.environ.get("HARNESS_CACHE_DIR"):
        return os.environ["HARNESS_CACHE_DIR"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        return "/var/cache/harness"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return str(Path(base) / "harness")


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def _renamed_key(key: str, source: str) -> str:
    """A dotted key (an override) under its new name, warned about where it had an old one."""
    for old, new in RENAMED.items():
        if key == old or key.startswith(old + "."):
            warnings.warn(f"{source}: config key {old!r} is now {new!r}", RenamedKeyWarning, stacklevel=3)
            return new + key[len(old):]
    return key


def _rename(data: dict[str, Any], source: str) -> dict[str, Any]:
    """A config file's tables with every old name (RENAMED) moved to its new one, each warned about.
    An old name given beside its new one stays, and validation refuses it as an unknown key."""
    for old, new in RENAMED.items():
        *parents, leaf = old.split(".")
        path: list[dict[str, Any]] = [data]  # the tables down to the old key
        for p in parents:
            path.append(path[-1].get(p) if isinstance(path[-1], dict) else None)
        if not isinstance(path[-1], dict) or leaf not in path[-1]:
            continue
        *new_parents, new_leaf = new.split(".")
        target = data
        for p in new_parents:
            target = target.setdefault(p, {})
        if new_leaf in target:
            warnings.warn(f"{source}: config key {old!r} is now {new!r}, which is given too: remove {old!r}",
                          RenamedKeyWarning, stacklevel=3)
            continue
        target[new_leaf] = path[-1].pop(leaf)
        for table, name in zip(reversed(path[:-1]), reversed(parents)):  # a table left empty goes too
            if table[name]:
                break
            del table[name]
        warnings.warn(f"{source}: config key {old!r} is now {new!r}", RenamedKeyWarning, stacklevel=3)
    return data


def load_config(path: Optional[str | Path] = None, overrides: Optional[dict[str, Any]] = None) -> Config:
    """The model's defaults and the shipped files (SHIPPED), then `path` (a TOML file with any subset of the keys), then `overrides`
    (dotted keys allowed: {"timing.budget_s": 1}). A key under an old name (RENAMED) is taken under
    its new one, with a RenamedKeyWarning."""
    data: dict[str, Any] = Config().model_dump()
    for shipped in SHIPPED:  # config as data; absent where the package was installed without configs/
        if shipped.exists():
            data = _merge(data, tomllib.loads(shipped.read_text()))
    if path:
        data = _merge(data, _rename(tomllib.loads(Path(path).read_text()), str(path)))
    for key, value in (overrides or {}).items():
        if value is None:
            continue
        node = data
        *parents, leaf = _renamed_key(key, "override").split(".")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return Config.model_validate(data)


def keys() -> list[str]:
    """Every key a config file may set, dotted ("timing.budget_s")."""
    out = []
    for name, field in Config.model_fields.items():
        sub = field.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel):
            out += [f"{name}.{k}" for k in sub.model_fields]
        else:
            out.append(name)
    return out


def nearest_key(loc: str) -> Optional[str]:
    """The key a misspelt one most likely meant: a whole key ("timing.budget_sec" -> timing.budget_s),
    a table ("correctnes" -> [correctness]), or a key written outside its table ("trials" ->
    correctness.trials)."""
    import difflib
    every = keys()
    tables = sorted({k.split(".")[0] for k in every if "." in k})
    if "." not in loc:
        placed = [k for k in every if k.split(".")[-1] == loc]
        if placed:
            return f"{placed[0]} (under [{placed[0].rsplit('.', 1)[0]}])" if "." in placed[0] else placed[0]
        table = difflib.get_close_matches(loc, tables, n=1, cutoff=0.75)
        if table:
            return f"[{table[0]}]"
    head = loc.split(".")[0]
    if "." in loc and head not in tables:
        table = difflib.get_close_matches(head, tables, n=1, cutoff=0.75)
        if table:
            return f"{table[0]}.{loc.split('.', 1)[1]}"
    near = difflib.get_close_matches(loc, every, n=1, cutoff=0.6)
    return near[0] if near else None


def explain(error, options: Optional[dict[str, str]] = None) -> str:
    """A pydantic ValidationError of Config in a user's words: each bad key, the option that set it
    where one did (`options`: dotted key -> "--trials"), and for a key that does not exist the
    nearest that does."""
    parts = []
    for err in error.errors():
        loc = ".".join(str(x) for x in err["loc"])
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "no such key" + (f"; did you mean {near}?" if (near := nearest_key(loc)) else "")
        where = (options or {}).get(loc)
        parts.append(f"{where} ({loc}): {msg}" if where else f"{loc}: {msg}")
    return "; ".join(parts)
