"""The messages between the writer and a worker process (``serve --workers``), sans-IO.

One local stream socket per worker (a socketpair made by the writer). A message is a
4-byte length, a 1-byte kind and its payload. The writer sends, in order: the worker's
settings, the image, then every batch of the stream, and the replies to forwarded
requests; the order matters: a reply follows the batches of the events its request caused,
so a worker that answers a reply has already applied them (a client reads its own write).

Payloads are JSON (orjson) but for the frames a request or answer travels in, and the
batches and image, which are bytes already (``replication``); a reply or request is a
small JSON head, a NUL, and the frame.
"""

from __future__ import annotations

import struct
from typing import Any, Final

import orjson

# writer -> worker
HELLO: Final = 1  # {"index", "config": {key: value}}
IMAGE: Final = 2  # replication image bytes
BATCH: Final = 3  # 8-byte monotonic ns when published, then the batch bytes
REPLY: Final = 4  # {"id", "position"} NUL answer frame (empty: no answer)
CLOSE_CHANNEL: Final = 5  # {"channel"}: the writer closes that connection (expiry)
GO_AWAY: Final = 6  # a graceful shutdown started: answer GO_AWAY as the writer does
# worker -> writer
READY: Final = 20  # {"position"}: caught up and accepting
REQUEST: Final = 21  # {"id", "channel", "peer", "proxied_by", "tls"} NUL request frame
CHANNEL_CLOSED: Final = 22  # {"channel", "reason"}
STATS: Final = 23  # {"position", ...counters}: the worker's figures, every second

_HEAD: Final = struct.Struct(">IB")
_NS: Final = struct.Struct(">Q")
MAX_MESSAGE: Final = 1 << 31  # an image of millions of topics; a length past it is a bug


class LinkError(ValueError):
    """Bytes on the link that are no message: the other side is not ours, or broke."""


def message(kind: int, payload: bytes) -> bytes:
    return _HEAD.pack(len(payload) + 1, kind) + payload


def json_message(kind: int, obj: Any) -> bytes:
    return message(kind, orjson.dumps(obj))


def framed_message(kind: int, head: dict[str, Any], frame: bytes) -> bytes:
    """A JSON head and a remoting frame (a forwarded request, a reply)."""
    return message(kind, orjson.dumps(head) + b"\x00" + frame)


def split_framed(payload: bytes) -> tuple[dict[str, Any], bytes]:
    head, _, frame = payload.partition(b"\x00")
    return orjson.loads(head), frame


def batch_message(published_ns: int, batch: bytes) -> bytes:
    return message(BATCH, _NS.pack(published_ns) + batch)


def split_batch(payload: bytes) -> tuple[int, bytes]:
    return _NS.unpack_from(payload)[0], payload[_NS.size :]


class LinkDecoder:
    """Bytes in, ``(kind, payload)`` messages out."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        buffer = self._buffer
        buffer += data
        out = []
        start = 0
        while len(buffer) - start >= _HEAD.size:
            length, kind = _HEAD.unpack_from(buffer, start)
            if not 1 <= length <= MAX_MESSAGE:
                raise LinkError(f"message length {length}")
            end = start + 4 + length
            if len(buffer) < end:
                break
            out.append((kind, bytes(buffer[start + _HEAD.size : end])))
            start = end
        if start:
            del buffer[:start]
        return out
