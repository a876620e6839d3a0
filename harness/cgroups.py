"""A control group per jail (sandbox.py): a cap on the memory and on the processes of everything a
jailed process runs, the whole group frozen while the other side is timed, and killed when the jail
is released.

The uid of its own already bounds signals, files and (RLIMIT_NPROC) its process count; what it does
not bound is memory: one solution could take the host's memory from every other evaluation and the
harness itself. The kernel's memory controller does, with the OOM killer confined to the group.

cgroup v2 (one hierarchy: the H100 machines) or v1 (a hierarchy per controller: this project's CI
machines), whichever the machine mounts under /sys/fs/cgroup. Freezing is v2's `cgroup.freeze`, or
v1's freezer hierarchy where mounted: a process the solution started in a session of its own escapes
the SIGSTOP of its process group (worker.Worker.pause), not its group's freezer. A helper's attack
burned the CPUs while its candidate was stopped, slowing the reference's timed rounds: 2.9-5.3x on
an honest 1.0x (tests/adversarial/sandbox/escaped_burner.py). The harness's own groups sit in a folder
of the parent's (`harness-<pid>`), removed at exit. Unavailable (no controller, not root): jails run
without, and records do not list `memory_cap`.
"""
from __future__ import annotations

import atexit
import os
import signal
import threading
import time
from pathlib import Path
from typing import Optional

ROOT = Path("/sys/fs/cgroup")
CONTROLLERS = ("memory", "pids")
FREEZER = "freezer"  # v1 only, where mounted (v2 freezes through cgroup.freeze in every group)
CPUACCT = "cpuacct"  # v1 only, where mounted (v2 counts CPU time in every group's cpu.stat)
CPUSET = "cpuset"  # where mounted (v1) or offered (v2): a jail held to its CPUs while timed (confine)
_lock = threading.Lock()
_bases: Optional[list[Path]] = None  # the parent's folder in each hierarchy; [] where unavailable
_why: Optional[str] = None


def _v2() -> bool:
    return (ROOT / "cgroup.controllers").exists()


def _own_path(controller: Optional[str]) -> str:
    """This process's group in a hierarchy: v2's ("0::/x"), or the v1 controller's ("4:memory:/x")."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, names, path = line.split(":", 2)
        if (controller is None and names == "") or (controller is not None and controller in names.split(",")):
            return path
    raise OSError(f"no {controller or 'v2'} hierarchy in /proc/self/cgroup")


def _clear_stale(folder: Path) -> None:
    """Groups left by harness processes that died without their exit handlers (SIGKILL, the OOM
    killer): what still runs in them killed, the groups removed."""
    for old in folder.glob("harness-*"):
        try:
            pid = int(old.name.split("-", 1)[1])
        except ValueError:
            continue
        if pid == os.getpid() or Path(f"/proc/{pid}").exists():
            continue
        remove([str(g) for g in old.iterdir() if g.is_dir()])
        remove([str(old)])


def _make_bases() -> list[Path]:
    name = f"harness-{os.getpid()}"
    if _v2():
        have = (ROOT / "cgroup.controllers").read_text().split()
        if not all(c in have for c in CONTROLLERS):
            raise OSError(f"cgroup v2 lacks {', '.join(c for c in CONTROLLERS if c not in have)}")
        # under the root: a group that holds processes (the harness's own) may not hand controllers on
        _clear_stale(ROOT)
        base = ROOT / name
        base.mkdir(exist_ok=True)
        (base / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in CONTROLLERS))
        if CPUSET in have:  # without it, jails are not held to their CPUs (confine says so)
            try:  # a group hands on only what its parent hands it: the root first
                (ROOT / "cgroup.subtree_control").write_text(f"+{CPUSET}")
                (base / "cgroup.subtree_control").write_text(f"+{CPUSET}")
            except OSError:
                pass
        return [base]
    bases = []
    for c in CONTROLLERS:
        if not (ROOT / c).is_dir():
            raise OSError(f"no cgroup v1 {c} hierarchy under {ROOT}")
        _clear_stale(ROOT / c / _own_path(c).lstrip("/"))
        base = ROOT / c / _own_path(c).lstrip("/") / name
        base.mkdir(exist_ok=True)
        bases.append(base)
    for extra in (FREEZER, CPUACCT, CPUSET):
        # without the freezer, jails go unfrozen (records do not list `frozen_while_other_timed`);
        # without cpuacct, the host-clock check takes no wait for a CPU out of a round (cpu_ns);
        # without cpuset, a jail is not held to its CPUs while timed (confine)
        if (ROOT / extra / "cgroup.procs").exists():
            try:
                _clear_stale(ROOT / extra / _own_path(extra).lstrip("/"))
                base = ROOT / extra / _own_path(extra).lstrip("/") / name
                base.mkdir(exist_ok=True)
                if extra == CPUSET:
                    _inherit_cpuset(base)
                bases.append(base)
            except OSError:
                pass
    return bases


def _inherit_cpuset(group: Path) -> None:
    """v1 makes a cpuset group with no CPUs and no memory nodes, and no process may join it so:
    its parent's are copied in."""
    for f in ("cpuset.cpus", "cpuset.mems"):
        if not (group / f).read_text().strip():
            (group / f).write_text((group.parent / f).read_text().strip())


