"""Solution code (its build, its import, its forward) runs as a uid of its own: not the harness's.

What a uid of its own stops, with the kernel as the judge, not checks in the solution's interpreter:
- signals and ptrace: a process may signal or trace only processes of its own uid, so the parent,
  the reference, the fork server, standbys and other solutions' processes are out of its reach;
- writes: the harness's files, the problems, the results and the build cache are the harness's
  (root's), so a solution cannot rewrite the judge's bytecode, another solution's build or a record.

Each process gets a fresh uid (`Jails.make`), and a home of its own (HOME, TMPDIR and the tool caches
point there) that the parent removes when the process ends. A solution's extension directory is
shared only with that solution's own processes, through a group derived from it (`solution_gid`):
torch's load_inline takes a lock file there, and the build writes it. Everything else it may only
read. The child enters its jail (`enter`) after the harness's own start-up (imports, the CUDA context,
the problem) and before the first line of the solution runs.

Available where the harness runs as root on Linux (`available`); every record lists the protections
in force (`protections`), and a run can refuse to start without them (`--require-sandbox`).
"""
from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import stat
import tempfile
import threading
from pathlib import Path
from typing import Optional

from .records.messages import Jail

UID_BASE = 0xC0000000  # far above any uid a system hands out; no passwd entry is needed
UID_SPAN = 1 << 28
GID_BASE = 0x80000000
GID_SPAN = 1 << 30


def available(reach: tuple = ()) -> Optional[str]:
    """None where solution code can be given a uid of its own, and reach `reach` (the build cache)
    besides what every jailed process reads; else why not."""
    if not hasattr(os, "setresuid") or not Path("/proc/self").exists():
        return "not Linux"
    if os.geteuid() != 0:
        return "the harness does not run as root, so it cannot hand out uids"
    bad = _closed_to_others(tuple(Path(p) for p in reach))
    if bad is not None:
        return (f"{bad} is closed to other users, so a jailed solution could not read Python, torch or "
                f"the harness below it (open it with chmod o+x)")
    return None


def _closed_to_others(extra: tuple = ()) -> Optional[str]:
    """The first folder on the way to what a jailed process reads (the interpreter's installation,
    its headers, torch, the harness) that other users may not pass through; None where all may."""
    import stat
    import sys
    import sysconfig
    here = Path(__file__).resolve().parent.parent
    targets = {Path(sys.base_prefix), Path(sys.prefix), Path(sysconfig.get_paths()["include"]), here,
               Path(sysconfig.get_paths()["purelib"]), *extra}
    for t in targets:
        for d in [*reversed(t.resolve().parents), t.resolve()]:
            try:
                if d.is_dir() and not os.stat(d).st_mode & stat.S_IXOTH:
                    return str(d)
            except OSError:
                continue
    return None


class SandboxUnavailable(RuntimeError):
    """The config asks for the sandbox (`[hardening] sandbox = "on"`, `--require-sandbox`) and this
    machine cannot give it."""


def wanted(setting: str, device: str, cache_dir: str) -> bool:
    """Whether solution code on `device` runs jailed, by `[hardening] sandbox`: "on" (or refuse to
    run), "off", or "auto": where available, on the CPU path; on a GPU only once the sandbox has been
    measured there (not yet: a CUDA context under a uid of its own is untested). `cache_dir`: where
    its builds go, which the jailed build must reach."""
    if setting == "off":
        return False
    why = available((cache_dir,))
    if setting == "on":
        if why is not None:
            raise SandboxUnavailable(f"the sandbox is required and unavailable: {why}")
        return True
    return why is None and device == "cpu"


def solution_gid(ext_dir: Path) -> int:
    """The group a solution's processes share, and nothing else has: from its extension directory
    (content-addressed by its source), in a space wide enough that two solutions of a run share one
    with odds of about n^2 / 2^31."""
    h = int(hashlib.sha256(str(Path(ext_dir).resolve()).encode()).hexdigest()[:16], 16)
    return GID_BASE + h % GID_SPAN


