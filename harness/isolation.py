"""Running untrusted code in a child interpreter, and talking to it.

Each worker is a fresh `python -m harness.worker` in its own session (process group), so a timeout
kills everything it started. Commands go down a private pipe; replies come back up another one as
JSON lines. The child's stdout and stderr are merged into a third pipe that a thread drains, keeping
only the tail: a solution that prints 100 MB costs a little CPU and nothing else, and nothing printed
is ever parsed. A reply that is missing, malformed or too large is a failure, never a pass.

A `Standby` keeps children started ahead of need, for candidates and a batch slot's references: each
has paid for the interpreter and the torch import while the previous candidate was still running, and
waits for its setup line.
"""
from __future__ import annotations

import functools
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from typing import Callable, Optional

from pydantic import ValidationError

from .cpus import restrict
from .forkserver import EXIT_UNKNOWN, SERVER_GONE, ForkServer
from .records.messages import Command, Reply

MAX_LINE_BYTES = 64 << 20
MAX_BLOB_BYTES = 16 << 30
LOG_TAIL_BYTES = 16 << 10


class WorkerDied(Exception):
    """The worker exited, or its reply channel closed, before it answered."""

    def __init__(self, message: str, returncode: Optional[int]):
        super().__init__(message)
        self.returncode = returncode


class WorkerTimeout(Exception):
    pass


class WorkerProtocolError(Exception):
    pass


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


def _widen(fd: int) -> None:
    """A 1 MB pipe buffer where the system allows it (64 KB by default): fewer wake-ups per trial."""
    try:
        import fcntl
        size = min(1 << 20, int(open("/proc/sys/fs/pipe-max-size").read()))
        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), size)
    except (OSError, ValueError, ImportError):
        pass


def _pipes() -> tuple[int, int, int, int, int, int]:
    """A worker's three pipes: (command read, command write, reply read, reply write, output read,
    output write)."""
    cmd_r, cmd_w = os.pipe()
    rep_r, rep_w = os.pipe()
    _widen(rep_r)
    out_r, out_w = os.pipe()
    return cmd_r, cmd_w, rep_r, rep_w, out_r, out_w


class _Tail(threading.Thread):
    """Drains a pipe and keeps the last LOG_TAIL_BYTES, counting the rest."""

    def __init__(self, fd: int):
        super().__init__(daemon=True)
        self.fd = fd
        self.chunks: deque[bytes] = deque()
        self.kept = 0
        self.total = 0

    def run(self) -> None:
        while True:
            try:
                data = os.read(self.fd, 1 << 16)
            except OSError:
                break
            if not data:
                break
            self.total += len(data)
            self.chunks.append(data)
            self.kept += len(data)
            while self.kept - len(self.chunks[0]) >= LOG_TAIL_BYTES:
                self.kept -= len(self.chunks.popleft())
        os.close(self.fd)

    def text(self) -> str:
        data = b"".join(self.chunks)[-LOG_TAIL_BYTES:]
        s = data.decode(errors="replace")
        if self.total > len(data):
            s = f"[... {self.total - len(data)} earlier bytes of output dropped ...]\n" + s
        return s


