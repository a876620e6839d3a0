"""Building a solution's extensions in an isolated child, into a content-addressed cache.

The build directory is keyed by the solution's source, the torch version, the device and the CUDA
architectures, so an unchanged solution reuses its build (ninja finds nothing to do) and two
solutions that name their extension alike never share one. A build that the compiler itself
rejected is remembered there too, so the same source is not compiled again only to fail again, and
so is one that succeeded, with the hashes of what it built: a warm run then skips the build child (a
torch import and a ninja check, 6-8 s of a core per solution on an H200 machine) while the
libraries are the ones that build produced."""
from __future__ import annotations

import functools
import hashlib
import json
import os
import stat
import sys
import time
from pathlib import Path
from typing import Optional

from .cachefiles import write_whole
from .cpus import Lender
from .process.worker import Worker, WorkerDied, WorkerProtocolError, WorkerTimeout
from .records.messages import CompileReply, Setup
from .sandbox import read_regular


def source_file(code: str, original: Path, cache_dir: Path, extracted: bool) -> Path:
    """Where the module is imported from: the file itself, or the extracted code saved by hash."""
    if not extracted:
        return original.resolve()
    digest = hashlib.sha256(code.encode()).hexdigest()[:16]
    out = cache_dir / "sources" / f"{original.stem}_{digest}.py"
    out.parent.mkdir(parents=True, exist_ok=True)
    if not out.exists():
        out.write_text(code)
    return out.resolve()


@functools.lru_cache(maxsize=1)
def torch_versions() -> tuple[str, Optional[str]]:
    """(torch.__version__, torch.version.cuda), read from the installed torch's version.py: the
    parent needs them before its first judging, and importing torch takes it 2-5 s (a batch imports
    it on a thread meanwhile)."""
    import importlib.util
    import re
    spec = importlib.util.find_spec("torch")
    try:
        text = (Path(list(spec.submodule_search_locations)[0]) / "version.py").read_text()
        version = re.search(r"^__version__\b[^=]*=\s*['\"]([^'\"]+)['\"]", text, re.M).group(1)
        cuda = re.search(r"^cuda\b[^=]*=\s*(.+)$", text, re.M).group(1).strip()
        return version, (None if cuda == "None" else cuda.strip("'\""))
    except (AttributeError, OSError, TypeError, IndexError):
        import torch
        return str(torch.__version__), torch.version.cuda


@functools.lru_cache(maxsize=1)
def torch_dir() -> str:
    """Where the installed torch lives: its headers' paths are in every build's commands."""
    import importlib.util
    spec = importlib.util.find_spec("torch")
    return str(Path(list(spec.submodule_search_locations)[0]).resolve()) if spec else ""


def extensions_dir(code: str, device: str, cache_dir: Path) -> Path:
    """The build folder of a solution's extensions, by everything its build depends on. The Python
    installation and torch's place count too: a cache shared by two checkouts (the root's
    /var/cache/harness) would otherwise hand one the other's build, whose commands name the other's
    headers, and the candidate's load_inline then rebuilds inside `timeouts.load_s` (a new user's
    honest solution timed out so). The compiler torch names in the commands counts for the same
    reason."""
    key = "\n".join([code, torch_versions()[0], device, os.environ.get("TORCH_CUDA_ARCH_LIST", ""),
                     sys.version.split()[0], sys.prefix, torch_dir(),
                     # the compiler torch writes into the build's commands, where one is named (the
                     # precompiled header's wrapper: pch.enable); a build cached under another was
                     # built again inside the candidate's load, past its timeout (session 43, an H200)
                     *([os.environ["CXX"]] if os.environ.get("CXX") else [])])
    d = cache_dir / "ext" / hashlib.sha256(key.encode()).hexdigest()[:20]
    d.mkdir(parents=True, exist_ok=True)
    return d.resolve()


def builds_extensions(code: str) -> bool:
    """Does the solution compile extensions (load_inline and friends), so that a build child runs it?"""
    return "cpp_extension" in code or "load_inline" in code


