"""Logging set-up: JSON lines for clusters (the chart's default), text for people (`make run`).

python-json-logger turns the standard library's records into one JSON object per line, with
`extra={...}` fields as top-level keys, so the code logs through `logging` as everywhere else and
log pipelines (Loki, Elasticsearch, Cloud Logging) index the fields without parsing text.

One exception, on the request path: the per-review line (`review`). Through `logging` a JSON
line costs about 20 us (record, formatter, handler lock), a quarter of a whole review; written
directly with the response's own JSON encoder it costs about 5 us. Same keys, same stream, one
`write` per line (whole lines: workers sharing stderr never interleave within one).

No line is written on the event loop: a slow stderr (a container runtime that reads its pipe
late, a full terminal) would stop every review. Lines go into a bounded queue and one thread
writes them; when the queue is full a line is dropped and counted, and the count is written
with the next line that gets through. At exit the queue is written out.
"""

from __future__ import annotations

import atexit
import logging
import os
import queue
import threading
from datetime import UTC, datetime
from typing import Any, Final

from pythonjsonlogger.json import JsonFormatter

from ..admission.review import dumps

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
REVIEW = logging.getLogger("gpu-policy.review")
_json = False
QUEUED_LINES: Final = 10_000  # lines waiting for stderr at most; past it they are dropped, counted
EXIT_SECONDS: Final = 2.0  # at exit, how long the queue may take to be written out


class Writer:
    """The one writer of stderr: `put` never blocks; a thread writes each line whole."""

    def __init__(self, fd: int = 2, size: int = QUEUED_LINES) -> None:
        self.fd = fd
        self.lines: queue.Queue[bytes | None] = queue.Queue(size)
        self.dropped = 0  # lines the full queue refused, not yet reported
        self.thread: threading.Thread | None = None
        self.start()
        # A pre-forked worker has the queue but not the thread: it starts its own.
        os.register_at_fork(after_in_child=self.start)

    def start(self) -> None:
        self.lines = queue.Queue(self.lines.maxsize)
        self.thread = threading.Thread(target=self._run, name="log-writer", daemon=True)
        self.thread.start()

    def put(self, line: bytes) -> None:
        try:
            self.lines.put_nowait(line)
        except queue.Full:
            self.dropped += 1

    def _run(self) -> None:
        while (line := self.lines.get()) is not None:
            if self.dropped:
                dropped, self.dropped = self.dropped, 0
                self._write(f"WARNING gpu-policy.logs: {dropped} log lines dropped: stderr too slow\n".encode())
            self._write(line)

    def _write(self, line: bytes) -> None:
        view = memoryview(line)
        while view:
            try:
                view = view[os.write(self.fd, view) :]
            except InterruptedError:
                continue
            except OSError:
                return  # stderr closed: nothing to tell anyone

    def close(self, timeout: float = EXIT_SECONDS) -> None:
        """Write out what is queued (at most `timeout` seconds), then stop the thread."""
        if self.thread is None or not self.thread.is_alive():
            return
        try:
            self.lines.put(None, timeout=timeout)
        except queue.Full:
            return
        self.thread.join(timeout)


class LineHandler(logging.Handler):
    """A logging handler whose lines go through the Writer (formatted by the caller, as before)."""

    def __init__(self, writer: Writer) -> None:
        super().__init__()
        self.writer = writer

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.writer.put((self.format(record) + "\n").encode("utf-8", "backslashreplace"))
        except Exception:
            self.handleError(record)


_writer: Writer | None = None


def writer() -> Writer:
    global _writer
    if _writer is None:
        _writer = Writer()
        atexit.register(_writer.close)
    return _writer


def setup(level: str, fmt: str) -> None:
    """Configure the root logger once: `fmt` is "json" or "text"."""
    global _json
    _json = fmt == "json"
    handler = LineHandler(writer())
    if _json:
        handler.setFormatter(
            JsonFormatter(
                "%(levelname)s %(name)s %(message)s",
                rename_fields={"levelname": "level", "name": "logger"},
                timestamp="time",
            )
        )
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())


def review(level: int, message: str, fields: dict[str, Any]) -> None:
    """One review's line: `fields` become top-level keys (JSON) or `extra` (text)."""
    if not REVIEW.isEnabledFor(level):
        return
    if not _json:
        REVIEW.log(level, message, extra=fields)
        return
    record = {
        "level": logging.getLevelName(level),
        "logger": REVIEW.name,
        "message": message,
        **fields,
        "time": datetime.now(UTC).isoformat(),
    }
    writer().put(dumps(record) + b"\n")
