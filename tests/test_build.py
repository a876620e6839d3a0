"""harness/build.py: the build cache (a rejected build is not compiled again, a good one not rebuilt
while its libraries are unchanged) and the environment every child starts with."""
from __future__ import annotations

from conftest import ROOT


def test_a_build_the_compiler_rejected_is_not_compiled_again(tmp_path, monkeypatch):
    """The same source fails the same way: its compiler error is remembered in its build directory,
    and a second build returns it without starting a compiler. A failure that says nothing about
    the source (the compiler killed) is not remembered."""
    import harness.build as build
    from harness.records.messages import CompileReply
    src = ROOT / "tests/fixtures/cpu/compile_error_cpp.py"
    ext = build.extensions_dir(src.read_text(), "cpu", tmp_path)
    first, failure, log = build.compile_solution(src, ext, "cpu", 300)
    assert failure is None and first.category == "compile_error" and (ext / build.FAILED_BUILD).exists()

    def no_compiler(*a, **k):
        raise AssertionError("a compiler was started for a build already known to fail")
    monkeypatch.setattr(build, "Worker", no_compiler)
    again, failure, log2 = build.compile_solution(src, ext, "cpu", 300)
    assert failure is None and again.error == first.error and again.category == "compile_error" and log2 == log
    killed = CompileReply(ok=False, category="compile_error", error="error: ninja: build stopped: Killed")
    assert build._deterministic(first) and not build._deterministic(killed)


def test_a_batch_build_the_compiler_rejected_is_not_compiled_again(tmp_path, monkeypatch):
    """The same memory on the batch's build path (build.build_child at idle priority, as executor.compile_item calls it)."""
    import harness.build as build
    src = ROOT / "tests/fixtures/cpu/compile_error_cpp.py"
    ext = build.extensions_dir(src.read_text(), "cpu", tmp_path)
    first, failure, log, cpu = build.build_child(src, ext, "cpu", 300, {}, idle=True)
    assert failure is None and first.category == "compile_error" and (ext / build.FAILED_BUILD).exists()

    def no_compiler(*a, **k):
        raise AssertionError("a compiler was started for a build already known to fail")
    monkeypatch.setattr(build, "Worker", no_compiler)  # the name build_child starts its child with
    again, failure, log2, cpu2 = build.build_child(src, ext, "cpu", 300, {}, idle=True)
    assert failure is None and again.error == first.error and log2 == log and cpu2 == 0.0


def test_a_build_that_succeeded_is_not_run_again_while_its_libraries_are_unchanged(tmp_path, monkeypatch):
    """A warm run skips the build child of a source that built before: the reply and log come from
    the build directory's marker. Any library rebuilt, replaced or removed since makes it build again."""
    import harness.build as build
    src = ROOT / "tests/fixtures/cpu/honest_cpp.py"
    ext = build.extensions_dir(src.read_text(), "cpu", tmp_path)
    first, failure, log = build.compile_solution(src, ext, "cpu", 300)
    assert failure is None and first.ok and first.extensions and (ext / build.BUILT).exists()
    libs = sorted(ext.rglob("*.so"))
    assert libs

    started = []
    real_worker = build.Worker

    def counting(*a, **k):
        started.append(a)
        return real_worker(*a, **k)
    monkeypatch.setattr(build, "Worker", counting)
    again, failure, log2, cpu = build.build_child(src, ext, "cpu", 300, idle=True)
    assert not started and failure is None and again.ok and again.extensions == first.extensions
    assert again.seconds == 0.0 and cpu == 0.0 and log2 == log

    libs[0].write_bytes(libs[0].read_bytes() + b"\0")  # replaced behind the cache's back
    third, failure, _ = build.compile_solution(src, ext, "cpu", 300)
    assert len(started) == 1 and failure is None and third.ok
    libs[0].unlink()
    assert build.remembered_build(ext) is None


def test_cpu_children_get_a_history_free_heap(monkeypatch):
    """glibc's dynamic mmap threshold and its trimming of the heap's top both depend on a process's
    allocation history; on the CPU path that made an identical candidate's per-call overhead 0.6-3 ms
    above its reference's, which the host-clock check reads as hidden time (bench/results/
    diagnostics.md). Every child gets both fixed; GPU children the threshold only."""
    from harness.build import child_env
    monkeypatch.delenv("MALLOC_TRIM_THRESHOLD_", raising=False)
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    cpu, gpu = child_env(None, "cpu"), child_env(None, "cuda")
    assert int(cpu["MALLOC_MMAP_THRESHOLD_"]) == int(gpu["MALLOC_MMAP_THRESHOLD_"]) == 32 << 20
    assert int(cpu["MALLOC_TRIM_THRESHOLD_"]) >= 1 << 30 and "MALLOC_TRIM_THRESHOLD_" not in gpu