class Worker:
    """One child interpreter running `harness.worker` in a given role. Spawned without a setup, it
    preloads what a candidate needs and waits: `ready()`, then `start(setup)`."""

    def __init__(self, setup: Optional[dict], env: Optional[dict[str, str]] = None, cwd: Optional[str] = None,
                 cpus: Optional[set[int]] = None, forkserver: Optional[ForkServer] = None, fork_timeout: float = 120.0):
        """`cpus`: the host CPUs it (and its children) may run on; None: any (see cpus.py).
        `forkserver` (a standby only, `env` the server's own): forked from there when it can, else
        started fresh."""
        cmd_r, self._cmd_w, self._rep_r, rep_w, out_r, out_w = _pipes()
        self.standby = setup is None
        proc = forkserver.fork(cmd_r, rep_w, out_w, fork_timeout) if forkserver and self.standby else None
        self.forked = proc is not None
        if forkserver and self.standby and proc is None:
            # those fds may have reached the server: a child it forks late must not share these pipes
            for fd in (cmd_r, self._cmd_w, self._rep_r, rep_w, out_r, out_w):
                os.close(fd)
            cmd_r, self._cmd_w, self._rep_r, rep_w, out_r, out_w = _pipes()
        child_env = dict(os.environ if env is None else env)
        child_env["PYTHONUNBUFFERED"] = "1"
        child_env["HARNESS_WORKER_FDS"] = f"{cmd_r},{rep_w}"
        if self.standby:
            child_env["HARNESS_STANDBY"] = "1"
        self.proc = proc or subprocess.Popen(
            [sys.executable, "-m", "harness.worker"],
            stdin=subprocess.DEVNULL, stdout=out_w, stderr=out_w,
            pass_fds=(cmd_r, rep_w), env=child_env, cwd=cwd,
            start_new_session=True, close_fds=True,
        )
        restrict(self.proc.pid, cpus)
        for fd in (cmd_r, rep_w, out_w):
            os.close(fd)
        self._tail = _Tail(out_r)
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
        if setup is not None:
            self._send_line(json.dumps(setup))

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
        """A ready() standby: make its CUDA context and pin the timing primitives now (worker._prime),
        so that its candidate's load does not. It runs GPU work: call it only where no timing runs
        (Standby does, under its gate). False when it died or hung meanwhile."""
        if not self.standby or self.preloaded is None or self.primed is not None:
            raise RuntimeError("prime() is for a ready standby worker, once")
        self._send_line(json.dumps({"op": "prime", "device": device}))
        try:
            self.primed = self.wait_reply("prime", timeout)
        except (WorkerTimeout, WorkerDied, WorkerProtocolError):
            return False
        return True

    def start(self, setup: dict) -> None:
        """Activate a standby worker that is ready(): from here on it is a worker like any other."""
        if not self.standby or self.preloaded is None:
            raise RuntimeError("start() is for a standby worker, after ready()")
        self.standby = False
        self._send_line(json.dumps(setup))

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

    def request(self, cmd: Command, timeout: float) -> tuple[Reply, float]:
        """Send one command; wait for its reply. Returns the reply and the parent's own wall time for
        it, measured where the child cannot reach. Binary frames that follow the reply line are in
        `reply.blobs`."""
        t0 = self.send(cmd)
        reply = self.wait_reply(cmd.op, timeout, t0=t0)
        return reply, time.perf_counter() - t0

    def wait_reply(self, op: str, timeout: float, t0: Optional[float] = None) -> Reply:
        deadline = (t0 or time.perf_counter()) + timeout
        self._p0 = self.stopped_for()
        try:
            line = self._read_until(deadline, lambda: self._buf.find(b"\n"), MAX_LINE_BYTES)
            try:
                reply = Reply.model_validate_json(line)
            except ValidationError as e:
                raise WorkerProtocolError(f"malformed reply from worker: {str(e)[:300]}") from None
            if reply.op != op:
                raise WorkerProtocolError(f"reply for {reply.op!r} received while waiting for {op!r}")
            if sum(reply.blob_sizes) > MAX_BLOB_BYTES or any(n < 0 for n in reply.blob_sizes):
                raise WorkerProtocolError("worker reply exceeds the size limit")
            reply.blobs = [self._read_exact(deadline, n) for n in reply.blob_sizes]
        except (WorkerTimeout, WorkerDied, WorkerProtocolError):
            self.out_of_step = True
            raise
        return reply

    def wait_json(self, timeout: float) -> bytes:
        """One raw reply line (the compile role answers with its own record)."""
        self._p0 = self.stopped_for()
        return self._read_until(time.perf_counter() + timeout, lambda: self._buf.find(b"\n"), MAX_LINE_BYTES)

    def _read_exact(self, deadline: float, n: int) -> bytearray:
        """The next `n` bytes, read straight into one buffer (payload.decode maps tensors on it):
        trials ship hundreds of MB, and appending to and slicing a growing buffer cost more than
        the pipe itself (6.1 s against 1.7 s for 960 MB, measured on a 2-core machine)."""
        frame = bytearray(n)
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
        on by the time the worker has been stopped since the request."""
        while True:
            left = deadline + (self.stopped_for() - self._p0) - time.perf_counter()
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
    def pause(self) -> None:
        """Stop the whole process group (SIGSTOP) while something else is timed."""
        with self._pause_lock:
            if self.proc.poll() is None and not self.stopped:
                try:
                    os.killpg(self.proc.pid, signal.SIGSTOP)
                    self.stopped = True
                    self._stopped_at = time.perf_counter()
                except ProcessLookupError:
                    pass

    def resume(self) -> None:
        with self._pause_lock:
            if self.stopped:
                try:
                    os.killpg(self.proc.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
                self.stopped = False
                self._stopped_s += time.perf_counter() - self._stopped_at
                self._stopped_at = None

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
            self._send_line(Command(op="exit").model_dump_json())
            if self._wait_exit(grace) is None:
                self.kill()
        else:
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


# Read by torch when an extension is loaded, not when it is imported: the only part of a candidate's
# environment that may differ between candidates, so it arrives with the setup instead
LATE_ENV = ("TORCH_EXTENSIONS_DIR",)


def _early(env: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k not in LATE_ENV}


def _dumpable_ok(env: dict[str, str]) -> dict[str, str]:
    """`env` without the reference's request not to be dumpable, which every standby honours already."""
    return {k: v for k, v in env.items() if k != "HARNESS_NONDUMPABLE"}


