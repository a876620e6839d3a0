"""harness/sandbox.py: solution code runs as a uid of its own. Each attack here succeeds as the
harness's uid (sandbox off: the false verdict it aims at) and fails as a uid of its own (sandbox on:
the verdict its wrong outputs earn), on a copy of the problem and a build cache every uid can reach.
Skipped where the sandbox is unavailable (not root, or the Python installation closed to others)."""
from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

import pytest
from conftest import ROOT, make_config

from harness import sandbox
from harness.sandbox import available

pytestmark = pytest.mark.skipif(available() is not None, reason=f"no sandbox here: {available()}")
ATTACKS = ROOT / "tests" / "adversarial" / "sandbox"


@pytest.fixture
def open_dir():
    """A folder other uids may pass through (pytest's tmp_path is closed: 0700)."""
    d = Path(tempfile.mkdtemp(prefix="sandbox-test-"))
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _evaluate(solution: Path, problem: Path, cache: Path, sandbox: str, **overrides):
    from harness.evaluation import evaluate
    cfg = make_config(**{"cache_dir": str(cache), "hardening.sandbox": sandbox, "device": "cpu", **overrides})
    return evaluate(solution, problem, cfg)


# the wall test's defences, shown where it is what stands: a forward over timing.cpu_clocked_below_ms
# (clocked, no time a candidate reports is used: tests/test_clocked.py)
UNCLOCKED = {"timing.cpu_clocked": "off"}


def _unwaited(r) -> float:
    """A CPU path's speedup as it would be had neither side waited for a CPU in its kept rounds."""
    tm = r.timing_method
    return r.speedup * (1 - tm.get("ref_waited_frac", 0.0)) / (1 - tm.get("cand_waited_frac", 0.0))


def _problem_copy(d: Path) -> Path:
    p = d / "problem" / "relu_add.py"
    p.parent.mkdir()
    shutil.copy(ROOT / "tests" / "problems" / "relu_add.py", p)
    return p


def test_a_solution_cannot_rewrite_what_the_judge_reads(open_dir, monkeypatch):
    """Two defences against the same attack (rewriting the problem's file at import, before the
    reference starts): jailed, the file is not the solution's to write; unjailed, it is rewritten,
    yet the processes run the problem's text as the parent read and hashed it (Setup.problem_source),
    not the file. Without either, the rewritten reference computes zeros too: passed."""
    from harness.reference import ReferenceSession
    off, on, bare = open_dir / "off", open_dir / "on", open_dir / "bare"
    for d in (off, on, bare):
        d.mkdir()
    plain = ReferenceSession.setup_for
    with monkeypatch.context() as m:  # no bytes from the parent: the children read the file
        m.setattr(ReferenceSession, "setup_for", lambda self, *a, **k: plain(self, *a, **k).model_copy(
            update={"problem_source": None}))
        prob = _problem_copy(bare)
        m.setenv("ATTACK_PROBLEM_COPY", str(prob))
        r = _evaluate(ATTACKS / "rewrite_problem.py", prob, bare / "cache", "off")
        assert r.status.value == "passed" and "own_uid" not in r.protections  # the attack works
        assert "zeros_like" in prob.read_text()

    prob = _problem_copy(off)
    monkeypatch.setenv("ATTACK_PROBLEM_COPY", str(prob))
    r = _evaluate(ATTACKS / "rewrite_problem.py", prob, off / "cache", "off")
    assert "zeros_like" in prob.read_text()  # rewritten, but not what ran
    assert r.status.value == "incorrect", (r.error, r.log_tail)

    prob = _problem_copy(on)
    monkeypatch.setenv("ATTACK_PROBLEM_COPY", str(prob))
    r = _evaluate(ATTACKS / "rewrite_problem.py", prob, on / "cache", "on")
    assert "own_uid" in r.protections
    assert r.status.value == "incorrect", (r.error, r.log_tail)
    assert "zeros_like" not in prob.read_text()


def test_a_solution_cannot_signal_the_harnesss_processes(open_dir):
    from harness.reference import ReferenceError
    prob = _problem_copy(open_dir)
    try:
        r = _evaluate(ATTACKS / "kill_reference.py", prob, open_dir / "cache", "off")
        escaped = r.status.value != "incorrect"
    except ReferenceError:
        escaped = True
    assert escaped  # unjailed, the reference dies and the wrong outputs are never judged
    r = _evaluate(ATTACKS / "kill_reference.py", prob, open_dir / "cache", "on")
    assert "own_uid" in r.protections
    assert r.status.value == "incorrect", (r.error, r.log_tail)


def test_a_jailed_build_and_candidate_pass_and_leave_nothing_behind(open_dir):
    """An honest C++ solution, built and run jailed: passed; its build folder belongs to root and its
    solution's group, writable by no one else; the jails' homes are gone after the evaluation."""
    from harness.sandbox import JAILS
    prob = _problem_copy(open_dir)
    r = _evaluate(ROOT / "tests" / "fixtures" / "cpu" / "honest_cpp.py", prob, open_dir / "cache", "on")
    assert r.status.value == "passed", (r.error, r.log_tail)
    assert "own_uid" in r.protections
    ext = next(p for p in (open_dir / "cache" / "ext").iterdir() if not p.name.startswith("."))
    for root, dirs, files in os.walk(ext):
        for name in [root, *(os.path.join(root, f) for f in files)]:
            st = os.stat(name)
            assert st.st_uid == 0 and st.st_gid == JAILS.group(ext), name
            assert not st.st_mode & 0o007, name  # nothing for other solutions, not even reading
    assert JAILS._base is None or [p.name for p in JAILS._base.iterdir()] == [sandbox.OWNER_FILE]


