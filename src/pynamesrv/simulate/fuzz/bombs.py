"""Compressed REGISTER_BROKER bodies that inflate to far more than they weigh.

A broker with ``compressedRegister=true`` sends its topic table as one zlib stream; a server
that inflates it in one call holds the whole result at once. These bodies are built without
compressing the inflated size: deflate output after a full flush depends only on the input
that follows, so one compressed chunk repeated n times, closed by an empty final block and
the Adler-32 of the n chunks, is a valid stream of n chunks. A 256 MiB bomb costs 0.1 s and
260 KB to build instead of seconds of ``zlib.compress``.
"""

from __future__ import annotations

import struct
import zlib
from functools import lru_cache
from typing import Final

CHUNK: Final = 1 << 20
_INT32 = struct.Struct(">i")
_EMPTY_FINAL_BLOCK: Final = b"\x03\x00"

# The topic line a repeated-topic bomb repeats (TopicConfig.encode: name read write perm type).
FLOOD_LINE: Final = b"FuzzFloodTopic 8 8 6 SINGLE_TAG"


def repeated_stream(chunk: bytes, count: int) -> bytes:
    """A zlib stream that inflates to ``chunk * count``."""
    if count < 1:
        return zlib.compress(b"")
    deflate = zlib.compressobj(9)
    first = deflate.compress(chunk) + deflate.flush(zlib.Z_FULL_FLUSH)
    repeat = deflate.compress(chunk) + deflate.flush(zlib.Z_FULL_FLUSH)
    adler = 1
    for _ in range(count):
        adler = zlib.adler32(chunk, adler)
    return first + repeat * (count - 1) + _EMPTY_FINAL_BLOCK + adler.to_bytes(4, "big")


@lru_cache(maxsize=32)
def zero_bomb(inflated: int) -> bytes:
    """Zeros: the inflate itself is the cost (the decoder fails right after)."""
    return repeated_stream(b"\0" * CHUNK, max(1, inflated // CHUNK))


@lru_cache(maxsize=32)
def topic_flood(inflated: int) -> bytes:
    """A well-formed compressed body whose topic table repeats one topic line until the
    body inflates to about ``inflated`` bytes: inflate and then parse every line."""
    entry = _INT32.pack(len(FLOOD_LINE)) + FLOOD_LINE
    per_chunk = (CHUNK - 64) // len(entry)  # the head and the tail fit in what is left
    chunks = max(1, inflated // CHUNK)
    count = per_chunk * chunks
    head = _chunk(b'{"counter":1,"timestamp":1}') + _INT32.pack(count)
    tail = _chunk(b"[]")
    deflate = zlib.compressobj(9)
    # head, then the repeated part, then the tail: three full-flushed parts of one stream.
    prefix = deflate.compress(head) + deflate.flush(zlib.Z_FULL_FLUSH)
    body = entry * per_chunk
    first = deflate.compress(body) + deflate.flush(zlib.Z_FULL_FLUSH)
    repeat = deflate.compress(body) + deflate.flush(zlib.Z_FULL_FLUSH)
    adler = zlib.adler32(head)
    for _ in range(chunks):
        adler = zlib.adler32(body, adler)
    adler = zlib.adler32(tail, adler)
    closing = zlib.compressobj(9, zlib.DEFLATED, -15)  # raw deflate: no second header
    suffix = closing.compress(tail) + closing.flush(zlib.Z_FINISH)
    return prefix + first + repeat * (chunks - 1) + suffix + adler.to_bytes(4, "big")


def compressed_body(data_version: bytes, lines: list[bytes], servers: bytes = b"[]") -> bytes:
    """The compact form a broker sends with ``compressed=true``, from raw parts (the parts
    may lie: a line may be bad UTF-8, the data version not JSON)."""
    parts = [_chunk(data_version), _INT32.pack(len(lines))]
    parts.extend(_chunk(line) for line in lines)
    parts.append(_chunk(servers))
    return zlib.compress(b"".join(parts), 6)


def _chunk(data: bytes) -> bytes:
    return _INT32.pack(len(data)) + data
