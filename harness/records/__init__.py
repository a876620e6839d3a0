"""Typed records: everything that crosses a process boundary or is written to disk.

- result.py: the record of one evaluation (EvalResult) and its parts (Status, Stats, EnvInfo,
  TrialCheck, PhaseTimes): one row of results.jsonl.
- messages.py: what crosses the pipe between the parent and a child (Command, Reply, CompileReply).
- signing.py: each line of results.jsonl signed (HMAC) under the harness's own key, and checked.
"""
