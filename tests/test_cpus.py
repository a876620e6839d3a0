"""harness/cpus.py: a timing CPU per GPU slot kept free of background work, processes pinned onto it
for a timing phase, and builds that borrow it only while nothing is timed."""
from __future__ import annotations

import os
from pathlib import Path

import pytest


def test_a_timing_cpu_per_gpu_slot_kept_free_of_background_work():
    """cpus.plan: one timing CPU per slot from the top, its SMT siblings kept free too; builds and
    standbys get the rest, unless that would leave them under half the machine. cpus.pinned moves a
    process onto the timing CPU for the block and back after it."""
    import os
    import subprocess
    import sys

    from harness import cpus
    from harness.batch.executor import DeviceSlot, SlotRuntime
    smt = lambda c: {c % 8, c % 8 + 8}  # noqa: E731  (16 CPUs, 8 cores of 2 threads)
    assert cpus.plan(1, list(range(16)), smt) == ([15], set(range(16)) - {7, 15})
    assert cpus.plan(2, list(range(16)), smt) == ([15, 14], set(range(16)) - {6, 7, 14, 15})
    timing, background = cpus.plan(1, [0, 1], lambda c: {0, 1})  # a 2-CPU VM: nothing to spare
    assert timing == [1] and background is None
    assert cpus.plan(3, [0, 1], lambda c: {c}) == ([1, 0, None], None)
    # a CPU a side: the reference's kept from jails with its siblings, the candidate's beside it
    assert cpus.slot_cpus(1, list(range(16)), smt) == ([(15, 14)], set(range(16)) - {6, 7, 14, 15})
    assert cpus.slot_cpus(2, list(range(16)), smt) == ([(15, 14), (13, 12)], set(range(16)) - {4, 5, 6, 7, 12, 13, 14, 15})
    assert cpus.reference_cpus([(15, 14), (13, 12)], smt) == {7, 15, 5, 13}
    assert cpus.slot_cpus(1, [0, 1], lambda c: {c}) == ([(1, 1)], None)  # too small: one shared
    # [hardening] timing_cpus = "shared": one CPU a slot (and its siblings) however many there are
    assert cpus.slot_cpus(2, list(range(16)), smt, mode="shared") == ([(15, 15), (14, 14)], set(range(16)) - {6, 7, 14, 15})
    assert cpus.reference_cpus([(1, 1)], lambda c: {c}) == set()

    allowed = sorted(os.sched_getaffinity(0))
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        before = os.sched_getaffinity(p.pid)
        with cpus.pinned([(p.pid, allowed[-1]), (None, allowed[0])]):
            assert os.sched_getaffinity(p.pid) == {allowed[-1]}
        assert os.sched_getaffinity(p.pid) == before
        with cpus.pinned([(p.pid, None)]):  # no timing CPU (the CPU path): left alone
            assert os.sched_getaffinity(p.pid) == before
    finally:
        p.kill()
        p.wait()
    # a slot keeps a reference session per evaluation in flight, and one more
    assert SlotRuntime(DeviceSlot("cuda:0", "cuda", {}, concurrency=4), "full", None, concurrency=4).max_sessions == 5


@pytest.fixture
def claims(tmp_path, monkeypatch):
    from harness import cpus
    monkeypatch.setenv("HARNESS_CPU_CLAIMS", str(tmp_path / "claims"))
    cpus.CLAIMS.release()
    yield cpus.CLAIMS
    cpus.CLAIMS.release()


_ELSEWHERE: list = []


def _plan_elsewhere(*args: str) -> tuple[list, list]:
    """slot_cpus(claim=True) in another process, which holds its claims until `_end_elsewhere`:
    (pairs, sorted background)."""
    import json
    import subprocess
    import sys
    code = ("import json, sys; from harness import cpus; "
            "smt = (lambda c: {c % 8, c % 8 + 8}) if 'smt' in sys.argv else (lambda c: {c}); "
            "n = int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2].isdigit() else 16; "
            "pairs, bg = cpus.slot_cpus(int(sys.argv[1]), list(range(n)), smt, claim=True); "
            "print(json.dumps([pairs, sorted(bg or [])]), flush=True); sys.stdin.read()")
    p = subprocess.Popen([sys.executable, "-c", code, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         env=os.environ, cwd=Path(__file__).resolve().parents[1])
    _ELSEWHERE.append(p)
    pairs, bg = json.loads(p.stdout.readline())
    return [tuple(x) for x in pairs], bg


def _claim_elsewhere(cpu: int) -> None:
    """Another process holding a claim on `cpu` until `_end_elsewhere`."""
    import subprocess
    import sys
    code = f"import sys; from harness import cpus; cpus.CLAIMS.take({{{cpu}}}); print('held', flush=True); sys.stdin.read()"
    p = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                         env=os.environ, cwd=Path(__file__).resolve().parents[1])
    _ELSEWHERE.append(p)
    assert p.stdout.readline().strip() == "held"


