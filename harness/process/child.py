"""The child side: runs in a fresh interpreter (`python -m harness.process.child`), one role per
process. This module is its start-up (a standby's preload and priming), its channel to the parent and
its command loop; it imports only what the child needs, never the parent's orchestration.

- `compile`: executes the solution module once so its `load_inline` calls build into the
  content-addressed extension directory; reports build errors with the compiler's own lines.
- `candidate`: imports the (already built) solution, builds `ModelNew`, runs correctness trials and
  timing calls on command (runner.py). A standby child (HARNESS_STANDBY) imports torch and these
  modules first, then waits for its setup line.
- `reference`: the same for the problem's `Model`. Never in the same process as a candidate.

Nothing here compares outputs or reduces timings into statistics: the parent does that, so a solution
that patches torch, numpy or this module changes nothing but its own raw data, which the parent checks
against the reference and its own clock.
"""
from __future__ import annotations

import json
import os
import platform
import socket
import sys
import time
import traceback
from typing import Any, Optional

from ..records.messages import Prime, Setup
from .runner import InterfaceError, Runner


def _channel() -> tuple[Any, int]:
    cmd_fd, rep_fd = (int(x) for x in os.environ.pop("HARNESS_WORKER_FDS").split(","))
    return os.fdopen(cmd_fd, "r"), rep_fd


def _send(rep_fd: int, obj: Any) -> None:
    _write_all(rep_fd, (obj.model_dump_json() if hasattr(obj, "model_dump_json") else json.dumps(obj)).encode() + b"\n")


