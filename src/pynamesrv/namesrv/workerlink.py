"""The messages between the writer and a worker process (``serve --workers``), sans-IO.

One local stream socket per worker (a socketpair made by the writer). A message is a
4-byte length, a 1-byte kind and its payload. The writer sends, in order: the worker's
settings, the image, then every batch of the stream, and the replies to forwarded
requests; the order matters: a reply follows the batches of the events its request caused,
so a worker that answers a reply has already applied them (a client reads its own write).

Payloads are JSON (orjson) but for the frames a request or answer travels in, and the
batches and image, which are bytes already (``replication``); a reply or request is a
small JSON head, a NUL, and the frame.

A message is written as the list of its parts (``parts_message``) and read back with one
copy of its payload, a batch as a view of that copy: a 100,000-topic registration (15 MB)
is forwarded with the body the worker received, not copied into a re-encoded frame, a head
and a message on the way, and its body travels as a message of its own (``request_parts``),
read back as the very bytes the writer decodes (each copy of a block that size maps and
faults in fresh pages).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
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
BODY: Final = 24  # the body of the REQUEST just before it, when large (``request_parts``)
CHANNEL_CLOSED: Final = 22  # {"channel", "reason"}
STATS: Final = 23  # {"position", ...counters}: the worker's figures, every second

SEPARATE_BODY_MIN: Final = 64 * 1024
_HEAD: Final = struct.Struct(">IB")
_NS: Final = struct.Struct(">Q")
MAX_MESSAGE: Final = 1 << 31  # an image of millions of topics; a length past it is a bug


class LinkError(ValueError):
    """Bytes on the link that are no message: the other side is not ours, or broke."""


def message(kind: int, payload: bytes) -> bytes:
    return _HEAD.pack(len(payload) + 1, kind) + payload


def parts_message(kind: int, parts: Sequence[bytes]) -> list[bytes]:
    """A message whose payload is ``parts`` in turn, to be written as they are
    (``writelines``), none of them copied into the message."""
    return [_HEAD.pack(sum(map(len, parts)) + 1, kind), *parts]


def json_message(kind: int, obj: Any) -> bytes:
    return message(kind, orjson.dumps(obj))


def framed_message(kind: int, head: dict[str, Any], frame: bytes) -> bytes:
    """A JSON head and a remoting frame (a forwarded request, a reply)."""
    return message(kind, orjson.dumps(head) + b"\x00" + frame)


def framed_parts(kind: int, head: dict[str, Any], frame: Sequence[bytes]) -> list[bytes]:
    """``framed_message`` of a frame given as its parts (a request's head, its body)."""
    return parts_message(kind, [orjson.dumps(head) + b"\x00", *frame])


def request_parts(head: dict[str, Any], frame_head: bytes, body: bytes) -> list[bytes]:
    """A forwarded request: ``head``, then its frame; a large body (``SEPARATE_BODY_MIN``)
    follows in a BODY message of its own, so that the writer reads it as the bytes object
    it decodes (a body in the REQUEST's payload is copied out of it: 8 ms for 15 MB, most of
    it faulting in fresh pages). ``head["body"]`` then says so, and the frame has no body."""
    if len(body) < SEPARATE_BODY_MIN:
        return framed_parts(REQUEST, head, (frame_head, body))
    return [
        *framed_parts(REQUEST, {**head, "body": True}, (frame_head,)),
        *parts_message(BODY, (body,)),
    ]


def split_framed(payload: bytes) -> tuple[dict[str, Any], bytes]:
    head, _, frame = payload.partition(b"\x00")
    return orjson.loads(head), frame


def split_framed_view(payload: bytes) -> tuple[dict[str, Any], memoryview]:
    """``split_framed`` with the frame as a view of ``payload`` (a forwarded request: its
    body is copied once, out of the view, by the frame's decoder)."""
    end = payload.index(0)
    return orjson.loads(payload[:end]), memoryview(payload)[end + 1 :]


def ack(position: int) -> bytes:
    """A worker's acknowledgement that it applied the batch at ``position`` (on a socket of
    their own, which the writer reads only while it waits: ``WorkerLink.hand_over``)."""
    return _NS.pack(position)


def ack_positions(data: bytes) -> list[int]:
    """The positions in acknowledgements read at once (whole ones: 8 bytes each, written
    one at a time)."""
    return [position for (position,) in _NS.iter_unpack(data[: len(data) - len(data) % 8])]


def batch_message(published_ns: int, batch: bytes) -> list[bytes]:
    return parts_message(BATCH, (_NS.pack(published_ns), batch))


def split_batch(payload: bytes) -> tuple[int, memoryview]:
    return _NS.unpack_from(payload)[0], memoryview(payload)[_NS.size :]


class LinkDecoder:
    """Bytes in, ``(kind, payload)`` messages out."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        """The messages ``data`` completes, each payload copied once (out of ``data`` when
        nothing was buffered, else out of the buffer); what follows them is kept."""
        buffer = self._buffer
        if buffer:
            buffer += data
            source: bytes | bytearray = buffer
        else:
            source = data
        out = []
        start = 0
        size = len(source)
        with memoryview(source) as view:
            while size - start >= _HEAD.size:
                length, kind = _HEAD.unpack_from(view, start)
                if not 1 <= length <= MAX_MESSAGE:
                    raise LinkError(f"message length {length}")
                end = start + 4 + length
                if size < end:
                    break
                out.append((kind, bytes(view[start + _HEAD.size : end])))
                start = end
            if source is not buffer and start < size:
                buffer += view[start:]
        if source is buffer and start:
            del buffer[:start]
        return out
