"""A precompiled <torch/extension.h> for solutions' builds (`[batch] precompiled_header`).

Of a load_inline CUDA extension's ~64 CPU-seconds on the H100 machine, 15 are g++ on the main.cpp
torch generates, almost all of it <torch/extension.h>; with the header precompiled, 6.6
(bench/results/build-cost.md). A batch builds the header once per torch, compiler and set of flags,
in the background (`start`): torch's own main.o command for a throwaway extension, less its name,
turned into a header build, for the flag sets solutions use most (none, `-O3`), with and without
CUDA by the device. Builds find it through their compiler (`enable`: `CXX` is harness/pch_cxx.py,
which adds it to CPATH only for a main.cpp compile of exactly those flags), so a build that starts
before the header is ready, or has other flags, compiles as before. The objects are the same
byte for byte (a helper's check on gcc 13).

Only the harness writes the headers' folder (root, as it builds them); jailed builds read it."""
from __future__ import annotations

import functools
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Optional

VARIANTS = ([], ["-O3"])  # the extra_cflags a header is built for


WRAPPER = Path(__file__).resolve().parent / "bin" / "g++"  # a name torch takes for gcc without asking it


@functools.lru_cache(maxsize=8)
def _compiler_id(cxx: str) -> Optional[str]:
    """The real compiler's version line, where it is gcc (clang does not look for .gch folders)."""
    try:
        out = subprocess.run([cxx, "-v"], capture_output=True, text=True, timeout=20).stderr
    except (OSError, subprocess.TimeoutExpired):
        return None
    return next((ln for ln in out.splitlines() if ln.startswith("gcc version")), None)


def root_for(cache_dir: Path, cxx: str) -> Optional[Path]:
    """The headers' folder for this torch and this compiler (a header from other headers or another
    compiler is never offered: gcc checks neither the headers' contents nor their version)."""
    from .build import torch_versions
    ident = _compiler_id(cxx)
    if ident is None:
        return None
    key = hashlib.sha256("\n".join([torch_versions()[0], shutil.which(cxx) or cxx, ident, sys.version]).encode())
    return Path(cache_dir).resolve() / "pch" / key.hexdigest()[:16]


def enable(cache_dir: Path) -> Optional[Path]:
    """From now on this process's children build through the wrapper, with `cache_dir`'s headers:
    the same command line whether or not a header is ready (ninja never rebuilds for it). Returns
    the headers' folder; None where the compiler is not gcc."""
    real = os.environ.get("HARNESS_REAL_CXX") if os.environ.get("CXX") == str(WRAPPER) else None
    real = real or os.environ.get("CXX") or "c++"
    root = root_for(cache_dir, real)
    if root is None:
        return None
    os.environ.update(CXX=str(WRAPPER), HARNESS_REAL_CXX=real, HARNESS_PCH_ROOT=str(root),
                      HARNESS_PYTHON=sys.executable)
    return root


def compile_commands(work: Path, **load_inline_kw) -> dict[str, list[str]]:
    """The compile commands torch writes for an extension built in `work`, by output file (main.o,
    cuda.cuda.o); nothing is compiled or loaded. In a process of its own: it stubs torch's build."""
    import torch.utils.cpp_extension as ce
    ce._run_ninja_build = lambda *a, **k: None
    ce._import_module_from_library = lambda *a, **k: None
    if ce.CUDA_HOME is None and shutil.which("nvcc"):  # a CPU build of torch: nvcc's own installation
        ce.CUDA_HOME = str(Path(shutil.which("nvcc")).resolve().parent.parent)
    ce.load_inline(build_directory=str(work), **load_inline_kw)
    out = subprocess.run(["ninja", "-C", str(work), "-t", "commands"], capture_output=True, text=True,
                         check=True).stdout
    return {Path(a[a.index("-o") + 1]).name: a for a in map(shlex.split, out.splitlines()) if "-o" in a and "-c" in a}


def header_command(main: list[str], header: Path, out: Path) -> list[str]:
    """main.o's command turned into a build of `header` precompiled: no extension name, no
    dependency file, no source (pch_cxx.flags)."""
    from .pch_cxx import flags
    return [main[0]] + flags(main[1:]) + ["-x", "c++-header", str(header), "-o", str(out)]


def _main_command(work: Path, cuda: bool, extra: list[str]) -> list[str]:
    """torch's main.o command for a throwaway extension with these flags."""
    kw = dict(cuda_sources="__global__ void k() {}\n", with_cuda=True) if cuda else {}
    return compile_commands(work, name="harness_pch_probe", cpp_sources="int harness_pch_probe();",
                            functions=None, extra_cflags=list(extra), **kw)["main.o"]


def build(cache_dir: Path, device: str, variants=VARIANTS) -> list[str]:
    """Each variant's header (its extra_cflags), where missing (run as the harness, in a process of
    its own: it imports torch). Returns what it did, a line each."""
    from .pch_cxx import flags_key
    root = enable(cache_dir)
    if root is None:
        return ["no gcc: no precompiled header"]
    import torch.utils.cpp_extension as ce
    include = Path(ce.include_paths()[0]) / "torch" / "extension.h"
    done = []
    for extra in variants:
        with tempfile.TemporaryDirectory(prefix="harness-pch-") as work:
            argv = _main_command(Path(work), device == "cuda", extra)
            d = root / flags_key(argv[1:])
            target = d / "torch" / "extension.h.gch" / "v.gch"
            if target.exists():
                done.append(f"{' '.join(extra) or 'default'}: ready")
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f".v.{os.getpid()}.gch")
            cmd = header_command([os.environ["HARNESS_REAL_CXX"]] + argv[1:], include, tmp)
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode != 0:
                tmp.unlink(missing_ok=True)
                done.append(f"{' '.join(extra) or 'default'}: failed: {p.stderr[-500:]}")
                continue
            tmp.chmod(0o644)
            # the header itself beside its precompiled form: a source that includes it again (load_inline's
            # main.cpp does: its own include, then the solution's) finds it where it found the first
            beside = d / "torch" / "extension.h"
            try:
                beside.symlink_to(include)
            except FileExistsError:
                pass
            os.replace(tmp, target)  # whole or absent: a build never reads one half written
            done.append(f"{' '.join(extra) or 'default'}: built")
    return done


def start(cache_dir: Path, device: str) -> Optional[subprocess.Popen]:
    """The headers built in the background, at idle priority (a batch does not wait for them)."""
    if enable(cache_dir) is None:
        return None
    p = subprocess.Popen([sys.executable, "-m", "harness.pch", str(cache_dir), device],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    from .build import idle_priority
    idle_priority(p.pid)
    import atexit
    atexit.register(p.kill)  # nothing of the batch's outlives it; a header is written whole or not at all
    return p


if __name__ == "__main__":
    for line in build(Path(sys.argv[1]), sys.argv[2]):
        print(line)
