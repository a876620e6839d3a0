"""Records the harness wrote, told from records anyone could have written: each line of
results.jsonl ends with an HMAC-SHA256 of the rest of the line, under a key kept where only the
harness's user can read it (`build.private_dir()`, 0700; the key file 0600). A jailed solution can
neither read the key nor write the run folder; a line added or edited by anything else (a process
of the harness's uid that is not the harness, another machine's run copied in, a hand edit) does
not verify, and `--resume` and the run's own tables pass it over.

The MAC covers the run's id (config.json's `run_id`: a signed line copied from another run does not
verify) and the exact bytes of the record as written (`EvalResult.model_dump_json()`, line breaks
of every kind escaped), so verifying needs no re-serialisation: the line is that JSON with
`,"mac":"<hex>"` put before its closing brace.
"""
from __future__ import annotations

import hashlib
import hmac
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Optional

KEY_BYTES = 32
_TAIL = re.compile(r',"mac":"([0-9a-f]{64})"\}$')


def key_path() -> Path:
    from ..build import private_dir
    return private_dir() / "record.key"


@lru_cache(maxsize=1)
def key() -> bytes:
    """This user's record key, made on first use (never overwritten: a second harness racing to make
    it reads the first one's)."""
    path = key_path()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "wb") as fh:
            fh.write(os.urandom(KEY_BYTES))
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(KEY_BYTES + 1)
    if len(data) != KEY_BYTES:
        raise RuntimeError(f"{path} is not a record key ({len(data)} bytes); remove it to make a new one")
    return data


# characters JSON leaves as they are but str.splitlines() ends a line at: escaped, so that a record
# (a solution's error message, say) is one line for every reader (found by a helper's attack: a
# record split so by the leaderboard's reader dropped out of its tables)
_BREAKS = {"\u2028": "\\u2028", "\u2029": "\\u2029", "\u0085": "\\u0085", "\x1c": "\\u001c",
           "\x1d": "\\u001d", "\x1e": "\\u001e", "\x0b": "\\u000b", "\x0c": "\\u000c"}


def _mac(body: str, run_id: str) -> str:
    return hmac.new(key(), f"{run_id}\n{body}".encode(), hashlib.sha256).hexdigest()


def signed(body: str, run_id: str = "") -> str:
    """The line for one record of the run `run_id`: its JSON object (line breaks of any kind
    escaped) with its MAC as the last key."""
    if not body.endswith("}"):
        raise ValueError("a record is a JSON object")
    for ch, esc in _BREAKS.items():
        body = body.replace(ch, esc)
    return f'{body[:-1]},"mac":"{_mac(body, run_id)}"}}'


def verified(line: str, run_id: str = "") -> Optional[str]:
    """The record's JSON as signed, where `line` carries this key's MAC of it for the run `run_id`;
    else None."""
    line = line.rstrip("\n")
    m = _TAIL.search(line)
    if m is None:
        return None
    body = line[:m.start()] + "}"
    return body if hmac.compare_digest(m.group(1), _mac(body, run_id)) else None
