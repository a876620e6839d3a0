"""Records the parent keeps under `cache_dir` for later runs (build markers, torch.compile baselines,
measured memory needs): each written whole or not at all, read back only as the record asked for.

A writer makes a fresh file (never opened through a link: a folder may be a jailed build's to write,
which could plant one at a predictable name for root to follow) and renames it over the record, so a
reader in another evaluation or batch sees the old record or the new one, never half of one.
"""
from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import Optional, TypeVar

from pydantic import BaseModel, ValidationError

Record = TypeVar("Record", bound=BaseModel)


def write_whole(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    os.replace(tmp, path)


def read_keyed(path: Path, model: type[Record], key: str) -> Optional[Record]:
    """The record at `path` where it is one of `model` for `key`; None where it is missing, unreadable
    or another's."""
    try:
        rec = model.model_validate_json(path.read_text())
    except (OSError, ValidationError, ValueError):
        return None
    return rec if getattr(rec, "key", None) == key else None
