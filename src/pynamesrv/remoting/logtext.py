"""Peer-supplied text made fit for one log line.

Broker and cluster names, topics, addresses and KV keys come from whoever reaches the port:
logged raw, a name with a newline forges a second log line, and a megabyte name makes a
megabyte line. Every such value passes ``shown`` on its way into a log line or a remark:
the one helper for it (connection peers too, which a PROXY header names, and exception
texts that may quote what a peer sent).
"""

from __future__ import annotations

from typing import Final

SHOWN_MAX: Final = 64  # an access key, an address: enough to tell them apart
NAME_MAX: Final = 255  # a broker, cluster or topic name: as long as registration allows


def shown(text: object, limit: int = SHOWN_MAX) -> str:
    """A peer-supplied value fit for one log line or remark: escaped, truncated; a field
    the peer left out is ``-``, not Python's ``None``."""
    value = "-" if text is None else str(text)
    if value.isprintable() and len(value) <= limit:
        return value
    escaped = value[:limit].encode("unicode_escape").decode("ascii")
    return escaped + ("..." if len(value) > limit else "")


def name(text: object) -> str:
    """``shown`` for a name (broker, cluster, topic, KV key), up to ``NAME_MAX``."""
    return shown(text, NAME_MAX)