def test_required_where_unavailable_refuses_to_run(monkeypatch):
    import harness.sandbox as sb
    monkeypatch.setattr(sb, "available", lambda reach=(): "not root")
    with pytest.raises(sb.SandboxUnavailable):
        sb.wanted("on", "cpu", "/tmp")
    assert sb.wanted("auto", "cpu", "/tmp") is False and sb.wanted("auto", "cuda", "/tmp") is False
    monkeypatch.setattr(sb, "available", lambda reach=(): None)  # where it can be had, on both paths
    assert sb.wanted("auto", "cpu", "/tmp") and sb.wanted("auto", "cuda", "/tmp")
    assert sb.wanted("off", "cuda", "/tmp") is False
    # the full set or nothing: without a view of its own (a mount namespace), "on" refuses too
    monkeypatch.setattr(sb, "_VIEWS", {"v": None, "why": "mount: operation not permitted"})
    with pytest.raises(sb.SandboxUnavailable, match="view"):
        sb.wanted("on", "cpu", "/tmp")
    assert sb.wanted("auto", "cpu", "/tmp")


def test_root_never_follows_what_a_jailed_build_left_in_its_folder(open_dir):
    """A jailed build may write its solution's folder, where root later writes markers, hashes the
    libraries and hands the folder to the group: a link planted there (to a file or a folder of
    root's) is never followed, a FIFO named like a library never blocks the parent (found by a
    helper's attack: root overwrote a root-only file through a planted link, and hung on a FIFO)."""
    import threading

    from harness.build import _artifacts, _write_marker, remembered_build
    from harness.sandbox import open_to
    victim_dir = open_dir / "victim"
    victim_dir.mkdir(mode=0o755)
    victim = victim_dir / "secret"
    victim.write_text("ORIGINAL")
    os.chmod(victim, 0o600)
    ext = open_dir / "ext"
    (ext / "mod").mkdir(parents=True)
    (ext / "mod" / "mod.so").write_bytes(b"\x7fELF")
    os.symlink(victim, ext / "built.json")
    os.symlink(victim, ext / "mod" / "source.cpp")
    os.symlink(victim_dir, ext / "linked_dir")
    os.mkfifo(ext / "mod" / "fifo.so")
    hard = victim_dir / "hard"  # a hard link to it (a host without fs.protected_hardlinks lets a jail make one)
    hard.write_text("ORIGINAL")
    os.chmod(hard, 0o600)
    os.link(hard, ext / "mod" / "hard.so")

    open_to(ext, 4242)
    for v in (victim, hard):
        st = os.stat(v)
        assert (st.st_uid, st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0, 0o600), v
    st = os.stat(victim_dir)
    assert (st.st_gid, stat.S_IMODE(st.st_mode)) == (0, 0o755)
    assert os.stat(ext / "mod" / "mod.so").st_gid == 4242

    assert remembered_build(ext) is None  # its marker is a link: not read through it
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("a", _artifacts(ext)), daemon=True)
    t.start()
    t.join(5)
    assert box["a"]["mod/fifo.so"] == "not a file" and len(box["a"]["mod/mod.so"]) == 64
    os.symlink(victim, ext / f"built.{os.getpid()}.tmp")  # where the marker's temporary file once went
    _write_marker(ext / "built.json", {"x": 1})
    assert victim.read_text() == "ORIGINAL" and not (ext / "built.json").is_symlink()


def test_a_jailed_process_in_a_session_of_its_own_dies_with_its_jail():
    """A daemon (fork, setsid) escapes the process-group kill; releasing the jail kills every process
    of its uid (found by a helper's attack: one outlived its evaluation by a minute)."""
    import subprocess
    import time

    from harness.sandbox import JAILS, become
    jail = JAILS.make(None, None)

    def drop():
        become(jail.uid, jail.gid)

    p = subprocess.Popen(["sleep", "300"], preexec_fn=drop, start_new_session=True)
    try:
        time.sleep(0.2)
        assert p.poll() is None
        JAILS.release(jail)
        assert p.wait(5) == -9
        assert not os.path.exists(jail.home)
    finally:
        p.kill()


def test_a_tree_deeper_than_pythons_recursion_neither_crashes_nor_outlives_the_parent(open_dir):
    """Folders nested 2,000 deep in a build folder or a home (found by a helper's attack: os.walk,
    fwalk and rmtree recursed, the parent crashed with no record, and every later evaluation of the
    source crashed the same way)."""
    from harness.build import _artifacts
    from harness.sandbox import open_to, remove_tree
    ext = open_dir / "ext"
    ext.mkdir()
    (ext / "m.so").write_bytes(b"x")
    fd = os.open(ext, os.O_RDONLY)
    for _ in range(2000):  # by descriptors: the path itself grows past PATH_MAX
        os.mkdir("d", dir_fd=fd)
        nfd = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = nfd
    os.close(fd)
    arts = _artifacts(ext)
    assert len(arts["m.so"]) == 64 and arts["(too deep)"] == "unreadable"
    open_to(ext, 4343)
    assert os.stat(ext / "m.so").st_gid == 4343
    remove_tree(ext)
    assert not ext.exists()


def test_what_a_jail_leaves_in_the_shared_temporary_folders_goes_with_it():
    """A file in /dev/shm is memory held for good; /tmp and /var/tmp fill the disk."""
    import subprocess

    from harness.sandbox import JAILS, become
    jail = JAILS.make(None, None)

    def drop():
        become(jail.uid, jail.gid)

    names = [f"/dev/shm/jail-left-{jail.uid}", f"/tmp/jail-left-{jail.uid}"]
    subprocess.run(["sh", "-c", f"echo x > {names[0]}; mkdir {names[1]}; echo y > {names[1]}/f"],
                   preexec_fn=drop, check=True)
    assert all(os.path.exists(n) for n in names)
    JAILS.release(jail)
    assert not any(os.path.exists(n) for n in names)


def test_each_solution_has_a_group_of_its_own_that_its_source_cannot_choose(tmp_path):
    """Drawn at random by the parent, the same for every process of the solution (a group derived
    from the build folder's name was matched by grinding a source: a helper's attack replaced another
    solution's library that way)."""
    from harness.sandbox import JAILS
    a, b = tmp_path / "a", tmp_path / "b"
    assert JAILS.group(a) == JAILS.group(a) != JAILS.group(b)


