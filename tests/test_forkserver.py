"""Standbys forked from a fork server: the same process a fresh interpreter would be, exit statuses
reported, and a server killed under them costs throughput, never a verdict. CPU only."""
from __future__ import annotations

import json
import os
import signal
import time

import pytest
import torch

from conftest import ROOT, TESTS
from harness.build import child_env
from harness.batch.executor import neighbour_may_have_caused
from harness.process.forkserver import EXIT_UNKNOWN
from harness.process.standby import Standby
from harness.process.worker import Worker, describe_exit
from harness.records.result import EvalResult, Status

SETUP = {"role": "candidate", "problem_path": str(TESTS / "problems" / "relu_add.py"), "device": "cpu",
         "size": "small", "dtype": None, "cpu_threads": 1}

# imported as the solution: reports what its process looks like, through its import error
PROBE = r'''
import ctypes, json, os, threading
fds = sorted(int(f) for f in os.listdir("/proc/self/fd"))
fds = [f for f in fds if os.path.exists(f"/proc/self/fd/{f}")]  # less listdir's own
facts = {
    "own_group": os.getpgid(0) == os.getpid(), "own_session": os.getsid(0) == os.getpid(),
    "fds": len(fds), "stdin": os.readlink("/proc/self/fd/0"),
    "dumpable": ctypes.CDLL(None).prctl(3, 0, 0, 0, 0),
    "env": sorted(k for k in os.environ if k.startswith("HARNESS") or k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")),
    "python_threads": threading.active_count(),
}
raise RuntimeError("facts=" + json.dumps(facts) + "=end")
'''


@pytest.fixture
def cleanup(monkeypatch):
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    made: list = []
    yield made
    for x in reversed(made):
        x.close()


def _facts(w: Worker) -> dict:
    reply = w.wait_reply("load", 120)
    assert not reply.ok and "facts=" in reply.error, reply.error
    return json.loads(reply.error.split("facts=", 1)[1].split("=end", 1)[0])


def test_a_forked_standby_is_the_process_a_fresh_one_would_be(cleanup, tmp_path):
    sol = tmp_path / "probe.py"
    sol.write_text(PROBE)
    env = child_env(tmp_path / "ext", "cpu")
    sb, own = Standby(child_env(None, "cpu"), 1), Standby(child_env(None, "cpu"), 1, fork=False)
    cleanup += [sb, own]
    assert sb.server.ready(120) and sb.server.notes["fork_safe"] and sb.server.notes["python_threads"] == 1
    assert sb.server.notes["cpp_extension"]  # imported once there, for every child
    facts = {}
    for role in ("candidate", "reference"):
        setup = {**SETUP, "role": role, "solution_path": str(sol)}
        if role == "reference":
            setup["problem_path"] = str(sol)  # the reference role imports the problem file
        # against a standby started as its own interpreter, which has imported as much (on a CUDA
        # machine a standby's preload has run cuInit, which a child with its setup from the start
        # does later)
        forked, fresh = sb.take(setup, env, 120), own.take(setup, env, 120)
        cleanup += [forked, fresh]
        assert forked.forked and forked.preloaded is not None and not fresh.forked and fresh.preloaded is not None
        facts[role] = (_facts(forked), _facts(fresh))
    for role, (forked, fresh) in facts.items():
        assert forked == fresh, role
        assert forked["own_group"] and forked["own_session"] and forked["stdin"] == "/dev/null"
        if torch.version.cuda is None:  # a CUDA torch's cpp_extension import runs cuInit, which opens its own
            assert forked["fds"] == 5  # stdin, stdout, stderr, its command pipe and its reply pipe
        assert forked["env"] == [] and forked["python_threads"] == 1
    assert facts["candidate"][0]["dumpable"] == 1  # a candidate, as a fresh one: dumpable again
    assert facts["reference"][0]["dumpable"] == 0  # a reference stays out of a candidate's reach


def test_the_server_reports_each_exit_and_is_not_dumpable(cleanup):
    # born in the harness's namespace: a process born apart is its namespace's pid 1, which a signal
    # from outside ends only when it is SIGKILL (the kernel's rule for an init)
    sb = Standby(child_env(None, "cpu"), 2, apart=False)
    cleanup.append(sb)
    assert sb.server.ready(120)
    assert sb.server.notes["dumpable"] == 0
    a, b = list(sb.pool)
    assert a.forked and b.forked and a.ready(60) and b.ready(60)
    os.killpg(a.pid, signal.SIGSEGV)
    assert a.proc.wait(30) == -signal.SIGSEGV
    assert describe_exit(a.returncode) == "segmentation fault (SIGSEGV)"
    b.close()  # asked politely: exit code 0
    assert b.returncode == 0


