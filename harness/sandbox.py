"""Solution code (its build, its import, its forward) runs as a uid of its own: not the harness's.

What a uid of its own stops, with the kernel as the judge, not checks in the solution's interpreter:
- signals and ptrace: a process may signal or trace only processes of its own uid, so the parent,
  the reference, the fork server, standbys and other solutions' processes are out of its reach;
- writes: the harness's files, the problems, the results and the build cache are the harness's
  (root's), so a solution cannot rewrite the judge's bytecode, another solution's build or a record.

Each process gets a fresh uid (`Jails.make`), and a home of its own (HOME, TMPDIR and the tool caches
point there) that the parent removes when the process ends. A solution's extension directory is
shared only with that solution's own processes, through a group the parent draws for it at random
(`Jails.group`; one derived from the folder's name could be matched by grinding a source until it
collided, which a helper's attack did in four minutes):
torch's load_inline takes a lock file there, and the build writes it. Everything else it may only
read. The child enters its jail (`enter`) after the harness's own start-up (imports, the CUDA context,
the problem) and before the first line of the solution runs.

Available where the harness runs as root on Linux (`available`); every record lists the protections
in force (`protections`), and a run can refuse to start without them (`--require-sandbox`).
"""
from __future__ import annotations

import contextlib
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
NPROC = 1024  # processes and threads a jail's uid may have (a build's compilers included)
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


def _installation() -> set[Path]:
    """Where every jailed process reads its Python, its headers, torch and the harness."""
    import sys
    import sysconfig
    here = Path(__file__).resolve().parent.parent
    return {Path(sys.base_prefix), Path(sys.prefix), Path(sysconfig.get_paths()["include"]), here,
            Path(sysconfig.get_paths()["purelib"])}


def _read_by_every_jail() -> set[str]:
    """The installation and every folder on the path (a --target install of a package, a checkout)."""
    import sys
    out = {str(p) for p in _installation()} | {p for p in sys.path if p and os.path.isabs(p)}
    return {os.path.realpath(p) for p in out if os.path.exists(p)}


def _closed_to_others(extra: tuple = ()) -> Optional[str]:
    """The first folder on the way to what a jailed process reads (the interpreter's installation,
    its headers, torch, the harness) that other users may not pass through; None where all may."""
    for t in {*_installation(), *extra}:
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
    run), "off", or "auto": wherever available (bench/results/sandbox-gpu.md measures it on a GPU).
    `cache_dir`: where its builds go, which the jailed build must reach."""
    if setting == "off":
        return False
    why = available((cache_dir,))
    if why is None and setting == "on" and views() is None:
        why = f"no view of the machine of its own could be made (a mount namespace): {_VIEWS.get('why', '')[-200:]}"
    elif why is None and setting == "on" and not views()["own_pids"]:
        why = f"no PID namespace of its own could be made: {_VIEWS.get('pids_why', '')[-200:]}"
    if setting == "on" and why is not None:
        raise SandboxUnavailable(f"the sandbox is required and unavailable: {why}")
    if why is None:
        JAILS.reads(cache_dir)
    return why is None


MAX_DEPTH = 64  # folders deeper than this in a solution's tree are left alone (os.walk recursed: 1,600 deep crashed the parent)


def open_to(ext_dir: Path, gid: int) -> None:
    """The extension directory writable by the solution's group (the build writes it, load_inline
    takes its lock there), by root's hand, for that solution only; every file in it root's. Through
    file descriptors, never a path: the folder is the solution's to rearrange while this runs, and a
    link swapped in for a file or a folder must not turn root's chown on a file of root's choosing."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        top = os.open(ext_dir, flags | os.O_DIRECTORY)
    except OSError:
        return
    stack = [(top, 0)]
    while stack:
        dir_fd, depth = stack.pop()
        try:
            os.fchown(dir_fd, 0, gid)
            os.fchmod(dir_fd, 0o2770)  # closed to other solutions: their builds and sources are their own
            for entry in os.scandir(dir_fd):
                try:
                    fd = os.open(entry.name, flags, dir_fd=dir_fd)
                except OSError:  # a link (ELOOP), or gone
                    continue
                st = os.fstat(fd)
                if stat.S_ISDIR(st.st_mode) and depth < MAX_DEPTH:
                    stack.append((fd, depth + 1))
                    continue
                try:
                    # a second name of a file elsewhere (a hard link, where the host lets anyone
                    # make one to a file not theirs: fs.protected_hardlinks=0) is left as it is
                    if stat.S_ISREG(st.st_mode) and st.st_nlink == 1:
                        os.fchown(fd, 0, gid)
                        # group-writable: ninja appends its log, torch rewrites a changed source;
                        # only the solution's own processes are in the group
                        os.fchmod(fd, (st.st_mode & 0o770) | 0o660)
                finally:
                    os.close(fd)
        except OSError:
            pass
        finally:
            os.close(dir_fd)


