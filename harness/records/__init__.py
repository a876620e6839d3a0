"""Typed records: everything that crosses a process boundary or is written to disk.

- result.py: the record of one evaluation (EvalResult) and its parts (Status, Stats, EnvInfo,
  TrialCheck, PhaseTimes): one row of results.jsonl.
- messages.py: what crosses the pipe between the parent and a child (Command, Reply, CompileReply).
"""