def test_harness_processes_sharing_a_cache_hand_a_solution_the_same_group(tmp_path):
    """Two parents (two test workers, two batches) evaluating one solution from one cache: each drawing
    a group of its own took the build folder from the other's processes mid-evaluation."""
    from harness.sandbox import Jails
    ext = tmp_path / "ext" / "abc"
    ext.mkdir(parents=True)
    assert Jails().group(ext) == Jails().group(ext)
    st = os.stat(tmp_path / "ext" / ".groups")
    assert st.st_uid == 0 and stat.S_IMODE(st.st_mode) == 0o700


def test_a_jailed_solution_reaches_no_network(open_dir, monkeypatch):
    import socket
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    monkeypatch.setenv("ATTACK_PORT", str(srv.getsockname()[1]))
    try:
        prob = _problem_copy(open_dir)
        r = _evaluate(ATTACKS / "answer_from_outside.py", prob, open_dir / "cache", "off")
        assert r.status.value == "passed"  # unjailed, it reached the server
        r = _evaluate(ATTACKS / "answer_from_outside.py", prob, open_dir / "cache", "on")
        assert "no_network" in r.protections
        assert r.status.value == "incorrect", (r.error, r.log_tail)
    finally:
        srv.close()


def test_the_harnesss_children_keep_their_temporary_files_and_compiler_caches_out_of_reach():
    """The reference compiles torch.compile(Model) as root: with Inductor's default cache,
    /tmp/torchinductor_root, a jailed solution that created that folder first ran its code as root
    in the reference (a helper's attack). Every child's TMPDIR and compiler caches are the harness's
    own, closed to other users; a jailed child's are its home's."""
    from harness.build import child_env
    env = child_env(None, "cpu")
    for k in ("TMPDIR", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
        p = Path(env[k])
        assert not str(p).startswith(("/tmp/", "/var/tmp/")) or "harness-private-" in str(p), p
        for d in (p, p.parent):
            st = os.stat(d)
            assert st.st_uid == os.geteuid() and not st.st_mode & 0o077, d


@pytest.mark.skipif(__import__("harness.cgroups", fromlist=["available"]).available() is not None,
                    reason="no control groups here")
def test_a_jailed_solution_cannot_take_more_memory_than_its_cap(open_dir):
    """memory_hog.py touches 2 GiB at every call: unjailed it passes; jailed under a 1 GiB cap its
    process is killed inside its own control group (runtime_error), the group is gone after."""
    from harness import cgroups
    prob = _problem_copy(open_dir)
    r = _evaluate(ATTACKS / "memory_hog.py", prob, open_dir / "cache", "off")
    assert r.status.value == "passed" and "memory_cap" not in r.protections
    r = _evaluate(ATTACKS / "memory_hog.py", prob, open_dir / "cache", "on", **{"hardening.jail_memory_gb": 1.0})
    assert "memory_cap" in r.protections and "own_uid" in r.protections
    assert r.status.value == "runtime_error" and "SIGKILL" in (r.error or ""), (r.error, r.log_tail)
    assert not [g for b in cgroups._bases or [] for g in b.iterdir() if g.is_dir()]  # every jail's group removed


def test_code_planted_in_the_current_folder_is_not_imported_by_the_harnesss_children(open_dir, monkeypatch):
    """A harness started from a folder the jailed uid may write (here 1777): plant_package.py writes a
    `harness` package there at import. Children start with -P and a PYTHONPATH without an empty entry,
    so the reference (root) does not import it and the zeros are judged: incorrect. (Started as
    `python -m harness...` without -P, the reference ran the plant: passed.) With its view of the
    machine (sandbox.make_view) the jail cannot even write the folder: the plant is never made."""
    import harness.sandbox as sb
    work = open_dir / "work"
    work.mkdir()
    os.chmod(work, 0o1777)
    prob = _problem_copy(open_dir)
    monkeypatch.chdir(work)
    if sb.views() is not None:
        r = _evaluate(ATTACKS / "plant_package.py", prob, open_dir / "cache", "on")
        assert "read_only_view" in r.protections
        assert not (work / "harness").exists()  # a world-writable folder is read-only in its view
        assert r.status.value == "incorrect", (r.error, r.log_tail)
    monkeypatch.setattr(sb, "_VIEWS", {"v": None})
    r = _evaluate(ATTACKS / "plant_package.py", prob, open_dir / "cache", "auto")
    assert "own_uid" in r.protections and "read_only_view" not in r.protections
    assert (work / "harness" / "__init__.py").exists()  # the plant was made, as the attack intends
    assert r.status.value == "incorrect", (r.error, r.log_tail)


@pytest.mark.skipif(__import__("harness.cgroups", fromlist=["available"]).available() is not None,
                    reason="no control groups here")
def test_the_build_jail_takes_the_configured_memory_cap_and_stale_groups_are_cleared(open_dir):
    """memory_hog_at_build.py touches 2 GiB at import, in the build child too: under a 1 GiB cap the
    build child is killed inside its group (runtime_error); unjailed it passes. Groups a dead harness left behind (a
    SIGKILLed batch) are cleared by the next harness's start."""
    from harness import cgroups
    prob = _problem_copy(open_dir)
    r = _evaluate(ATTACKS / "memory_hog_at_build.py", prob, open_dir / "cache", "off")
    assert r.status.value == "passed", (r.error, r.log_tail)
    r = _evaluate(ATTACKS / "memory_hog_at_build.py", prob, open_dir / "cache2", "on",
                  **{"hardening.jail_memory_gb": 1.0})
    assert r.status.value == "runtime_error" and "imported for its build" in r.error and "SIGKILL" in r.error, \
        (r.status, r.error, r.log_tail)
    for base in cgroups._bases or []:  # a dead harness's folder, with a jail's group in it
        stale = base.parent / "harness-999999999"
        (stale / "jail-1").mkdir(parents=True)
        cgroups._clear_stale(base.parent)
        assert not stale.exists()


@pytest.mark.skipif(not __import__("harness.cgroups", fromlist=["confines"]).confines(),
                    reason="no cpuset control group here")
def test_every_jail_a_build_s_too_is_kept_off_the_cpus_references_are_timed_on(open_dir, monkeypatch):
    """A jail's timers fire on the CPU that armed them, and a build's jail runs beside other
    evaluations' timing in a batch: every jail, the build's included, is made in a cpuset group
    without the references' CPUs (sandbox.Jails.keep_off; on the CPU path cpus.cpu_path_split, on a
    GPU each slot's reference CPU, cpus.slot_cpus). The solution here reports its CPUs from its
    build's import; with nothing kept off (as before) it had the reference's too."""
    from harness import cpus, sandbox
    from harness.sandbox import JAILS
    if len(cpus.available()) < 2:
        pytest.skip("needs two CPUs")
    prob = _problem_copy(open_dir)
    sol = open_dir / "where_am_i.py"
    sol.write_text("# problem: relu_add (a build child runs it: load_inline)\nimport os\n"
                   "raise RuntimeError('cpus=' + ','.join(map(str, sorted(os.sched_getaffinity(0)))))\n")
    jail_cpus, ref_cpus = cpus.cpu_path_split(1)
    monkeypatch.setattr(JAILS, "_off", set())

    def reported(cache):
        r = _evaluate(sol, prob, open_dir / cache, "on")
        assert r.status.value == "runtime_error" and r.phases.load_s == 0.0, (r.status, r.error)  # its build's
        return {int(c) for c in r.error.split("cpus=")[1].split()[0].split(",")}
    assert reported("cache") == jail_cpus and not reported("cache") & ref_cpus
    monkeypatch.setattr(JAILS, "_off", set())
    monkeypatch.setattr(sandbox, "keep_off_references", lambda *a, **k: None)
    assert reported("cache2") & ref_cpus  # the defence undone


def _run_apart(code: str) -> tuple[str, str]:
    """`code` in a Python process of its own (the jail's filter installed there stays there):
    (its output, the end of its errors)."""
    import subprocess
    import sys
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})
    return r.stdout.strip(), r.stderr[-500:]