def remove_tree(path) -> None:
    """A tree a jailed process wrote, gone: shutil.rmtree (which never follows links), and where it
    cannot (a tree too deep for its recursion) rm, which walks iteratively."""
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        return
    except (OSError, RecursionError):
        import subprocess
        subprocess.run(["rm", "-rf", "--one-file-system", "--", str(path)], check=False)


# What a solution's build folder may keep in the cache once its jail is released: an honest build is
# tens of MB; a helper's attack left a 512 MiB file there, and enough of them fill the disk the
# builds of every later solution need
BUILD_FOLDER_CAP = 1 << 30


def tree_bytes(path: Path, stop_at: int) -> int:
    """The bytes on disk of everything under `path` (files, links, folders), through file descriptors
    and never following a link, counted until they pass `stop_at` (a tree of a million files is not
    walked to its end). A tree deeper than MAX_DEPTH counts as over: what lies below is not walked
    (a helper's attack hid 1.3 GiB 70 folders down, and 1.2 GiB in the targets of 300,000 links)."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        stack = [(os.open(path, flags | os.O_DIRECTORY), 0)]
    except OSError:
        return 0
    total = 0
    while stack and total <= stop_at:
        dir_fd, depth = stack.pop()
        try:
            for entry in os.scandir(dir_fd):
                if total > stop_at:
                    break
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                total += st.st_blocks * 512  # what it holds on disk (a sparse file holds little)
                if stat.S_ISDIR(st.st_mode):
                    if depth >= MAX_DEPTH:
                        total = stop_at + 1
                        break
                    try:
                        stack.append((os.open(entry.name, flags | os.O_DIRECTORY, dir_fd=dir_fd), depth + 1))
                    except OSError:
                        pass
        finally:
            os.close(dir_fd)
    for fd, _ in stack:
        os.close(fd)
    return total


def trim_build_folder(path: Path) -> None:
    """A build folder over BUILD_FOLDER_CAP is emptied: whatever needs it again builds it again."""
    if tree_bytes(path, BUILD_FOLDER_CAP) > BUILD_FOLDER_CAP:
        remove_tree(path)
        path.mkdir(exist_ok=True)


SHARED_TMP = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/var/lock")


def remove_leftovers(uid: int) -> None:
    """What a jail's uid left in the machine's shared temporary folders (a /dev/shm file is memory
    held for good)."""
    for d in SHARED_TMP:
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            try:
                if e.stat(follow_symlinks=False).st_uid != uid:
                    continue
                if e.is_dir(follow_symlinks=False):
                    remove_tree(e.path)
                else:
                    os.unlink(e.path)
            except OSError:
                pass


def become(uid: int, gid: int) -> None:
    """This process is `uid` in `gid` alone from now on, for good (real, effective and saved ids)."""
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    if os.getuid() != uid or os.geteuid() != uid:
        raise RuntimeError("the jail's uid did not take")


def read_regular(path) -> str:
    """A file the harness wrote where a jailed process may write too: never read through a link it
    planted, never blocked on a FIFO it made."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd) as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(f"{path} is not a regular file")
        return fh.read()


def kill_all(uid: int) -> None:
    """Every process of `uid` killed: what a jailed process started in a session of its own (a
    daemon past the process-group kill) dies with its jail. As that uid, kill(-1) reaches exactly
    the processes it owns."""
    import signal
    pid = os.fork()
    if pid == 0:
        try:
            become(uid, uid)
            for _ in range(3):  # again, for one forked while the first signal went out
                try:
                    os.kill(-1, signal.SIGKILL)
                except ProcessLookupError:
                    break
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def _kept_group(folder: Path, name: str) -> int:
    """The group kept for `name` in `folder` (root's alone), drawn and kept now if there is none: the
    file appears whole or not at all (written aside, then linked), so a concurrent reader never sees
    half of it and two drawers agree on the first."""
    folder.mkdir(mode=0o700, exist_ok=True)
    path = folder / name
    if not path.exists():
        tmp = folder / f".{name}.{os.getpid()}.{secrets.token_hex(4)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(str(GID_BASE + secrets.randbelow(GID_SPAN)))
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        finally:
            os.unlink(tmp)
    return int(read_regular(path).strip())