@functools.lru_cache(maxsize=1)
def private_dir() -> Path:
    """The harness's own temporary and compiler-cache folder for its children (the reference's
    torch.compile above all): in the user's home, closed to everyone else. Inductor's default,
    /tmp/torchinductor_<user>, is a predictable path a jailed solution could create first and fill
    with code the reference would run as root (found by a helper's attack)."""
    d = Path.home() / ".cache" / "harness-private"
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = os.lstat(d)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
        import tempfile
        d = Path(tempfile.mkdtemp(prefix="harness-private-"))  # 0700, made by this process
    for sub in ("tmp", "inductor", "triton"):
        (d / sub).mkdir(exist_ok=True, mode=0o700)
    return d


def child_env(ext_dir: Optional[Path], device: str, extra: Optional[dict[str, str]] = None) -> dict[str, str]:
    """None for ext_dir: a standby's environment, whose extension directory comes with its setup.
    Temporary files and compiler caches go to `private_dir` (a jailed child's own home replaces it)."""
    env = dict(os.environ)
    priv = private_dir()
    env.update(TMPDIR=str(priv / "tmp"), TORCHINDUCTOR_CACHE_DIR=str(priv / "inductor"),
               TRITON_CACHE_DIR=str(priv / "triton"))
    if ext_dir is not None:
        env["TORCH_EXTENSIONS_DIR"] = str(ext_dir)
    # no empty entry: one would put the current folder on the children's path (a jailed solution may
    # write there a `harness` package the reference, as root, would import: found by a helper's attack)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parent.parent),
                                         *(p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)])
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    # A fixed mmap threshold: glibc's dynamic one depends on each process's allocation history, so
    # two processes doing the same work could pay different page-fault costs per call.
    env.setdefault("MALLOC_MMAP_THRESHOLD_", str(32 << 20))
    if device == "cpu":
        # and no trimming of the heap's top: whether a freed buffer sits there (given back, faulted in
        # again on the next call) also depends on the history. On the CPU path, where the host-clock
        # check compares two processes' per-call overhead, it made a candidate identical to its
        # reference 0.6-3 ms a call slower in 10 of 12 evaluations of softmax_wide on a 2-core VM,
        # which rejected them; with it, within 0.07 ms (bench/results/diagnostics.md)
        env.setdefault("MALLOC_TRIM_THRESHOLD_", str(4 << 30))
    # solutions never learn the run's secrets from the environment
    for k in list(env):
        if k.startswith("HARNESS_SECRET"):
            del env[k]
    env.update(extra or {})
    return env


FAILED_BUILD = "failed-build.json"
# failures that say nothing about the source: the compiler killed or starved, the disk full
_TRANSIENT = ("killed", "signal", "out of memory", "cannot allocate", "no space left", "resource temporarily",
              "timed out", "timeout", "interrupted")


def _deterministic(reply: CompileReply) -> bool:
    text = (reply.error or "").lower()
    return (not reply.ok and reply.category == "compile_error" and "error" in text
            and not any(t in text for t in _TRANSIENT))


def remembered_failure(ext_dir: Path) -> Optional[tuple[CompileReply, str]]:
    """(reply, log) of the compiler's rejection of this very source, if it was built before."""
    try:
        data = json.loads(read_regular(ext_dir / FAILED_BUILD))
        return CompileReply.model_validate(data["reply"]).model_copy(update={"seconds": 0.0}), data["log"]
    except (ValueError, KeyError, OSError):
        return None  # never failed, or unreadable: build (again)


def _write_marker(path: Path, data: dict) -> None:
    """Whole or not at all: a concurrent build of the same source reads the old marker or the new."""
    write_whole(path, json.dumps(data))


def remember_failure(ext_dir: Path, reply: CompileReply, log: str) -> None:
    """Keep a build's failure for the next build of the same source, if it says something about it."""
    if _deterministic(reply):
        _write_marker(ext_dir / FAILED_BUILD, {"reply": reply.model_dump(), "log": log})


BUILT = "built.json"