def _end_elsewhere() -> None:
    for p in _ELSEWHERE:
        p.stdin.close()
        p.wait(30)
    _ELSEWHERE.clear()


def test_two_harness_processes_on_one_machine_time_on_cpus_of_their_own(claims):
    """Two batches on one machine, one a GPU each (or an eval beside a batch), each planned its
    CPUs as if the machine were its own and both timed on the top two: on two H200s every phase ran
    at half speed. Claimed machine-wide, the second plans around the first's, its builds kept off
    them too; a process's claims end with it; one process asking again keeps what it holds."""
    from harness import cpus
    one = lambda c: {c}  # noqa: E731
    try:
        assert cpus.slot_cpus(1, list(range(16)), one, claim=True) == ([(15, 14)], set(range(14)))
        assert cpus.slot_cpus(1, list(range(16)), one, claim=True) == ([(15, 14)], set(range(14)))
        assert sorted(claims.held) == [14, 15]
        pairs, bg = _plan_elsewhere("1")
        assert pairs == [(13, 12)] and bg == list(range(12))
        pairs, bg = _plan_elsewhere("2")  # a third, of two GPUs
        assert pairs == [(11, 10), (9, 8)] and bg == list(range(8))
        # without claims (the default, and the CPU path) nothing changes
        assert cpus.slot_cpus(1, list(range(16)), one) == ([(15, 14)], set(range(14)))
    finally:
        _end_elsewhere()
    claims.release()
    try:
        pairs, _ = _plan_elsewhere("1")  # the others' claims ended with their processes, ours let go
        assert pairs == [(15, 14)]
    finally:
        _end_elsewhere()


def test_claimed_cpus_keep_their_smt_siblings_and_too_few_left_plan_as_before(claims):
    from harness import cpus
    smt = lambda c: {c % 8, c % 8 + 8}  # noqa: E731
    try:
        pairs, _ = _plan_elsewhere("1", "smt")
        assert pairs == [(15, 14)]
        # 15, 14 and their siblings 7, 6 are the other's: this one plans on the 12 left
        assert cpus.slot_cpus(1, list(range(16)), smt, claim=True) == ([(13, 12)], {0, 1, 2, 3, 8, 9, 10, 11})
        claims.release()
        # another of three slots: too few CPUs left for a pair apart each, so one shared each
        # (13, 12, 11 and their siblings); what is left gives this one a shared CPU too
        assert _plan_elsewhere("3", "smt")[0] == [(13, 13), (12, 12), (11, 11)]
        assert cpus.slot_cpus(1, list(range(16)), smt, claim=True) == ([(10, 10)], {0, 1, 8, 9})
    finally:
        _end_elsewhere()
    claims.release()
    one = lambda c: {c}  # noqa: E731
    try:
        # a 3-CPU machine, two of them claimed: under a pair left, so planned over every CPU, as
        # without claims, and nothing claimed
        assert _plan_elsewhere("1", "3")[0] == [(2, 2)]
        assert _plan_elsewhere("1", "3")[0] == [(1, 1)]
        assert cpus.slot_cpus(1, [0, 1, 2], one, claim=True) == cpus.slot_cpus(1, [0, 1, 2], one) == ([(2, 2)], {0, 1})
        assert claims.held == {}
    finally:
        _end_elsewhere()