def test_a_jailed_solution_cannot_submit_io_that_completes_while_it_is_frozen(open_dir):
    """io_completion_storm.py (a helper's) submits O_DIRECT reads through Linux AIO at the end of its
    rounds, not waited for, each completion fanned out through 999 epoll instances: they complete
    while its jail is frozen and the reference is timed, in interrupt and softirq context on the CPU
    the disk's interrupt goes to, whichever CPU submitted them. On this project's VM, whose disk
    interrupts all go to the reference's CPU, that passed at 1.45x (honest 1.00) with every jail kept
    off that CPU. The jail's seccomp filter refuses io_setup and io_uring_setup (EPERM): the filter
    in a process of its own refuses them and allows the rest; the attack, jailed, times honestly. (Refused
    io_setup, the fixture makes its context as a 32-bit syscall, which passed at 1.46-1.62x until the
    filter refused other ABIs: test_the_jails_filter_cannot_be_passed_under_another_abi.)"""
    code = ("import ctypes, os\nfrom harness.sandbox import no_user_namespaces\nassert no_user_namespaces()\n"
            "libc = ctypes.CDLL(None, use_errno=True)\nctx = ctypes.c_ulong(0)\nout = []\n"
            "for nr, args in ((206, (8, ctypes.byref(ctx))), (425, (8, None))):\n"
            "    out.append((libc.syscall(nr, *args), ctypes.get_errno()))\n"
            "pid = os.fork()\nif pid == 0:\n    os._exit(0)\nos.waitpid(pid, 0)\nprint(out, os.getpid() > 0)\n")
    out, err = _run_apart(code)
    assert out == "[(-1, 1), (-1, 1)] True", (out, err)
    prob = open_dir / "problem" / "linear_relu.py"
    prob.parent.mkdir()
    shutil.copy(ROOT / "tests" / "problems" / "linear_relu.py", prob)
    jailed = _evaluate(ATTACKS / "io_completion_storm.py", prob, open_dir / "cache", "on", size="full")
    assert "no_async_io" in jailed.protections and jailed.status.value == "passed", (jailed.status, jailed.error)
    # (the suite's other workers on the reference's CPU are taken out: 1.78x under them once, with the
    # reference waiting for its CPU: _unwaited. This attack's work is interrupt and softirq time on
    # that CPU, which is no wait: taking the waits out leaves it in)
    assert _unwaited(jailed) < 1.25, (jailed.speedup, jailed.timing_method.get("ref_waited_frac"))


def test_the_jails_filter_cannot_be_passed_under_another_abi():
    """The filter's rules are for x86-64's syscall numbers; a 64-bit process may still make 32-bit
    syscalls (`int 0x80`, numbers of their own: io_setup 245, unshare 310) or x32's (numbers with bit
    30 set). The filter used to let every other ABI through: an i386 getpid worked under it. Now any
    syscall of another ABI is refused (EPERM), and the process's own run normally."""
    import platform
    if platform.machine() != "x86_64":
        pytest.skip("the filter is x86-64's")
    code = ("import ctypes, mmap, os\nfrom harness.sandbox import no_user_namespaces\n"
            "buf = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)\n"
            "buf.write(bytes([0xB8, 0x14, 0, 0, 0, 0xCD, 0x80, 0xC3]))  # mov eax, 20 (i386 getpid); int 0x80; ret\n"
            "i386_getpid = ctypes.CFUNCTYPE(ctypes.c_int)(ctypes.addressof(ctypes.c_char.from_buffer(buf)))\n"
            "before = i386_getpid() == os.getpid()\nassert no_user_namespaces()\n"
            "libc = ctypes.CDLL(None, use_errno=True)\nx32 = (libc.syscall(0x40000000 | 39), ctypes.get_errno())\n"
            "print(before, i386_getpid(), x32, os.getpid() > 0)\n")
    out, err = _run_apart(code)
    if not out.startswith("True"):
        pytest.skip(f"no 32-bit syscalls on this kernel: {out or err}")
    assert out == "True -1 (-1, 1) True", (out, err)