class Standby:
    """Candidate children kept started for a fixed environment (a device slot's), `depth` of them:
    each needs seconds to start (interpreter, torch import), and once evaluations take only a few
    seconds themselves one replacement started per evaluation is not ready in time. Thread-safe: the
    evaluations sharing a device slot take from one Standby.

    `prime` (the slot's device): each one, once started, is also primed (Worker.prime: CUDA context,
    timing primitives pinned) by a thread of its own inside a stoppable phase of the slot's `gate`,
    so that it never runs GPU work beside a timing run (the timing stops it). A worker taken before its turn came is handed
    out unprimed and pins for itself, as a fresh one does."""

    def __init__(self, env: dict[str, str], depth: int = 1, cpus: Optional[set[int]] = None,
                 prime: Optional[str] = None, gate=None, timeout: float = 120.0, fork: bool = True):
        from .sharing import SoloGate
        self.env = _early(env)
        self.depth = max(1, depth)
        self.cpus = cpus  # where they start up: off the slot's timing CPU (cpus.py)
        self.prime_device = prime
        self.gate = gate or SoloGate()
        self.timeout = timeout
        # one torch import for all of them (forkserver.py); None: each imports its own
        self.server = ForkServer(self.env, cpus) if fork else None
        self._cv = threading.Condition()
        # id(worker) -> "starting" (its thread waits for the preload), "queued" (for the gate),
        # "priming", "done", or "taken" (handed out or closed before its turn: not primed)
        self._state: dict[int, str] = {}
        self.pool: deque[Worker] = deque(self._spawn() for _ in range(self.depth))

    def _spawn(self) -> Worker:
        w = Worker(None, env=self.env, cpus=self.cpus, forkserver=self.server, fork_timeout=self.timeout)
        if self.prime_device:
            self._state[id(w)] = "starting"
            threading.Thread(target=self._prime, args=(w,), daemon=True, name="standby-prime").start()
        return w

    def _move(self, w: Worker, frm: str, to: str) -> bool:
        with self._cv:
            if self._state.get(id(w)) != frm:
                return False  # taken or closed meanwhile
            self._state[id(w)] = to
            self._cv.notify_all()
            return True

    def _prime(self, w: Worker) -> None:
        try:
            if not w.ready(self.timeout):
                self._move(w, "starting", "done")
                return
            if not self._move(w, "starting", "queued"):
                return
            with self.gate.stoppable() as phase:
                phase.add(w)
                if self._move(w, "queued", "priming") and not w.prime(self.prime_device, self.timeout):
                    w.kill()  # it may still be priming: it would answer "prime" to its setup
        except Exception:  # noqa: BLE001 - closed under it: take() falls back to a fresh worker
            pass
        finally:
            with self._cv:
                if self._state.get(id(w)) in ("starting", "priming"):
                    self._state[id(w)] = "done"
                self._cv.notify_all()

    def _settled(self, w: Worker, timeout: float) -> bool:
        """Under self._cv, for a worker with a priming thread: wait until that thread is neither
        reading its preload nor priming. Neither needs the gate, so a caller inside a shared phase
        cannot deadlock here. False when it is still at it after `timeout` (hung)."""
        return self._cv.wait_for(lambda: self._state[id(w)] not in ("starting", "priming"), timeout)

    def _claim(self, w: Worker, timeout: float) -> bool:
        """Make `w` this thread's to use: its priming thread, if any, is past the preload and either
        done or told not to start (never left mid-way). True when `w` is ready and alive."""
        with self._cv:
            if id(w) in self._state:
                if not self._settled(w, timeout):
                    return False  # the caller closes it
                if self._state[id(w)] == "queued":
                    self._state[id(w)] = "taken"
        return w.ready(timeout) and w.returncode is None

    @property
    def idle(self) -> Optional[Worker]:
        """The one the next take() hands out."""
        return self.pool[0] if self.pool else None

    def take(self, setup: dict, env: dict[str, str], timeout: float,
             on_worker: Optional[Callable[[Worker], None]] = None) -> Worker:
        """A candidate or reference worker for `setup`, as Worker(setup, env=env) would give: the
        oldest idle one when `env` matches (a fresh one if it died meanwhile), its replacement started
        at once. A standby is not dumpable from its start, as a reference must be (HARNESS_NONDUMPABLE),
        and has run nothing but the harness's imports, so either role may have it: a reference then
        starts in about a second instead of four (the torch import), under the slot's gate.
        `on_worker`: told of the worker before it is sent its setup (a stoppable phase of the gate,
        which must be able to stop it before it runs any of the solution's code)."""
        tell = on_worker or (lambda w: None)
        if setup.get("role") not in ("candidate", "reference") or _early(_dumpable_ok(env)) != self.env:
            cand = Worker(setup, env=env)
            tell(cand)
            return cand
        with self._cv:
            idle = self.pool.popleft() if self.pool else None
        if idle is not None and self._claim(idle, timeout):
            tell(idle)
            idle.start({**setup, "env": {k: env[k] for k in LATE_ENV if k in env}})
            cand = idle
        else:
            if idle is not None:
                idle.close(grace=0)
            cand = Worker(setup, env=env)  # a fresh interpreter: seconds before it imports anything
            tell(cand)
        with self._cv:
            if idle is not None:
                self._state.pop(id(idle), None)
            while len(self.pool) < self.depth:
                self.pool.append(self._spawn())
        return cand

    def reserve(self, n: int) -> None:
        """Make sure `n` are started for the takes that follow at once (a side's further processes,
        candidate or reference): the pool's replacements otherwise start one per take, so a group of
        7 primed about two at a time, one after another (bench/diag/further_start.py). Those not
        taken stay in the pool for later evaluations."""
        with self._cv:
            while len(self.pool) < n:
                self.pool.append(self._spawn())

    def settle(self, timeout: float) -> None:
        """Wait until the idle ones have finished starting (before CPU timing: they would share the cores)."""
        with self._cv:
            pool = list(self.pool)
        for w in pool:
            with self._cv:
                if id(w) in self._state:
                    self._settled(w, timeout)
                    continue
            w.ready(timeout)

    def close(self) -> None:
        with self._cv:
            pool, self.pool = list(self.pool), deque()
            for w in pool:
                if id(w) in self._state:
                    self._state[id(w)] = "taken"
            self._cv.notify_all()
        close_all([functools.partial(w.close, grace=0) for w in pool])
        if self.server is not None:
            self.server.close()
