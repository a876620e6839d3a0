"""The parent's handle on a child process: running untrusted code in a child interpreter, and talking
to it.

Each worker is a fresh `python -m harness.process.child` (or a standby forked from the slot's fork
server, forkserver.py) in its own session (process group), so a timeout kills everything it started.
Commands go down a private pipe; replies come back up another one as JSON lines. The child's stdout
and stderr are merged into a third pipe that a thread drains, keeping only the tail (pipes.py):
nothing printed is ever parsed. A reply that is missing, malformed or too large is a failure, never
a pass.
"""
from __future__ import annotations

import mmap
import os
import select
import signal
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Optional, Union

from pydantic import ValidationError

from ..cgroups import freeze
from ..cpus import restrict
from ..memory import frame_limit
from ..records.messages import REPLY, Command, ExitCommand, Prime, Reply, Setup
from ..sandbox import born_apart
from .forkserver import EXIT_UNKNOWN, SERVER_GONE, ForkServer
from .pipes import MAX_LINE_BYTES, Tail, make_pipes

# How long a pause waits for the jail's group to be frozen. An honest candidate's processes are idle,
# waiting for a command, and freeze at once; a helper kept inside the kernel (one long system call)
# would run on beside the other side's timing: past this, the measurement is not taken (measure.py)
FREEZE_WAIT_S = 5.0


# A request's timeout leaves out the time its process was stopped (a neighbour's timing), up to this:
# a stopped process's GPU kernels go on running, so a kernel that never ends, stopped again and
# again by the others' timing, would otherwise hold the device past any timeout (150 s and counting,
# with timeouts.run_s = 120, in a batch on an H100)
STOP_CREDIT_S = 10.0


class WorkerDied(Exception):
    """The worker exited, or its reply channel closed, before it answered."""

    def __init__(self, message: str, returncode: Optional[int]):
        super().__init__(message)
        self.returncode = returncode


class WorkerTimeout(Exception):
    pass


class WorkerProtocolError(Exception):
    pass


class FrameTooLarge(WorkerProtocolError):
    """A reply announced more bytes of frames than the request allowed (`announced`, `limit`)."""

    def __init__(self, announced: int, limit: int):
        super().__init__(f"the reply announces {announced / 2**30:.2f} GB of outputs; at most "
                         f"{limit / 2**30:.2f} GB could be taken")
        self.announced, self.limit = announced, limit


def describe_exit(code: Optional[int]) -> str:
    if code is None:
        return "still running"
    if code == EXIT_UNKNOWN:
        return SERVER_GONE
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        hint = {"SIGSEGV": "segmentation fault", "SIGABRT": "aborted", "SIGKILL": "killed (out of memory?)",
                "SIGBUS": "bus error", "SIGFPE": "floating-point exception", "SIGILL": "illegal instruction"}
        return f"{hint.get(name, 'killed by ' + name)} ({name})"
    return f"exit code {code}"


def new_frame(n: int):
    """A writable buffer of `n` bytes whose memory is taken only as bytes arrive (an anonymous
    mapping): the size a reply announces costs the parent nothing until it is sent. A zero-filled
    bytearray took it all at once (2 GiB announced, nothing sent: 2.2 GiB held until the timeout)."""
    return mmap.mmap(-1, n) if n else bytearray()