@pytest.mark.skipif(__import__("harness.sandbox", fromlist=["views"]).views() is None,
                    reason="no mount namespace for a view of its own here")
def test_a_jailed_solution_writes_only_its_own_folders_and_sees_only_its_own_processes(open_dir, monkeypatch):
    """drop_outside.py answers wrongly where it could leave a file in a world-writable folder (outside
    the private temporary folders, as a checkout or a results folder may be), see_processes.py where
    it could read the harness's command lines, see_pids_cgroup.py where the control groups' member
    lists gave it another uid's live process, probe_pids.py where kill(pid, 0) found one,
    cgroup_path.py where its own groups' paths named the harness's pid. As a uid
    of its own, with no view, all can (incorrect); with its view of the machine (sandbox.make_view)
    and a PID namespace of its own (sandbox.born_apart) none can (passed), the record says so, and
    its /tmp was its own: nothing it left there is on the machine's. With the view and no PID
    namespace, only the probe works."""
    import harness.sandbox as sb
    drop = Path(tempfile.mkdtemp(prefix="sandbox-drop-", dir=ROOT / "tests"))  # not under /tmp
    mounts = Path("/proc/self/mountinfo").read_text()
    sb.JAILS.reads("/tmp")  # a build cache at /tmp itself (another test's) must not undo the private /tmp
    try:
        os.chmod(drop, 0o1777)
        monkeypatch.setenv("ATTACK_DROP", str(drop))
        prob = _problem_copy(open_dir)
        for attack in ("drop_outside.py", "see_processes.py", "see_pids_cgroup.py", "probe_pids.py",
                       "cgroup_path.py"):
            r = _evaluate(ATTACKS / attack, prob, open_dir / "cache", "on")
            assert {"read_only_view", "private_tmp", "hidden_processes", "own_pid_namespace"} <= set(r.protections), r.protections
            assert r.status.value == "passed", (attack, r.error, r.log_tail)
        assert not list(drop.iterdir())
        monkeypatch.setenv("ATTACK_DROP", "/tmp")
        r = _evaluate(ATTACKS / "drop_outside.py", prob, open_dir / "cache", "on")
        assert r.status.value == "incorrect"  # it could write its own /tmp ...
        assert not list(Path("/tmp").glob("left-by-*"))  # ... which went with it
        monkeypatch.setenv("ATTACK_DROP", str(drop))
        if sb.views()["own_pids"]:
            monkeypatch.setattr(sb, "_VIEWS", {"v": {**sb.views(), "own_pids": False}})
            r = _evaluate(ATTACKS / "see_processes.py", prob, open_dir / "cache", "auto")
            assert r.status.value == "passed" and "own_pid_namespace" not in r.protections, (r.error, r.protections)
            r = _evaluate(ATTACKS / "probe_pids.py", prob, open_dir / "cache", "auto")
            assert r.status.value == "incorrect", (r.error, r.log_tail)
        monkeypatch.setattr(sb, "_VIEWS", {"v": None})
        for attack in ("drop_outside.py", "see_processes.py", "see_pids_cgroup.py", "probe_pids.py",
                       "cgroup_path.py"):
            r = _evaluate(ATTACKS / attack, prob, open_dir / "cache", "auto")
            assert "own_uid" in r.protections and "read_only_view" not in r.protections
            assert r.status.value == "incorrect", (attack, r.error, r.log_tail)  # the attacks work
        assert list(drop.iterdir())
        # nothing of the views reached the machine's own mounts (a tmpfs over /tmp, a hidden /proc)
        assert Path("/proc/self/mountinfo").read_text() == mounts
    finally:
        shutil.rmtree(drop, ignore_errors=True)


