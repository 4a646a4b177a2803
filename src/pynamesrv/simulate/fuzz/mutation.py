"""What every mutator shares: the value tables, the limits, the seed context, and the
helpers that rebuild a frame after a change.

The tables are the point: numbers no 64-bit field holds, byte sequences that are not UTF-8,
nesting depths around the limits of common JSON libraries (255/256 in encoders, 1,024 in
decoders, Python's recursion limit near 1,000), and values of every JSON type.
"""

from __future__ import annotations

import random
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, NamedTuple

from pynamesrv.simulate.fuzz.corpus import Seed
from pynamesrv.simulate.fuzz.wire import (
    SERIALIZE_JSON,
    SERIALIZE_ROCKETMQ,
    Raw,
    dump_json,
    frame,
    rocketmq_header,
)

MIB: Final = 1 << 20
DEFAULT_MAX_FRAME_LENGTH: Final = 16 * MIB
REGISTER_BROKER: Final = 103

# Opaques of mutants that must never be answered (oneway requests, stray responses): a
# range no seed and no other mutator uses, so an answer carrying one is unambiguous.
SILENT_OPAQUE_BASE: Final = 0x6F000000

# Request codes a name server knows, codes other RocketMQ servers know, and edge values.
CODES: Final = (
    0, 10, 11, 34, 38, 47, 100, 101, 102, 103, 104, 105, 106, 205, 206, 216, 217, 219, 224,
    304, 311, 312, 313, 318, 319, 322, 327, 901, 904, 905, 9999, -1, 32767, -32768,
)  # fmt: skip

# Numbers a 64-bit (or 32-bit) decoder cannot hold, and texts that only look like numbers.
HUGE_NUMBERS: Final = (
    "1e30", "-1e19", "1e308", "1e999", "-1e999", "9223372036854775807", "9223372036854775808",
    "-9223372036854775809", "18446744073709551615", "18446744073709551616",
    "340282366920938463463374607431768211456", "2147483648", "-2147483649", "4294967296",
    "1.5", "-0", "0.0", "1E+2", "123456789012345678901234567890123456789",
)  # fmt: skip
NUMBER_LIKE_TEXTS: Final = (
    "NaN", "Infinity", "-Infinity", "0x10", " 1 ", "1_000", "+1", "1e3", "١٢٣", "",
    "99999999999999999999", "-9223372036854775809",
)  # fmt: skip

# Byte sequences that are not UTF-8, and JSON escapes of lone surrogates.
BAD_UTF8: Final = (
    b"\xff", b"\xfe\xff", b"\x80", b"\xc3\x28", b"\xa0\xa1", b"\xe2\x28\xa1", b"\xf0\x28\x8c\xbc",
    b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xf8\x88\x80\x80\x80", b"\xe2\x82",
)  # fmt: skip
BAD_ESCAPES: Final = ("\\ud800", "\\udfff", "\\ud800\\u0041", "\\udc00\\ud800", "\\u0000")

NEST_DEPTHS: Final = (64, 200, 254, 255, 256, 257, 300, 500, 1000, 1023, 1024, 1025, 5000)
HEADER_MEMBERS: Final = ("code", "opaque", "flag", "version")
CONFUSED_VALUES: Final = (
    Raw('"105"'), Raw('"abc"'), Raw('""'), Raw("0"), Raw("-1"), Raw("1.5"), Raw("true"),
    Raw("false"), Raw("null"), Raw("{}"), Raw("[]"), Raw('{"a":1}'), Raw('[1,"2"]'),
)  # fmt: skip
INTERESTING_BYTES: Final = (0x00, 0xFF, 0x7F, 0x80, 0x22, 0x5C, 0x7B, 0x7D, 0x5B, 0x2C, 0x3A)


class Out(NamedTuple):
    """What a mutator made: the bytes, and the opaque of a request that must get no answer."""

    data: bytes
    silent_opaque: int | None = None


@dataclass(frozen=True, slots=True)
class Mutant:
    """Frame ``index`` of a run: its bytes and how they were made (for the failure report)."""

    index: int
    mutator: str
    seed_label: str
    data: bytes
    silent_opaque: int | None = None