def _artifacts(ext_dir: Path) -> dict[str, str]:
    """sha256 of every shared library under the build directory, by relative path."""
    out = {}
    found, stack = [], [(Path(ext_dir), 0)]
    while stack:  # iterative and bounded: a solution's build can nest folders past Python's recursion
        d, depth = stack.pop()
        if depth > 64:
            out["(too deep)"] = "unreadable"
            continue
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            if e.is_dir(follow_symlinks=False):
                stack.append((Path(e.path), depth + 1))
            elif e.name.endswith(".so"):
                found.append(Path(e.path))
    for so in sorted(found):
        h = hashlib.sha256()
        try:  # regular files only, never through a link or into a FIFO a jailed build left
            fd = os.open(so, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            out[str(so.relative_to(ext_dir))] = "unreadable"
            continue
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                out[str(so.relative_to(ext_dir))] = "not a file"
                continue
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
        out[str(so.relative_to(ext_dir))] = h.hexdigest()
    return out


def remembered_build(ext_dir: Path) -> Optional[tuple[CompileReply, str]]:
    """(reply, log) of this source's earlier successful build, if the libraries it left are still
    there unchanged; None when it never built, or anything was rebuilt, removed or replaced since."""
    try:
        data = json.loads(read_regular(ext_dir / BUILT))
        reply = CompileReply.model_validate(data["reply"])
        if not reply.ok or data["artifacts"] != _artifacts(ext_dir):
            return None
        return reply.model_copy(update={"seconds": 0.0}), data["log"]
    except (ValueError, KeyError, TypeError, OSError):
        return None


def remember_build(ext_dir: Path, reply: CompileReply, log: str) -> None:
    if reply.ok:
        _write_marker(ext_dir / BUILT, {"reply": reply.model_dump(), "log": log, "artifacts": _artifacts(ext_dir)})


def compile_solution(module_path: Path, ext_dir: Path, device: str, timeout: float,
                     extra_env: Optional[dict[str, str]] = None, jailed: bool = False,
                     memory_bytes: Optional[int] = None, light: bool = False
                     ) -> tuple[Optional[CompileReply], Optional[str], str]:
    """Returns (reply, failure, log_tail). failure is 'timeout' or 'died: ...' when no reply came."""
    return build_child(module_path, ext_dir, device, timeout, extra_env, jailed=jailed, memory_bytes=memory_bytes,
                       light=light)[:3]


def build_child(module_path: Path, ext_dir: Path, device: str, timeout: float,
                extra_env: Optional[dict[str, str]] = None, *, idle: bool = False,
                cpus: Optional[set[int]] = None, lender: Optional[Lender] = None,
                jailed: bool = False, memory_bytes: Optional[int] = None, light: bool = False
                ) -> tuple[Optional[CompileReply], Optional[str], str, Optional[float]]:
    """The build, in an isolated child: (reply, failure, log_tail, cpu_seconds). `idle`: a batch's
    build, at the lowest priority (so that it never slows an evaluation beside it) and with the CPU
    seconds of the child and everything it waited for (the compiler) counted; else cpu_seconds is
    None. `cpus`: where the child and its compilers may run (cpus.py); `lender`: and the timing
    CPUs it lends while nothing is timed. `jailed`: the child runs the solution as a uid of its own
    (sandbox.py), writing only its extension directory, its memory capped at `memory_bytes` (None:
    the jail's default). `light`: nvcc's first try with the light <torch/extension.h>
    (light_header.py), and where the compiler refuses it, the build again with torch's own."""
    known = remembered_failure(ext_dir) or remembered_build(ext_dir)
    if known is not None:
        return known[0], None, known[1], 0.0
    run = functools.partial(_build_once, module_path, ext_dir, device, timeout, idle=idle, cpus=cpus,
                            lender=lender, jailed=jailed, memory_bytes=memory_bytes)
    light_cpu = None
    if light:
        from . import light_header
        reply, failure, log, cpu = run({**(extra_env or {}), **light_header.env()})
        if failure is None and reply is not None and reply.ok:
            reply.light_header = True
            remember_build(ext_dir, reply, log)
            return reply, failure, log, cpu
        if failure is not None or reply is None or not _deterministic(reply):
            return reply, failure, log, cpu  # a timeout, a death, an import error: as without it
        light_cpu = cpu  # the compiler refused it: built again as torch gives it
    reply, failure, log, cpu = run(extra_env)
    if reply is not None:
        if light:
            reply.light_header = False
        remember_failure(ext_dir, reply, log)
        remember_build(ext_dir, reply, log)
    if light_cpu is not None and cpu is not None:
        cpu += light_cpu
    return reply, failure, log, cpu


def _build_once(module_path: Path, ext_dir: Path, device: str, timeout: float, extra_env: Optional[dict[str, str]],
                *, idle: bool, cpus: Optional[set[int]], lender: Optional[Lender], jailed: bool,
                memory_bytes: Optional[int]) -> tuple[Optional[CompileReply], Optional[str], str, Optional[float]]:
    """One build child, start to end; what it built or failed to is not remembered here."""
    from .sandbox import JAILS, open_to
    jail = JAILS.make(ext_dir, module_path, memory_bytes) if jailed else None
    setup = Setup(role="compile", solution_path=jail.solution_path if jail else str(module_path), device=device,
                  jail=jail)
    w = Worker(setup, env=child_env(ext_dir, device, extra_env), cpus=cpus)
    if jail is not None:
        # its processes (a daemon too) gone first, then the folder it wrote made its solution's group's
        w.on_close.append(lambda: (JAILS.release(jail), open_to(ext_dir, jail.gid)))
    if idle:
        idle_priority(w.proc.pid)
    if lender is not None:
        lender.track(w.proc.pid)
    try:
        try:
            line = w.wait_json(timeout)
            reply, log = CompileReply.model_validate_json(line), w.log_tail()
            return reply, None, log, _reap_cpu(w.proc.pid) if idle else None
        except WorkerTimeout:
            w.kill()
            clear_build_locks(ext_dir)
            return None, "timeout", w.log_tail(), None
        except (WorkerDied, WorkerProtocolError, ValueError) as e:
            cpu = _reap_cpu(w.proc.pid, wait=0.5) if idle else None
            clear_build_locks(ext_dir)
            return None, f"died: {e}", w.log_tail(), cpu
    finally:
        if lender is not None:
            lender.untrack(w.proc.pid)
        w.close()


def clear_build_locks(ext_dir: Path) -> int:
    """Remove torch's build locks (`<extension>/lock`) from a build folder whose process was killed
    or died: load_inline takes one for every load, built or not, and waits forever where one is
    left. Returns how many there were. The folder's contents are the solution's (its jail writes
    them): each subfolder is opened without following links and the lock unlinked through it, so a
    link planted there cannot point the parent's unlink at a file of someone else's named `lock`."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    try:
        top = os.open(ext_dir, flags)
    except OSError:
        return 0
    n = 0
    try:
        for name in os.listdir(top):
            try:
                sub = os.open(name, flags, dir_fd=top)
            except OSError:
                continue  # not a folder, or a link
            try:
                os.unlink("lock", dir_fd=sub)
                n += 1
            except OSError:
                pass  # none there, or not a file
            finally:
                os.close(sub)
    finally:
        os.close(top)
    return n


def idle_priority(pid: int) -> None:
    """Builds take only CPU that evaluations leave idle (SCHED_IDLE, else nice 19), so a build beside
    a timed run does not disturb its clocks. Inherited by ninja and the compiler."""
    try:
        os.sched_setscheduler(pid, os.SCHED_IDLE, os.sched_param(0))
        return
    except (OSError, AttributeError):
        pass
    try:
        os.setpriority(os.PRIO_PROCESS, pid, 19)
    except (OSError, AttributeError):
        pass


def _reap_cpu(pid: int, wait: float = 10.0) -> Optional[float]:
    """Wait for the child to exit (it does right after replying) and return its user+system CPU,
    children included. Popen copes with a child reaped behind its back."""
    deadline = time.monotonic() + wait
    while True:
        try:
            got, _status, ru = os.wait4(pid, os.WNOHANG)
        except ChildProcessError:
            return None
        if got == pid:
            return ru.ru_utime + ru.ru_stime
        if time.monotonic() > deadline:
            return None
        time.sleep(0.02)