def test_no_jail_runs_on_the_timing_cpus_another_harness_process_claimed(claims):
    """A jail's timers fire on the CPU that armed them: each process keeps its jails off its own
    references' CPUs (sandbox.Jails.keep_off), and off those another harness process claimed."""
    from harness import cpus
    from harness.sandbox import Jails
    if len(cpus.available()) < 2:
        pytest.skip("one CPU: a jail has nowhere else to run")
    mine = max(cpus.available())
    assert Jails().allowed_cpus() is None  # nothing claimed, nothing kept off: anywhere
    try:
        _claim_elsewhere(mine)
        allowed = Jails().allowed_cpus()
        assert allowed is not None and mine not in allowed and allowed == set(cpus.available()) - {mine}
    finally:
        _end_elsewhere()
    assert Jails().allowed_cpus() is None


def test_claims_add_up_in_a_process_and_are_given_back_by_cpu(claims):
    """A batch's judging of a build that failed calls evaluate() without a gate: a claim there let go
    of the batch's other slots' CPUs (a reviewer's finding). Claims now add up, and an executor gives
    back only its own slots' CPUs."""
    from harness import cpus
    one = lambda c: {c}  # noqa: E731
    assert cpus.slot_cpus(2, list(range(16)), one, claim=True)[0] == [(15, 14), (13, 12)]
    cpus.slot_cpus(1, list(range(16)), one, claim=True)
    assert sorted(claims.held) == [12, 13, 14, 15]
    claims.release({13, 12, None})
    assert sorted(claims.held) == [14, 15] and claims.planned == {14, 15}


