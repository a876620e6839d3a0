"""The host CPU that a device slot's timed processes run on.

The two sides of a comparison are timed in their own processes, one round after the other. Left to
the scheduler, each runs wherever it lands, beside compilers and standbys importing torch (or on
their SMT siblings, where the machine has SMT), and the host-clock checks (timing.clock_checks) read
a persistent difference in host work per call between the two as hidden time. Seen on an H200
machine without this: 2 honest solutions of 78 rejected, identical code on both sides in one of them,
0.56-0.62 ms more host time per call on the candidate's side in every round; with it, 0 of 273 since
(bench/results/throughput-cuda.md; that machine has no SMT, so the cause was not the siblings).

So each GPU slot has one timing CPU. Both sides' main threads are moved onto it for the timing
phase (they never run at once there: rounds alternate, and the gate stops everything else of the
slot's), and builds and standbys starting up are kept off it and its SMT siblings where the
machine has CPUs to spare. The CPU path is left alone: there, contention is the noise the checks are
set for, and evaluations run beside each other in tests.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
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


def restrict(pid: int, cpus: Optional[set[int]]) -> None:
    """Keep a background process (inherited by its children) to `cpus`; None: anywhere."""
    if cpus:
        try:
            os.sched_setaffinity(pid, cpus)
        except (OSError, AttributeError):
            pass


@contextmanager
def pinned(pids: Iterable[Optional[int]], cpu: Optional[int]):
    """Each process's main thread on `cpu` for the block, then back where it was."""
    old: dict[int, set[int]] = {}
    if cpu is not None:
        for pid in pids:
            if pid is None:
                continue
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