def freezes() -> bool:
    """Whether a jail's group can be frozen here."""
    return available() is None and (_v2() or any(b.is_relative_to(ROOT / FREEZER) for b in _bases or []))


def freeze(groups: list[str], frozen: bool, wait_s: float = 0.1) -> Optional[bool]:
    """Freeze (or thaw) every process of the groups. Freezing waits up to `wait_s` for the kernel to
    have stopped them all: a task is frozen only on its way back from the kernel, so a helper inside
    one long system call (a gigabyte read into fresh pages) runs on meanwhile. True once done (every
    group frozen), False where a group was still freezing at `wait_s`, None where none can freeze."""
    done: Optional[bool] = None
    for g in map(Path, groups):
        try:
            if (g / "cgroup.freeze").exists():
                (g / "cgroup.freeze").write_text("1" if frozen else "0")
                state, want = g / "cgroup.events", "frozen 1"
            elif (g / "freezer.state").exists():
                (g / "freezer.state").write_text("FROZEN" if frozen else "THAWED")
                state, want = g / "freezer.state", "FROZEN"
            else:
                continue
        except OSError:
            continue
        done = True if done is None else done
        deadline = time.perf_counter() + wait_s
        while frozen:
            try:
                if want in state.read_text():
                    break
            except OSError:
                break
            if time.perf_counter() > deadline:
                done = False
                break
            time.sleep(0.0002)
    return done


def cpu_ns(groups: list[str]) -> Optional[int]:
    """CPU time used by every process and thread of the jail so far (v2's cpu.stat, v1's cpuacct),
    in ns; None where neither is kept."""
    for g in map(Path, groups):
        try:
            if (g / "cpuacct.usage").exists():
                return int((g / "cpuacct.usage").read_text())
            if (g / "cpu.stat").exists():
                for line in (g / "cpu.stat").read_text().splitlines():
                    if line.startswith("usage_usec "):
                        return int(line.split()[1]) * 1000
        except (OSError, ValueError):
            continue
    return None


def available() -> Optional[str]:
    """None where jails get a group of their own; else why not (once per process)."""
    global _bases, _why
    with _lock:
        if _bases is None:
            try:
                if os.geteuid() != 0:
                    raise OSError("the harness does not run as root")
                _bases = _make_bases()
                atexit.register(_remove_bases)
            except (OSError, ValueError) as e:
                _bases, _why = [], f"no control groups: {e}"
        return _why if not _bases else None


