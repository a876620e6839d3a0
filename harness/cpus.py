"""The host CPU that a device slot's timed processes run on.

The two sides of a comparison are timed in their own processes, one round after the other. Left to
the scheduler, each runs wherever it lands, beside compilers and standbys importing torch (or on
their SMT siblings, where the machine has SMT), and the host-clock checks (timing.clock_checks) read
a persistent difference in host work per call between the two as hidden time. Seen on an H200
machine without this: 2 honest solutions of 78 rejected, identical code on both sides in one of them,
0.56-0.62 ms more host time per call on the candidate's side in every round; with it, 0 of 273 since
(bench/results/throughput-cuda.md; that machine has no SMT, so the cause was not the siblings).

So each GPU slot has two timing CPUs, one a side (`slot_cpus`): each side's main thread is moved
onto its own for the timing phase, and builds and standbys starting up are kept off them and their
SMT siblings where the machine has CPUs to spare. One each, not one shared: a jail frozen while the
reference is timed keeps its timers, which fire on the CPU that armed them, so the reference's CPU
is kept from every jail (`sandbox.Jails.keep_off`), and the candidate is timed on a CPU of the same
kind beside it. A machine too small for two a slot shares one between the sides.

On the CPU path (contention is the noise the checks are set for, and
evaluations run beside each other) each side of a timing phase runs on `timing.cpu_threads` CPUs
(`held_to`), the candidate's jail held there by its cpuset group, so a solution cannot buy more cores
than the reference has; and the reference's CPUs are kept from every jail (`cpu_path_split`).

Timing holds a slot's CPU for a fraction of a cold batch (0.5 s per solution against builds of a
minute), so a `Lender` gives the timing CPUs to the builds whenever no timing phase holds them, and
takes each back, moving every process of every build off it, before a timing phase starts
(`pinned(..., lender=)`, 9-16 ms). On a 16-core H100 machine the builds kept that CPU 83-87% busy
through a cold batch against 24-26% without, and the batch took 119-121 s against 128-137 s
(bench/results/throughput-cuda.md). On a VM the CPUs have SMT siblings the guest cannot see, so a
build can still slow one side's host work; a measurement that confirms a host-clock flag therefore
runs with every build stopped (`Lender.quiet`).
"""
from __future__ import annotations

import itertools
import os
import signal
import threading
import time
from collections import Counter
from contextlib import ExitStack, contextmanager
from typing import Iterable, Optional


def available() -> list[int]:
    return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []


