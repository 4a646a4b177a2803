"""How the process's file descriptors are shared between the two ports.

Every connection costs a descriptor, and the soft ``RLIMIT_NOFILE`` (often 1,024) caps them
all. When slow HTTP connections took every descriptor, the remoting port could accept no
broker or client at all (issue 24). The rule: HTTP connections may use at most a quarter of
the limit; remoting connections at most what is left after HTTP's quarter and a reserve of
``RESERVE`` (listening sockets, journal and log files, outgoing notifications, a burst of
connections accepted before they are refused). So a configured ``maxConnections`` or
``httpMaxConnections`` above its share is lowered to it, said once at start, and a connection
past it is refused and counted instead of failing silently in ``accept``.
"""

from __future__ import annotations

import resource
from typing import Final

HTTP_SHARE: Final = 4  # HTTP may use 1/HTTP_SHARE of the open-file limit
RESERVE: Final = 64


def open_file_limit() -> int | None:
    """The soft limit on open descriptors, or None when there is none."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft


def http_cap(configured: int, limit: int | None) -> int:
    """HTTP connections allowed: the configured cap, at most a quarter of ``limit``."""
    if limit is None:
        return configured
    return max(1, min(configured, limit // HTTP_SHARE))


def remoting_cap(configured: int, limit: int | None) -> int:
    """Remoting connections allowed: the configured cap, at most what HTTP's share and the
    reserve leave of ``limit``."""
    if limit is None:
        return configured
    return max(1, min(configured, limit - limit // HTTP_SHARE - RESERVE))