def make(name: str, memory_bytes: int, pids: int) -> list[str]:
    """A group (one folder per hierarchy) capped at `memory_bytes` and `pids`; [] where unavailable."""
    if available() is not None:
        return []
    made = []
    try:
        for base in _bases or []:
            g = base / name
            g.mkdir()
            made.append(str(g))
            if (g / "memory.max").exists():  # v2: both controllers in one folder
                (g / "memory.max").write_text(str(memory_bytes))
                (g / "memory.swap.max").exists() and (g / "memory.swap.max").write_text("0")
                (g / "pids.max").write_text(str(pids))
            elif (g / "memory.limit_in_bytes").exists():
                (g / "memory.limit_in_bytes").write_text(str(memory_bytes))
                # v1 leaves TCP buffers uncharged unless they have a limit of their own (a helper's
                # attack queued 2.3 GB on loopback in a user namespace of its own, outside the cap),
                # and swap uncounted unless memsw is (absent where the kernel does not account swap)
                for extra in ("memory.kmem.tcp.limit_in_bytes", "memory.memsw.limit_in_bytes"):
                    try:
                        (g / extra).write_text(str(memory_bytes))
                    except OSError:
                        pass
            elif (g / "pids.max").exists():
                (g / "pids.max").write_text(str(pids))
            elif (g / "cpuset.mems").exists():
                _inherit_cpuset(g)
    except OSError:
        remove(made)
        return []
    return made


def confines() -> bool:
    """Whether a jail's group can be held to chosen CPUs here (confine)."""
    return available() is None and any((b / "cpuset.cpus").exists() for b in _bases or [])


def confine(groups: list[str], cpus: Optional[set[int]]) -> bool:
    """Every process and thread of the groups held to `cpus` (None: the CPUs the harness has). The
    kernel moves them and keeps anything they start there; a process inside cannot widen its own
    affinity past it, as it could a mask set by sched_setaffinity. True where a group took it."""
    done = False
    for g in map(Path, groups):
        f = g / "cpuset.cpus"
        if not f.exists():
            continue
        try:
            if cpus:
                f.write_text(",".join(map(str, sorted(cpus))))
            elif _v2():
                f.write_text("")  # empty: the parent's
            else:
                f.write_text((g.parent / "cpuset.cpus").read_text().strip())
            done = True
        except OSError:
            continue
    return done


def join(groups: list[str]) -> None:
    """This process into its jail's groups (as root, before it gives up its uid): what it starts
    follows it."""
    for g in groups:
        with open(Path(g) / "cgroup.procs", "w") as fh:
            fh.write(str(os.getpid()))


def procs(groups: list[str]) -> list[int]:
    """Every process in the groups (their pids as this process sees them), from the first group that
    lists them."""
    for g in map(Path, groups):
        try:
            return [int(p) for p in (g / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            continue
    return []


def memory_exceeded(groups: list[str]) -> bool:
    """Whether the memory cap made the kernel kill (or refuse) something in the group."""
    for g in map(Path, groups):
        try:
            if (g / "memory.events").exists():
                events = dict(line.split() for line in (g / "memory.events").read_text().splitlines())
                if int(events.get("oom_kill", 0)) or int(events.get("max", 0)):
                    return True
            elif (g / "memory.failcnt").exists() and int((g / "memory.failcnt").read_text()):
                return True
        except (OSError, ValueError):
            continue
    return False


def remove(groups: list[str]) -> None:
    """Every process left in the groups killed, and the groups removed."""
    freeze(groups, False, 0)  # a frozen process does not die of SIGKILL until thawed
    for g in map(Path, groups):
        for _ in range(50):
            try:
                if (g / "cgroup.kill").exists():
                    (g / "cgroup.kill").write_text("1")
                else:
                    for pid in (g / "cgroup.procs").read_text().split():
                        try:
                            os.kill(int(pid), signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                g.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:  # still busy: its processes are exiting
                time.sleep(0.01)


def _remove_bases() -> None:
    for base in _bases or []:
        try:
            for g in base.iterdir():
                if g.is_dir():
                    remove([str(g)])
            base.rmdir()
        except OSError:
            pass
