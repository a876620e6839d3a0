"""The pipes between the parent and a child: their creation, the size limits of what comes back up
them, and `Tail`, the thread that drains a child's merged stdout and stderr keeping only the tail.

A solution that prints 100 MB costs a little CPU and nothing else, and nothing printed is ever parsed.
"""
from __future__ import annotations

import os
import threading
from collections import deque

MAX_LINE_BYTES = 64 << 20
LOG_TAIL_BYTES = 16 << 10


def _widen(fd: int) -> None:
    """A 1 MB pipe buffer where the system allows it (64 KB by default): fewer wake-ups per trial."""
    try:
        import fcntl
        size = min(1 << 20, int(open("/proc/sys/fs/pipe-max-size").read()))
        fcntl.fcntl(fd, getattr(fcntl, "F_SETPIPE_SZ", 1031), size)
    except (OSError, ValueError, ImportError):
        pass


def make_pipes() -> tuple[int, int, int, int, int, int]:
    """A worker's three pipes: (command read, command write, reply read, reply write, output read,
    output write)."""
    cmd_r, cmd_w = os.pipe()
    rep_r, rep_w = os.pipe()
    _widen(rep_r)
    out_r, out_w = os.pipe()
    return cmd_r, cmd_w, rep_r, rep_w, out_r, out_w


class Tail(threading.Thread):
    """Drains a pipe and keeps the last LOG_TAIL_BYTES, counting the rest."""

    def __init__(self, fd: int):
        super().__init__(daemon=True)
        self.fd = fd
        self.chunks: deque[bytes] = deque()
        self.kept = 0
        self.total = 0

    def run(self) -> None:
        while True:
            try:
                data = os.read(self.fd, 1 << 16)
            except OSError:
                break
            if not data:
                break
            self.total += len(data)
            self.chunks.append(data)
            self.kept += len(data)
            while self.kept - len(self.chunks[0]) >= LOG_TAIL_BYTES:
                self.kept -= len(self.chunks.popleft())
        os.close(self.fd)

    def text(self) -> str:
        data = b"".join(self.chunks)[-LOG_TAIL_BYTES:]
        s = data.decode(errors="replace")
        if self.total > len(data):
            s = f"[... {self.total - len(data)} earlier bytes of output dropped ...]\n" + s
        return s