class Worker:
    """One child interpreter running `harness.process.child` in a given role. Spawned without a setup, it
    preloads what a candidate needs and waits: `ready()`, then `start(setup)`."""

    def __init__(self, setup: Union[Setup, dict, None], env: Optional[dict[str, str]] = None, cwd: Optional[str] = None,
                 cpus: Optional[set[int]] = None, forkserver: Optional[ForkServer] = None, fork_timeout: float = 120.0,
                 apart: bool = False):
        """`cpus`: the host CPUs it (and its children) may run on; None: any (see cpus.py).
        `apart`: born in a PID namespace of its own (sandbox.born_apart), as a jail that says so
        (`Jail.own_pids`) needs; a setup's jail decides it for a worker started with its setup.
        `forkserver` (a standby only, `env` the server's own): forked from there when it can, else
        started fresh."""
        cmd_r, self._cmd_w, self._rep_r, rep_w, out_r, out_w = make_pipes()
        self.on_close: list[Callable[[], Any]] = []  # run once close() has ended the process
        self.standby = setup is None
        if setup is not None:
            setup = Setup.model_validate(setup)
            apart = setup.jail is not None and setup.jail.own_pids
        self.apart = apart
        proc = forkserver.fork(cmd_r, rep_w, out_w, fork_timeout, apart) if forkserver and self.standby else None
        self.forked = proc is not None
        if forkserver and self.standby and proc is None:
            # those fds may have reached the server: a child it forks late must not share these pipes
            for fd in (cmd_r, self._cmd_w, self._rep_r, rep_w, out_r, out_w):
                os.close(fd)
            cmd_r, self._cmd_w, self._rep_r, rep_w, out_r, out_w = make_pipes()
        child_env = dict(os.environ if env is None else env)
        child_env["PYTHONUNBUFFERED"] = "1"
        child_env["HARNESS_WORKER_FDS"] = f"{cmd_r},{rep_w}"
        if self.standby:
            child_env["HARNESS_STANDBY"] = "1"
        if proc is None:
            with born_apart(apart):
                proc = subprocess.Popen(
                    # -P: nothing from the current folder (a jailed solution may write there) shadows the harness
                    [sys.executable, "-P", "-m", "harness.process.child"],
                    stdin=subprocess.DEVNULL, stdout=out_w, stderr=out_w,
                    pass_fds=(cmd_r, rep_w), env=child_env, cwd=cwd,
                    start_new_session=True, close_fds=True,
                )
        self.proc = proc
        restrict(self.proc.pid, cpus)
        for fd in (cmd_r, rep_w, out_w):
            os.close(fd)
        self._tail = Tail(out_r)
        self._tail.start()
        self._buf = bytearray()
        self.stopped = False
        # time spent stopped (pause()): a request's timeout leaves it out, since a neighbour's timing
        # stops a worker in the middle of its work (sharing.DeviceGate.stoppable)
        self._pause_lock = threading.Lock()
        self._stopped_at: Optional[float] = None
        self._stopped_s = 0.0
        self._p0 = 0.0  # stopped_for() when the reply now awaited was asked for
        self.preloaded: Optional[Reply] = None  # a standby's first line: imports done, what it holds
        self.primed: Optional[Reply] = None     # its second, if asked for (prime): CUDA and pinning done
        # a reply was waited for and not read in full (a timeout, say): it may still come, so the
        # channel is out of step and the worker cannot take another command. Sticky: a healthy
        # request of another thread in flight at the same moment never sets it
        self.out_of_step = False
        self.groups: list[str] = []  # its jail's control groups (cgroups.py): frozen with it in pause()
        self.jail = None  # its Jail, where it has one (a clocked round's slots go in its home: timing.clocked)
        self.unfrozen = 0  # pauses after which its groups were still freezing at FREEZE_WAIT_S
        self.undrained: list[str] = []  # CUDA processes a pause could not lock (gpulock.py), and why
        self.drained_ms: list[float] = []  # per draining pause, how long its GPU work took to drain
        self.drain_unavailable: Optional[str] = None  # why a pause could not drain at all (no such driver)
        self.drain_locked_all = False  # the last pause locked every CUDA process of its jail
        self._held = None  # gpulock.Held: its CUDA processes locked while paused
        if setup is not None:
            self._send_setup(setup)  # validated above

    def ready(self, timeout: float) -> bool:
        """A standby worker: wait until it has preloaded. False when it died or hung meanwhile."""
        if self.preloaded is None:
            if not self.standby:
                raise RuntimeError("ready() is for a worker spawned without a setup")
            try:
                self.preloaded = self.wait_reply("standby", timeout)
            except (WorkerTimeout, WorkerDied, WorkerProtocolError):
                return False
        return True

    def prime(self, device: str, timeout: float) -> bool:
        """A ready() standby: make its CUDA context and pin the timing primitives now (child._prime),
        so that its candidate's load does not. It runs GPU work: call it only where no timing runs
        (Standby does, under its gate). False when it died or hung meanwhile."""
        if not self.standby or self.preloaded is None or self.primed is not None:
            raise RuntimeError("prime() is for a ready standby worker, once")
        self._send_line(Prime(device=device).model_dump_json())
        try:
            self.primed = self.wait_reply("prime", timeout)
        except (WorkerTimeout, WorkerDied, WorkerProtocolError):
            return False
        return True

    def start(self, setup: Union[Setup, dict]) -> None:
        """Activate a standby worker that is ready(): from here on it is a worker like any other."""
        if not self.standby or self.preloaded is None:
            raise RuntimeError("start() is for a standby worker, after ready()")
        self.standby = False
        self._send_setup(Setup.model_validate(setup))

    def _send_setup(self, setup: Setup) -> None:
        self.groups = list(setup.jail.cgroups) if setup.jail is not None else []
        self.jail = setup.jail
        self._send_line(setup.model_dump_json())

    # -- channel ---------------------------------------------------------------------------------
    def _send_line(self, line: str) -> None:
        try:
            os.write(self._cmd_w, line.encode() + b"\n")
        except (BrokenPipeError, OSError):
            pass  # the death shows up when we wait for the reply

    def send(self, cmd: Command) -> float:
        """Send one command without waiting: several workers can then work at once. Its reply is
        read by wait_reply(cmd.op, timeout, t0=) with the time this returns."""
        t0 = time.perf_counter()
        self._send_line(cmd.model_dump_json())
        return t0

    def request(self, cmd: Command, timeout: float, max_bytes: Optional[int] = None) -> tuple[Reply, float]:
        """Send one command; wait for its reply. Returns the reply and the parent's own wall time for
        it, measured where the child cannot reach. Binary frames that follow the reply line are in
        `reply.blobs`: at most `max_bytes` of them (wait_reply)."""
        t0 = self.send(cmd)
        reply = self.wait_reply(cmd.op, timeout, t0=t0, max_bytes=max_bytes)
        return reply, time.perf_counter() - t0

    def wait_reply(self, op: str, timeout: float, t0: Optional[float] = None,
                   max_bytes: Optional[int] = None) -> Reply:
        """`max_bytes`: the most the reply's frames may announce (FrameTooLarge past it); None: a
        trials reply may take what the host can hold now (memory.frame_limit), any other none."""
        if max_bytes is None:
            max_bytes = frame_limit() if op == "trials" else 0
        deadline = (t0 or time.perf_counter()) + timeout
        self._p0 = self.stopped_for()
        try:
            line = self._read_until(deadline, lambda: self._buf.find(b"\n"), MAX_LINE_BYTES)
            try:
                reply = REPLY.validate_json(line)
            except ValidationError as e:
                raise WorkerProtocolError(f"malformed reply from worker: {str(e)[:300]}") from None
            if reply.op != op:
                raise WorkerProtocolError(f"reply for {reply.op!r} received while waiting for {op!r}")
            if any(n < 0 for n in reply.blob_sizes):
                raise WorkerProtocolError("a reply announced a frame of negative size")
            if sum(reply.blob_sizes) > max_bytes:
                raise FrameTooLarge(sum(reply.blob_sizes), max_bytes)
            reply.blobs = [self._read_exact(deadline, n) for n in reply.blob_sizes]
        except (WorkerTimeout, WorkerDied, WorkerProtocolError):
            self.out_of_step = True
            raise
        return reply

    def wait_json(self, timeout: float) -> bytes:
        """One raw reply line (the compile role answers with its own record)."""
        self._p0 = self.stopped_for()
        return self._read_until(time.perf_counter() + timeout, lambda: self._buf.find(b"\n"), MAX_LINE_BYTES)

    def _read_exact(self, deadline: float, n: int):
        """The next `n` bytes, read straight into one buffer (payload.decode maps tensors on it):
        trials ship hundreds of MB, and appending to and slicing a growing buffer cost more than
        the pipe itself (6.1 s against 1.7 s for 960 MB, measured on a 2-core machine)."""
        frame = new_frame(n)
        view = memoryview(frame)
        have = min(n, len(self._buf))
        view[:have] = self._buf[:have]
        del self._buf[:have]
        while have < n:
            self._readable(deadline)
            got = os.readv(self._rep_r, [view[have:]])
            if not got:
                raise self._died()
            have += got
        return frame

    def _read_until(self, deadline: float, ready_at, limit: int) -> bytes:
        """Read until ready_at() >= 0 (the end offset of the frame); return the frame."""
        while (end := ready_at()) < 0:
            self._readable(deadline)
            data = os.read(self._rep_r, 1 << 22)
            if not data:
                raise self._died()
            self._buf += data
            if len(self._buf) > limit + (1 << 22):
                raise WorkerProtocolError("worker reply exceeds the size limit")
        frame = bytes(self._buf[:end])
        del self._buf[:end + 1]
        return frame

    def _readable(self, deadline: float) -> None:
        """Until the reply pipe has data (or its end), or WorkerTimeout at the deadline, which moves
        on by the time the worker has been stopped since the request, up to STOP_CREDIT_S."""
        while True:
            left = deadline + min(self.stopped_for() - self._p0, STOP_CREDIT_S) - time.perf_counter()
            if left <= 0:
                raise WorkerTimeout()
            if select.select([self._rep_r], [], [], min(left, 1.0))[0]:
                return

    def _died(self) -> WorkerDied:
        code = self._wait_exit(5.0)
        return WorkerDied(f"worker died: {describe_exit(code)}", code)

    def _wait_exit(self, timeout: float) -> Optional[int]:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    # -- control ---------------------------------------------------------------------------------
    def pause(self, drain_gpu_s: Optional[float] = None) -> None:
        """Stop the whole process group (SIGSTOP) while something else is timed, and freeze its
        jail's control group: a process it started in a session of its own stops too (cgroups.py).
        The group is frozen first: a task stopped by the signal while the freeze begins can stay
        "freezing" until it is continued (seen here: 5 of 300 pauses on cgroup v1).
        `drain_gpu_s`: before that, every CUDA process of its jail is locked (gpulock.py), which waits
        up to that long for the GPU work they queued to finish and blocks their further CUDA calls
        until resume(); `drained_ms` and `undrained` say how it went."""
        with self._pause_lock:
            self.drain_locked_all = False
            if self.proc.poll() is None and not self.stopped:
                if drain_gpu_s is not None:
                    self._drain(drain_gpu_s)
                if self.groups and freeze(self.groups, True, FREEZE_WAIT_S) is False:
                    self.unfrozen += 1
                try:
                    os.killpg(self.proc.pid, signal.SIGSTOP)
                except ProcessLookupError:
                    pass
                self.stopped = True
                self._stopped_at = time.perf_counter()

    def resume(self) -> None:
        with self._pause_lock:
            if self.stopped:
                try:  # SIGCONT first: it drops a stop still pending in a frozen task
                    os.killpg(self.proc.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
                if self.groups:
                    freeze(self.groups, False)
                held, self._held = self._held, None
                self.stopped = False
                self._stopped_s += time.perf_counter() - self._stopped_at
                self._stopped_at = None
                if held is not None:  # last: an unlock refused raises, the worker's state already set
                    held.release()

    def _drain(self, wait_s: float) -> None:
        from . import gpulock
        from ..cgroups import procs
        listed = lambda: (procs(self.groups) if self.groups else []) or [self.proc.pid]  # noqa: E731
        first = listed()
        held = gpulock.hold(first, wait_s)
        if held is None:
            self.drain_unavailable = gpulock.unavailable()
            return
        self._held = held
        # a process started, or one that started CUDA, while the locks waited: looked at again
        gpulock.hold(listed(), wait_s, into=held)
        self.drained_ms.append(held.ms)
        self.undrained += held.failed
        self.drain_locked_all = held.whole and bool(held.pids)

    def stopped_for(self) -> float:
        """Seconds spent stopped so far, a stop under way included."""
        with self._pause_lock:
            if self._stopped_at is None:
                return self._stopped_s
            return self._stopped_s + time.perf_counter() - self._stopped_at

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self._wait_exit(10.0)

    def close(self, grace: float = 5.0) -> None:
        """Ask politely, then kill the whole group: nothing it started outlives it."""
        if self.proc.poll() is None:
            self.resume()
            self._send_line(ExitCommand().model_dump_json())
            if self._wait_exit(grace) is None:
                self.kill()
        elif not self.apart:  # born apart, nothing outlives it: its group's number may be another's by now
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)  # orphans of a dead leader
            except (ProcessLookupError, PermissionError):
                pass
        for fd in (self._cmd_w, self._rep_r):
            try:
                os.close(fd)
            except OSError:
                pass
        self._tail.join(timeout=2.0)
        while self.on_close:  # what outlives the process: its jail's home (sandbox.py)
            try:
                self.on_close.pop(0)()
            except Exception:  # noqa: BLE001
                pass

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> Optional[int]:
        return self.proc.poll()

    def log_tail(self) -> str:
        return self._tail.text()

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def close_all(closers) -> None:
    """Call each of `closers` (a worker's, a session's or a standby's close), all at once, each on a
    thread: on a GPU a process's exit takes its context's teardown, 0.3-0.5 s."""
    threads = [threading.Thread(target=c, daemon=True) for c in closers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
