"""Standby workers forked from one interpreter that imported torch once.

A fresh `python -m harness.process.child` pays 2-4 s of CPU for the torch import before it can take a
candidate; a batch slot starts one per evaluation and per reference, and on a GPU machine those imports
competed with the builds (cold) and held up the next load (warm). A fork server imports once
(`child.preload_imports`: no CUDA context, no problem's or solution's code) and forks each standby
from there in milliseconds.

The server imports nothing that initialises the CUDA driver (a child forked after that cannot use
CUDA) and checks before each fork that its device files are still closed; with Python threads or an
initialised driver it forks nothing, and the standbys start fresh.

What a forked standby shares with a fresh one, so that a verdict cannot depend on how it started:
- the same environment (the server is started with the standby's), its own session (process group),
  stdin on /dev/null, stdout and stderr on its own pipe, only its two channel fds and those open;
- not dumpable from its start, like every standby; the server is not dumpable either, so a
  candidate (its child) cannot reach into it to change what later standbys, references among them,
  start from;
- then exactly `child.main()`, as a standby.

The server reaps its children and reports each exit status, since they are not the harness's own
children. If the server dies (a candidate may kill it: it is a process of the same user), its
children live on; an exit seen after that has no status (`EXIT_UNKNOWN`), and new standbys come from
fresh interpreters again (`ForkServer.fork` returns None).

Protocol on a Unix socket pair: the parent sends b"f" (b"a": born in a PID namespace of its own,
sandbox.born_apart) with the child's three fds (command read end,
reply write end, output write end) attached; the server answers JSON lines: {"ready": ...} once, then
{"forked": pid} per request, and {"exit": pid, "code": c} as children end (`code` as Popen's
returncode: negative for a signal).
"""
from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Optional

from ..sandbox import born_apart
from .pipes import Tail

# an exit the server could not report (it died first): no status known
EXIT_UNKNOWN = -1000
SERVER_GONE = "exit status unknown: its fork server was killed"
# read at library load: a thread pool made while importing would not survive the fork (OpenBLAS shuts
# its own down around one); the children start single-threaded, as torch's cpu_threads setting has them
_SERVER_ONLY_ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}


