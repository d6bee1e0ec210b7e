"""A cell's output copied to its `log.txt` while it still reaches the terminal.

The copy is taken at the file descriptors (1 and 2), so it holds what Python prints, what C libraries
write and what child processes (an environment's JVM, say) print, not only `print()`. Inside the
block Python's own `sys.stdout` and `sys.stderr` write to those descriptors too (where a caller had
replaced them, as pytest does, they would bypass the copy). Where cells share a terminal, each line
that reaches it can be prefixed with the cell's name; the log holds the lines as printed, except that
of a line redrawn in place (a progress bar: ended by a carriage return) it keeps the last state. Each
descriptor has a pipe and a thread of its own, so each stream's lines keep their order in the log,
but a stdout line and a stderr line written moments apart may land in either order (a print just
before a traceback can follow it).
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, BinaryIO

JOIN_S = 5.0  # how long to wait for the last lines at the end (a child process still holding the pipe)


@contextlib.contextmanager
def tee_output(log_path: Path, prefix: str = "", header: str = "") -> Iterator[None]:
    """Within the block, everything written to fd 1 and 2 goes to `log_path` (appended, after `header`)
    and, each line after `prefix`, to where it went before."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    log = open(log_path, "ab")  # noqa: SIM115 (closed below, once the pumps are done with it)
    log.write(header.encode())
    log.flush()
    lock = threading.Lock()
    saved: list[int] = []
    pumps: list[threading.Thread] = []
    streams = sys.stdout, sys.stderr
    try:
        for fd in (1, 2):
            saved.append(os.dup(fd))
            read_end, write_end = os.pipe()
            pump = threading.Thread(
                target=_pump, args=(read_end, saved[-1], log, lock, prefix.encode()), daemon=True
            )
            pump.start()
            pumps.append(pump)
            os.dup2(write_end, fd)
            os.close(write_end)
        sys.stdout, sys.stderr = _text(1), _text(2)
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        sys.stdout, sys.stderr = streams
        for fd, copy in zip((1, 2), saved, strict=False):
            os.dup2(copy, fd)  # closes the pipe's last write end this process holds: the pump ends
        deadline = time.monotonic() + JOIN_S  # for both pumps together, not each in turn
        for pump in pumps:
            pump.join(max(0.0, deadline - time.monotonic()))
        if not any(p.is_alive() for p in pumps):  # else a child still writes: the pumps keep their files
            log.close()
            for copy in saved:
                os.close(copy)


def _text(fd: int) -> IO[str]:
    """A text stream on `fd` that leaves the descriptor open when dropped, flushing every line."""
    return io.TextIOWrapper(
        open(fd, "wb", buffering=0, closefd=False),  # noqa: SIM115
        encoding="utf-8",
        errors="replace",
        line_buffering=True,
        write_through=True,
    )


def _pump(read_end: int, terminal: int, log: BinaryIO, lock: threading.Lock, prefix: bytes) -> None:
    """Copy the pipe to the log as is and to the terminal with `prefix` at each line's start, a whole
    line at a time (up to its newline or carriage return): stdout and stderr have a pump each, and a
    line written in pieces (an unbuffered child's print, a word and then its newline) would otherwise
    be cut by the other stream's lines in the log."""
    pending = b""
    settled = _Settled()
    try:
        while chunk := os.read(read_end, 1 << 16):
            pending += chunk
            cut = max(pending.rfind(b"\n"), pending.rfind(b"\r")) + 1
            if cut:
                _copy(pending[:cut], terminal, log, lock, prefix, settled)
                pending = pending[cut:]
        _copy(pending, terminal, log, lock, prefix, settled, last=True)  # the last line, without its end
    finally:
        os.close(read_end)


class _Settled:
    """What the log keeps of one stream: a line a carriage return alone ends is one a progress bar
    redraws (tqdm's `\rLoading weights: 40%|...`), so it is held and dropped once the next line
    follows: the log has each bar's last state, not every redraw. A newline alone right after it is a
    `\r\n` the pipe delivered in two reads: it completes the held line instead."""

    def __init__(self) -> None:
        self.held = b""

    def lines(self, data: bytes, last: bool = False) -> bytes:
        kept = []
        for line in data.splitlines(keepends=True):
            if line == b"\n" and self.held:
                line = self.held + line
            self.held = b""
            if line.endswith(b"\r"):
                self.held = line
            else:
                kept.append(line)
        if last:  # a bar the output ended on: its last state
            kept.append(self.held)
            self.held = b""
        return b"".join(kept)


def _copy(
    lines: bytes,
    terminal: int,
    log: BinaryIO,
    lock: threading.Lock,
    prefix: bytes,
    settled: _Settled,
    last: bool = False,
) -> None:
    """Whole lines to the log as `settled` keeps them (under the lock both pumps share) and, each after
    `prefix`, to the terminal as they are."""
    with lock:
        log.write(settled.lines(lines, last))
        log.flush()
    if prefix:
        lines = b"".join(prefix + line for line in lines.splitlines(keepends=True))
    _write_all(terminal, lines)


def _write_all(fd: int, data: bytes) -> None:
    with contextlib.suppress(OSError):  # the terminal went away: the log still gets everything
        while data:
            data = data[os.write(fd, data) :]
