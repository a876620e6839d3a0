"""The CPU path's clocked rounds: each call of a forward under 20 ms timed by a trusted clock.

A side's own timer is the side's word, and the parent's wall around a round holds the harness's
per-call work too (inputs mapped, outputs fingerprinted: about 0.1 ms a call on a CPU), whose noise
between two processes bounds what the wall test can see: under its 0.5 ms floor, a forward of a few
microseconds was reported 40x faster than it ran and passed (relu_add small,
tests/adversarial/cpu/timer_scaled_microseconds.py). A clocked round takes the side's timer and the
harness's per-call work out of the candidate's times:

- the reference's process makes the round's inputs into a file no jail can read (the source), and
  for each side a slots file: a slot per call for its inputs, and a control page;
- a clock process (`serve`: this module run as a program, no torch, no solution code) opens the
  round's files while the candidate is frozen (a file it opens is checked to be the one made: not a
  link, one name, its owner), runs on the side's own CPU, and the two hand it to each other through
  the control words (a futex each): the side, ready for call k, waits; the clock stamps the start,
  copies the call's inputs into its slot and says go; the side runs the forward, writes where its
  outputs lie and says done, then waits; the clock reads the outputs from the side's memory
  (process_vm_readv) into a file of its own (`snap`) and stamps the end;
- a call's inputs reach the side only inside its interval, so nothing of a call can be done before
  it starts (nor can they be rebuilt: the seeds a side is told are not the inputs',
  measure._told_seeds); its outputs are read inside it, so nothing can be done after it ends; the
  interval is the clock's, so the side's timer, patched or not, times nothing;
- the clock reads the layout (which storages a call's inputs are, where outputs go) from the
  reference's slots file, never from the candidate's, which is the candidate's to write: a helper's
  attack rewrote its pickled header, ran code as root in the clock (5x), and in another version
  gave call 0 every call's inputs (17.6x);
- the reference's calls, under the same clock, are timed by its own timer (its process runs no
  solution code); their clock intervals less that time are what the clock adds to a call (the
  copies, the reading, two hand-offs: 17-24 us beside a 6 us relu_add on the CI machine), and the
  candidate's time is its interval less the median of that (measure._net_of_clock);
- the reference's process fingerprints both sides' outputs, after its calls.

A side's own times are still read: one whose timer falls short of the clock by much more than the
reference's does is flagged `timer_mismatch` (clocks.report_check). What a candidate may still gain:
the harness's own work inside its interval (writing the outputs' addresses, the hand-offs, at most a
few microseconds a call), which its process may do its own way. Clocked rounds are for forwards
under `cpu_clocked_below_ms` (`timing.cpu_clocked`, "auto": the reference's, 20 ms); a longer one is
timed as before, where the wall test sees a report scaled by over a fifth (its inputs' and outputs'
copies in every interval cost more there than the rest of the hole they would close).
"""
from __future__ import annotations

import ctypes
import mmap
import os
import pickle
import select
import struct
import subprocess
import sys
import threading
import time
from typing import Optional

from .inputs import read_header

ALIGN = mmap.PAGESIZE
# control words, a cache line apart, each holding k + 1 for call k: READY (the side waits for it)
# and DONE (it is done) written by the side, GO (it starts) and TAKEN (its outputs taken) by the
# clock; ABORT by the clock where its round fails (or by the side, which only ends its own round)
READY, GO, DONE, ABORT, TAKEN = 0, 64, 128, 192, 256
# where the side leaves each call's outputs' addresses for the clock to read: a count, then
# (address, bytes) per output tensor
DESC = 512
MAX_LEAVES = (ALIGN - DESC - 8) // 16
OUT_ALIGN = 64
FUTEX_WAIT, FUTEX_WAKE = 0, 1
_SYS_FUTEX = {"x86_64": 202, "aarch64": 98}.get(os.uname().machine, 202)
_libc = None


def _futex(addr: int, op: int, val: int, timeout) -> int:
    """futex(2) on a word of a shared mapping (not FUTEX_PRIVATE: the waiter is another process);
    through ctypes, which lets go of the interpreter's lock while the call sleeps."""
    return _libc_fn("syscall")(_SYS_FUTEX, ctypes.c_void_p(addr), op, val, timeout, None, 0)