def _write_all(rep_fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(rep_fd, view)
        view = view[n:]


def _short_exc(e: BaseException) -> str:
    msg = f"{type(e).__name__}: {e}".strip()
    return msg if len(msg) < 4000 else msg[:4000] + " ..."


def _frames(e: BaseException, filename_hint: str) -> str:
    """The traceback lines that point into the user's file, so the error is actionable."""
    tb = traceback.extract_tb(e.__traceback__)
    mine = [f"  line {f.lineno}: {f.line}" for f in tb if filename_hint in (f.filename or "")]
    return ("\n" + "\n".join(mine[-3:])) if mine else ""


# --------------------------------------------------------------------------------------------------
# Environment fingerprint

def fingerprint(device: str) -> dict[str, Any]:
    import torch

    from ..version import __version__
    env: dict[str, Any] = {
        "device": device, "torch": torch.__version__, "python": platform.python_version(),
        "harness": __version__, "hostname": socket.gethostname(), "cpu": platform.processor() or platform.machine(),
        "cudnn_allow_tf32": bool(torch.backends.cudnn.allow_tf32),
        "matmul_allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
    }
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        env.update(gpu_name=props.name, compute_capability=f"{props.major}.{props.minor}",
                   cuda=torch.version.cuda, gpu_uuid=str(getattr(props, "uuid", "")) or None)
        env.update(_nvml_state())
    return env


def _nvml_state() -> dict[str, Any]:
    from ..timing.monitor import GpuMonitor
    mon = GpuMonitor()
    snap = mon.snapshot()
    if snap is None:
        return {}
    return {"driver": mon._get(lambda n, h: n.nvmlSystemGetDriverVersion()), "sm_clock_mhz": snap["sm"],
            "mem_clock_mhz": snap["mem"], "temperature_c": snap["temp"]}


# --------------------------------------------------------------------------------------------------
# compile role

class NeedsCuda(RuntimeError):
    pass


def run_compile(setup: Setup, rep_fd: int) -> None:
    """Execute the solution module with load_inline wrapped, so that build failures are told apart
    from other import errors and a CUDA build on a machine without CUDA fails in one clear line."""
    import torch
    import torch.utils.cpp_extension as cpp

    from ..records.messages import CompileReply
    from ..kernels import kernel_names

    t0 = time.perf_counter()
    built: list[str] = []
    kernels: list[str] = []
    failure: dict[str, str] = {}
    real_inline, real_load = cpp.load_inline, cpp.load
    # CUDA sources are buildable only for a CUDA evaluation: on the CPU path their kernels could never
    # run, whatever this machine has (a GPU machine evaluating with --device cpu included)
    has_cuda = setup.device == "cuda" and (torch.cuda.is_available() or bool(os.environ.get("TORCH_CUDA_ARCH_LIST")))

    def load_inline(name, cpp_sources, cuda_sources=None, *args, **kwargs):
        if cuda_sources and not has_cuda:
            failure["category"] = "needs_cuda"
            raise NeedsCuda(f"extension {name!r} has cuda_sources but this evaluation has no CUDA device "
                            f"(device={setup.device}, torch {torch.__version__})")
        kernels.extend(kernel_names(cuda_sources))
        try:
            mod = real_inline(name, cpp_sources, cuda_sources, *args, **kwargs)
        except Exception:
            failure.setdefault("category", "compile_error")
            raise
        built.append(name)
        return mod

    def load(name, sources, *args, **kwargs):
        if any(str(s).endswith(".cu") for s in ([sources] if isinstance(sources, str) else sources)) and not has_cuda:
            failure["category"] = "needs_cuda"
            raise NeedsCuda(f"extension {name!r} has .cu sources but no CUDA device is available here")
        try:
            mod = real_load(name, sources, *args, **kwargs)
        except Exception:
            failure.setdefault("category", "compile_error")
            raise
        built.append(name)
        return mod

    cpp.load_inline, cpp.load = load_inline, load
    path = setup.solution_path
    try:
        source = open(path).read()
        code = compile(source, path, "exec")
    except SyntaxError as e:
        _send(rep_fd, CompileReply(ok=False, category="compile_error",
                                   error=f"SyntaxError in solution, line {e.lineno}: {e.msg}",
                                   seconds=time.perf_counter() - t0))
        return
    try:
        from ..problems import import_file
        if setup.jail is not None:  # the solution's uid from its first line on (sandbox.py)
            from ..sandbox import enter
            enter(setup.jail)
        import_file(path, "solution_module")
    except BaseException as e:  # noqa: BLE001 - anything the module raises is the solution's
        category = failure.get("category", "import_error")
        msg = compiler_errors(str(e)) if category == "compile_error" else _short_exc(e) + _frames(e, path)
        if category == "needs_cuda":
            msg = str(e)
        _send(rep_fd, CompileReply(ok=False, category=category, error=msg, extensions=built,
                                   seconds=time.perf_counter() - t0))
        return
    del code
    _send(rep_fd, CompileReply(ok=True, extensions=built, kernel_names=sorted(set(kernels)),
                               seconds=time.perf_counter() - t0))


def compiler_errors(text: str, limit: int = 40) -> str:
    """The compiler's own error lines out of torch's 'Error building extension' message, the first on
    the first line (tables show only that), each source named by its file name alone: the build
    folder's path filled a table's cell before the line number (a new user's compile error read
    `/var/cache/harness/ext/7a09.../me_gemm_swish_bias/mai...`)."""
    import re
    lines = text.splitlines()
    head = lines[0] if lines else "build failed"
    keep = [ln for ln in lines if "error" in ln.lower() and not ln.startswith("ninja:")
            and "Error building extension" not in ln]
    if not keep:
        keep = lines[-limit:]
    keep = [re.sub(r"(?:/[^\s:/()]+)+/([^\s:/()]+\.(?:cpp|cc|cxx|cu|cuh|h|hpp))(?=[:(])", r"\1", ln)
            for ln in keep[:limit]]  # gcc's "main.cpp:12:5:", nvcc's "main.cu(12):"
    return head.split(":")[0] + (": " + "\n".join(keep) if keep else ":")


# --------------------------------------------------------------------------------------------------
# candidate / reference roles: the command loop around runner.Runner

def serve(setup: Setup, cmd_in, rep_fd: int) -> None:
    from ..records.messages import (COMMAND, BuildReply, InputsReply, JudgeReply, KernelsReply, LintReply, LoadReply,
                                    ProfilerReply, QuietReply, ReleaseReply, TimeReply, TrialsReply, failed)

    try:
        runner = Runner(setup)
        t0 = time.perf_counter()
        env = fingerprint(setup.device)
        _send(rep_fd, LoadReply(ok=True, env=env,
                                notes={**runner.steps, "fingerprint_s": f"{time.perf_counter() - t0:.3f}"}))
    except BaseException as e:  # noqa: BLE001
        _send(rep_fd, failed("load", "runtime_error",
                             _short_exc(e) + _frames(e, setup.solution_path or setup.problem_path)))
        return
    for line in cmd_in:
        cmd = COMMAND.validate_json(line)
        if cmd.op == "exit":
            return
        runner.shared.clear()  # a candidate's exported outputs: judged by now
        try:
            if cmd.op == "build":
                runner.build(cmd.init_seed)
                params = getattr(runner.model, "parameters", None)
                reply = BuildReply(ok=True,
                                   param_count=sum(p.numel() for p in params()) if callable(params) else 0)
            elif cmd.op == "trials":
                blobs, seen = runner.trials(cmd.seeds, cmd.shapes, cmd.inputs, cmd.share)
                reply = TrialsReply(ok=True, blob_sizes=[b.size for b in blobs], **seen)
                reply.blobs = blobs
            elif cmd.op == "judge" and runner.role == "reference" and runner.device == "cuda":
                reply = JudgeReply(ok=True, **runner.judge(cmd))
            elif cmd.op == "release" and runner.role == "reference":
                runner.release(cmd.token)
                reply = ReleaseReply(ok=True)
            elif cmd.op == "lint" and runner.role == "reference":
                reply = LintReply(ok=True, **runner.lint(cmd))
            elif cmd.op == "time":
                reply = TimeReply(ok=True, **runner.time(cmd))
            elif cmd.op == "inputs" and runner.role == "reference":
                reply = InputsReply(ok=True, **runner.serve_inputs(cmd))
            elif cmd.op == "quiet" and runner.role == "reference" and runner.device == "cuda":
                reply = QuietReply(ok=True, **runner.quiet(cmd.probe_us, cmd.probes, cmd.max_s))
            elif cmd.op == "profiler" and runner.role == "candidate" and runner.device == "cuda":
                reply = ProfilerReply(ok=True, **runner.start_profiler(cmd.kernel_list))
            elif cmd.op == "kernels" and runner.role == "candidate" and runner.device == "cuda":
                reply = KernelsReply(ok=True, **runner.kernels(cmd.seeds[0]))
            else:
                reply = failed(cmd.op, "runtime_error", f"unknown op {cmd.op}")
        except InterfaceError as e:
            reply = failed(cmd.op, "interface_error", str(e))
        except BaseException as e:  # noqa: BLE001
            reply = failed(cmd.op, "runtime_error",
                           _short_exc(e) + _frames(e, setup.solution_path or "problem_module"))
        _send(rep_fd, reply)
        reply_ok = reply.ok
        try:
            for blob in reply.blobs:  # each a payload.Encoded, produced as it is written
                for part in blob:
                    _write_all(rep_fd, part)
        except BaseException:  # noqa: BLE001 - the reply line promised bytes that cannot come now
            return
        if cmd.op in ("trials", "judge"):
            reply = None
            runner.release_cache()
        if not reply_ok and not (cmd.op == "time" and cmd.variant == "compiled" and runner.role == "reference"):
            return  # a failed candidate may hold a poisoned CUDA context: never reuse it
        if not reply_ok:
            # torch.compile(Model) failed (Inductor, or out of memory beside other evaluations): the
            # baseline is left out; the reference goes on (it ended here before, and the evaluation
            # sharing it lost its reference mid-timing: a false failure of the problem)
            runner.release_cache()


def set_dumpable(dumpable: bool) -> None:
    """Other processes of this user (a candidate) cannot read this one's memory or file descriptors
    through /proc or ptrace once it is not dumpable (Linux)."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(4, int(dumpable), 0, 0, 0)  # PR_SET_DUMPABLE = 4
    except Exception:
        pass


def is_dumpable() -> Optional[int]:
    """PR_GET_DUMPABLE (Linux); None where it cannot be asked."""
    try:
        import ctypes
        return ctypes.CDLL(None).prctl(3, 0, 0, 0, 0)
    except Exception:
        return None


def preload_imports(fork_safe: bool = False) -> None:
    """A standby's start: what the candidate role imports anyway, and nothing that runs a problem's
    or a solution's code or creates a CUDA context (the setup, and the device, are not known yet).
    `fork_safe`: for a fork server (forkserver.py), leaving the CUDA driver uninitialised, since a
    forked child could not use it then."""
    import torch
    import torch.profiler  # noqa: F401  (the kernel list after timing; importing attaches nothing)
    from .. import problems  # noqa: F401
    from ..records import messages, result  # noqa: F401
    from ..timing import loop  # noqa: F401  (and the hold, fingerprints and NVML monitor it imports)
    if not fork_safe:
        import torch.utils.cpp_extension  # noqa: F401
        return
    # torch.utils.cpp_extension's import asks torch.cuda.is_available() (cuInit) wherever nvcc is
    # installed, only to print a warning where no device answers; everything else it sets up is paths
    # and flags. Asked nothing here, so that each forked child does not import it (setuptools and
    # all: about 0.6 s with its cuInit) and the driver starts in the child's own priming instead
    real = torch.cuda.is_available
    torch.cuda.is_available = lambda: True
    try:
        import torch.utils.cpp_extension  # noqa: F401
    finally:
        torch.cuda.is_available = real


def _preload(rep_fd: int) -> None:
    import torch

    from ..records.messages import StandbyReply
    preload_imports()
    _send(rep_fd, StandbyReply(ok=True, notes={"torch": torch.__version__,
                                                       "cuda_initialized": str(torch.cuda.is_initialized())}))


def _prime(rep_fd: int, device: str) -> None:
    """A standby's second step, asked for by the parent in a stoppable phase of the slot's gate (it
    touches the GPU, so a timing stops it): the CUDA context, and the timing primitives pinned with
    the launch hold built and checked, which a candidate's load would otherwise do (0.7 s of it on an
    H200 machine). Still no problem's or
    solution's code: pinning here is as early as pinning in Runner, and the reference role, which
    also takes standbys, only ever reads what pin() keeps."""
    import torch

    from ..records.messages import PrimeReply
    from ..timing.hold import is_pinned, pin, pinned
    if device == "cuda":
        torch.cuda.init()
    pin(torch)
    notes = {"cuda_initialized": str(torch.cuda.is_initialized()), "pinned": str(is_pinned()),
             "hold": str(pinned("hold") is not None)}
    _send(rep_fd, PrimeReply(ok=True, notes=notes))


def main() -> None:
    from ..sandbox import apart_at_birth
    apart_at_birth()  # before any thread: a view made later covers them all (sandbox.make_view)
    nondumpable = bool(os.environ.pop("HARNESS_NONDUMPABLE", None))
    standby = bool(os.environ.pop("HARNESS_STANDBY", None))
    # a standby waits while the previous candidate runs: that one must not be able to reach into it
    # (its command pipe through /proc) and write the next candidate's setup
    if nondumpable or standby:
        set_dumpable(False)
    cmd_in, rep_fd = _channel()
    if standby:
        _preload(rep_fd)
    while True:
        line = cmd_in.readline()
        if not line:  # the parent went away before sending a setup
            os._exit(0)
        first = json.loads(line)
        if standby and first.get("op") == "prime":
            _prime(rep_fd, Prime.model_validate(first).device)
            continue
        if first.get("op") == "exit":  # what close() sends a standby that was never given a setup
            os._exit(0)
        setup = Setup.model_validate(first)
        break
    if standby:
        if setup.role not in ("candidate", "reference"):
            os._exit(0)
        if setup.role == "candidate" and not nondumpable:
            set_dumpable(True)  # from here on, a candidate exactly like a fresh one
        # a reference stays as it started: not dumpable, out of a candidate's reach
    os.environ.update(setup.env)
    if setup.jail is not None:  # (a fresh child: before torch starts any thread; sandbox.isolate)
        from ..sandbox import isolate
        isolate()
    if setup.role == "compile":
        run_compile(setup, rep_fd)
    else:
        serve(setup, cmd_in, rep_fd)
    sys.stdout.flush()
    os._exit(0)  # skip interpreter teardown: extension destructors may crash after a CUDA fault


if __name__ == "__main__":
    main()
