"""Crash-safe replacement of a small file: the one way the name server writes to disk.

Both persisted files (kvConfigPath and configStorePath) go through ``atomic_write`` so that a
kill -9 at any instant leaves either the previous or the new content, never a torn file.
Its own module because the KV store and the config registry share it.

Each file has one owner: ``lock_beside`` takes an exclusive ``flock`` on ``<file>.lock``,
held while the server runs, so a second server configured with the same file is refused
instead of sharing it (and deleting its temporary files as leftovers). A start that is
refused after it took locks removes the lock files and directories it created (``discard``).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from dataclasses import dataclass
from pathlib import Path


class FileInUse(OSError):
    """Another process holds the lock of a state file."""

    def __init__(self, path: Path, holder: str) -> None:
        super().__init__(f"{path} is in use by another process{holder}")
        self.path, self.holder = path, holder


@dataclass(slots=True)
class FileLock:
    """A lock of ``lock_beside``: the descriptor holding it, and what taking it created (the
    lock file, directories), which ``discard`` removes again."""

    fd: int
    path: Path  # the lock file
    created_file: bool
    created_dirs: list[Path]  # outermost first


def make_dirs(directory: Path) -> list[Path]:
    """``mkdir -p``, returning the directories it created, outermost first."""
    missing = []
    for candidate in (directory, *directory.parents):
        if candidate.exists():
            break
        missing.append(candidate)
    created = []
    try:
        for candidate in reversed(missing):
            try:
                candidate.mkdir()
            except FileExistsError:
                if not candidate.is_dir():
                    raise
                continue
            created.append(candidate)
    except BaseException:
        _remove_dirs(created)
        raise
    return created


def _remove_dirs(created: list[Path]) -> None:
    for directory in reversed(created):
        with contextlib.suppress(OSError):  # not empty: someone else put something there
            directory.rmdir()


def lock_beside(path: Path) -> FileLock:
    """Lock ``path`` for this process: an exclusive, non-blocking ``flock`` on
    ``<path>.lock`` (created, with the directory, if missing). The lock holds until
    ``unlock`` or the process ends (kill -9 included: the kernel releases it). Raises
    ``FileInUse`` naming the holder's pid when another process has it, ``OSError`` when the
    lock file cannot be created.

    A lock file is deleted only by ``discard`` (a refused start removing what it created),
    while its lock is held; whoever opened it before that finds, once it has the lock, that
    the name no longer leads to the file it locked, and tries again. So no two processes
    ever hold locks on different files of the same name."""
    created_dirs = make_dirs(path.parent)
    lock = path.with_name(path.name + ".lock")
    try:
        while True:
            fd, created = _open_lock_file(lock)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pid = ""
                with contextlib.suppress(OSError):
                    pid = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
                os.close(fd)
                raise FileInUse(path, f" (pid {pid})" if pid.isdigit() else "") from None
            except BaseException:
                os.close(fd)
                raise
            if _same_file(fd, lock):
                break
            os.close(fd)  # deleted (or replaced) while we took it: not the lock any more
    except BaseException:
        _remove_dirs(created_dirs)
        raise
    with contextlib.suppress(OSError):  # who holds it, for the refusal of the next one
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return FileLock(fd, lock, created, created_dirs)


def _open_lock_file(lock: Path) -> tuple[int, bool]:
    """Open the lock file, creating it when missing; whether this call created it."""
    while True:
        try:
            return os.open(lock, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644), True
        except FileExistsError:
            pass
        try:
            return os.open(lock, os.O_RDWR | os.O_CLOEXEC), False
        except FileNotFoundError:
            continue  # discarded between the two calls


def _same_file(fd: int, path: Path) -> bool:
    try:
        on_disk = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (held.st_dev, held.st_ino) == (on_disk.st_dev, on_disk.st_ino)


def unlock(lock: FileLock) -> None:
    """Release a lock of ``lock_beside`` (the lock file stays)."""
    os.close(lock.fd)


def discard(lock: FileLock) -> None:
    """Release a lock and remove what taking it created: a start that was refused leaves
    nothing behind. The file goes while the lock is still held (see ``lock_beside``)."""
    if lock.created_file:
        with contextlib.suppress(OSError):
            lock.path.unlink()
    os.close(lock.fd)
    _remove_dirs(lock.created_dirs)


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
    ``path`` (the file itself is intact: the rename is atomic); returns what was removed.
    Only the owner may call it: the process holding ``lock_beside(path)``."""
    removed = []
    for name in (path.name + ".tmp", path.name + ".bak.tmp"):
        leftover = path.with_name(name)
        try:
            leftover.unlink()
        except FileNotFoundError:
            continue
        removed.append(leftover)
    return removed


def path_problem(path: Path, exc: OSError) -> str:
    """Why ``path`` (a file to create) failed, in the words an operator needs: "… is not a
    directory" naming the file that stands where a parent directory should be (mkdir says
    only "file exists"), else the system's words for the error."""
    if isinstance(exc, (FileExistsError, NotADirectoryError)):
        for ancestor in reversed(path.absolute().parents):
            if ancestor.exists() and not ancestor.is_dir():
                return f"{ancestor} is not a directory"
    if exc.errno:
        return os.strerror(exc.errno).lower()
    return (exc.strerror or str(exc)).lower()


def read_bytes(path: Path) -> bytes | None:
    """The file's content, or None when it does not exist."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