class _Timespec(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long)]


def _align(n: int, a: int = ALIGN) -> int:
    return -(-n // a) * a




def call_storages(head: dict, k: int) -> list[int]:
    """The storages call k's tensors lie in."""
    return sorted({item[1] for item in head["calls"][k] if item[0] == "t"})


def slots_header(inputs_head: dict, outs: list[list[tuple[int, str, tuple]]]) -> dict:
    """A slots file's header: the inputs' (calls, storages at the same offsets in its storage area),
    the control page after them, and per call its outputs (nbytes, dtype, shape) and where each lies
    in a snap file (the outputs as the clock read them)."""
    body = _align(max((off + n for off, n in inputs_head["storages"]), default=0))
    out_at, end = [], 0
    for call in outs:
        at = []
        for nbytes, _, _ in call:
            at.append(end)
            end = _align(end + nbytes, OUT_ALIGN)
        out_at.append(at)
    return {"calls": inputs_head["calls"], "storages": inputs_head["storages"], "outs": outs,
            "out_at": out_at, "ctrl": body, "out_bytes": end}


def write_slots(path: str, head: dict, owner: Optional[tuple[int, int]] = None) -> int:
    """A new slots file at `path` (0600, given to `owner`'s uid and gid): its header, then zeros
    for every slot and the control page, allocated (a side maps pages, not holes). Returns its size."""
    blob = pickle.dumps(head, protocol=pickle.HIGHEST_PROTOCOL)
    start = _align(8 + len(blob))
    size = start + head["ctrl"] + ALIGN
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        os.write(fd, struct.pack("<Q", len(blob)) + blob)
        os.ftruncate(fd, size)
        try:
            os.posix_fallocate(fd, start, size - start)
        except OSError:
            pass  # (a file system without it: pages are made as first touched)
        if owner is not None:
            os.fchown(fd, *owner)
    finally:
        os.close(fd)
    return size


def snap_size(head: dict) -> int:
    return max(_align(head["out_bytes"]), ALIGN)


class _Words:
    """A slots file's control words, as the side and the clock hand the CPU to each other: a word is
    set, then its waiter woken (futex, on the shared mapping); a waiter sleeps in the kernel until
    its word holds the value it waits for, its deadline passes, or ABORT is set."""

    def __init__(self, mm, ctrl: int, deadline: float):
        self.mm, self.ctrl, self.deadline = mm, ctrl, deadline
        self._cells = {w: ctypes.c_int32.from_buffer(mm, ctrl + w) for w in (READY, GO, DONE, ABORT, TAKEN)}
        self._addr = {w: ctypes.addressof(c) for w, c in self._cells.items()}
        self._ts = _Timespec(0, 10_000_000)  # a wait wakes at least every 10 ms to check the deadline

    def set(self, word: int, value: int) -> None:
        self._cells[word].value = value
        _futex(self._addr[word], FUTEX_WAKE, 1, None)

    def wait(self, word: int, value: int, what: str) -> None:
        cell, addr, abort = self._cells[word], self._addr[word], self._cells[ABORT]
        ts = ctypes.byref(self._ts)
        while True:
            now = cell.value
            if now == value:
                return
            if abort.value:
                raise RoundAborted(f"round aborted while waiting for {what}")
            if time.perf_counter() > self.deadline:
                raise TimeoutError(f"no {what} within the round's time")
            _futex(addr, FUTEX_WAIT, now, ts)

    def abort(self) -> None:
        """The round is over, on the clock's side: the side's waits end (RoundAborted)."""
        self._cells[ABORT].value = 1
        for w in (READY, GO, DONE, TAKEN):
            _futex(self._addr[w], FUTEX_WAKE, 1 << 30, None)

    def close(self) -> None:
        self._cells.clear()  # (the mapping can be closed only once no cell points into it)


class RoundAborted(Exception):
    pass


# -- the reference's process: the round's files ------------------------------------------------

class Unclockable(Exception):
    """Outputs a slot cannot carry (not plain tensors on the CPU): the round is timed as before."""


def prepare(runner, seeds: list[int], source: str, slots: list[tuple[str, Optional[tuple[int, int]]]],
            snaps: list[str], max_bytes: int) -> dict:
    """The reference's process: the round's inputs into `source` (timing/inputs.write_round), its own
    forward run on each call's to learn the outputs' sizes, then a slots file per side (path, owner)
    and an empty file for each side's snapped outputs. The layout is kept for fingerprinting the
    snaps (`snap_prints`). Raises Unclockable, or inputs.Unservable, where it cannot be."""
    from .fingerprint import leaf_tensors
    from .inputs import RoundInputs, write_round
    torch = runner.torch
    made = write_round(runner, seeds, source, max_bytes)
    served = RoundInputs(torch, source)
    fn = runner.timed_callable("eager")
    outs = []
    try:
        with torch.no_grad():
            for k in range(made["calls"]):
                runner.seed_forward(seeds[k])
                leaves = leaf_tensors(torch, fn(*served.take(k)))
                if not leaves or any(type(t) is not torch.Tensor or t.device.type != "cpu" for t in leaves):
                    raise Unclockable("an output that is not a plain tensor on the CPU")
                if len(leaves) > MAX_LEAVES:
                    raise Unclockable(f"more than {MAX_LEAVES} output tensors")
                outs.append([(t.numel() * t.element_size(), str(t.dtype).split(".")[-1], tuple(t.shape)) for t in leaves])
    finally:
        served.close()
    fd = os.open(source, os.O_RDONLY | os.O_CLOEXEC)
    try:
        inputs_head, _ = read_header(fd)
    finally:
        os.close(fd)
    head = slots_header(inputs_head, outs)
    for path, owner in slots:
        write_slots(path, head, owner)
    for path in snaps:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        os.ftruncate(fd, snap_size(head))
        os.close(fd)
    runner.cache["clocked_head"] = head
    return made


def snap_prints(runner, path: str, seeds: list[int], npos: int) -> list[list[float]]:
    """The fingerprints of a side's snapped outputs (Clock), read as the reference's own outputs'
    dtypes and shapes (the layout `prepare` kept)."""
    from .fingerprint import OutputPrints
    torch = runner.torch
    head = runner.cache["clocked_head"]
    with open(path, "rb") as f:
        data = bytearray(f.read())
    raw = torch.frombuffer(data, dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)
    prints = OutputPrints(torch, npos, len(seeds), batch=False)
    for k, seed in enumerate(seeds):
        leaves = [raw[a:a + nb].view(getattr(torch, dt)).reshape(shape)
                  for a, (nb, dt, shape) in zip(head["out_at"][k], head["outs"][k])]
        prints.add(leaves, seed)
    prints.flush()
    return prints.fps


# -- a side's process: the clocked calls -------------------------------------------------------

def side_calls(runner, seeds: list[int], path: str, variant: str, timeout_s: float, now, prints=None) -> dict:
    """The side's loop of a clocked round (see the module's docstring): each call's inputs are read
    where the clock put them; its outputs are left where the forward made them, their addresses
    told to the clock, which reads them. Its own timer (`now`) around each forward is reported (the
    reference's is its time; a candidate's is held to the clock's: clocks.report_check); the outputs
    are fingerprinted here only where `prints` is given (the reference's process), after the calls."""
    torch = runner.torch
    fn = runner.timed_callable(variant)
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    try:
        head, start = read_header(fd)
        mm = mmap.mmap(fd, os.fstat(fd).st_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)
    raw = torch.frombuffer(mm, dtype=torch.uint8)
    storage = raw.untyped_storage()
    calls = []
    for k in range(len(seeds)):
        items = []
        for item in head["calls"][k]:
            if item[0] == "v":
                items.append(("v", item[1]))
                continue
            _, i, dtype, size, stride, offset, grad = item
            dt = getattr(torch, dtype)
            at = (start + head["storages"][i][0]) // dt.itemsize + offset
            t = torch.empty(0, dtype=dt).set_(storage, at, size, stride)
            items.append(("t", t.requires_grad_(grad) if grad else t))
        calls.append((items, [getattr(torch, dt) for _, dt, _ in head["outs"][k]]))
    if head["ctrl"]:  # every input page mapped before the first interval
        raw[start:start + head["ctrl"]:ALIGN].sum()
    words = _Words(mm, start + head["ctrl"], time.perf_counter() + timeout_s)
    try:
        return _side_loop(runner, torch, fn, calls, seeds, words, mm, start + head["ctrl"] + DESC, now, prints)
    finally:
        words.close()


def _side_loop(runner, torch, fn, calls, seeds, words, mm, desc: int, now, prints) -> dict:
    import copy
    from .fingerprint import leaf_tensors
    put, count = struct.Struct("<qq").pack_into, struct.Struct("<q").pack_into
    own: list[float] = []
    flags: list[str] = []
    kept = []  # the outputs to fingerprint, after the calls: between them both sides only wait
    with torch.no_grad():
        for k, (items, dtypes) in enumerate(calls):
            args = [copy.deepcopy(x) if kind == "v" else x for kind, x in items]
            runner.seed_forward(seeds[k])
            words.set(READY, k + 1)
            words.wait(GO, k + 1, f"call {k}'s start")
            t0 = now()
            out = fn(*args)
            leaves = (out,) if type(out) is torch.Tensor else leaf_tensors(torch, out)
            told = []
            for t, dt in zip(leaves, dtypes):
                # read by type before any torch call touches it: a subclass's __torch_function__
                # would run there (timing/loop.py); its slot is left unread
                if type(t) is not torch.Tensor:
                    told.append(None)
                    continue
                if t.dtype != dt:
                    t = t.to(dt)
                if not t.is_contiguous():
                    t = t.contiguous()
                told.append(t)
            t1 = now()
            for i, t in enumerate(told):
                put(mm, desc + 8 + 16 * i, *((t.data_ptr(), t.numel() * t.element_size()) if t is not None else (0, 0)))
            count(mm, desc, len(told))
            # said done, the side waits until the clock has read the outputs: the clock then runs at
            # once and stamps the end (work of the side's here would be in the interval)
            words.set(DONE, k + 1)
            words.wait(TAKEN, k + 1, f"call {k}'s outputs taken")
            own.append((t1 - t0) * 1e3)
            if any(t is None for t in told) and "tensor_subclass" not in flags:
                flags.append("tensor_subclass")
            if prints is not None:
                kept.append(leaves)
            del out, leaves, told, args
    if prints is not None:
        for leaves, seed in zip(kept, seeds):
            prints.add(leaves, seed)
        prints.flush()
    return {"times_ms": own, "host_ms": list(own), "fingerprints": prints.fps if prints is not None else [],
            "flags": flags}


# -- the clock's side (no torch) ---------------------------------------------------------------

class Unreadable(Exception):
    """The clock may not read the side's memory here (process_vm_readv refused): the round cannot be
    clocked, and is timed as before."""


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


def _open_checked(path: str, flags: int, owner_uid: Optional[int]) -> int:
    """A round's file as it was made: not a link (O_NOFOLLOW), a regular file of one name, owned by
    `owner_uid` (the harness's where None). A jail may write its slots file, and rename or replace
    it in its home."""
    import stat
    fd = os.open(path, flags | os.O_CLOEXEC | os.O_NOFOLLOW)
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1 or st.st_uid != (os.getuid() if owner_uid is None else owner_uid):
        os.close(fd)
        raise ValueError(f"{path} is not the file made for the round")
    return fd


def clock_round(cmd, opened) -> list[float]:
    """Clock `cmd.calls` calls of the side (process `cmd.pid`) waiting on `cmd.slots` (see the
    module's docstring); each call's outputs read from the side's memory into `cmd.snap`. The layout
    is read from `cmd.layout`, a file of the same layout no jail can write (the candidate's slots
    file is its own to write, header and all). `opened()` is called once the files are open and
    mapped: only then may the side run (the parent holds the candidate frozen until it hears so).
    The candidate's slots file is emptied through the descriptor opened here at the end, never by
    its name. Returns each call's interval and the CPU time the clock used over the round, in ms
    (its side waits behind it: measure._clocked_wait)."""
    _empty_pending()
    if cmd.cpu is not None:
        try:
            os.sched_setaffinity(0, {cmd.cpu})
        except OSError:
            pass
    deadline = time.perf_counter() + cmd.timeout_s
    fds = []
    maps = []
    words = None
    try:
        for path, flags, owner in ((cmd.source, os.O_RDONLY, None), (cmd.layout, os.O_RDONLY, None),
                                   (cmd.slots, os.O_RDWR, cmd.owner_uid), (cmd.snap, os.O_RDWR, None)):
            fds.append(_open_checked(path, flags, owner))
        sfd, lfd, dfd, pfd = fds
        shead, sstart = read_header(sfd)
        head, start = read_header(lfd)
        size = start + head["ctrl"] + ALIGN
        if os.fstat(dfd).st_size != size:
            raise ValueError("the slots file is not the size the round made it")
        src = mmap.mmap(sfd, os.fstat(sfd).st_size, mmap.MAP_SHARED, mmap.PROT_READ)
        dst = mmap.mmap(dfd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        out = mmap.mmap(pfd, os.fstat(pfd).st_size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        maps = [src, dst, out]
        msrc, mdst = memoryview(src), memoryview(dst)
        maps = [msrc, mdst] + maps
        ctrl = start + head["ctrl"]
        words = _Words(dst, ctrl, deadline)
        base = ctypes.addressof(ctypes.c_char.from_buffer(out))
        plan = []
        for k in range(cmd.calls):
            copies = [(sstart + off, start + off, n) for off, n in (head["storages"][i] for i in call_storages(head, k))]
            plan.append((copies, [(base + a, o[0]) for a, o in zip(head["out_at"][k], head["outs"][k])]))
        # every page this process touches in an interval mapped first, for writing where it writes:
        # a fault on each (a file system's page_mkwrite included) cost 80 us a call
        for copies, outs in plan:
            for a, b, n in copies:
                for i in range(0, n, ALIGN):
                    msrc[a + i]
                    mdst[b + i] = mdst[b + i]
        for i in range(0, len(out), ALIGN):
            out[i] = 0
        opened()
        stat = os.open("/proc/self/schedstat", os.O_RDONLY | os.O_CLOEXEC)
        fds.append(stat)
        ran0 = _ran_ns(stat)
        read_desc = struct.Struct("<qq").unpack_from
        local, remote = (_Iovec * MAX_LEAVES)(), (_Iovec * MAX_LEAVES)()
        vm_read = _libc_fn("process_vm_readv")
        now = time.perf_counter_ns
        times = []
        for k, (copies, outs) in enumerate(plan):
            # the side says when it waits for call k (its seeding and arguments done): an interval
            # opened before would hold its work between calls
            words.wait(READY, k + 1, f"call {k}'s readiness")
            t0 = now()
            for a, b, n in copies:
                mdst[b:b + n] = msrc[a:a + n]
            words.set(GO, k + 1)
            words.wait(DONE, k + 1, f"call {k}'s end")
            # the outputs where the side says they lie, as many bytes as the reference's: read
            # from its memory, inside the interval (a side's helper writing on is timed)
            n = struct.unpack_from("<q", dst, ctrl + DESC)[0]
            want = 0
            for i, (at, nb) in enumerate(outs[:max(0, min(n, len(outs)))]):
                addr, told = read_desc(dst, ctrl + DESC + 8 + 16 * i)
                if addr and told == nb:
                    local[want].base, local[want].len = at, nb
                    remote[want].base, remote[want].len = addr, nb
                    want += 1
            if want:
                got = vm_read(cmd.pid, local, want, remote, want, 0)
                if got < 0 and ctypes.get_errno() == 1:  # EPERM: never a side's doing
                    raise Unreadable("process_vm_readv refused (EPERM)")
            t1 = now()
            words.set(TAKEN, k + 1)
            times.append((t1 - t0) / 1e6)
        return times, (_ran_ns(stat) - ran0) / 1e6
    except BaseException:
        if words is not None:
            words.abort()
        raise
    finally:
        if words is not None:
            words.close()
        for m in maps:
            try:
                m.release() if isinstance(m, memoryview) else m.close()
            except BufferError:  # (a cell still exported: the mapping goes with the object)
                pass
        if cmd.truncate_slots and len(fds) > 2:
            _EMPTY_LATER.append(os.dup(fds[2]))
        for fd in fds:
            os.close(fd)


# slots files to empty through the descriptor the clock opened (never by their names, which a jail
# may have pointed anywhere), at the next round's start or at the clock's end: by then the side has
# answered its request, so nothing of it still reads the control words
_EMPTY_LATER: list[int] = []


def _empty_pending() -> None:
    while _EMPTY_LATER:
        fd = _EMPTY_LATER.pop()
        try:
            os.ftruncate(fd, 0)
        except OSError:
            pass
        os.close(fd)


def _ran_ns(fd: int) -> int:
    """This process's time on a CPU (the kernel's schedstat, open on `fd`)."""
    try:
        return int(os.pread(fd, 128, 0).split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def _libc_fn(name: str):
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    return getattr(_libc, name)


def serve() -> None:
    """The clock process: a ClockCommand a line on stdin; a ClockReply `opened` once its files are
    open, then one with the round's times (or one error) on stdout."""
    from ..records.messages import ClockCommand, ClockReply

    def say(reply) -> None:
        sys.stdout.write(reply.model_dump_json() + "\n")
        sys.stdout.flush()
    for line in sys.stdin:
        cmd = ClockCommand.model_validate_json(line)
        try:
            times, ran = clock_round(cmd, lambda: say(ClockReply(ok=True, opened=True)))
            say(ClockReply(ok=True, times_ms=times, ran_ms=ran))
        except Unreadable as e:
            say(ClockReply(ok=False, unreadable=True, error=str(e)))
        except Exception as e:  # noqa: BLE001 - every failure is the round's, told to the parent
            say(ClockReply(ok=False, error=f"{type(e).__name__}: {e}"))
    _empty_pending()


class Clock:
    """The parent's handle on a clock process (one per measurement: its rounds are one at a time)."""

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, "-P", "-m", "harness.timing.clocked"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
                                     start_new_session=True)
        self.result = None
        self._thread: Optional[threading.Thread] = None

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _line(self, timeout_s: float):
        from ..records.messages import ClockReply
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout_s)
        line = self.proc.stdout.readline() if ready else ""
        return ClockReply.model_validate_json(line) if line else ClockReply(ok=False, error="the clock process did not answer")

    def start(self, source: str, slots: str, layout: str, snap: str, calls: int, pid: int, cpu: Optional[int],
              timeout_s: float, owner_uid: Optional[int] = None, truncate_slots: bool = False) -> bool:
        """A round: returns once the clock has its files open (False: it could not, and `result`
        says why), and clocks it in the background; `finish` waits for its times."""
        from ..records.messages import ClockCommand
        self.result = None
        cmd = ClockCommand(source=source, slots=slots, layout=layout, snap=snap, calls=calls, pid=pid, cpu=cpu,
                           timeout_s=timeout_s, owner_uid=owner_uid, truncate_slots=truncate_slots)
        self.proc.stdin.write(cmd.model_dump_json() + "\n")
        self.proc.stdin.flush()
        first = self._line(30)
        if not first.opened:
            self.result = first
            if first.error == "the clock process did not answer":
                self.proc.kill()
                self.proc.wait()
            return False

        def read():
            self.result = self._line(timeout_s + 10)
        self._thread = threading.Thread(target=read, daemon=True)
        self._thread.start()
        return True

    def finish(self, grace_s: float = 2.0):
        """The round's ClockReply; a round still going `grace_s` after its side answered is ended,
        the process with it (a measurement starts another)."""
        from ..records.messages import ClockReply
        if self._thread is not None:
            self._thread.join(grace_s)
            if self._thread.is_alive():
                self.proc.kill()
                self.proc.wait()
                self._thread.join()
            self._thread = None
        return self.result or ClockReply(ok=False, error="the clock process did not answer")

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(2)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


if __name__ == "__main__":
    serve()