ROOT_PREFIX = "harness-jails-"
OWNER_FILE = ".owner"  # locked (flock) by the harness process whose jails live under the folder
ABANDONED_AFTER_S = 60.0


def _own(root: Path) -> int:
    """Lock `root` as this process's for its life: the open descriptor holds the flock, and the
    kernel lets go of it when the process ends, however it ends."""
    import fcntl
    fd = os.open(root / OWNER_FILE, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def _owned_root(tmp: Optional[Path], prefix: str) -> tuple[Path, int]:
    """A new folder of this harness process's under `tmp` (None: the temporary folder), after the
    abandoned ones there are swept: 0711 (not listable), owner-locked (`_own`: the descriptor
    returned) and removed at exit."""
    import atexit
    sweep_abandoned_roots(tmp)
    root = Path(tempfile.mkdtemp(prefix=prefix, dir=tmp))
    os.chmod(root, 0o711)
    fd = _own(root)
    atexit.register(remove_tree, root)
    return root, fd


def sweep_abandoned_roots(tmp: Optional[Path] = None) -> list[Path]:
    """Remove the jail folders of harness processes that ended without their exit handler (killed,
    crashed): an unlocked owner file, or, made before owner files, an empty folder. A batch killed
    a thousand times left a thousand folders, each with the homes of its last jails. A folder under
    a minute old is left alone (its owner may not have locked it yet). Returns those removed."""
    import fcntl
    import time
    removed = []
    for d in Path(tmp or tempfile.gettempdir()).glob(ROOT_PREFIX + "*"):
        try:
            st = d.lstat()
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or time.time() - st.st_mtime < ABANDONED_AFTER_S:
                continue
            fd = os.open(d / OWNER_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            with contextlib.suppress(OSError):
                d.rmdir()  # only where empty
                removed.append(d)
            continue
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # its owner lives
        finally:
            os.close(fd)
        remove_tree(d)
        removed.append(d)
    return removed


class Jails:
    """The parent's hand-out of uids and homes: one `Jail` per process that runs solution code."""

    def __init__(self):
        self._lock = threading.Lock()
        self._live: set[int] = set()
        self._groups: dict[str, int] = {}  # a solution's build folder -> its group, for this parent's life
        self._base: Optional[Path] = None
        self._owner: Optional[int] = None  # the descriptor that holds _base's owner lock
        self._off: set[int] = set()  # CPUs no jail may run on (keep_off)
        self._reads: set[str] = set()  # build caches, besides what every jail reads (reads)
        self._shared: Optional[Path] = None
        self._shared_owner: Optional[int] = None
        self._private: Optional[Path] = None
        self._private_owner: Optional[int] = None

    def reads(self, path) -> None:
        """Every jail made from now on reads `path` (a build cache: its precompiled headers), even
        where its view of the machine hides the folder it lies in (make_view)."""
        with self._lock:
            self._reads.add(str(Path(path).resolve()))

    def keep_off(self, cpus: set[int]) -> None:
        """No jail made from now on may run on `cpus` (the CPUs references are timed on): a jail's
        timers fire on the CPU that armed them, frozen or not, and interrupt work is charged to
        whatever runs there (a helper's attack: 300 timerfds each watched through 1,660 epoll
        instances slowed a reference on the jail's CPU 2.2x). Held by each jail's cpuset group, which
        nothing inside can widen; where there is none, by nothing (`cgroups.confines`)."""
        with self._lock:
            self._off |= set(cpus)

    def allowed_cpus(self) -> Optional[set[int]]:
        """Where a jail may run; None: anywhere. Never on the timing CPUs another harness process on
        this machine has claimed (cpus.Claims) either: its references are timed there."""
        from .cpus import CLAIMS, available
        cpus = set(available())
        with self._lock:
            off = set(self._off)
        off |= CLAIMS.held_elsewhere(cpus) - CLAIMS.planned  # (a plan made over claimed CPUs pins its own there)
        if not off:
            return None
        return (cpus - off) or None

    def group(self, ext_dir: Path) -> int:
        """The group of the solution whose build folder is `ext_dir`: drawn at random the first time
        (never chosen or predicted by a solution) and kept beside the folder, in a root-only file
        (`.groups/` of its parent), so that every harness process sharing the cache hands the folder
        to the same group (each drawing its own, two test workers took it from each other)."""
        ext_dir = Path(ext_dir).resolve()
        key = str(ext_dir)
        with self._lock:
            if key not in self._groups:
                self._groups[key] = _kept_group(ext_dir.parent / ".groups", ext_dir.name)
            return self._groups[key]

    def _kept(self, path_attr: str, owner_attr: str, parent: Optional[Path], prefix: str,
              mode: Optional[int] = None) -> Path:
        """The folder held in `path_attr` (its owner lock's descriptor in `owner_attr`), made again
        (under `parent`, given `mode`) where it went missing."""
        path = getattr(self, path_attr)
        if path is None or not path.exists():
            owner = getattr(self, owner_attr)
            if owner is not None:
                os.close(owner)
            path, owner = _owned_root(parent, prefix)
            if mode is not None:
                os.chmod(path, mode)
            setattr(self, path_attr, path)
            setattr(self, owner_attr, owner)
        return path

    def _root(self) -> Path:
        return self._kept("_base", "_owner", None, ROOT_PREFIX)  # homes reachable by their owners only

    def shared_folder(self) -> Path:
        """Where the harness leaves files a jail may read by name only (a round's inputs, made by the
        reference's process: timing.inputs): one folder per harness process, in memory (/dev/shm)
        where there is one, 0711 (no jail may list it), its files the harness's (none may write
        them), bound back read-only into every jail's view."""
        shm = Path("/dev/shm")
        tmp = shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())
        with self._lock:
            return self._kept("_shared", "_shared_owner", tmp, ROOT_PREFIX + "shared-")

    def private_folder(self) -> Path:
        """Where the harness keeps a clocked round's files that no jail may read (its inputs before
        their calls, the outputs the clock took: timing.clocked): one folder per harness process,
        0700, beside the jails' homes (the same file system as a candidate's slots file, so both
        sides' are alike)."""
        with self._lock:
            return self._kept("_private", "_private_owner", None, ROOT_PREFIX + "private-", 0o700)

    def make(self, ext_dir: Optional[Path], solution: Optional[Path], memory_bytes: Optional[int] = None) -> Jail:
        """A fresh uid, its home, and (given the solution's file) a copy of the solution it may read
        wherever the original lies; `ext_dir` (the solution's extensions) opened to its group; a
        control group capped at `memory_bytes` (None: half the host's) and NPROC processes."""
        with self._lock:
            while True:
                uid = UID_BASE + secrets.randbelow(UID_SPAN)
                if uid not in self._live:
                    self._live.add(uid)
                    break
            home = self._root() / str(uid)
        gid = self.group(ext_dir) if ext_dir is not None else uid
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
        from . import cgroups
        groups = cgroups.make(f"jail-{uid}", memory_bytes or default_memory_cap(), NPROC)
        allowed = self.allowed_cpus()
        if allowed:
            cgroups.confine(groups, allowed)
        view = views()
        shared = str(self.shared_folder())
        return Jail(uid=uid, gid=gid, home=str(home), solution_path=str(copy) if copy else None, cgroups=groups,
                    views=view is not None, hide_pids=bool(view and view["hide_pids"]),
                    own_pids=bool(view and view["own_pids"]),
                    writable=[str(home), *([str(ext_dir)] if ext_dir is not None else [])],
                    readable=sorted(self._reads | _read_by_every_jail() | {shared}))

    def release(self, jail: Jail) -> None:
        kill_all(jail.uid)
        from . import cgroups
        cgroups.remove(jail.cgroups)
        remove_tree(jail.home)
        for folder in jail.writable[1:]:  # its build folder, which the cache keeps
            trim_build_folder(Path(folder))
        remove_leftovers(jail.uid)
        with self._lock:
            self._live.discard(jail.uid)


JAILS = Jails()


def keep_off_references(cuda: bool, cpu_threads: int, pairs=()) -> None:
    """Keep every jail made from now on off the CPUs references are timed on: on a GPU each slot's
    reference CPU (`cpus.slot_cpus`: (reference, candidate) CPU pairs), on the CPU path the top
    `cpu_threads` (`cpus.cpu_path_split`)."""
    from . import cpus
    off = cpus.reference_cpus(pairs) if cuda else set(cpus.available()) - cpus.cpu_path_split(cpu_threads)[0]
    if off:
        JAILS.keep_off(off)


def memory_cap(jail_memory_gb: float) -> Optional[int]:
    """`[hardening] jail_memory_gb` in bytes; None: the default (half the host's)."""
    return int(jail_memory_gb * 2**30) if jail_memory_gb else None


def default_memory_cap() -> int:
    from .memory import host_memory
    _, total = host_memory()
    return (total or 8 << 30) // 2


CLONE_NEWNET, CLONE_NEWIPC, CLONE_NEWCGROUP = 0x40000000, 0x08000000, 0x02000000


def _unshare(flags: int, what: str) -> None:
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(flags) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare({what}) failed: {os.strerror(err)}")


def isolate() -> None:
    """While still root, before any thread: a network namespace of its own (no interface but a loopback
    that is down: no network, no socket to another process's port) and an IPC namespace (SysV IPC
    and message queues of its own). A process that started threads already (a standby, torch
    imported) moves only its calling thread: threads it makes later follow, its earlier ones do not."""
    _unshare(CLONE_NEWNET | CLONE_NEWIPC, "CLONE_NEWNET | CLONE_NEWIPC")


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
    from . import cgroups
    cgroups.join(jail.cgroups)  # while still root: its memory and processes capped, all it starts with it
    if jail.own_pids and not _own_pids:
        raise OSError("the jail says a PID namespace of its own, and this process was not born in one")
    if jail.views:
        # its groups become its cgroup namespace's root: /proc/self/cgroup named the harness's group,
        # harness-<the parent's pid> (a helper's attack)
        _unshare(CLONE_NEWCGROUP, "CLONE_NEWCGROUP")
        make_view(jail.writable, jail.hide_pids, jail.readable)
    become(jail.uid, jail.gid)
    import resource
    # its processes and threads, together (the uid is its alone): no fork bomb takes the machine's pids
    resource.setrlimit(resource.RLIMIT_NPROC, (NPROC, NPROC))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS: no setuid binary gives root back
    no_user_namespaces()
    # the uid change left the process not dumpable (so its own /proc entries became root's); it has
    # a uid of its own, so dumpable reaches no one else's
    libc.prctl(4, 1, 0, 0, 0)


# seccomp: no user namespace from a jail. In one, a jailed process is root over a network namespace of
# its own: it brought its loopback up and queued 2.3 GB of TCP buffers that cgroup v1 did not charge
# (a helper's attack), and every kernel path behind CAP_SYS_ADMIN-in-a-user-namespace is its to try.
# clone3 passes its flags in memory a filter cannot read: it fails with ENOSYS, and glibc falls back
# to clone, whose flags it can.
# Nor asynchronous I/O (io_setup, io_uring_setup): reads submitted just before its jail is frozen
# complete while the reference is timed, in interrupt and softirq context on the CPU the disk's
# interrupt goes to, whatever CPU submitted them: a helper's attack fanned each completion out
# through 999 epoll instances on a VM whose disk interrupts all went to the reference's CPU, 1.45x
# passed (tests/adversarial/sandbox/io_completion_storm.py). A blocking read cannot do that: the
# freezer waits for it to finish before the reference is timed.
AUDIT_ARCH_X86_64 = 0xC000003E
NR_CLONE, NR_UNSHARE, NR_CLONE3 = 56, 272, 435
NR_IO_SETUP, NR_IO_URING_SETUP = 206, 425
# Nor the kernel's keyrings (add_key, request_key, keyctl): a key added to a uid's user keyring outlives
# every process of the uid, and one opened to all is read by any later jail through /proc/keys and
# keyctl (a helper's attack: a channel between evaluations that no file view covers, and keys that pile
# up, one keyring per spent uid)
NR_ADD_KEY, NR_REQUEST_KEY, NR_KEYCTL = 248, 249, 250
# Nor inotify (inotify_init, inotify_init1): a watch on the harness's, torch's or the problems' folders
# told a helper's attack when the reference started and what it imported, which no view hides (the
# files must stay readable). Nothing a build or a forward runs needs it; fanotify needs privileges
# a jail does not have.
NR_INOTIFY_INIT, NR_INOTIFY_INIT1 = 253, 294
CLONE_NEWUSER = 0x10000000
X32_SYSCALL_BIT = 0x40000000


def _filter() -> bytes:
    import struct
    ALLOW, ERRNO = 0x7FFF0000, 0x00050000
    LD_W_ABS, JEQ_K, JGE_K, JSET_K, RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
    # (code, k, jump-if-true label, jump-if-false label); labels resolved to relative offsets below
    prog = [
        ("arch", LD_W_ABS, 4, None, None),
        # another ABI (a 32-bit `int 0x80` from this 64-bit process, or x32's numbers) would pass every
        # rule below under numbers of its own: refused whole (an i386 getpid through `int 0x80` ran under it)
        (None, JEQ_K, AUDIT_ARCH_X86_64, None, "eperm"),
        (None, LD_W_ABS, 0, None, None),                   # syscall number
        (None, JGE_K, X32_SYSCALL_BIT, "eperm", None),
        (None, JEQ_K, NR_CLONE3, None, "not3"),
        (None, RET_K, ERRNO | 38, None, None),             # ENOSYS
        ("not3", JEQ_K, NR_IO_SETUP, "eperm", None),
        (None, JEQ_K, NR_IO_URING_SETUP, "eperm", None),
        (None, JEQ_K, NR_ADD_KEY, "eperm", None),
        (None, JEQ_K, NR_REQUEST_KEY, "eperm", None),
        (None, JEQ_K, NR_KEYCTL, "eperm", None),
        (None, JEQ_K, NR_INOTIFY_INIT, "eperm", None),
        (None, JEQ_K, NR_INOTIFY_INIT1, "eperm", None),
        (None, JEQ_K, NR_CLONE, "flags", None),
        (None, JEQ_K, NR_UNSHARE, None, "allow"),
        ("flags", LD_W_ABS, 16, None, None),               # args[0], low half: the flags
        (None, JSET_K, CLONE_NEWUSER, None, "allow"),
        ("eperm", RET_K, ERRNO | 1, None, None),           # EPERM
        ("allow", RET_K, ALLOW, None, None),
    ]
    at = {label: i for i, (label, *_rest) in enumerate(prog) if label}

    def off(i, label):
        return 0 if label is None else at[label] - i - 1
    return b"".join(struct.pack("HBBI", code, off(i, jt), off(i, jf), k)
                    for i, (_l, code, k, jt, jf) in enumerate(prog))


def no_user_namespaces() -> bool:
    """Install the filter in this process (inherited by all it starts); False where it cannot be."""
    import ctypes
    import platform
    if platform.machine() != "x86_64":
        return False
    code = _filter()
    buf = ctypes.create_string_buffer(code)

    class Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
    prog = Prog(len(code) // 8, ctypes.cast(buf, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
    return libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) == 0


def protections(jailed: bool) -> list[str]:
    """What a record says was in force around its solution's code."""
    out = ["private_pipe", "nondumpable_reference"]
    if jailed:
        from . import cgroups
        out += ["own_uid", "read_only_harness", "private_home", "no_network"]
        view = views()
        if view is not None:
            out += ["read_only_view", "private_tmp"] + (["hidden_processes"] if view["hide_pids"] else [])
            out += ["own_pid_namespace"] if view["own_pids"] else []
        if cgroups.available() is None:
            out.append("memory_cap")
        if cgroups.freezes():  # everything it started stops while the other side is timed
            out.append("frozen_while_other_timed")
        import platform
        if platform.machine() == "x86_64":
            out += ["no_user_namespaces", "no_async_io", "no_keyrings", "no_inotify"]
    return out


# A view of the machine of its own, in a mount namespace. The uid already keeps a solution off the
# harness's files; the view closes what a uid leaves open: every folder the machine lets anyone write
# (/tmp, /var/tmp, /dev/shm, /dev/mqueue, a world-writable checkout or results folder), where a
# solution could leave files for the harness's or another solution's processes to find, and the
# other processes' entries in /proc (command lines, states, times), which every uid may read.
CLONE_NEWNS = 0x00020000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND = 0x1, 0x2, 0x4, 0x8, 0x20, 0x1000
MS_REC, MS_PRIVATE = 0x4000, 0x40000
PRIVATE_TMP = ("/tmp", "/var/tmp", "/dev/shm")
CGROUPS = "/sys/fs/cgroup"
# left writable as they are: the kernel's own (proc, sysfs, below them too) and the device nodes a GPU
# is driven through (/dev, /dev/pts; not the rest of /dev: /dev/mqueue, /dev/hugepages)
_KEPT_MOUNTS = ("/proc", "/sys", "/dev", "/dev/pts")
_apart = False  # this process has a mount namespace of its own whose mounts propagate nowhere


def apart_at_birth() -> None:
    """In a child of the harness, before its first thread: a mount namespace of its own, private
    (nothing mounted in it reaches the machine's). Made for every child (a standby does not know yet
    whether it will run solution code), so that the view `enter` makes covers every thread the
    process will have: a namespace made later moves only the thread that made it. Where it cannot be
    made, `make_view` refuses to run."""
    global _apart
    if _apart or not hasattr(os, "setresuid") or os.geteuid() != 0:
        return
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNS) != 0:
        return
    try:
        _mount(None, "/", None, MS_REC | MS_PRIVATE)
    except OSError:
        return
    _apart = True
    if os.getpid() == 1:  # born in a PID namespace of its own (`born_apart`)
        global _own_pids
        try:
            # the machine's /proc names processes by the machine's pids, its own among them under
            # another number: the CUDA driver fails to start there (error 304 on an H200)
            _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        except OSError:
            return
        _own_pids = True


