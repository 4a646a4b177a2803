"""Crash-safe replacement of a small file: the one way the name server writes to disk.

Both persisted files (kvConfigPath and configStorePath) go through ``atomic_write`` so that a
kill -9 at any instant leaves either the previous or the new content, never a torn file.
Its own module because the KV store and the config registry share it.
"""

from __future__ import annotations

import os
from pathlib import Path


def atomic_write(path: Path, data: bytes, *, keep_backup: bool = True) -> None:
    """Write ``data`` to ``path`` atomically and durably.

    Plan: write ``<path>.tmp``, fsync it, keep the current file as ``<path>.bak`` (a hard
    link, so ``path`` itself never disappears), rename the temporary file over ``path``,
    then fsync the directory so the rename survives a power cut. When this returns, the new
    content is on disk.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)
    if keep_backup and path.exists():
        backup = path.with_name(path.name + ".bak")
        backup_tmp = path.with_name(path.name + ".bak.tmp")
        backup_tmp.unlink(missing_ok=True)
        os.link(path, backup_tmp)
        os.replace(backup_tmp, backup)
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def remove_leftovers(path: Path) -> list[Path]:
    """Delete the temporary files a kill -9 in the middle of ``atomic_write`` left beside
    ``path`` (the file itself is intact: the rename is atomic); returns what was removed."""
    removed = []
    for name in (path.name + ".tmp", path.name + ".bak.tmp"):
        leftover = path.with_name(name)
        try:
            leftover.unlink()
        except FileNotFoundError:
            continue
        removed.append(leftover)
    return removed


def read_bytes(path: Path) -> bytes | None:
    """The file's content, or None when it does not exist."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
