"""Stage 2: the solution's extensions built in a child process, with a timeout, into the
content-addressed cache (harness/build.py); a solution with nothing to build is only parsed."""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..build import builds_extensions, compile_solution, extensions_dir, source_file
from ..light_header import first_try
from ..pyast import parse
from ..records.messages import CompileReply
from ..records.result import Status
from .context import Context, Failure
from .source import Source

# what a batch hands over when it built the solution ahead: (reply, failure, log)
Prebuilt = tuple[Optional[CompileReply], Optional[str], str]


@dataclass
class Built:
    module: Path          # the solution's code as the candidate imports it
    ext_dir: Path         # where its extensions were built (TORCH_EXTENSIONS_DIR of its children)
    reply: CompileReply   # the build's report: kernel names defined, among others


def build(ctx: Context, source: Source, prebuilt: Optional[Prebuilt]) -> Built:
    cfg = ctx.cfg
    t0 = time.perf_counter()
    cache = Path(cfg.cache_dir).resolve()
    sol = source.solution
    module = source_file(sol.code, sol.path, cache, sol.extracted)
    ext = extensions_dir(sol.code, ctx.device, cache)
    if prebuilt is not None:
        creply, failure, log = prebuilt
    elif builds_extensions(sol.code):
        from ..sandbox import memory_cap
        creply, failure, log = compile_solution(module, ext, ctx.device, cfg.timeouts.compile_s, ctx.env_extra,
                                                  jailed=ctx.jailed, memory_bytes=memory_cap(cfg.hardening.jail_memory_gb),
                                                  light=first_try(cfg, ctx.device, sol.code))
    else:  # nothing to build: parse here (no execution); the candidate's import reports the rest
        creply, failure, log = parse_only(sol.code, str(module)), None, ""
    ctx.phases.compile_s = time.perf_counter() - t0
    if failure == "timeout":
        raise Failure(Status.timeout, f"building the solution took over {cfg.timeouts.compile_s:g} s", log=log)
    if failure:
        raise Failure(Status.runtime_error, f"the solution crashed while being imported for its build ({failure})", log=log)
    if not creply.ok and creply.category == "needs_cuda" and ctx.device == "cpu":
        # its import called a CUDA build (the build child's wrapper stopped it there): what it is cannot
        # be seen on the CPU path. Only a build it ran counts, never a source that merely mentions one
        # (a dead `if False: load_inline(..., cuda_sources=...)` took wrong CPU solutions out of
        # solved and fast_p: a helper's attack)
        # what to do first: tables and reports clip a long error at its end
        raise Failure(Status.unsupported, f"needs a CUDA device, and this evaluation runs on the CPU: run it "
                                          f"on a GPU machine with --device cuda ({creply.error})", log=log)
    ctx.res.light_cuda_header = creply.light_header if creply is not None else None
    if not creply.ok:
        status = Status.runtime_error if creply.category == "import_error" else Status.compile_error
        raise Failure(status, creply.error, log=log)
    return Built(module=module, ext_dir=ext, reply=creply)


def parse_only(code: str, path: str) -> CompileReply:
    try:
        parse(code, path)
    except SyntaxError as e:
        return CompileReply(ok=False, category="compile_error", error=f"SyntaxError in solution, line {e.lineno}: {e.msg}")
    return CompileReply(ok=True)
