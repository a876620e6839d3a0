"""The process model: the parent's handles on child interpreters, and the child side.

Parent side:
- worker.py: `Worker`, the parent's handle on one child (spawn, commands and replies, pause and
  resume, kill), its errors (WorkerDied, WorkerTimeout, WorkerProtocolError), describe_exit, close_all.
- pipes.py: the three pipes to a child, the size limits of a reply, `Tail` (the drained output's tail).
- standby.py: `Standby`, children started ahead of need for a device slot.
- forkserver.py: `ForkServer`, one interpreter that imported torch once and forks standbys; run as
  `python -m harness.process.forkserver` (its server side is in the same file).

Child side (imports only what the child needs, never the parent's orchestration; tests/test_imports.py):
- child.py: the child's entry (`python -m harness.process.child`): start-up (a standby's preload and
  priming, set_dumpable), the channel, the compile role, the command loop of the other roles.
- runner.py: `Runner`, the candidate and reference roles (build, trials, timing calls, kernel list).
"""