def test_processes_started_later_keep_off_cpus_claimed_since(claims):
    """A first batch's background set was planned before a second claimed its CPUs: what either
    starts afterwards (builds, standbys, their fork servers) keeps off the other's, and a probe (a
    shared lock) is never taken for a claim."""
    import fcntl
    import subprocess
    import sys

    from harness import cpus
    avail = cpus.available()
    if len(avail) < 2:
        pytest.skip("one CPU")
    mine, other = set(avail), max(avail)
    assert claims.without_others(mine) == mine
    try:
        _claim_elsewhere(other)
        assert claims.without_others(mine) == mine - {other}
        sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
        try:
            cpus.restrict(sleeper.pid, mine)
            assert os.sched_getaffinity(sleeper.pid) == mine - {other}
        finally:
            sleeper.kill()
            sleeper.wait()
        lender = cpus.Lender(set(avail) - {other}, {other: {other}})
        assert other not in lender.mask()  # lent to builds only where nobody else times on it
        # a plan of this process's own made over the other's claim (too few free) keeps its jails
        # allowed there: its candidate is pinned to it
        claims.planned.add(other)
        from harness.sandbox import Jails
        assert Jails().allowed_cpus() is None
    finally:
        _end_elsewhere()
    # another process's probe holds a shared lock: not a claim
    probe = os.open(os.path.join(claims.folder(), f"cpu{other}"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(probe, fcntl.LOCK_SH | fcntl.LOCK_NB)
        claims.release()
        assert claims.held_elsewhere({other}) == set()
    finally:
        os.close(probe)


@pytest.mark.parametrize("children_lists", [True, False], ids=["children-lists", "proc-scan"])
def test_builds_borrow_the_timing_cpu_only_while_nothing_is_timed(monkeypatch, children_lists):
    """cpus.Lender: a build's every process and thread runs on the background CPUs and the timing CPU
    while no timing phase holds it; a timing phase (pinned with the lender) moves them all off it
    first, a process forked meanwhile inherits that, and they get it back after. The gate of a batch's
    slot carries the lender to the timing phase. Both ways of finding a build's processes: the
    kernel's children lists, and a scan of /proc where it has none."""
    import os
    import subprocess
    import sys

    from harness import cpus
    from harness.batch.executor import DeviceSlot, SlotRuntime
    allowed = sorted(os.sched_getaffinity(0))
    if len(allowed) < 2:
        pytest.skip("needs two CPUs")
    if children_lists and not cpus._children_lists(os.getpid()):
        pytest.skip("this kernel has no /proc/PID/task/TID/children")
    monkeypatch.setattr(cpus, "_children_lists", lambda pid: children_lists)
    timing_cpu, background = allowed[-1], set(allowed[:-1])
    assert cpus.Lender.plan([timing_cpu], None) is None  # nothing reserved: nothing to lend
    assert cpus.Lender.plan([None], background) is None
    smt = lambda c: {c % 8, c % 8 + 8}  # noqa: E731
    planned = cpus.Lender.plan([15, 14], set(range(16)) - {6, 7, 14, 15}, smt)
    assert planned.timing == {15: {7, 15}, 14: {6, 14}} and planned.mask() == set(range(16))
    with planned.reclaimed(15):
        assert planned.mask() == set(range(16)) - {7, 15}
        with planned.reclaimed(14), planned.reclaimed(15):
            assert planned.mask() == set(range(16)) - {6, 7, 14, 15}
        assert planned.mask() == set(range(16)) - {7, 15}  # the outer phase still holds it
    assert planned.mask() == set(range(16))

    # a build child with a thread and a grandchild, and a pipe to fork another on demand
    code = ("import os, subprocess, sys, threading, time\n"
            "threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n"
            "kids = [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])]\n"
            "print(kids[0].pid, flush=True)\n"
            "for line in sys.stdin:\n"
            "    kids.append(subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']))\n"
            "    print(kids[-1].pid, flush=True)\n")
    build = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    timed = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    lender = cpus.Lender(background, {timing_cpu: {timing_cpu}})

    def masks(*roots):
        kids = cpus.children_by_parent()
        out, stack = {}, list(roots)
        while stack:
            p = stack.pop()
            for t in os.listdir(f"/proc/{p}/task"):
                out[int(t)] = frozenset(os.sched_getaffinity(int(t)))
            stack.extend(kids.get(p, ()))
        return out

    spawned = []
    try:
        grandchild = int(build.stdout.readline())
        spawned.append(grandchild)
        cpus.restrict(build.pid, background)
        lender.track(build.pid)
        seen = masks(build.pid)
        assert grandchild in seen and len(seen) >= 3  # the child's threads and the grandchild
        assert set(seen.values()) == {frozenset(allowed)}
        gate = SlotRuntime(DeviceSlot("cuda:0", "cuda", {}, timing_cpu=timing_cpu), "full", None,
                           lender=lender).gate
        assert gate.lender is lender and gate.cand_cpu == timing_cpu  # no CPU of its own: the reference's
        with cpus.pinned([(timed.pid, gate.timing_cpu)], gate.lender):
            assert os.sched_getaffinity(timed.pid) == {timing_cpu}
            assert set(masks(build.pid).values()) == {frozenset(background)}
            build.stdin.write("fork\n")
            build.stdin.flush()
            late = int(build.stdout.readline())
            spawned.append(late)
            assert os.sched_getaffinity(late) == background  # inherited
            lender.track(build.pid)  # a build starting meanwhile gets the same
            assert set(masks(build.pid).values()) == {frozenset(background)}
        after = masks(build.pid)
        assert late in after and set(after.values()) == {frozenset(allowed)}
        lender.untrack(build.pid)
        with lender.reclaimed(timing_cpu):  # an ended build is left alone
            assert set(masks(build.pid).values()) == {frozenset(allowed)}
        assert lender.moves == 4
    finally:
        for pid in spawned:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        for p in (build, timed):
            p.kill()
            p.wait()


def test_the_cpu_paths_timing_holds_each_side_to_its_own_cpus_and_lets_go():
    """cpus.held_to: the reference by its affinity on the top CPUs (cpu_path_split), the candidate by
    its jail's cpuset group where there is one (its own affinity calls cannot leave it), else by
    affinity, on others; each one's own mask back after (the jail's group back to the CPUs jails may
    use). The candidate's sets rotate, so evaluations timed at once are spread."""
    import subprocess

    from harness import cgroups, cpus
    every = set(os.sched_getaffinity(0))
    assert cpus.cpu_path_split(1, [0, 1, 2, 3], lambda c: {c}) == ({0, 1, 2}, {3})
    assert cpus.cpu_path_split(1, [0, 1, 2, 3], lambda c: {c, c ^ 2}) == ({0, 2}, {3})  # 3's sibling 1 kept too
    assert cpus.cpu_path_split(1, [5]) == ({5}, {5})  # one CPU: nothing to keep apart
    assert cpus.spread_set(1, {0, 1, 2}) != cpus.spread_set(1, {0, 1, 2})
    jail_cpus, ref_cpus = cpus.cpu_path_split(1)
    procs = [subprocess.Popen(["sleep", "30"]) for _ in range(2)]
    cand, ref = (p.pid for p in procs)
    groups = cgroups.make("test-held", 1 << 30, 64) if cgroups.confines() else []
    try:
        for g in groups:  # as cgroups.join does for the process itself
            Path(g, "cgroup.procs").write_text(str(cand))
        with cpus.held_to(1, cand, groups, ref) as how:
            assert how == ("cpuset" if groups else "affinity")
            mine = os.sched_getaffinity(cand)
            assert os.sched_getaffinity(ref) == ref_cpus and len(mine) == 1 and mine <= jail_cpus
            if len(every) > 1:
                assert not mine & ref_cpus
            if groups:  # the candidate asks for the whole machine and stays where it was put
                os.sched_setaffinity(cand, every)
                assert os.sched_getaffinity(cand) == mine
        assert os.sched_getaffinity(ref) == every
        assert os.sched_getaffinity(cand) == (jail_cpus if groups else every)
    finally:
        for p in procs:
            p.kill()
            p.wait()
        cgroups.remove(groups)


@pytest.mark.parametrize("children_lists", [True, False], ids=["children-lists", "proc-scan"])
def test_a_quiet_measurement_stops_every_build_process_and_starts_them_again(monkeypatch, children_lists):
    """cpus.Lender.quiet (a measurement confirming a host-clock flag): every process of every build
    stopped, a grandchild and a build starting meanwhile included, and every one running again after;
    a nested block stops nothing more and resumes nothing early."""
    import subprocess
    import sys

    from harness import cpus
    if children_lists and not cpus._children_lists(os.getpid()):
        pytest.skip("this kernel has no /proc/PID/task/TID/children")
    monkeypatch.setattr(cpus, "_children_lists", lambda pid: children_lists)

    def state(pid):
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]

    code = ("import subprocess, sys, time\n"
            "k = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
            "print(k.pid, flush=True); time.sleep(60)\n")
    build = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    late = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    # a process that is no build's, listed under the build as a pid reused since would be (a helper's
    # attack): the walk takes none but a process whose parent is the one it was listed under
    foreign = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    if not children_lists:
        scan = cpus.children_by_parent
        monkeypatch.setattr(cpus, "children_by_parent",
                            lambda: {**scan(), build.pid: scan().get(build.pid, []) + [foreign.pid]})
    lender = cpus.Lender(set(), {})
    fds_before = len(os.listdir("/proc/self/fd"))
    try:
        grandchild = int(build.stdout.readline())
        lender.track(build.pid)
        with lender.quiet() as stopped:
            assert stopped == 2
            lender.track(late.pid)
            with lender.quiet() as nested:
                assert nested == 0
            assert {state(p) for p in (build.pid, grandchild, late.pid)} == {"T"}
            assert state(foreign.pid) != "T"
        assert "T" not in {state(p) for p in (build.pid, grandchild, late.pid)}
        assert lender.quiets == 1
        lender.untrack(build.pid)
        lender.untrack(late.pid)
        assert not lender._roots
        assert len(os.listdir("/proc/self/fd")) == fds_before  # every pidfd closed
    finally:
        for p in (build, late, foreign):
            p.kill()
            p.wait()
        os.kill(grandchild, 9)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs: one for the reference, one for the rest")
def test_a_reference_slowed_by_the_hosts_other_processes_is_flagged():
    """On the CPU path the reference is timed on CPUs no jail may use, but the host's other
    processes may: a busy loop there slowed the reference of an honest-speed solution and gave it
    2.7x on a 2-core machine (bench/results/clock-checks.md). The reference's waits for a CPU over
    its timed rounds are recorded (`ref_waited_frac`) and past `timing.max_reference_wait_frac`
    flagged `reference_contended`."""
    import subprocess
    import sys

    from conftest import ROOT, make_config

    from harness import cpus
    from harness.evaluation import evaluate

    ref_cpu = max(cpus.cpu_path_split(1)[1])
    burner = subprocess.Popen([sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{ref_cpu}}})\nwhile True: pass"])
    try:
        r = evaluate(ROOT / "tests/fixtures/cpu/honest_linear_torch.py", ROOT / "tests/problems/linear_relu.py",
                     make_config(device="cpu", size="full", **{"timing.max_reference_wait_frac": 0.1}))
    finally:
        burner.kill()
        burner.wait()
    assert r.status.value == "passed", (r.status, r.error)
    assert r.timing_method["ref_waited_frac"] > 0.1 and "reference_contended" in r.flags, (r.timing_method, r.flags)