class ForkedProc:
    """The part of subprocess.Popen that Worker uses, for a child of the fork server."""

    def __init__(self, server: "ForkServer", pid: int):
        self.server = server
        self.pid = pid

    def poll(self) -> Optional[int]:
        return self.server._exit_code(self.pid)

    def wait(self, timeout: Optional[float] = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            code = self.server._exit_code(self.pid, wait=0.05 if deadline is None else
                                          max(0.0, min(0.05, deadline - time.monotonic())))
            if code is not None:
                return code
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(f"forked worker {self.pid}", timeout)


class ForkServer:
    """One server process for one environment (a Standby's). Thread-safe."""

    def __init__(self, env: dict[str, str], cpus: Optional[set[int]] = None):
        from ..cpus import restrict
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        out_r, out_w = os.pipe()
        senv = dict(env)
        # the children put back the standby's own values (None: unset)
        senv["HARNESS_FORKSERVER_ENV"] = json.dumps({k: env.get(k) for k in _SERVER_ONLY_ENV})
        senv.update(_SERVER_ONLY_ENV)
        senv["PYTHONUNBUFFERED"] = "1"
        senv["HARNESS_FORKSERVER_FD"] = str(theirs.fileno())
        self.proc = subprocess.Popen([sys.executable, "-P", "-m", "harness.process.forkserver"],
                                     stdin=subprocess.DEVNULL, stdout=out_w, stderr=out_w,
                                     pass_fds=(theirs.fileno(),), env=senv, start_new_session=True,
                                     close_fds=True)
        restrict(self.proc.pid, cpus)  # inherited by every child
        theirs.close()
        os.close(out_w)
        self._tail = Tail(out_r)
        self._tail.start()
        self.sock = mine
        self._lock = threading.Lock()      # one fork request at a time
        self._cv = threading.Condition()
        self._ready: Optional[dict] = None
        self._forked: list[Optional[int]] = []  # None: the server refused (see main)
        self._exits: dict[int, int] = {}
        self._mine: set[int] = set()
        self.dead = False
        threading.Thread(target=self._read, daemon=True, name="forkserver-reader").start()

    def _read(self) -> None:
        buf = b""
        try:
            while True:
                data = self.sock.recv(1 << 16)
                if not data:
                    break
                buf += data
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    msg = json.loads(line)
                    with self._cv:
                        if "ready" in msg:
                            self._ready = msg
                        elif "forked" in msg:
                            self._forked.append(msg["forked"])
                        elif "error" in msg:
                            self._forked.append(None)
                        elif "exit" in msg:
                            self._exits[msg["exit"]] = msg["code"]
                        self._cv.notify_all()
        except (OSError, ValueError):
            pass
        with self._cv:
            self.dead = True
            self._cv.notify_all()

    def ready(self, timeout: float) -> bool:
        """Wait until the server has imported what standbys need. False if it died, took longer than
        `timeout` (it is then given up on: no later request waits for it again) or cannot fork safely."""
        with self._cv:
            if not self._cv.wait_for(lambda: self._ready is not None or self.dead, timeout):
                self.dead = True
                self.proc.kill()
            return self._ready is not None and not self.dead and bool(self._ready.get("fork_safe"))

    def fork(self, cmd_r: int, rep_w: int, out_w: int, timeout: float, apart: bool = False) -> Optional[ForkedProc]:
        """A new standby on these fds (the caller keeps and closes its own copies), or None when the
        server cannot give one (dead, refused, or no answer within `timeout`): the caller starts a
        fresh one, on new pipes, since these may have reached the server."""
        if not self.ready(timeout):
            return None
        with self._lock:
            try:
                socket.send_fds(self.sock, [b"a" if apart else b"f"], [cmd_r, rep_w, out_w])
            except OSError:
                return None
            with self._cv:
                if not self._cv.wait_for(lambda: self._forked or self.dead, timeout) or not self._forked:
                    # a late answer would pair the next request with this child: no more requests
                    self.dead = True
                    self.proc.kill()
                    return None
                pid = self._forked.pop(0)
                if pid is None:  # refused: it will refuse again
                    self._ready = {**(self._ready or {}), "fork_safe": False}
                    return None
                # an exit already reported under this pid was an earlier child's: the kernel reuses
                # pids (32768 of them, cycled within a KernelBench batch by Inductor's and the builds'
                # processes), and kept, it made a live reference look dead ("exit code 0") to the
                # evaluation timing it, and its problem fail. The server reports an exit before it
                # forks again, so every exit read by now is the earlier one's.
                self._exits.pop(pid, None)
                self._mine.add(pid)
        return ForkedProc(self, pid)

    def _exit_code(self, pid: int, wait: float = 0.0) -> Optional[int]:
        with self._cv:
            if wait > 0:
                self._cv.wait_for(lambda: pid in self._exits or self.dead, wait)
            if pid in self._exits:
                return self._exits[pid]
            if not self.dead:
                return None
        # the server is gone: the child was reparented, and its status went with the server
        if _alive(pid):
            time.sleep(wait)
            return None
        return EXIT_UNKNOWN

    @property
    def notes(self) -> dict:
        return dict(self._ready or {})

    def log_tail(self) -> str:
        return self._tail.text()

    def close(self, grace: float = 5.0) -> None:
        """No more forks. The server exits once its last child has (the workers it gave out are the
        caller's to close); killed if still there after `grace` seconds with no children left."""
        try:
            self.sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            with self._cv:
                live = [p for p in self._mine if p not in self._exits]
            if not any(_alive(p) for p in live):
                self.proc.kill()
                self.proc.wait()


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


# --------------------------------------------------------------------------------------------------
# the server side

def _driver_open() -> bool:
    """Has this process initialised the CUDA driver (its device files open)? A child forked after
    that cannot use CUDA, so the server then stops forking (the standbys start fresh)."""
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}").startswith("/dev/nvidia"):
                return True
        except OSError:
            pass
    return False


