"""Failed ``accept`` calls of a listening socket, told to its server instead of the loop's log.

When the process runs out of file descriptors (EMFILE, ENFILE) or kernel memory, asyncio's
accept loop hands the error to the loop's exception handler, stops accepting for a second
and tries again: by default a traceback per second, with nothing counted. This module puts
one handler on the loop that gives such an error to the server whose socket failed (which
counts it and logs one line per interval); every other error goes where it went before.

uvloop does not report them at all: libuv closes the pending connections itself (its
"EMFILE trick"). The descriptor budget (``fdbudget``) is what keeps the remoting port out of
that state; ``pynamesrv_connections_refused`` and the ``process_open_fds`` metric show it.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from typing import Any, Final

ACCEPT_FAILED: Final = "socket.accept() out of system resource"  # asyncio's message

AcceptListener = Callable[[OSError], None]
ExceptionHandler = Callable[[asyncio.AbstractEventLoop, dict[str, Any]], object]

_WATCHERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Watcher] = (
    weakref.WeakKeyDictionary()
)


class _Watcher:
    """The loop's exception handler: accept errors of watched sockets to their listener."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.previous: ExceptionHandler | None = loop.get_exception_handler()
        self.listeners: dict[int, AcceptListener] = {}  # listening socket's fd -> listener
        loop.set_exception_handler(self)

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        exc, sock = context.get("exception"), context.get("socket")
        if context.get("message") == ACCEPT_FAILED and isinstance(exc, OSError):
            listener = self.listeners.get(sock.fileno()) if sock is not None else None
            if listener is not None:
                listener(exc)
                return
        if self.previous is not None:
            self.previous(loop, context)
        else:
            loop.default_exception_handler(context)


def watch_accept(fileno: int, listener: AcceptListener) -> Callable[[], None]:
    """Send accept errors of the listening socket ``fileno`` to ``listener`` (on the running
    loop); returns the function that stops it."""
    loop = asyncio.get_running_loop()
    watcher = _WATCHERS.get(loop)
    if watcher is None or loop.get_exception_handler() is not watcher:
        watcher = _WATCHERS[loop] = _Watcher(loop)
    watcher.listeners[fileno] = listener

    def unwatch() -> None:
        if watcher.listeners.get(fileno) is listener:
            del watcher.listeners[fileno]

    return unwatch