# A PID namespace of its own for every process that runs solution code: its pids are its own
# processes' only, so no probe (kill(pid, 0) answers EPERM for another uid's live process, ESRCH for
# none), no pidfd_open, no affinity or scheduling query reaches the harness's or another solution's
# processes, and when its first process (its pid 1) ends the kernel kills every process it left.
# A process enters a PID namespace only at birth: its parent makes it (`born_apart`) and still sees it
# under its machine pid, which is what the parent signals, pins, reads and records.
# A reference is never born so: CUDA IPC refuses a handle whose exporter has the importer's own pid
# as each sees it (the driver takes it for the same process), and every process born apart is pid 1
# (an H200: a candidate apart to a reference in the machine's namespace opens; two apart, error 201).
CLONE_NEWPID = 0x20000000
_own_pids = False  # this process is pid 1 of a PID namespace of its own, with a /proc of its own


@contextlib.contextmanager
def born_apart(on: bool = True):
    """Inside the `with`, the process this thread starts (one) is born in a PID namespace of its own.
    The kernel keeps the namespace for new children per thread, so the harness's other threads are
    untouched; on leaving, this thread's are its own namespace's again."""
    if not on:
        yield
        return
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    own = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    try:
        _unshare(CLONE_NEWPID, "CLONE_NEWPID")
        try:
            yield
        finally:
            if libc.setns(own, CLONE_NEWPID) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"setns back to the harness's PID namespace failed: {os.strerror(err)}")
    finally:
        os.close(own)