def test_every_lane_asking_at_once_gets_the_same_answer_about_the_view(monkeypatch):
    """A batch's lanes make their first jails together: while the probe ran, the others were told
    "no view" (3 of 100 level-2 records on an H100 ran without one)."""
    import threading

    import harness.sandbox as sb
    monkeypatch.setattr(sb, "_VIEWS", {})
    got = []
    threads = [threading.Thread(target=lambda: got.append(sb.views())) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 6 and all(g == got[0] for g in got), got


@pytest.mark.parametrize("attack, protection", [("keyring_channel.py", "no_keyrings"), ("watch_files.py", "no_inotify")])
def test_a_jailed_solution_cannot_leave_keys_in_the_kernels_keyrings_or_watch_files(open_dir, attack, protection):
    """keyring_channel.py answers wrongly where add_key ran, watch_files.py where it could watch a
    folder with inotify: as root, unjailed, both do (incorrect); jailed, the seccomp filter refuses
    them (passed), and the record says so."""
    import platform
    if platform.machine() != "x86_64":
        pytest.skip("the filter's syscall numbers are x86-64's")
    prob = _problem_copy(open_dir)
    r = _evaluate(ATTACKS / attack, prob, open_dir / "cache", "off")
    assert r.status.value == "incorrect", (r.error, r.log_tail)
    r = _evaluate(ATTACKS / attack, prob, open_dir / "cache", "on")
    assert protection in r.protections
    assert r.status.value == "passed", (r.error, r.log_tail)


def test_a_build_folder_filled_past_its_cap_is_emptied_when_its_jail_is_released(open_dir, monkeypatch):
    """fill_build_folder.py leaves 64 MiB in its build folder, which the cache keeps: under a 32 MiB
    cap the folder is emptied at release, above it (a 128 MiB cap) what it left stays."""
    import harness.sandbox as sb
    monkeypatch.setenv("ATTACK_FILL_MB", "64")
    prob = _problem_copy(open_dir)
    for cap, kept in ((128 << 20, True), (32 << 20, False)):
        monkeypatch.setattr(sb, "BUILD_FOLDER_CAP", cap)
        cache = open_dir / f"cache{cap}"
        r = _evaluate(ATTACKS / "fill_build_folder.py", prob, cache, "on")
        assert r.status.value == "passed" and "own_uid" in r.protections, (r.error, r.log_tail)
        left = list((cache / "ext").glob("*/ballast.bin"))
        assert bool(left) == kept, (cap, left)


def test_a_build_folders_size_counts_links_and_folders_and_a_tree_too_deep_counts_as_over(tmp_path, monkeypatch):
    """What a helper's attack kept past the cap: the targets of 300,000 links (each a block on disk,
    never a regular file) and a file 70 folders down (below the walk's depth limit)."""
    import harness.sandbox as sb
    links = tmp_path / "links"
    links.mkdir()
    for i in range(64):
        os.symlink("x" * 4000, links / f"l{i}")  # a target this long takes a block of its own
    assert sb.tree_bytes(links, 1 << 30) >= 64 * 4096
    monkeypatch.setattr(sb, "MAX_DEPTH", 4)
    deep = tmp_path / "deep"
    (deep / "a" / "b" / "c" / "d" / "e" / "f").mkdir(parents=True)
    assert sb.tree_bytes(deep, 1 << 30) > 1 << 30
    assert sb.tree_bytes(deep / "a" / "b" / "c", 1 << 30) <= 1 << 30


def test_a_jailed_solution_cannot_make_a_user_namespace(open_dir):
    """user_namespace.py answers wrongly where it could make a user namespace: unjailed (root) it
    can (incorrect); jailed, the seccomp filter refuses it (passed), and the record says so."""
    import platform
    if platform.machine() != "x86_64":
        pytest.skip("the filter's syscall numbers are x86-64's")
    prob = _problem_copy(open_dir)
    r = _evaluate(ATTACKS / "user_namespace.py", prob, open_dir / "cache", "off")
    assert r.status.value == "incorrect" and "no_user_namespaces" not in r.protections, (r.error, r.log_tail)
    r = _evaluate(ATTACKS / "user_namespace.py", prob, open_dir / "cache", "on")
    assert "no_user_namespaces" in r.protections
    assert r.status.value == "passed", (r.error, r.log_tail)


@pytest.mark.skipif(not __import__("harness.cgroups", fromlist=["freezes"]).freezes(), reason="no cgroup freezer here")
def test_a_helper_out_of_the_candidates_process_group_is_frozen_while_the_reference_is_timed(open_dir, monkeypatch):
    """escaped_burner.py computes Model's own function and starts helpers in sessions of their own that
    burn every CPU while its candidate is stopped, i.e. while the reference is timed. With only the
    candidate's process group stopped (SIGSTOP) the reference looks 2.9-5.3x slower; with its jail's
    control group frozen too (worker.Worker.pause) the speedup is an honest one. (The CPU placement,
    cpus.cpu_path_split and held_to, keeps the helpers off the reference's CPUs but not out of the
    caches and memory it shares: 1.49x passed with it and without the freezer on a loaded 2-core
    host. Both are undone here, so that the freezer is what is shown.)"""
    from contextlib import contextmanager

    from harness import cpus
    from harness.process import worker as worker_mod
    from harness.sandbox import JAILS

    @contextmanager
    def not_held(*a, **k):
        yield None
    prob = open_dir / "problem" / "linear_relu.py"
    prob.parent.mkdir()
    shutil.copy(ROOT / "tests" / "problems" / "linear_relu.py", prob)
    monkeypatch.setattr(cpus, "cpu_path_split", lambda n, *a, **k: (set(cpus.available()), set(cpus.available())))
    monkeypatch.setattr(JAILS, "_off", set())  # kept off by earlier evaluations of this process
    monkeypatch.setattr(cpus, "held_to", not_held)
    unfrozen = []
    with monkeypatch.context() as m:
        m.setattr(worker_mod, "freeze", lambda groups, frozen, wait_s=0.1: None)  # as where none can freeze
        for _ in range(2):  # its strength depends on what else the host runs (1.69x once beside CI's suite)
            r = _evaluate(ATTACKS / "escaped_burner.py", prob, open_dir / "cache", "on", size="full")
            assert "own_uid" in r.protections and r.status.value == "passed", (r.error, r.log_tail)
            unfrozen.append(r.speedup)
            if r.speedup > 1.8:
                break
    assert max(unfrozen) > 1.8, unfrozen  # the attack works without the freezer
    r = _evaluate(ATTACKS / "escaped_burner.py", prob, open_dir / "cache", "on", size="full")
    assert "frozen_while_other_timed" in r.protections and r.status.value == "passed", (r.error, r.log_tail)
    # (raw: this attack's own effect is the reference's wait for its CPU, which _unwaited takes out)
    assert r.speedup < 1.4, (r.speedup, r.timing_method.get("ref_waited_frac"))


@pytest.mark.skipif(not __import__("harness.cgroups", fromlist=["freezes"]).freezes(), reason="no cgroup freezer here")
def test_a_jail_that_does_not_freeze_in_time_is_not_timed_beside_the_reference(open_dir, monkeypatch):
    """A helper inside one long system call runs on until the call returns, the group still
    freezing (a helper's attack: 1 GB reads into fresh pages, up to 1.8x). A pause whose group is not
    frozen within FREEZE_WAIT_S times no reference round: the solution is `rejected`, `unfreezable`
    (here the freezer is made to report so, on an honest solution; it passes otherwise)."""
    from harness.process import worker as worker_mod
    prob = _problem_copy(open_dir)
    honest = ROOT / "tests" / "fixtures" / "cpu" / "honest_cpp.py"
    r = _evaluate(honest, prob, open_dir / "cache", "on")
    assert r.status.value == "passed" and "frozen_while_other_timed" in r.protections, (r.error, r.log_tail)
    monkeypatch.setattr(worker_mod, "freeze", lambda groups, frozen, wait_s=0.1: False if frozen else True)
    r = _evaluate(honest, prob, open_dir / "cache", "on")
    assert r.status.value == "rejected" and "unfreezable" in r.flags, (r.status, r.error)


@pytest.mark.skipif(__import__("harness.cgroups", fromlist=["cpu_ns"]).available() is not None,
                    reason="no control groups here: no wait is taken out of a round")
def test_a_wait_for_a_cpu_while_a_helper_thread_works_is_not_taken_out_of_the_wall(open_dir, monkeypatch):
    """waiting_timer_thread.py divides its reported times by 5 and runs its forward on a helper
    thread pinned to the timing thread's CPU, so that the timing thread waits in the run queue for
    the whole call. Taken out of the round's wall as a wait, that hid the 5x (passed); taken out only
    where nothing else of the jail ran (measure._waited_alone_ms), the hidden time shows: rejected."""
    from harness.timing import measure
    prob = open_dir / "problem" / "linear_relu.py"
    prob.parent.mkdir()
    shutil.copy(ROOT / "tests" / "problems" / "linear_relu.py", prob)
    raw = lambda a, b: (b[0][1] - a[0][1]) / 1e6 if a[0] and b[0] else 0.0  # noqa: E731 - the whole wait
    with monkeypatch.context() as m:
        m.setattr(measure, "_waited_alone_ms", raw)
        r = _evaluate(ATTACKS / "waiting_timer_thread.py", prob, open_dir / "cache", "on", size="full", **UNCLOCKED)
    # the attack works (its 5x comes out at 1.9-5x: under a loaded test run, less)
    assert r.status.value == "passed" and r.speedup > 1.5, (r.status, r.speedup, r.error)
    r = _evaluate(ATTACKS / "waiting_timer_thread.py", prob, open_dir / "cache", "on", size="full", **UNCLOCKED)
    assert r.status.value == "rejected" and "timer_mismatch" in r.flags, (r.status, r.speedup, r.flags)


@pytest.mark.skipif(not __import__("harness.cgroups", fromlist=["confines"]).confines(),
                    reason="no cpuset control group here: a jail is not held to its CPUs")
def test_a_jailed_solution_is_held_to_as_many_cpus_as_the_reference_and_apart_from_them(open_dir, monkeypatch):
    """more_threads.py asks torch for every CPU it may use in its forward, widen_affinity.py first
    widens its own affinity to the whole machine; the reference gets timing.cpu_threads (1). While
    timed, each side runs on cpu_threads CPUs, the candidate's jail held there by its cpuset group
    (cpus.held_to): neither attack gets more than one CPU's time (the jail's CPU time per second of
    each timed round, `cand_cpus_median`, from its cgroup) nor a speedup from it. Without the hold
    (made a no-op), more_threads used 1.9 CPUs for 1.96x on this 2-core host when idle, flagged
    `cpu_oversubscribed` (over cpu_threads + 0.5): the flag is held to the number recorded, and the
    number to its side of the line only on a host with a core to spare. interrupt_storm.py fires
    timer interrupts on its own CPU while the reference is timed: with the reference on the jail's
    CPU (both held to one) it passed at 1.9-3.0x; kept apart (cpus.cpu_path_split), it slows itself."""
    from contextlib import contextmanager

    from harness import cpus
    from harness.sandbox import JAILS
    prob = open_dir / "problem" / "linear_relu.py"
    prob.parent.mkdir()
    shutil.copy(ROOT / "tests" / "problems" / "linear_relu.py", prob)
    honest = _evaluate(ROOT / "tests" / "fixtures" / "cpu" / "honest_linear_torch.py", prob, open_dir / "cache", "on",
                       size="full")
    assert honest.status.value == "passed", (honest.status, honest.error)
    for attack in ("more_threads.py", "widen_affinity.py", "interrupt_storm.py"):
        r = _evaluate(ATTACKS / attack, prob, open_dir / "cache", "on", size="full")
        assert r.status.value == "passed", (attack, r.status, r.error)
        assert r.timing_method["cpus_held"] == "cpuset", r.timing_method
        assert r.timing_method["cand_cpus_median"] <= 1.2 and "cpu_oversubscribed" not in r.flags, (attack, r.timing_method)
        # the suite's other workers share this host's CPUs: each speedup is taken back to what the
        # sides' waits for a CPU left of it (the rounds past timing.max_runqueue_frac are re-taken,
        # measure._judge_waits, yet a load that lasts is measured under): the reference's 46% waited
        # inflated an honest speed to 1.75x
        assert _unwaited(r) < 1.3 * max(1.0, _unwaited(honest)), (attack, r.speedup, honest.speedup, r.timing_method)

    idle = len(os.sched_getaffinity(0)) >= 2 and os.getloadavg()[0] < 0.5
    with monkeypatch.context() as mp:  # the reference's CPUs not kept from the jail: the storm reaches it
        split = cpus.cpu_path_split
        mp.setattr(cpus, "cpu_path_split", lambda n, *a, **k: (split(n)[1], split(n)[1]))
        mp.setattr(JAILS, "_off", set())
        storm = _evaluate(ATTACKS / "interrupt_storm.py", prob, open_dir / "cache", "on", size="full")
        if idle:
            assert storm.status.value == "passed" and storm.speedup > 1.5, (storm.status, storm.speedup)

    @contextmanager
    def not_held(*a, **k):
        yield None
    monkeypatch.setattr(cpus, "held_to", not_held)
    more = _evaluate(ATTACKS / "more_threads.py", prob, open_dir / "cache", "on", size="full")
    # on a busy host its threads starve its own timing thread, which the host-clock check can reject
    assert more.status.value == "passed" or (not idle and "timer_mismatch" in more.flags), (more.status, more.error)
    if more.status.value == "passed":
        used = more.timing_method["cand_cpus_median"]
        assert ("cpu_oversubscribed" in more.flags) == (used > 1.5), (used, more.flags)
        if idle:
            assert "cpu_oversubscribed" in more.flags and more.speedup > 1.3, (used, more.speedup)


@pytest.mark.skipif(not (__import__("harness.sandbox", fromlist=["views"]).views() or {}).get("own_pids"),
                    reason="no PID namespaces here")
def test_a_process_born_apart_takes_every_process_it_left_with_it():
    """Born in a PID namespace of its own (sandbox.born_apart), a process is its namespace's pid 1 and
    sees only its own processes; a daemon it leaves (forked twice, a session of its own) ends when it
    does, killed by the kernel, before and whatever the jail's release kills by uid. The harness's
    own namespace is the starting thread's again afterwards."""
    import subprocess
    import sys
    import time

    from harness.sandbox import born_apart
    code = ("import os, sys, time\nfrom harness import sandbox as s\ns.apart_at_birth()\n"
            "print(os.getpid(), s._own_pids, sorted(p for p in os.listdir('/proc') if p.isdigit()), flush=True)\n"
            "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(120)\n    os._exit(0)\n"
            "time.sleep(120)\n")
    with born_apart():
        p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert p.stdout.readline().split(" ", 2)[:2] == ["1", "True"]
        deadline = time.monotonic() + 30
        # the daemon's parent gone (a zombie: pid 1 here reaps nothing), the daemon itself alive
        while not ({"Z"} < {_state(d) for d in _descendants(p.pid)}):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        left = [d for d in _descendants(p.pid) if _state(d) != "Z"]
        assert left
        assert all(_in_own_namespace(d) for d in left)
    finally:
        p.kill()
        p.wait()
    deadline = time.monotonic() + 10
    while any(os.path.exists(f"/proc/{d}") and _state(d) not in ("Z", "X") for d in left):
        assert time.monotonic() < deadline, "a process it left outlived it"
        time.sleep(0.05)
    with subprocess.Popen([sys.executable, "-c", "import os; print(os.getpid())"], stdout=subprocess.PIPE, text=True) as q:
        assert q.stdout.read().strip() == str(q.pid)  # this thread's children are the harness's namespace's again


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for t in os.listdir(f"/proc/{p}/task"):
            try:
                kids = [int(c) for c in open(f"/proc/{p}/task/{t}/children").read().split()]
            except OSError:
                continue
            out += kids
            todo += kids
    return out


def _in_own_namespace(pid: int) -> bool:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("NSpid:"):
            return len(line.split()) == 3
    return False


def _state(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "X"


@pytest.mark.skipif(__import__("harness.sandbox", fromlist=["views"]).views() is None,
                    reason="no mount namespace for a view of its own here")
def test_without_pid_namespaces_the_view_stays_and_a_required_sandbox_refuses(monkeypatch, open_dir):
    """Where a PID namespace cannot be made, the probe says so (and still finds the view), records
    leave out own_pid_namespace, and `--require-sandbox` refuses to run, naming why."""
    import harness.sandbox as sb
    monkeypatch.setattr(sb, "CLONE_NEWPID", 0x1)  # not a namespace: unshare refuses it (EINVAL)
    got = sb._probe_views()
    assert got["v"] == {"hide_pids": sb.views()["hide_pids"], "own_pids": False}, got
    assert "unshare" in got["pids_why"]
    monkeypatch.setattr(sb, "_VIEWS", got)
    assert "own_pid_namespace" not in sb.protections(True) and "read_only_view" in sb.protections(True)
    cache = open_dir / "cache"
    cache.mkdir()
    with pytest.raises(sb.SandboxUnavailable, match="PID namespace"):
        sb.wanted("on", "cpu", str(cache))
    assert sb.wanted("auto", "cpu", str(cache))


def test_the_jail_folders_of_a_killed_harness_are_removed_by_the_next_one(tmp_path, monkeypatch):
    """A harness process killed before its exit handler leaves its jails' folder behind (306 of them
    in /tmp on the development VM after a day of killed test runs). The next one removes those whose
    owner lock nobody holds, and leaves a live process's, a young one and a non-empty one of before
    owner locks."""
    import fcntl
    import subprocess
    import sys

    old = 10 * sandbox.ABANDONED_AFTER_S

    def folder(name: str, owner: bool, age: float, content: bool = True) -> Path:
        d = tmp_path / (sandbox.ROOT_PREFIX + name)
        d.mkdir()
        if owner:
            (d / sandbox.OWNER_FILE).touch()
        if content:
            (d / "12345" / "tmp").mkdir(parents=True)
            (d / "12345" / "tmp" / "left.bin").write_bytes(b"x" * 100)
        t = os.path.getmtime(d) - age
        os.utime(d, (t, t))
        return d

    killed = folder("killed", owner=True, age=old)
    legacy_empty = folder("legacy", owner=False, age=old, content=False)
    legacy_full = folder("legacyfull", owner=False, age=old)
    young = folder("young", owner=True, age=0)
    live = folder("live", owner=True, age=old)
    # its owner: another process holding the lock, as a running harness does
    holder = subprocess.Popen([sys.executable, "-c", "import fcntl, os, sys, time\n"
                               f"fd = os.open({str(live / sandbox.OWNER_FILE)!r}, os.O_WRONLY)\n"
                               "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        removed = sandbox.sweep_abandoned_roots(tmp_path)
        assert sorted(removed) == sorted([killed, legacy_empty])
        assert not killed.exists() and not legacy_empty.exists()
        assert live.exists() and young.exists() and legacy_full.exists()
    finally:
        holder.kill()
        holder.wait()
    fd = os.open(young / sandbox.OWNER_FILE, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # unheld, and left alone only for its age
    os.close(fd)
    # its owner gone, the kernel let go of the lock: the next harness's first jail folder sweeps it,
    # and holds its own
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    jails = sandbox.Jails()
    mine = jails._root()
    assert not live.exists() and mine.parent == tmp_path
    fd = os.open(mine / sandbox.OWNER_FILE, os.O_RDONLY)
    with pytest.raises(BlockingIOError):
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.close(fd)
    os.utime(mine, (0, 0))
    assert sandbox.sweep_abandoned_roots(tmp_path) == []