def _send(sock: socket.socket, obj: dict) -> None:
    sock.sendall(json.dumps(obj).encode() + b"\n")


def _child(fds: list[int], keep_env: dict, sync_w: int) -> None:
    """In the forked child: become a standby exactly as `python -m harness.process.child` would."""
    try:
        os.setsid()  # its own group before the server tells the parent its pid (pause, kill)
        os.write(sync_w, b"s")
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        cmd_r, rep_w, out_w = fds
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_w, 1)
        os.dup2(out_w, 2)
        keep = {0, 1, 2, cmd_r, rep_w}
        for name in os.listdir("/proc/self/fd"):
            fd = int(name)
            if fd not in keep:
                try:
                    os.close(fd)
                except OSError:
                    pass
        for k, v in keep_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        os.environ.pop("HARNESS_FORKSERVER_FD", None)
        os.environ.pop("HARNESS_FORKSERVER_ENV", None)
        os.environ["HARNESS_WORKER_FDS"] = f"{cmd_r},{rep_w}"
        os.environ["HARNESS_STANDBY"] = "1"
        from . import child
        child.main()
    finally:
        os._exit(70)


def main() -> None:
    from .child import is_dumpable, preload_imports, set_dumpable
    set_dumpable(False)
    sock = socket.socket(fileno=int(os.environ["HARNESS_FORKSERVER_FD"]))
    keep_env = json.loads(os.environ["HARNESS_FORKSERVER_ENV"])
    t0 = time.perf_counter()
    preload_imports(fork_safe=True)
    threads = threading.active_count()
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    safe = threads == 1 and not _driver_open()
    _send(sock, {"ready": True, "fork_safe": safe, "import_s": round(time.perf_counter() - t0, 3),
                 "cpp_extension": "torch.utils.cpp_extension" in sys.modules,
                 "python_threads": threads, "native_threads": len(os.listdir("/proc/self/task")),
                 "dumpable": is_dumpable()})
    children = 0
    open_ = True
    parent, mine, orphaned = os.getppid(), set(), False
    while open_ or children:
        if not orphaned and os.getppid() != parent:
            # the harness died without closing the server (SIGKILL, the OOM killer): what it forked
            # must not run on, least of all a standby a neighbour's timing left stopped (seen: one held
            # its memory, stopped, after its batch was killed). Each child leads a group of its own
            orphaned, open_ = True, False
            for pid in mine:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except OSError:
                    pass
        r, _, _ = select.select([sock, wake_r] if open_ else [wake_r], [], [], 1.0)
        if wake_r in r:
            os.read(wake_r, 4096)
        if sock in r:
            msg, fds, _, _ = socket.recv_fds(sock, 16, 3)
            if not msg:
                open_ = False
            elif len(fds) == 3 and safe and not _driver_open():
                sync_r, sync_w = os.pipe()
                try:
                    with born_apart(msg == b"a"):
                        pid = os.fork()
                        if pid == 0:
                            os.close(sync_r)
                            _child(fds, keep_env, sync_w)
                except OSError as e:  # no namespace: refused, as any request it cannot serve
                    for fd in (sync_r, sync_w, *fds):
                        os.close(fd)
                    _send(sock, {"error": f"no PID namespace: {e}"})
                    continue
                os.close(sync_w)
                os.read(sync_r, 1)  # setsid done, or the child died trying (EOF)
                os.close(sync_r)
                children += 1
                mine.add(pid)
                _send(sock, {"forked": pid})
            else:
                safe = safe and len(fds) != 3  # once unsafe, never again
                _send(sock, {"error": "bad request" if len(fds) != 3 else "fork unsafe: threads or a CUDA driver"})
            for fd in fds:
                os.close(fd)
        while children:  # reap
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                children = 0
                break
            if pid == 0:
                break
            children -= 1
            mine.discard(pid)
            try:
                _send(sock, {"exit": pid, "code": os.waitstatus_to_exitcode(status)})
            except OSError:
                pass  # the parent is gone: keep reaping until the last child ends
    os._exit(0)


if __name__ == "__main__":
    main()
