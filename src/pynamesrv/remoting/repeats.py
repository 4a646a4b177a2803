"""Runs of one request repeated with other opaques: found, and answered, a block at a time.

A client polling a route sends the same JSON header again and again; only the ``opaque``
digits change. The server remembers the last header its fast path answered, split around
the opaque into ``prefix`` and ``suffix``, and ``take_repeats`` finds the frames at the
front of the buffer that are ``prefix + digits + suffix``. With many requests in flight a
read holds dozens of them, and frames whose opaques have as many digits are equally long,
so one precompiled ``struct`` format cuts a whole block into its opaques and what lies
between them in a single C call, and one tuple comparison checks every frame boundary at
once. The answers are joined the same way: no Python-level step per frame on either side.
"""

from __future__ import annotations

import re
import struct
from functools import lru_cache
from typing import Final, NamedTuple

_LENGTHS = struct.Struct(">iI")  # frame length word, serialize type << 24 | header length
_MAX_DIGITS: Final = 10  # an int32 opaque; ten digits only up to INT32_MAX_DIGITS
# Java's opaque is an int: the decoder refuses a larger one, so the fast paths leave it to it.
INT32_MAX_DIGITS: Final = b"2147483647"


class OpaqueRun(NamedTuple):
    """Consecutive frames repeating one request; ``opaques`` holds each one's digits."""

    size: int  # digits per opaque
    frame_len: int
    opaques: tuple[bytes, ...]

    def rewrite(self, head: bytes, tail: bytes) -> list[bytes]:
        """Each opaque between ``head`` and ``tail``: the parts of the answers, when those
        are an answer's bytes before and after its opaque."""
        parts = [head, b"", tail] * len(self.opaques)
        parts[1::3] = self.opaques
        return parts


@lru_cache(maxsize=2048)
def _cutter(lead_len: int, size: int, suffix_len: int, count: int) -> struct.Struct:
    """Cuts ``count`` frames into: the first lead, then per frame its opaque and what
    follows it up to the next opaque (suffix + lead), the last frame's suffix alone."""
    boundary = f"{size}s{suffix_len + lead_len}s" * (count - 1)
    return struct.Struct(f"{lead_len}s{boundary}{size}s{suffix_len}s")


def take_repeats(
    buf: bytes | bytearray, prefix: bytes, suffix: bytes
) -> tuple[list[OpaqueRun], int]:
    """The complete frames at the front of ``buf`` that are body-less JSON requests with
    header ``prefix``, 1 to 10 decimal digits without a leading zero, ``suffix``, and the
    bytes they take; the first frame that differs ends the scan."""
    runs: list[OpaqueRun] = []
    end = len(buf)
    fixed = len(prefix) + len(suffix)
    pos = 0
    while end - pos >= 8:
        length, word = _LENGTHS.unpack_from(buf, pos)
        size = length - 4 - fixed
        if word != length - 4 or not 0 < size <= _MAX_DIGITS:
            break  # another request (or a body, or not JSON)
        lead = _LENGTHS.pack(length, word) + prefix  # the length words are part of it
        if not buf.startswith(lead, pos):
            break  # another request of the same length: the usual miss, found at once
        frame_len = 4 + length
        count = (end - pos) // frame_len
        while count:  # the longest block of repeats from here: all that arrived, or half...
            parts = _cutter(len(lead), size, len(suffix), count).unpack_from(buf, pos)
            opaques = parts[1::2]
            digits = b"".join(opaques)
            if (
                parts[0] == lead
                and parts[2:-1:2] == (suffix + lead,) * (count - 1)
                and parts[-1] == suffix
                and digits.isdigit()
                and (size == 1 or 48 not in digits[::size])  # no leading zero
                and (size < _MAX_DIGITS or max(opaques) <= INT32_MAX_DIGITS)
            ):
                break
            count //= 2
        if not count:
            break
        runs.append(OpaqueRun(size, frame_len, opaques))
        pos += count * frame_len
    return runs, pos


# What a RocketMQ topic name may hold (TopicValidator: ^[%|a-zA-Z0-9_-]+$, at most 127
# characters): nothing JSON escapes, so a topic's bytes in a header are the name itself.
_NAME: Final = rb"[%|a-zA-Z0-9_-]{1,127}"
_DIGITS: Final = rb"0|[1-9][0-9]{0,9}"  # an opaque as the fast path accepts it
_NAME_ONLY: Final = re.compile(_NAME.decode(), re.ASCII)

# One frame of a family, as found: its two length words, the name, the opaque digits.
FamilyFrame = tuple[bytes, bytes, bytes]


class RequestFamily:
    """Requests that differ only in one name and their opaque: a client polling the routes
    of its topics, say. A header of the family is ``before + name + between + digits +
    after``.

    ``find`` cuts a whole read of such frames with two regular-expression calls: one finds
    how far the run of family frames reaches from the front, the other lists each frame's
    length words, name and digits. Each part matches in one way only (a name stops at the
    quote that ``between`` starts with, the digits at the non-digit that starts ``after``),
    so the two calls agree on the frames. The length words are not checked here: the caller
    compares them with what the header's length must be.
    """

    __slots__ = ("_fixed", "_frame", "_run", "after", "before", "between")

    def __init__(self, before: bytes, between: bytes, after: bytes) -> None:
        self.before, self.between, self.after = before, between, after
        self._fixed = 8 + len(before) + len(between) + len(after)
        before, between, after = re.escape(before), re.escape(between), re.escape(after)
        self._frame = re.compile(
            rb"(?s)(.{8})" + before + b"(" + _NAME + b")" + between + b"(" + _DIGITS + b")" + after
        )
        one = rb".{8}" + before + _NAME + between + b"(?:" + _DIGITS + b")" + after
        self._run = re.compile(rb"(?s)(?:" + one + b")+")

    @staticmethod
    def accepts(name: str) -> bool:
        """Whether a family can hold this name (a valid topic name)."""
        return _NAME_ONLY.fullmatch(name) is not None

    def find(self, buf: bytes | bytearray) -> tuple[list[FamilyFrame], int]:
        """The family frames at the front of ``buf`` and the bytes they take."""
        run = self._run.match(buf)
        if run is None:
            return [], 0
        return self._frame.findall(buf, 0, run.end()), run.end()

    def size(self, frames: list[FamilyFrame]) -> int:
        """The bytes these frames take."""
        return sum(self._fixed + len(name) + len(digits) for _, name, digits in frames)