def siblings(cpu: int) -> set[int]:
    """The CPUs sharing `cpu`'s physical core (itself included)."""
    try:
        text = open(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list").read().strip()
    except OSError:
        return {cpu}
    out: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out | {cpu}


def plan(slots: int, cpus: Optional[list[int]] = None,
         siblings_of=siblings) -> tuple[list[Optional[int]], Optional[set[int]]]:
    """(a timing CPU per slot, the CPUs left for background work). The timing CPUs are taken from
    the top; the background set is None (anywhere) on a machine too small to give up their cores:
    fewer than half of its CPUs would be left."""
    cpus = available() if cpus is None else sorted(cpus)
    timing: list[Optional[int]] = []
    reserved: set[int] = set()
    for _ in range(slots):
        free = [c for c in reversed(cpus) if c not in reserved]
        if not free:
            timing.append(None)
            continue
        timing.append(free[0])
        reserved |= (siblings_of(free[0]) & set(cpus)) | {free[0]}
    rest = set(cpus) - reserved
    return timing, (rest if rest and len(rest) >= max(2, len(cpus) // 2) else None)


def slot_cpus(slots: int, cpus: Optional[list[int]] = None, siblings_of=siblings,
              mode: str = "apart", claim: bool = False) -> tuple[list[tuple[Optional[int], Optional[int]]], Optional[set[int]]]:
    """(per slot (the reference's timing CPU, the candidate's), the CPUs left for background work):
    two a slot from the top (`plan`); one shared by both sides where the machine cannot spare two,
    or where `mode` ([hardening] timing_cpus) is "shared".

    `claim`: the timing CPUs are claimed for this process's life, machine-wide, and those another
    harness process holds (with their SMT siblings) are left out of the plan, its background set
    included. Two batches on one machine, one a GPU, otherwise both time on the top two CPUs, each
    side beside the other batch's same side, every phase at half speed (bench/results/
    multigpu-NVIDIA_H200.md, session 46); so does a `harness eval` beside a batch. Where too few
    CPUs are left unclaimed, the plan is made over all of them, as without claims."""
    cpus = available() if cpus is None else sorted(cpus)
    if not claim:
        return _slot_plan(slots, cpus, siblings_of, mode)
    for _ in range(8):  # another process may claim a CPU between our look and our claim: look again
        others = CLAIMS.held_elsewhere(cpus)
        blocked = set().union(*(siblings_of(c) | {c} for c in others)) if others else set()
        free = [c for c in cpus if c not in blocked]
        if len(free) < (2 * slots if mode == "apart" else slots):
            break
        pairs, background = _slot_plan(slots, free, siblings_of, mode)
        mine = {c for pair in pairs for c in pair if c is not None}
        if CLAIMS.take(mine):
            CLAIMS.planned |= mine
            return pairs, background
        if not CLAIMS.last_refused:
            break
    pairs, background = _slot_plan(slots, cpus, siblings_of, mode)
    CLAIMS.planned |= {c for pair in pairs for c in pair if c is not None}
    return pairs, background


def _slot_plan(slots: int, cpus: list[int], siblings_of, mode: str
               ) -> tuple[list[tuple[Optional[int], Optional[int]]], Optional[set[int]]]:
    if mode == "apart":
        timing, background = plan(2 * slots, cpus, siblings_of)
        if background is not None and None not in timing:
            return [(timing[2 * i], timing[2 * i + 1]) for i in range(slots)], background
    timing, background = plan(slots, cpus, siblings_of)
    return [(t, t) for t in timing], background


class Claims:
    """Timing CPUs claimed machine-wide by the harness processes of this user: an exclusive lock on a
    file per CPU (flock, in `HARNESS_CPU_CLAIMS` or the temporary folder's `harness-cpus-<uid>`),
    held open by the claiming process and so let go when it ends, however it ends."""

    def __init__(self):
        self.held: dict[int, int] = {}  # cpu -> the descriptor holding its lock
        # every timing CPU this process planned on, claimed or not (a plan made over claimed CPUs,
        # too few being free, still pins its sides there: its jails must be let onto them)
        self.planned: set[int] = set()
        self.last_refused = False
        self._lock = threading.Lock()

    @staticmethod
    def folder() -> Optional[str]:
        import stat
        import tempfile
        path = os.environ.get("HARNESS_CPU_CLAIMS") or os.path.join(tempfile.gettempdir(), f"harness-cpus-{os.getuid()}")
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
            st = os.lstat(path)
        except OSError:
            return None
        # a folder of this user's that no one else may write, not a link to one: claims are this
        # user's harness processes' alone (root's files are never made where a link points)
        ours = stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and not st.st_mode & 0o022
        return path if ours else None

    def _try(self, cpu: int, probe: bool = False) -> Optional[int]:
        """The CPU's lock file's descriptor, locked (shared where `probe`: probes never look like a
        claim to each other); -1 where another process holds it; None where there is nowhere to claim."""
        import fcntl
        folder = self.folder()
        if folder is None:
            return None
        try:
            fd = os.open(os.path.join(folder, f"cpu{cpu}"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW,
                         0o600)
        except OSError:
            return None
        try:
            fcntl.flock(fd, (fcntl.LOCK_SH if probe else fcntl.LOCK_EX) | fcntl.LOCK_NB)
            return fd
        except OSError:
            os.close(fd)
            return -1

    def held_elsewhere(self, cpus: Iterable[int]) -> set[int]:
        """The CPUs of `cpus` another process holds a claim on."""
        import fcntl
        out = set()
        with self._lock:
            for c in cpus:
                if c in self.held:
                    continue
                fd = self._try(c, probe=True)
                if fd is None:
                    return set()  # no folder to claim in: nobody's claims are seen
                if fd < 0:
                    out.add(c)
                else:
                    fcntl.flock(fd, fcntl.LOCK_UN)
                    os.close(fd)
        return out

    def take(self, cpus: set[int]) -> bool:
        """Claim `cpus` besides what this process holds (a batch's slots keep theirs whatever a
        later plan of the process takes); False if another process got one of them first
        (`last_refused`) or there is no folder to claim in (nothing more held then)."""
        with self._lock:
            self.last_refused = False
            got = {}
            for c in sorted(cpus):
                if c in self.held:
                    continue
                fd = self._try(c)
                if fd is None or fd < 0:
                    for f in got.values():
                        os.close(f)
                    self.last_refused = fd is not None
                    return False
                got[c] = fd
            self.held.update(got)
            return True

    def without_others(self, cpus: Optional[set[int]]) -> Optional[set[int]]:
        """`cpus` less those another harness process claimed since they were planned (this process's
        own plan's never), where any are left: a background process started now keeps off them."""
        if not cpus:
            return cpus
        rest = set(cpus) - (self.held_elsewhere(cpus) - self.planned)
        return rest or cpus

    def release(self, cpus: Optional[Iterable[Optional[int]]] = None) -> None:
        """Let go of `cpus` (every claim where None): an executor shut down gives back its slots'."""
        with self._lock:
            for c in list(self.held) if cpus is None else [c for c in cpus if c is not None]:
                if c in self.held:
                    os.close(self.held.pop(c))
                self.planned.discard(c)
            if cpus is None:
                self.planned.clear()


def slots_cpus(slots) -> set[int]:
    """The timing CPUs a batch's slots were given (make_executor), to give back once it is done."""
    return {c for s in slots for c in (getattr(s, "timing_cpu", None), getattr(s, "cand_cpu", None)) if c is not None}


CLAIMS = Claims()


def reference_cpus(pairs: Iterable[tuple[Optional[int], Optional[int]]], siblings_of=siblings) -> set[int]:
    """The CPUs no jail may run on: each slot's reference CPU and its SMT siblings, where the slot
    times its candidate on another one."""
    out: set[int] = set()
    for ref, cand in pairs:
        if ref is not None and cand is not None and cand != ref:
            out |= siblings_of(ref) | {ref}
    return out


def restrict(pid: int, cpus: Optional[set[int]]) -> None:
    """Keep a background process (inherited by its children) to `cpus`, less the timing CPUs another
    harness process claimed since they were planned; None: anywhere."""
    cpus = CLAIMS.without_others(cpus)
    if cpus:
        try:
            os.sched_setaffinity(pid, cpus)
        except (OSError, AttributeError):
            pass


def _children_lists(pid: int) -> bool:
    return os.path.exists(f"/proc/{pid}/task/{pid}/children")


def children_by_parent() -> dict[int, list[int]]:
    """Where the kernel has no /proc/PID/task/TID/children (CONFIG_PROC_CHILDREN): one pass over /proc."""
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        ppid = _ppid(int(d))
        if ppid is not None:
            kids.setdefault(ppid, []).append(int(d))
    return kids


class Lender:
    """The slots' timing CPUs (with their SMT siblings), lent to the batch's builds while no timing
    phase holds them. `track(pid)` a build child as it starts; `reclaimed(cpu)` around a timing phase
    moves every build process off that CPU first and gives it back after."""

    def __init__(self, background: set[int], timing: dict[int, set[int]]):
        self.background = set(background)
        self.timing = {c: set(r) for c, r in timing.items()}  # timing CPU -> the CPUs reserved with it
        self._held: Counter = Counter()  # timing CPUs now reclaimed, by how many phases
        self._roots: dict[int, int] = {}  # a build child's pid -> its pidfd, taken as it starts
        self._lock = threading.Lock()
        self.moves = 0  # masks applied to build trees (for tests)
        self.reclaims = 0  # timing phases that took their CPU back, and the seconds that took them
        self.reclaim_s = 0.0
        self._quiet = 0  # measurements now holding every build stopped (quiet)
        self._stopped: list[int] = []  # pidfds of the build processes quiet stopped
        self.quiets = 0

    @classmethod
    def plan(cls, timing: list[Optional[int]], background: Optional[set[int]],
             siblings_of=siblings) -> Optional["Lender"]:
        """None where nothing was reserved (the CPU path, a machine too small to spare a core)."""
        cores = [c for c in timing if c is not None]
        if not background or not cores:
            return None
        every = background | {c for t in cores for c in siblings_of(t)}
        return cls(background, {t: (siblings_of(t) & every) | {t} for t in cores})

    def mask(self) -> set[int]:
        """Where builds may run now: the background CPUs and the timing CPUs no phase holds, less
        those another harness process claimed since (its references are timed there)."""
        out = set(self.background)
        for cpu, reserved in self.timing.items():
            if not self._held[cpu]:
                out |= reserved
        return CLAIMS.without_others(out)

    def track(self, pid: int) -> None:
        try:
            fd = os.pidfd_open(pid)
        except OSError:
            return  # it exited
        with self._lock:
            old = self._roots.pop(pid, None)
            if old is not None:
                os.close(old)
            self._roots[pid] = fd
            self._apply([pid], self.mask())
            if self._quiet:
                fds = _stop_tree(pid, fd)
                _wait_stopped(fds)
                self._stopped += fds.values()

    def untrack(self, pid: int) -> None:
        with self._lock:
            fd = self._roots.pop(pid, None)
            if fd is not None:
                os.close(fd)

    @contextmanager
    def reclaimed(self, cpu: Optional[int]):
        if cpu not in self.timing:
            yield
            return
        with self._lock:
            self._held[cpu] += 1
            if self._held[cpu] == 1:
                t0 = time.perf_counter()
                self._apply(list(self._roots), self.mask())
                self.reclaims += 1
                self.reclaim_s += time.perf_counter() - t0
        try:
            yield
        finally:
            with self._lock:
                self._held[cpu] -= 1
                if not self._held[cpu]:
                    self._apply(list(self._roots), self.mask())

    @contextmanager
    def quiet(self):
        """Every build process stopped for the block: a measurement that confirms a host-clock flag
        (stages/timed.py). On a VM each timing CPU has SMT siblings the guest cannot see, a build
        running on one slows the host work of one side only, and cold one-GPU batches rejected 1 honest
        solution in 39 that way (bench/results/throughput-cuda.md, session 38). A cheat's hidden time
        is there in a quiet measurement too; noise from the builds is not. Yields how many processes
        it stopped (0 in a nested block)."""
        with self._lock:
            self._quiet += 1
            n = 0
            if self._quiet == 1:
                fds = {}
                for root, fd in list(self._roots.items()):
                    fds.update(_stop_tree(root, fd))
                _wait_stopped(fds)
                self._stopped = list(fds.values())
                self.quiets += 1
                n = len(self._stopped)
        try:
            yield n
        finally:
            with self._lock:
                self._quiet -= 1
                if not self._quiet:
                    for fd in self._stopped:
                        _pidfd_signal(fd, signal.SIGCONT)
                        os.close(fd)
                    self._stopped = []

    def _apply(self, roots: list[int], mask: set[int]) -> None:
        for root in roots:
            self.moves += 1
            _set_tree(root, mask, self._roots.get(root))


def _walk_tree(root: int, visit, root_fd: Optional[int] = None) -> None:
    """`visit(pid, pidfd, tids)` on `root` and each of its descendants, before that process's
    children are listed, so that one forked meanwhile is seen or inherits what the visit did; a visit
    that returns False skips its children. A pid read from a list can be a process's that exited and
    whose pid went to another since (a build can time its children's exits to a neighbour's fork, and
    had the parent stop a process of root's so: a helper's attack), so each is pinned by a pidfd and
    visited only while its parent, itself pinned until its children are checked, is alive and is the
    one it was listed under (while a process lives, its pid is no one else's); a list is kept only if
    its process outlived the reading. `root_fd`: the root's pidfd, taken when it started (else taken
    here). Without the kernel's children lists, the map from one pass over /proc misses a child
    forked between that pass and its parent's visit: a second pass finds it (each visited again)."""
    direct = _children_lists(root)
    for _ in range(1 if direct else 2):
        kids = None if direct else children_by_parent()
        held: dict[int, list[int]] = {}  # a listed parent's pidfd and its children still to check
        tokens = itertools.count()
        stack: list[tuple[int, Optional[int], Optional[int]]] = [(root, None, None)]
        while stack:
            p, parent, token = stack.pop()
            try:
                fd = os.dup(root_fd) if parent is None and root_fd is not None else os.pidfd_open(p)
            except OSError:
                fd = None  # it exited
            try:
                if fd is None:
                    continue
                if parent is not None and (_ppid(p) != parent or not _alive(held[token][0]) or not _alive(fd)):
                    continue  # not the child it was listed as
                try:
                    tids = [int(t) for t in os.listdir(f"/proc/{p}/task")]
                except (OSError, ValueError):
                    continue
                if not _alive(fd) or not visit(p, fd, tids):
                    continue
                if kids is not None:
                    found = list(kids.get(p, ()))
                else:
                    found = []
                    for t in tids:
                        try:
                            found += [int(c) for c in open(f"/proc/{p}/task/{t}/children").read().split()]
                        except (OSError, ValueError):
                            pass
                    if not _alive(fd):
                        continue  # gone while listed: the list may be its pid's next owner's
                if found:
                    try:
                        mine = next(tokens)
                        held[mine] = [os.dup(fd), len(found)]
                    except OSError:
                        continue  # out of descriptors: its children are not taken
                    stack.extend((c, p, mine) for c in found)
            finally:
                if fd is not None:
                    os.close(fd)
                if token is not None:
                    held[token][1] -= 1
                    if not held[token][1]:
                        os.close(held.pop(token)[0])


def _alive(fd: int) -> bool:
    try:
        signal.pidfd_send_signal(fd, 0)
        return True
    except OSError:
        return False


def _stat(pid: int) -> Optional[list[str]]:
    """/proc/PID/stat's fields after the command's name (state, ppid, ...); None: it is gone."""
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _ppid(pid: int) -> Optional[int]:
    fields = _stat(pid)
    return int(fields[1]) if fields and len(fields) > 1 else None


def _set_tree(root: int, mask: set[int], root_fd: Optional[int] = None) -> None:
    """`mask` on every thread of `root` and its descendants."""
    def visit(_pid, _fd, tids):
        for t in tids:
            try:
                os.sched_setaffinity(t, mask)
            except OSError:
                pass  # it exited
        return True
    _walk_tree(root, visit, root_fd)


def _pidfd_signal(fd: int, sig: int) -> None:
    try:
        signal.pidfd_send_signal(fd, sig)
    except OSError:
        pass  # it exited


def _stop_tree(root: int, root_fd: Optional[int] = None) -> dict[int, int]:
    """SIGSTOP `root` and its descendants (a stopped process forks no more), through pidfds
    (`_walk_tree`). Returns a pidfd per process stopped (by pid), so that the SIGCONT reaches that
    process and no later one of its pid."""
    fds: dict[int, int] = {}

    def visit(pid, fd, _tids):
        if pid not in fds:
            fds[pid] = os.dup(fd)
            _pidfd_signal(fds[pid], signal.SIGSTOP)
        return True
    _walk_tree(root, visit, root_fd)
    return fds


def _wait_stopped(pids, limit_s: float = 0.2) -> None:
    """A stop takes effect as the process next leaves the kernel: wait for that, briefly (one in an
    uninterruptible wait stops only when it leaves it)."""
    end = time.perf_counter() + limit_s
    left = set(pids)
    while left and time.perf_counter() < end:
        left = {p for p in left if _state(p) not in ("T", "t", "Z", "X", None)}
        if left:
            time.sleep(0.002)


def _state(pid: int) -> Optional[str]:
    fields = _stat(pid)
    return fields[0] if fields else None


_turn = itertools.count()


def cpu_path_split(n: int, cpus: Optional[list[int]] = None, siblings_of=siblings) -> tuple[set[int], set[int]]:
    """(the CPUs a CPU-path jail may ever run on, the `n` a reference is timed on). The reference's
    are the top `n`, and no jail gets them or their SMT siblings: a jail frozen while the reference
    is timed still has its timers, which fire on the CPU that armed them, and a helper's attack fired
    300 timerfds each watched through 1,660 epoll instances there (interrupt work charged to
    whatever runs, outside every cgroup): the reference on the same CPU ran 2.2x slower, the solution
    passed at 2.0-3.0x. On a machine too small to keep them apart, both sets are every CPU."""
    cpus = available() if cpus is None else sorted(cpus)
    n = max(1, min(n, len(cpus))) if cpus else 0
    ref = set(cpus[len(cpus) - n:]) if cpus else set()
    reserved = set(ref)
    for c in ref:
        reserved |= siblings_of(c) & set(cpus)
    rest = {c for c in cpus if c not in reserved}
    return (rest, ref) if len(rest) >= n else (set(cpus), ref)


def spread_set(n: int, cpus: set[int]) -> set[int]:
    """`n` of `cpus`, the next `n` each time round, so that evaluations timed at once (a CPU batch)
    are spread over them."""
    order = sorted(cpus)
    if not order:
        return set()
    n = max(1, min(n, len(order)))
    start = next(_turn) * n
    return {order[(start + i) % len(order)] for i in range(n)}


@contextmanager
def held_to(n: int, cand_pid: Optional[int], cand_groups: list[str], ref_pid: Optional[int]):
    """The CPU path's timing phase: each side on `n` CPUs (`timing.cpu_threads`), so the candidate
    has as many cores as the reference and no more, on CPUs apart from the reference's
    (cpu_path_split). The candidate's jail through its cpuset group (cgroups.confine: nothing inside
    can widen it), else its process tree's affinity, which its own code could widen again; the
    reference (trusted) through its affinity. Yields how the candidate was held: "cpuset",
    "affinity", or None where nothing could be."""
    from . import cgroups
    jail_cpus, ref_cpus = cpu_path_split(n)
    chosen = spread_set(n, jail_cpus)
    if not chosen:
        yield None
        return
    old: dict[int, set[int]] = {}
    for pid in (ref_pid, cand_pid):
        if pid is not None:
            try:
                old[pid] = os.sched_getaffinity(pid)
            except (OSError, AttributeError):
                pass
    how = "cpuset" if cand_groups and cgroups.confine(cand_groups, chosen) else None
    if ref_pid in old:
        _set_tree(ref_pid, ref_cpus)
    if how is None and cand_pid in old:
        _set_tree(cand_pid, chosen)
        how = "affinity"
    try:
        yield how
    finally:
        if how == "cpuset":
            cgroups.confine(cand_groups, jail_cpus)
        for pid, mask in old.items():
            if pid == ref_pid or how == "affinity":
                _set_tree(pid, mask)


@contextmanager
def pinned(placement: Iterable[tuple[Optional[int], Optional[int]]], lender: Optional[Lender] = None):
    """Each (pid, cpu): the process's main thread on `cpu` for the block, then back where it was
    (a pid or cpu of None: left alone); builds borrowing those CPUs (`lender`) are moved off first."""
    placement = [(pid, cpu) for pid, cpu in placement if pid is not None and cpu is not None]
    if lender is not None:
        with ExitStack() as stack:
            for cpu in sorted({cpu for _, cpu in placement}):
                stack.enter_context(lender.reclaimed(cpu))
            stack.enter_context(pinned(placement))
            yield
        return
    old: dict[int, set[int]] = {}
    for pid, cpu in placement:
        try:
            old[pid] = os.sched_getaffinity(pid)
            os.sched_setaffinity(pid, {cpu})
        except (OSError, AttributeError):
            pass
    try:
        yield
    finally:
        for pid, cpus in old.items():
            try:
                os.sched_setaffinity(pid, cpus)
            except OSError:
                pass  # it exited
