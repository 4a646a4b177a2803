"""Mutators of the body: another request's body, JSON bodies with one value broken, and
compressed REGISTER_BROKER bodies that lie or inflate far beyond their size.

Each keeps ``bodyCrc32`` true (mostly), so the body gets past the CRC check and reaches the
decoder, which is where an unbounded inflate or a recursive parse would hurt.
"""

from __future__ import annotations

import json
import random
import zlib
from typing import Any

from pynamesrv.simulate.fuzz import bombs
from pynamesrv.simulate.fuzz.corpus import Seed
from pynamesrv.simulate.fuzz.mutation import (
    BAD_UTF8,
    CONFUSED_VALUES,
    HUGE_NUMBERS,
    INTERESTING_BYTES,
    NEST_DEPTHS,
    REGISTER_BROKER,
    Context,
    Out,
    header_copy,
    json_frame,
    log_uniform,
    nest,
    same_type_frame,
    with_crc,
)
from pynamesrv.simulate.fuzz.wire import Raw, dump_json


def splice(rng: random.Random, seed: Seed, ctx: Context) -> Out:
    """This request's header with another request's body (CRC made to match, mostly)."""
    other = rng.choice(ctx.seeds)
    header = header_copy(seed)
    if rng.random() < 0.8:
        with_crc(header, other.body)
    return Out(same_type_frame(seed, header, other.body))


def body_mutation(rng: random.Random, seed: Seed, ctx: Context) -> Out:
    """A value inside a JSON body replaced by another type, a huge number, deep nesting or
    bad text; the CRC made to match so the body decoder sees it."""
    try:
        body = json.loads(seed.body) if seed.body else None
    except (ValueError, RecursionError):
        body = None
    header = header_copy(seed)
    if not isinstance(body, (dict, list)):
        data = bytearray(seed.body or b"{}")
        data[rng.randrange(len(data))] = rng.choice(INTERESTING_BYTES)
        new_body = bytes(data)
    else:
        slots = _slots(body)
        container, key = rng.choice(slots) if slots else (body, None)
        kind = rng.randrange(4)
        if kind == 0:
            value: Any = rng.choice(CONFUSED_VALUES)
        elif kind == 1:
            value = Raw(rng.choice(HUGE_NUMBERS))
        elif kind == 2:
            value = nest(rng, rng.choice(NEST_DEPTHS))
        else:
            value = Raw(json.dumps("\x01fuzz\x01"))
        if key is None:
            new_text = dump_json(value)
        else:
            container[key] = value
            new_text = dump_json(body)
        new_body = new_text.encode()
        if kind == 3:
            new_body = new_body.replace(b"\x01fuzz\x01", rng.choice(BAD_UTF8))
    if rng.random() < 0.9:
        with_crc(header, new_body)
    return Out(same_type_frame(seed, header, new_body))


def _slots(value: Any) -> list[tuple[Any, Any]]:
    """Every (container, key) pair inside a decoded JSON value, breadth first."""
    out: list[tuple[Any, Any]] = []
    queue = [value]
    while queue:
        current = queue.pop()
        items = current.items() if isinstance(current, dict) else enumerate(current)
        for key, child in items:
            out.append((current, key))
            if isinstance(child, (dict, list)):
                queue.append(child)
    return out


def _register_template(rng: random.Random, seed: Seed, ctx: Context) -> dict[str, Any]:
    """A REGISTER_BROKER header to carry a compressed body (this seed's if it is one)."""
    template = seed if seed.code == REGISTER_BROKER else rng.choice(ctx.register_seeds or [seed])
    header = header_copy(template)
    header["code"] = REGISTER_BROKER
    if not isinstance(header.get("extFields"), dict):
        header["extFields"] = {}
    header["extFields"]["compressed"] = "true"
    header["extFields"].setdefault("bodyCrc32", "0")
    header["version"] = max(int(header.get("version") or 0), 401)
    return header


def zlib_bomb(rng: random.Random, seed: Seed, ctx: Context) -> Out:
    """A compressed REGISTER_BROKER body that inflates to up to ``Limits.bomb_max`` of
    zeros (the inflate is the cost), or to up to ``Limits.flood_max`` of one topic line
    repeated (inflate, then parse a quarter of a million lines: a well-formed body)."""
    header = _register_template(rng, seed, ctx)
    inflated = 1 << rng.randint(20, max(20, ctx.limits.bomb_max.bit_length() - 1))
    if rng.random() < 0.6:
        body = bombs.zero_bomb(inflated)
    else:
        body = bombs.topic_flood(min(inflated, ctx.limits.flood_max))
    with_crc(header, body)
    return Out(json_frame(header, body))


def compressed_junk(rng: random.Random, seed: Seed, ctx: Context) -> Out:
    """``compressed=true`` with a body that is not what it claims: not zlib, a cut stream,
    lying chunk lengths and counts, bad topic lines, or a JSON body."""
    header = (
        header_copy(seed) if seed.code == REGISTER_BROKER else _register_template(rng, seed, ctx)
    )
    header.setdefault("extFields", {})["compressed"] = "true"
    kind = rng.randrange(6)
    version = b'{"counter":1,"timestamp":1}'
    if kind == 0:
        body = rng.randbytes(rng.randint(0, 512))
    elif kind == 1:
        whole = bombs.compressed_body(version, [b"FuzzTopic 8 8 6 SINGLE_TAG"])
        body = whole[: rng.randrange(len(whole))]
    elif kind == 2:
        lines = [rng.choice((b"T", b"T 1 1", b"T x y z w", b"T 99999999999999999999 1 6 S",
                             b"T -1 -1 -1 SINGLE_TAG", b"\xff\xfe 8 8 6 SINGLE_TAG",
                             b"T 8 8 6 SINGLE_TAG " + b"[" * 300))]  # fmt: skip
        body = bombs.compressed_body(rng.choice((version, b"", b"[]", b"{", b"1e999")), lines)
    elif kind == 3:
        inner = bytearray(zlib.decompress(bombs.compressed_body(version, [b"T 8 8 6 SINGLE_TAG"])))
        pos = rng.choice((0, len(version) + 4, len(inner) - 6))
        inner[pos : pos + 4] = rng.choice((0x7FFFFFFF, -1, -(1 << 31), 1 << 20)).to_bytes(
            4, "big", signed=True
        )
        body = zlib.compress(bytes(inner))
    elif kind == 4:
        body = seed.body or b'{"topicConfigSerializeWrapper":{}}'
    else:
        body = zlib.compress(seed.body or b"{}")
        header["extFields"]["compressed"] = rng.choice(("TRUE", "yes", "1", "", "false"))
    with_crc(header, body)
    return Out(json_frame(header, body))


def big_body(rng: random.Random, seed: Seed, ctx: Context) -> Out:
    """A body from 64 KiB up to the frame limit: JSON padded with whitespace, or junk."""
    room = ctx.limits.frame_room - 8 - len(seed.header_raw) - 64  # the CRC may grow the header
    size = min(log_uniform(rng, 64 * 1024, ctx.limits.big_body_max), room)
    header = header_copy(seed)
    if seed.body and rng.random() < 0.5:
        body = seed.body + b" " * max(0, size - len(seed.body))
    else:
        body = (rng.randbytes(4096) * (size // 4096 + 1))[:size]
    if rng.random() < 0.8:
        with_crc(header, body)
    return Out(same_type_frame(seed, header, body))


# name -> (weight, mutator). Weights make the cheap, varied mutators common and keep the
# heavy ones (bombs, 16 MiB bodies) at about one frame in a thousand.
