"""Mutators of the framing: the length words, the serialize byte, and where the bytes end.

Most of these frames make the server close the connection (Java does the same); what they
test is that the close is clean and costs nothing, and that a frame that never completes
does not hold the server.
"""

from __future__ import annotations

import random

from pynamesrv.simulate.fuzz.corpus import Seed
from pynamesrv.simulate.fuzz.mutation import INTERESTING_BYTES, Context, Out
from pynamesrv.simulate.fuzz.wire import SERIALIZE_JSON, SERIALIZE_ROCKETMQ, frame


def bit_flip(rng: random.Random, seed: Seed, ctx: Context) -> Out:
    """Flip 1-8 random bits anywhere, length words included."""
    data = bytearray(seed.raw)
    for _ in range(rng.randint(1, 8)):
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    return Out(bytes(data))


def byte_set(rng: random.Random, seed: Seed, ctx: Context) -> Out:
    """Overwrite 1-4 bytes with values that matter to parsers (quotes, braces, 0x00, 0xFF)."""
    data = bytearray(seed.raw)
    for _ in range(rng.randint(1, 4)):
        data[rng.randrange(len(data))] = rng.choice(INTERESTING_BYTES)
    return Out(bytes(data))


def truncate(rng: random.Random, seed: Seed, ctx: Context) -> Out:
    """Send only a prefix: the length word promises bytes that never come."""
    return Out(seed.raw[: rng.randrange(1, len(seed.raw))])


def truncate_inside(rng: random.Random, seed: Seed, ctx: Context) -> Out:
    """Cut the header or the body but keep the length words true: framing holds, the
    content ends early."""
    if seed.body and rng.random() < 0.4:
        return Out(
            frame(seed.serialize, seed.header_raw, seed.body[: rng.randrange(len(seed.body))])
        )
    cut = seed.header_raw[: rng.randrange(len(seed.header_raw))]
    return Out(frame(seed.serialize, cut, seed.body))


def frame_length(rng: random.Random, seed: Seed, ctx: Context) -> Out:
    """A length word that lies: too short, too long, at and past the limit, negative."""
    true_length = len(seed.raw) - 4
    room = ctx.limits.frame_room
    candidates = (
        0, 1, 3, 4, 7, true_length - 1, true_length + 1, true_length + rng.randint(2, 4096),
        rng.randint(4, max(4, true_length - 1)), room - 4, room - 3, room, 0x7FFFFFFF, -1,
        -(1 << 31),
    )  # fmt: skip
    lie = _untrue(rng, true_length, 0xFFFFFFFF, candidates)
    return Out((lie & 0xFFFFFFFF).to_bytes(4, "big") + seed.raw[4:])


def header_length(rng: random.Random, seed: Seed, ctx: Context) -> Out:
    """A header-length word that lies (the serialize byte kept)."""
    true_header = len(seed.header_raw)
    frame_rest = len(seed.raw) - 8
    candidates = (
        0, 1, true_header - 1, true_header + 1, frame_rest, frame_rest + 1, 0xFFFFFF,
        rng.randrange(0x1000000),
    )  # fmt: skip
    lie = _untrue(rng, true_header, 0xFFFFFF, candidates)
    word = (seed.serialize << 24) | (lie & 0xFFFFFF)
    return Out(seed.raw[:4] + word.to_bytes(4, "big") + seed.raw[8:])


def serialize_type(rng: random.Random, seed: Seed, ctx: Context) -> Out:
    """The other serialize type (JSON read as binary and back) or one that does not exist."""
    other = SERIALIZE_ROCKETMQ if seed.serialize == SERIALIZE_JSON else SERIALIZE_JSON
    kind = _untrue(
        rng, seed.serialize, 0xFF, (other, other, 2, 3, 0x7F, 0x80, 0xFF, rng.randrange(256))
    )
    return Out(seed.raw[:4] + bytes((kind,)) + seed.raw[5:])


def _untrue(rng: random.Random, truth: int, mask: int, candidates: tuple[int, ...]) -> int:
    """One of ``candidates`` that differs from ``truth`` in the field's width (``mask``)."""
    lies = [c & mask for c in candidates if c & mask != truth & mask]
    return rng.choice(lies)