@dataclass(frozen=True, slots=True)
class Limits:
    """Sizes the heavy mutators stay under (the frame limit is the server's)."""

    max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH
    bomb_max: int = 256 * MIB  # inflated bytes of a compressed-body bomb of zeros
    # inflated bytes of a well-formed compressed body repeating one topic line: parsing it
    # costs a Java-like server ~4 s and ~1 GiB per 128 MiB, so it stays small by default
    flood_max: int = 8 * MIB
    big_body_max: int = DEFAULT_MAX_FRAME_LENGTH - 64 * 1024

    @property
    def frame_room(self) -> int:
        """The largest frame (length word included) the server accepts."""
        return self.max_frame_length - 4


class Context:
    """What a mutator may use besides its seed: the other seeds and the limits."""

    def __init__(self, seeds: list[Seed], limits: Limits) -> None:
        self.seeds = seeds
        self.limits = limits
        self.register_seeds = [s for s in seeds if s.code == REGISTER_BROKER]


Mutator = Callable[[random.Random, Seed, Context], Out]


def header_copy(seed: Seed) -> dict[str, Any]:
    """A copy of the seed's header that a mutator may change (extFields copied too)."""
    header = dict(seed.header)
    if isinstance(header.get("extFields"), dict):
        header["extFields"] = dict(header["extFields"])
    return header


def json_frame(header: dict[str, Any], body: bytes) -> bytes:
    return frame(SERIALIZE_JSON, dump_json(header).encode(), body)


def same_type_frame(seed: Seed, header: dict[str, Any], body: bytes) -> bytes:
    """Re-encode in the seed's own serialize type (ROCKETMQ only holds in-range values)."""
    if seed.serialize == SERIALIZE_ROCKETMQ:
        return frame(SERIALIZE_ROCKETMQ, rocketmq_header(header), body)
    return json_frame(header, body)


def with_crc(header: dict[str, Any], body: bytes) -> None:
    """Make ``bodyCrc32`` match the body, so a body mutation reaches the body decoder."""
    ext = header.setdefault("extFields", {})
    if isinstance(ext, dict) and "bodyCrc32" in ext:
        ext["bodyCrc32"] = str(zlib.crc32(body) & 0x7FFFFFFF)


def ext_keys(header: dict[str, Any]) -> list[str]:
    ext = header.get("extFields")
    return list(ext) if isinstance(ext, dict) else []


def json_type_of(value: Any) -> str:
    """The JSON type of a decoded value or of a ``Raw`` token's text."""
    if isinstance(value, Raw):
        first = value.text[:1]
        if first in ('"', "{", "["):
            return {'"': "string", "{": "object", "[": "array"}[first]
        if value.text in ("true", "false", "null"):
            return "boolean" if value.text != "null" else "null"
        return "float" if any(c in value.text for c in ".eE") else "integer"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    for kind, name in ((int, "integer"), (float, "float"), (str, "string"), (dict, "object")):
        if isinstance(value, kind):
            return name
    return "array"


def nest(rng: random.Random, depth: int) -> Raw:
    kind = rng.randrange(3)
    if kind == 0:
        return Raw("[" * depth + "]" * depth)
    if kind == 1:
        return Raw('{"a":' * depth + "1" + "}" * depth)
    return Raw('[{"a":' * (depth // 2) + "[]" + "}]" * (depth // 2))


def log_uniform(rng: random.Random, low: int, high: int) -> int:
    if high <= low:
        return low
    return int(low * (high / low) ** rng.random())


def put_somewhere(rng: random.Random, header: dict[str, Any], value: Raw) -> None:
    """Put ``value`` in a header member, an existing extFields value or a new ext field."""
    where = rng.randrange(3)
    keys = ext_keys(header)
    if where == 0 or (where == 1 and not keys):
        header[rng.choice((*HEADER_MEMBERS, "language", "remark"))] = value
    elif where == 1:
        header["extFields"][rng.choice(keys)] = value
    else:
        if not isinstance(header.get("extFields"), dict):
            header["extFields"] = {}
        header["extFields"]["fuzz"] = value