def test_a_build_folder_belongs_to_one_python_installation_and_torch(tmp_path, monkeypatch):
    """Two checkouts share the root's build cache; a build made by one names its own headers in its
    commands, and the other's load_inline would rebuild it inside the candidate's load timeout (a new
    user's honest solution timed out so). So the folder's key holds the installation's prefix and
    torch's place."""
    import sys

    import harness.build as build
    code = (ROOT / "tests/fixtures/cpu/honest_cpp.py").read_text()
    here = build.extensions_dir(code, "cpu", tmp_path)
    assert build.extensions_dir(code, "cpu", tmp_path) == here
    monkeypatch.setattr(sys, "prefix", "/elsewhere/.venv")
    assert build.extensions_dir(code, "cpu", tmp_path) != here
    monkeypatch.undo()
    monkeypatch.setattr(build, "torch_dir", lambda: "/elsewhere/site-packages/torch")
    assert build.extensions_dir(code, "cpu", tmp_path) != here


def test_a_build_lock_left_by_a_killed_import_is_removed(tmp_path):
    """torch's load_inline takes a lock file in the extension's build folder for every load, built or
    not, and waits for it forever where it is held. A candidate killed while holding it (its import
    over `timeouts.load_s`) leaves it: the harness removes it then, says so, and the next evaluation
    of the same build passes."""
    import os

    from conftest import make_config

    import harness.build as build
    from harness.evaluation import evaluate
    os.chmod(tmp_path, 0o755)
    sol, prob = ROOT / "tests/fixtures/cpu/honest_cpp.py", ROOT / "tests/problems/relu_add.py"
    cfg = make_config(device="cpu", cache_dir=str(tmp_path), **{"timeouts.load_s": 8})
    first = evaluate(sol, prob, cfg)
    assert first.status.value == "passed", first.error
    ext = build.extensions_dir(sol.read_text(), "cpu", tmp_path)
    folders = [d for d in ext.iterdir() if d.is_dir()]
    assert folders
    for d in folders:  # as a killed loader leaves it
        (d / "lock").touch()
    stuck = evaluate(sol, prob, cfg)
    assert stuck.status.value == "timeout" and "build lock" in stuck.error, stuck.error
    assert not list(ext.glob("*/lock"))
    again = evaluate(sol, prob, cfg)
    assert again.status.value == "passed", again.error


def test_clearing_build_locks_follows_no_link_the_solution_planted(tmp_path):
    """build.clear_build_locks runs as the harness over a folder the solution wrote: a subfolder that
    is a link to another folder (another solution's build, or any folder with a file named `lock`)
    is passed over; a real subfolder's lock is removed."""
    import harness.build as build
    ext, victim = tmp_path / "ext", tmp_path / "victim"
    (ext / "mine").mkdir(parents=True)
    victim.mkdir()
    (ext / "mine" / "lock").touch()
    (victim / "lock").touch()
    (ext / "planted").symlink_to(victim, target_is_directory=True)
    assert build.clear_build_locks(ext) == 1
    assert not (ext / "mine" / "lock").exists() and (victim / "lock").exists()
    assert build.clear_build_locks(tmp_path / "none") == 0


def test_a_build_through_the_precompiled_headers_wrapper_has_a_folder_of_its_own(tmp_path, monkeypatch):
    """torch writes the compiler it was given (CXX) into a build's commands, and ninja builds again
    when a command changes: a build cached without the precompiled header's wrapper (harness/pch.py)
    was built again inside a candidate's load, with the wrapper on, past its timeout (the GPU suite
    on an H200, session 43). So the compiler named is part of the folder's key; with none named, the
    key is as before, and caches made before stay valid."""
    import harness.build as build
    from harness import pch
    code = (ROOT / "tests/fixtures/cpu/honest_cpp.py").read_text()
    monkeypatch.delenv("CXX", raising=False)
    plain = build.extensions_dir(code, "cpu", tmp_path)
    monkeypatch.setenv("CXX", str(pch.WRAPPER))
    assert build.extensions_dir(code, "cpu", tmp_path) != plain