def test_a_killed_server_costs_throughput_not_verdicts(cleanup, tmp_path):
    """A candidate can kill the server (same user). The standbys it forked go on working; their
    exits then have no status, which reads as a failure a neighbour may have caused (re-run alone),
    and later standbys are fresh interpreters."""
    sb = Standby(child_env(None, "cpu"), 1)
    cleanup.append(sb)
    w = sb.idle
    assert w.forked and w.ready(60)
    os.kill(sb.server.proc.pid, signal.SIGKILL)
    sb.server.proc.wait(30)
    deadline = time.monotonic() + 30
    while not sb.server.dead:
        assert time.monotonic() < deadline
        time.sleep(0.05)

    sol = tmp_path / "report_ext_dir.py"
    sol.write_text('import os\nraise RuntimeError("ext=" + os.environ.get("TORCH_EXTENSIONS_DIR", "unset"))\n')
    got = sb.take({**SETUP, "solution_path": str(sol)}, child_env(tmp_path / "ext", "cpu"), 120)
    cleanup.append(got)
    assert got is w  # still alive and working
    reply = got.wait_reply("load", 120)
    assert f"ext={tmp_path / 'ext'}" in reply.error
    assert sb.idle is not None and not sb.idle.forked and sb.idle.ready(120)

    assert got.proc.wait(30) == EXIT_UNKNOWN  # it exits after a failed load, with no one to report how
    rec = EvalResult(problem="p", solution="s", status=Status.runtime_error,
                     error=f"the solution's process died: {describe_exit(got.returncode)}")
    assert "fork server was killed" in rec.error and neighbour_may_have_caused(rec)


def test_a_refused_fork_gives_a_fresh_standby_on_its_own_pipes(cleanup):
    """The server refuses a request it cannot serve safely (here a malformed one: two fds). The
    caller then starts a fresh interpreter on new pipes, and asks the server nothing more."""
    import socket
    sb = Standby(child_env(None, "cpu"), 1)
    cleanup.append(sb)
    assert sb.idle.forked and sb.idle.ready(120)
    r, w = os.pipe()
    with sb.server._lock:
        socket.send_fds(sb.server.sock, [b"f"], [r, w])
    os.close(r)
    os.close(w)
    fresh = Worker(None, env=sb.env, forkserver=sb.server, fork_timeout=30)
    cleanup.append(fresh)
    assert not fresh.forked and fresh.ready(120) and fresh.returncode is None
    assert not sb.server.notes["fork_safe"]
    later = Worker(None, env=sb.env, forkserver=sb.server, fork_timeout=30)
    cleanup.append(later)
    assert not later.forked and later.ready(120)


ORPHAN = r"""
import os, signal, sys, time
sys.path.insert(0, {root!r})
from harness.build import child_env
from harness.process.standby import Standby
sb = Standby(child_env(None, "cpu"), 1)
w = sb.idle
assert w.forked and w.ready(60)
os.kill(w.proc.pid, signal.SIGSTOP)  # as a neighbour's timing leaves it
print(sb.server.proc.pid, w.proc.pid, flush=True)
time.sleep(600)
"""


def test_a_harness_killed_outright_leaves_no_fork_server_nor_stopped_standby():
    """The harness SIGKILLed while a standby it forked is stopped: the server sees its parent gone,
    kills what it forked (stopped or not) and exits, instead of waiting for ever on a child that
    never ends (seen after a killed batch: a stopped standby holding its memory)."""
    import subprocess
    import sys

    from harness.process.forkserver import _alive
    p = subprocess.Popen([sys.executable, "-c", ORPHAN.format(root=str(ROOT))], stdout=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        server, standby = map(int, p.stdout.readline().split())
    finally:
        p.kill()
        p.wait(30)
    deadline = time.monotonic() + 15
    while (_alive(server) or _alive(standby)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(standby) and not _alive(server)


def test_a_pid_the_kernel_reuses_does_not_carry_an_earlier_childs_exit():
    """The server reports each child's exit by pid; a later child given the same pid (the kernel
    cycles its 32768 within a long batch) must not look dead from its first moment (a live reference
    read as "exit code 0" in KernelBench level-1 batches on an H100, and its problem failed)."""
    import socket
    import threading

    from harness.process.forkserver import ForkServer
    srv = ForkServer.__new__(ForkServer)  # the parent's bookkeeping alone: no server process
    srv._lock, srv._cv, srv.dead = threading.Lock(), threading.Condition(), False
    srv._ready, srv._mine = {"ready": True, "fork_safe": True}, set()
    srv._forked, srv._exits = [4242], {4242: 0}  # the earlier 4242 exited; the server forked a new one
    srv.sock, theirs = socket.socketpair()
    r, w = os.pipe()
    try:
        proc = srv.fork(r, w, w, timeout=1.0)
        assert proc is not None and proc.pid == 4242
        assert proc.poll() is None  # alive until the server says the new one ended
        srv._exits[4242] = -9
        assert proc.poll() == -9
    finally:
        for fd in (r, w):
            os.close(fd)
        srv.sock.close()
        theirs.close()
