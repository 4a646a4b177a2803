"""The pid file of ``serve`` and what ``stop`` does with it (mqshutdown namesrv's job).

Java's mqshutdown finds the NameServer with ``ps | grep``; on a shared host that may stop
someone else's server, so pynamesrv keeps a pid file instead (``pidFile`` / ``--pid-file``):
written atomically when ``serve`` starts, removed when it exits, refused while another live
pynamesrv holds it. A file left by a kill -9 is recognised as stale and replaced.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Final

from pynamesrv.namesrv.filestore import atomic_write

POLL_INTERVAL_S: Final = 0.1


class PidFileError(Exception):
    """Why a pid file cannot be used or acted on; the message is one line for an operator."""


def read_pid(path: Path) -> int | None:
    """The pid in ``path``; None when there is no file. ``PidFileError`` when it holds junk."""
    try:
        text = path.read_text(encoding="ascii", errors="replace").strip()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise PidFileError(f"cannot read pid file {path}: {exc.strerror or exc}") from exc
    if not text.isdigit() or int(text) <= 0:
        raise PidFileError(f"pid file {path} does not hold a process id")
    return int(text)


GONE: Final = "gone"
PYNAMESRV: Final = "pynamesrv"
OTHER: Final = "other"


def process_state(pid: int) -> str:
    """``gone`` (no such process, or exited and not yet reaped), ``pynamesrv``, or ``other``:
    where ``/proc`` shows command lines, a reused pid running something else is not ours."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return GONE
    except PermissionError:
        pass  # alive, another user's: the command line decides
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return PYNAMESRV if not Path("/proc/self").exists() else GONE  # no procfs: trust kill
    except OSError:
        return PYNAMESRV
    if stat.rpartition(")")[2].split()[:1] == ["Z"]:
        return GONE
    return PYNAMESRV if b"pynamesrv" in cmdline else OTHER


def claim(path: Path) -> None:
    """Write this process's pid to ``path`` (atomically); ``PidFileError`` if a live
    pynamesrv already holds it."""
    holder = read_pid(path)
    if holder is not None and holder != os.getpid() and process_state(holder) == PYNAMESRV:
        raise PidFileError(f"pynamesrv already runs with pid {holder} (pid file {path})")
    try:
        atomic_write(path, f"{os.getpid()}\n".encode(), keep_backup=False)
    except OSError as exc:
        raise PidFileError(f"cannot write pid file {path}: {exc.strerror or exc}") from exc


def release(path: Path) -> None:
    """Remove ``path`` if it still names this process (another server may have taken it)."""
    with contextlib.suppress(PidFileError, OSError):
        if read_pid(path) == os.getpid():
            path.unlink()


def stop(path: Path, timeout_s: float) -> int:
    """SIGTERM the pynamesrv named in ``path`` and wait until it exits; returns its pid.

    ``PidFileError`` when nothing runs (no file, or a stale one, which is removed), when the
    pid is not a pynamesrv, or when it did not exit within ``timeout_s``.
    """
    pid = read_pid(path)
    if pid is None:
        raise PidFileError(f"no pynamesrv is running: no pid file at {path}")
    state = process_state(pid)
    if state == GONE:
        with contextlib.suppress(OSError):
            path.unlink()
        raise PidFileError(
            f"no pynamesrv is running: pid {pid} from {path} is gone (stale pid file removed)"
        )
    if state == OTHER:
        raise PidFileError(f"pid {pid} from {path} is not a pynamesrv process; not stopping it")
    waiter = _exit_waiter(pid)
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return pid  # it exited just now
    except PermissionError as exc:
        raise PidFileError(f"not allowed to stop pid {pid} (run as its user)") from exc
    if not waiter(timeout_s):
        raise PidFileError(f"pynamesrv (pid {pid}) did not stop within {timeout_s:g} s")
    return pid


def _exit_waiter(pid: int) -> Callable[[float], bool]:
    """A function that waits up to its argument for ``pid`` to exit, True when it did.

    Linux: a pidfd, readable once the process exits (an event, not a poll; it also sees an
    exited child that its parent has not reaped). Elsewhere: poll ``process_state``.
    """
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = None

    def wait_fd(timeout_s: float) -> bool:
        assert fd is not None
        try:
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            return bool(poller.poll(timeout_s * 1000))
        finally:
            os.close(fd)

    def wait_poll(timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while process_state(pid) != GONE:
            if time.monotonic() >= deadline:
                return False
            time.sleep(POLL_INTERVAL_S)
        return True

    return wait_poll if fd is None else wait_fd