def open_to(ext_dir: Path, gid: int) -> None:
    """The extension directory writable by the solution's group (the build writes it, load_inline
    takes its lock there), by root's hand, for that solution only. Through file descriptors, never
    a path: the folder is the solution's to rearrange while this runs, and a link swapped in for a
    file or a folder must not turn root's chown on a file of root's choosing."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
    for _, _, files, dir_fd in os.fwalk(ext_dir, follow_symlinks=False):  # (checks each folder it enters)
        os.fchown(dir_fd, 0, gid)
        os.fchmod(dir_fd, 0o2770)  # closed to other solutions: their builds and sources are their own
        for f in files:
            try:
                fd = os.open(f, flags, dir_fd=dir_fd)
            except OSError:  # a link (ELOOP), or gone
                continue
            try:
                st = os.fstat(fd)
                if stat.S_ISREG(st.st_mode):
                    os.fchown(fd, 0, gid)
                    # group-writable: ninja appends its log, torch rewrites a changed source; only
                    # the solution's own processes are in the group
                    os.fchmod(fd, (st.st_mode & 0o770) | 0o660)
            finally:
                os.close(fd)


def kill_all(uid: int) -> None:
    """Every process of `uid` killed: what a jailed process started in a session of its own (a
    daemon past the process-group kill) dies with its jail. As that uid, kill(-1) reaches exactly
    the processes it owns."""
    import signal
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            for _ in range(3):  # again, for one forked while the first signal went out
                try:
                    os.kill(-1, signal.SIGKILL)
                except ProcessLookupError:
                    break
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


class Jails:
    """The parent's hand-out of uids and homes: one `Jail` per process that runs solution code."""

    def __init__(self):
        self._lock = threading.Lock()
        self._live: set[int] = set()
        self._base: Optional[Path] = None

    def _root(self) -> Path:
        if self._base is None or not self._base.exists():
            self._base = Path(tempfile.mkdtemp(prefix="harness-jails-"))
            os.chmod(self._base, 0o711)  # homes reachable by their owner only, not listable
            import atexit
            atexit.register(shutil.rmtree, self._base, True)
        return self._base

    def make(self, ext_dir: Optional[Path], solution: Optional[Path]) -> Jail:
        """A fresh uid, its home, and (given the solution's file) a copy of the solution it may read
        wherever the original lies; `ext_dir` (the solution's extensions) opened to its group."""
        with self._lock:
            while True:
                uid = UID_BASE + secrets.randbelow(UID_SPAN)
                if uid not in self._live:
                    self._live.add(uid)
                    break
            home = self._root() / str(uid)
        gid = solution_gid(ext_dir) if ext_dir is not None else uid
        home.mkdir(mode=0o700)
        for sub in ("tmp", ".cache"):
            (home / sub).mkdir()
        copy = None
        if solution is not None:
            copy = home / "src" / Path(solution).name
            copy.parent.mkdir()
            shutil.copy2(solution, copy)
        for root, dirs, files in os.walk(home):
            os.chown(root, uid, gid)
            for f in files:
                os.chown(os.path.join(root, f), uid, gid)
        if ext_dir is not None:
            open_to(ext_dir, gid)
        return Jail(uid=uid, gid=gid, home=str(home), solution_path=str(copy) if copy else None)

    def release(self, jail: Jail) -> None:
        kill_all(jail.uid)
        shutil.rmtree(jail.home, ignore_errors=True)
        with self._lock:
            self._live.discard(jail.uid)


JAILS = Jails()


def enter(jail: Jail) -> None:
    """In the child, before any solution code: its home as HOME, TMPDIR and the tools' caches, then
    the uid and group for good (no way back, no privileges gained through exec)."""
    import ctypes
    home = jail.home
    os.environ.update(HOME=home, TMPDIR=os.path.join(home, "tmp"), XDG_CACHE_HOME=os.path.join(home, ".cache"),
                      TRITON_CACHE_DIR=os.path.join(home, ".cache", "triton"),
                      TORCHINDUCTOR_CACHE_DIR=os.path.join(home, ".cache", "inductor"),
                      USER="solution", LOGNAME="solution")  # getpass finds no passwd entry for the uid
    tempfile.tempdir = None
    os.umask(0o002)  # what it creates in its solution's directory stays its group's (setgid dirs)
    os.setgroups([])
    os.setresgid(jail.gid, jail.gid, jail.gid)
    os.setresuid(jail.uid, jail.uid, jail.uid)
    if os.getuid() != jail.uid or os.geteuid() != jail.uid:
        raise RuntimeError("the jail's uid did not take")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS: no setuid binary gives root back
    # the uid change left the process not dumpable (so its own /proc entries became root's); it has
    # a uid of its own, so dumpable reaches no one else's
    libc.prctl(4, 1, 0, 0, 0)


def protections(jailed: bool) -> list[str]:
    """What a record says was in force around its solution's code."""
    out = ["private_pipe", "nondumpable_reference"]
    if jailed:
        out += ["own_uid", "read_only_harness", "private_home"]
    return out