def _mount(src, target, fstype, flags: int, data=None) -> None:
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    enc = [x.encode() if isinstance(x, str) else x for x in (src, target, fstype, data)]
    if libc.mount(enc[0], enc[1], enc[2], flags, enc[3]) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"mount of {target} ({fstype or 'remount'}): {os.strerror(err)}")


def _mount_points() -> list[tuple[str, list[str]]]:
    """(mount point, its options) of this namespace, from /proc/self/mountinfo."""
    out = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            f = line.split()
            point = f[4]
            for esc, ch in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
                point = point.replace(esc, ch)
            out.append((point, f[5].split(",")))
    return out


def make_view(writable: list[str], hide_pids: bool, readable: list[str] = ()) -> None:
    """As root, in a process apart (`apart_at_birth`): every mount read-only but the kernel's own
    (/proc, /sys) and the device nodes (/dev, /dev/pts); a fresh tmpfs over each private temporary
    folder, with what lies under one and the process must still read (`readable`: its Python, the
    harness, the build cache) bound back read-only; an empty /sys/fs/cgroup; `writable` (its home,
    its build folder) bound back writable where they were; and (`hide_pids`) /proc mounted anew
    showing no process of another uid
    (hidepid=2, in a proc of its own: kernels from 5.8 give each mount its own options). Raises where
    any step fails: the jail never runs with less than its record says."""
    if not _apart:
        raise OSError("no mount namespace of its own (apart_at_birth did not run or failed)")
    hidden = tuple(d + "/" for d in PRIVATE_TMP)
    keep = []  # (path, fd, writable), the read-only ones first: a build folder lies in the cache
    for path, rw in [*((p, False) for p in readable), *((p, True) for p in writable)]:
        real = os.path.realpath(path)
        # only what lies under a private folder; the folder itself (a build cache made at /tmp) bound
        # back would make the machine's /tmp its /tmp again (seen: a test's wanted(..., "/tmp"))
        if not rw and (real in PRIVATE_TMP or not (real + "/").startswith(hidden)):
            continue
        try:
            keep.append((path, os.open(path, os.O_PATH), rw))
        except FileNotFoundError:
            continue
    try:
        for point, opts in _mount_points():
            if point in _KEPT_MOUNTS or point.startswith(("/proc/", "/sys/")) or "ro" in opts:
                continue
            flags = MS_REMOUNT | MS_BIND | MS_RDONLY
            for name, bit in (("nosuid", MS_NOSUID), ("nodev", MS_NODEV), ("noexec", MS_NOEXEC)):
                if name in opts:
                    flags |= bit
            try:
                _mount(None, point, None, flags)
            except FileNotFoundError:  # under a mount stacked over it: out of sight already
                continue
        for d in PRIVATE_TMP:
            if os.path.isdir(d) and not os.path.islink(d):
                _mount("tmpfs", d, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777")
        if os.path.isdir(CGROUPS) and not os.path.islink(CGROUPS):
            # every control group's member list is open to all (cgroup v1 `tasks`, v2 `cgroup.procs`):
            # the pids hidepid hides, the harness's among them (a helper's attack). The parent reads
            # and writes the jail's groups; nothing inside needs them
            _mount("tmpfs", CGROUPS, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY, "mode=0555")
        for path, fd, rw in keep:
            # under a fresh tmpfs, its place is made again
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                os.makedirs(path, exist_ok=True)
            elif not os.path.exists(path):
                os.makedirs(os.path.dirname(path), exist_ok=True)
                os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
            _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND)
            _mount(None, path, None, MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | (0 if rw else MS_RDONLY))
        if hide_pids:
            _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=2")
    finally:
        for _path, fd, _rw in keep:
            os.close(fd)


