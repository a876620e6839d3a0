"""The run folder's files: its default name, its lock (one writer at a time), results.jsonl (read
back for --resume, appended one record at a time, each signed: records/signing.py) and events.jsonl
(the run's timeline)."""
from __future__ import annotations

import datetime as _dt
import fcntl
import json
import os
from pathlib import Path
from typing import Optional

from ..records import signing
from ..records.result import EvalResult
from .plan import BatchError


class RunLock:
    """An exclusive lock on the run folder itself for as long as a batch writes to it: a second
    `harness batch` on the same folder (a --resume started twice, say) is refused at once instead of
    recording the same items again beside the first. The kernel drops it if the process dies. The
    folder's own descriptor, not a lock file: a file would stay behind after the run, and removing
    it on release would let a waiter lock a name another process had just made anew."""

    def __init__(self, run_dir: Path):
        run_dir.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            raise BatchError(f"another harness batch is writing to {run_dir}; wait for it to end, or use "
                             "another --out") from None

    def release(self) -> None:
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def default_run_dir(base: Path = Path("results")) -> Path:
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    out, n = base / stamp, 1
    while out.exists():
        n += 1
        out = base / f"{stamp}-{n}"
    return out


def record_key(label: Optional[str], solution: str, solution_hash, problem_hash, config_hash) -> tuple:
    """Identity of a finished item. The path and label are part of it: two submitters (or two
    samples) with identical code are two items, each owed its record."""
    return (label or "", str(Path(solution).resolve()), solution_hash, problem_hash, config_hash)


def run_id(run_dir: Path) -> str:
    """The run's id (config.json), which every record's MAC covers; "" for a folder without one."""
    try:
        return str(json.loads((run_dir / "config.json").read_text()).get("run_id") or "")
    except (OSError, ValueError, AttributeError):
        return ""


def read_records(path: Path, signed_only: bool = False, run_id: str = "") -> tuple[list[dict], int]:
    """(records, lines passed over): `signed_only`, only the records this harness signed for the run
    `run_id` (records/signing.py); every line that does not verify is counted and left out. Lines
    end at "\n" alone, as written."""
    out, passed_over = [], 0
    if not path.exists():
        return out, passed_over
    with open(path, "rb") as fh:
        for raw in fh:
            if not raw.endswith(b"\n"):
                break  # a line cut by a crash: that item is redone
            line = raw.decode("utf-8", errors="replace")
            if signed_only:
                body = signing.verified(line, run_id)
                if body is None:
                    passed_over += bool(line.strip())
                    continue
                line = body
            try:
                rec = json.loads(line)
            except ValueError:
                passed_over += 1
                continue
            if isinstance(rec, dict):
                out.append(rec)
            else:
                passed_over += 1
    return out, passed_over


class ResultsFile:
    """results.jsonl, appended one record at a time, each on disk before the next item is counted."""

    def __init__(self, path: Path, run_id: str = ""):
        self.path, self.run_id = path, run_id
        if path.exists():  # drop a partial last line left by a crash, so appends stay one per line
            data = path.read_bytes()
            if data and not data.endswith(b"\n"):
                with open(path, "r+b") as fh:
                    fh.truncate(data.rfind(b"\n") + 1)
        self.fh = open(path, "a", encoding="utf-8")

    def write(self, rec: EvalResult) -> None:
        self.fh.write(signing.signed(rec.model_dump_json(), self.run_id) + "\n")
        self.fh.flush()
        os.fsync(self.fh.fileno())

    def close(self) -> None:
        self.fh.close()


class EventLog:
    def __init__(self, path: Path):
        self.fh = open(path, "a", encoding="utf-8")

    def write(self, event: str, **data) -> None:
        self.fh.write(json.dumps({"event": event, "time": _dt.datetime.now().isoformat(timespec="seconds"),
                                  **data}) + "\n")
        self.fh.flush()

    def close(self) -> None:
        self.fh.close()
