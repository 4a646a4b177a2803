"""Where ``pynamesrv serve`` logs, and in what shape: standard error, or a rotated file.

Why a module of its own: the server only calls ``logging``; how records leave the process is
the command's business (``logFile``, ``logMaxBytes``, ``logBackups``, ``logFormat``,
``logLevel`` in the key table, or the matching ``serve`` flags).

A log file is written by a thread of its own (``QueueHandler`` -> ``QueueListener``, as
Java's AsyncAppender): the event loop only formats the line and appends it to a queue, so a
slow disk or a rotation (which gzip-compresses the closed file, like Java's
``otherdays/namesrv.N.log.gz``) never stalls route answers. Records are formatted on the
caller's side, so a line shows the state at the moment it was logged.
"""

from __future__ import annotations

import atexit
import gzip
import logging
import logging.handlers
import os
import queue
import shutil
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import orjson

DEFAULT_LOG_FILE: Final = "default"  # the logFile value that means Java's place
TEXT_FORMAT: Final = "%(asctime)s %(levelname)-5s %(name)s - %(message)s"
# LogRecord attributes that are not "extra" fields (``extra={...}`` adds the others).
_STANDARD_ATTRS: Final = frozenset(
    set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}
)


def java_log_file() -> Path:
    """``~/logs/rocketmqlogs/namesrv.log``: where mqnamesrv logs."""
    return Path.home() / "logs" / "rocketmqlogs" / "namesrv.log"


def resolve_log_file(value: str) -> Path | None:
    """The file ``logFile`` names: None for standard error, Java's place for ``default``."""
    if not value:
        return None
    if value == DEFAULT_LOG_FILE:
        return java_log_file()
    return Path(value).expanduser()


def iso_utc(created: float) -> str:
    """``2026-11-23T07:02:44.123Z``: UTC, milliseconds, no offset arithmetic for readers."""
    stamp = datetime.fromtimestamp(created, UTC)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts``, ``level``, ``logger``, ``message``, the fields
    passed with ``extra=``, and ``exception`` (the traceback text) when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": iso_utc(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD_ATTRS and key not in entry:
                entry[key] = value
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        if record.stack_info:
            entry["stack"] = self.formatStack(record.stack_info)
        return orjson.dumps(entry, default=str).decode()


class _Preformatted(logging.handlers.QueueHandler):
    """Formats on the logging side, hands the finished line to the writer thread."""

    def prepare(self, record: logging.LogRecord) -> logging.LogRecord:
        line = self.format(record)
        copy = logging.makeLogRecord({"msg": line, "levelno": record.levelno})
        return copy


def _gzip_rotator(source: str, dest: str) -> None:
    """Compress the closed log file (Java keeps its old logs as ``.log.gz`` too)."""
    with open(source, "rb") as plain, gzip.open(dest, "wb", compresslevel=6) as packed:
        shutil.copyfileobj(plain, packed, 1 << 20)
    os.remove(source)


def _gz_name(default_name: str) -> str:
    return default_name + ".gz"


def file_handler(path: Path, max_bytes: int, backups: int) -> logging.Handler:
    """A size-rotated file (``namesrv.log``, ``namesrv.log.1.gz``, ...); ``OSError`` when
    the file cannot be opened."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.handlers.RotatingFileHandler(
        path, maxBytes=max_bytes, backupCount=backups, encoding="utf-8"
    )
    handler.rotator = _gzip_rotator
    handler.namer = _gz_name
    handler.setFormatter(logging.Formatter("%(message)s"))
    return handler


def configure(
    *,
    log_file: str,
    max_bytes: int,
    backups: int,
    log_format: str,
    level: str,
) -> Path | None:
    """Set up the root logger; returns the log file in use (None: standard error)."""
    formatter: logging.Formatter = (
        JsonFormatter() if log_format == "json" else logging.Formatter(TEXT_FORMAT)
    )
    path = resolve_log_file(log_file)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    handler: logging.Handler
    if path is None:
        handler = logging.StreamHandler(sys.stderr)
    else:
        writer = file_handler(path, max_bytes, backups)
        records: queue.SimpleQueue[logging.LogRecord] = queue.SimpleQueue()
        handler = _Preformatted(records)
        listener = logging.handlers.QueueListener(records, writer)
        listener.start()
        atexit.register(_stop_listener, listener, writer)
    handler.setFormatter(formatter)
    root.addHandler(handler)
    root.setLevel(level.upper())
    return path


def _stop_listener(listener: logging.handlers.QueueListener, writer: logging.Handler) -> None:
    """At exit: write what is queued, then close the file."""
    listener.stop()
    writer.close()