def _kernel_at_least(major: int, minor: int) -> bool:
    import platform
    import re
    m = re.match(r"(\d+)\.(\d+)", platform.release())
    return bool(m) and (int(m.group(1)), int(m.group(2))) >= (major, minor)


_VIEWS: dict = {}
_VIEWS_LOCK = threading.Lock()


def views() -> Optional[dict]:
    """Whether jailed processes get a view of their own (`make_view`) here: {"hide_pids": bool,
    "own_pids": bool (born in a PID namespace of their own: `born_apart`)}, or None where it cannot
    be made. Found once per parent by making one, in a fresh process (a fork of
    a parent with threads could deadlock), so that a jail's record never claims a view its process
    then fails to make. hidepid only from kernel 5.8: before, every proc mount shares one set of
    options, and the machine's own /proc would hide its processes too."""
    with _VIEWS_LOCK:  # one answer for every lane: a record must not claim a view its jail lacked
        if "v" not in _VIEWS:
            _VIEWS.update(_probe_views())
    return _VIEWS["v"]


def _probe_views() -> dict:
    if not hasattr(os, "setresuid") or os.geteuid() != 0:
        return {"v": None, "why": "not root on Linux"}
    import subprocess
    import sys
    hide = _kernel_at_least(5, 8)
    d = tempfile.mkdtemp(prefix="harness-view-probe-")
    code = ("from harness import sandbox as s; s.apart_at_birth(); "
            f"s.make_view([{d!r}], {hide}, {sorted(_read_by_every_jail())!r}); open({d!r} + '/ok', 'w').close()")
    path = [str(Path(__file__).resolve().parent.parent), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    code += f"; s._own_pids and open({d!r} + '/pids', 'w').close()"

    def attempt(apart: bool) -> Optional[str]:
        try:
            with born_apart(apart):
                r = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True, timeout=30,
                                   env={**os.environ, "PYTHONPATH": os.pathsep.join(path)})
            if r.returncode == 0 and os.path.exists(os.path.join(d, "ok")):
                return None
            return r.stderr.decode(errors="replace")[-300:] or f"exit {r.returncode}"
        except (OSError, subprocess.TimeoutExpired) as e:
            return str(e)
    try:
        why = attempt(True)
        if why is None and os.path.exists(os.path.join(d, "pids")):
            return {"v": {"hide_pids": hide, "own_pids": True}}
        pids_why = why or "born apart, it was not pid 1 with a /proc of its own"
        for name in ("ok", "pids"):
            if os.path.exists(os.path.join(d, name)):
                os.remove(os.path.join(d, name))
        why = attempt(False)
        if why is None:
            return {"v": {"hide_pids": hide, "own_pids": False}, "pids_why": pids_why}
        return {"v": None, "why": why, "pids_why": pids_why}
    finally:
        shutil.rmtree(d, ignore_errors=True)
