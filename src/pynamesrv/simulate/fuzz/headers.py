"""Mutators of the header: values of the wrong type or size, nesting, bad text, binary
headers whose field lengths lie, and the flags and codes that decide whether to answer.

These frames keep their framing, so they reach the header decoder and, mostly, the request
processor; that is where the answers to earlier valid requests got lost.
"""

from __future__ import annotations

import json
import random

from pynamesrv.simulate.fuzz.corpus import Seed
from pynamesrv.simulate.fuzz.mutation import (
    BAD_ESCAPES,
    BAD_UTF8,
    CODES,
    CONFUSED_VALUES,
    HEADER_MEMBERS,
    HUGE_NUMBERS,
    MIB,
    NEST_DEPTHS,
    NUMBER_LIKE_TEXTS,
    SILENT_OPAQUE_BASE,
    Context,
    Out,
    ext_keys,
    header_copy,
    json_frame,
    json_type_of,
    log_uniform,
    nest,
    put_somewhere,
    same_type_frame,
    with_crc,
)
from pynamesrv.simulate.fuzz.wire import (
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    SERIALIZE_JSON,
    SERIALIZE_ROCKETMQ,
    BinaryLies,
    Raw,
    dump_json,
    frame,
    rocketmq_header,
)


def type_confusion(rng: random.Random, seed: Seed, ctx: Context) -> Out:
    """A header member or extFields value of the wrong JSON type (string, number, object,
    array, boolean, null), or extFields itself not an object."""
    header = header_copy(seed)
    keys = ext_keys(header)
    target = rng.randrange(4)
    if target == 3:
        header["extFields"] = rng.choice((Raw("[]"), Raw('"x"'), Raw("1"), Raw("true"), Raw("[1]")))
        return Out(json_frame(header, seed.body))
    if target == 0 or (target == 1 and not keys):
        where, name = header, rng.choice(HEADER_MEMBERS)
    elif target == 1:
        where, name = header["extFields"], rng.choice(keys)
    else:
        where, name = header, rng.choice(("language", "remark", "serializeTypeCurrentRPC"))
    current = json_type_of(where.get(name))
    where[name] = rng.choice([v for v in CONFUSED_VALUES if json_type_of(v) != current])
    return Out(json_frame(header, seed.body))


def huge_number(rng: random.Random, seed: Seed, ctx: Context) -> Out:
    """A number no 64-bit field holds, as a JSON number or as the text of an ext field."""
    header = header_copy(seed)
    keys = ext_keys(header)
    if keys and rng.random() < 0.4:
        number = rng.choice(HUGE_NUMBERS)
        text = rng.choice((number, Raw(number), rng.choice(NUMBER_LIKE_TEXTS)))
        header["extFields"][rng.choice(keys)] = text
    else:
        member = rng.choice((*HEADER_MEMBERS, *HEADER_MEMBERS, "language"))
        header[member] = Raw(rng.choice((*HUGE_NUMBERS, "NaN", "Infinity", "-Infinity")))
    return Out(json_frame(header, seed.body))


def deep_nesting(rng: random.Random, seed: Seed, ctx: Context) -> Out:
    """Arrays/objects nested 64 to 5,000 deep in the header or as the body."""
    depth = rng.choice(NEST_DEPTHS)
    header = header_copy(seed)
    if rng.random() < 0.3:
        body = nest(rng, depth).text.encode()
        with_crc(header, body)
        return Out(json_frame(header, body))
    put_somewhere(rng, header, nest(rng, depth))
    return Out(json_frame(header, seed.body))


def bad_utf8(rng: random.Random, seed: Seed, ctx: Context) -> Out:
    """Bytes that are not UTF-8 (or escaped lone surrogates) inside a header string, a
    binary header's strings, or the body."""
    bad = rng.choice(BAD_UTF8)
    where = rng.randrange(4)
    if where == 0 and seed.body:
        cut = rng.randrange(len(seed.body) + 1)
        body = seed.body[:cut] + bad + seed.body[cut:]
        header = header_copy(seed)
        with_crc(header, body)
        return Out(same_type_frame(seed, header, body) if rng.random() < 0.5 else
                   json_frame(header, body))  # fmt: skip
    header = header_copy(seed)
    if where == 1:  # binary header with raw bytes in a key, a value or the remark
        entries = [
            (str(k).encode(), str(v).encode()) for k, v in (header.get("extFields") or {}).items()
        ]
        if entries and rng.random() < 0.7:
            i = rng.randrange(len(entries))
            key, value = entries[i]
            entries[i] = (key + bad, value) if rng.random() < 0.3 else (key, value + bad)
            return Out(
                frame(SERIALIZE_ROCKETMQ, rocketmq_header(header, raw_ext=entries), seed.body)
            )
        return Out(frame(SERIALIZE_ROCKETMQ, rocketmq_header(header, remark=b"x" + bad), seed.body))
    escape = rng.choice(BAD_ESCAPES)
    marker = "\x01fuzz\x01"
    put_somewhere(rng, header, Raw(json.dumps(marker)))
    text = dump_json(header).encode()
    replacement = b'"' + (bad if where == 2 else escape.encode()) + b'"'
    return Out(
        frame(SERIALIZE_JSON, text.replace(json.dumps(marker).encode(), replacement), seed.body)
    )


def rocketmq_lies(rng: random.Random, seed: Seed, ctx: Context) -> Out:
    """A binary header whose remark, ext, key or value length lies."""
    header = header_copy(seed)
    if not ext_keys(header):
        header["extFields"] = {"topic": "FuzzTopic"}
    if rng.random() < 0.3 and not header.get("remark"):
        header["remark"] = "fuzz remark"
    true_header = rocketmq_header(header)
    first_key, first_value = next(iter(header["extFields"].items()))
    remark_len = len(str(header.get("remark") or "").encode())
    truths = {
        "remark_len": remark_len,
        "ext_len": len(true_header) - 17 - remark_len - 4,  # fixed part, remark, ext length
        "key_len": len(str(first_key).encode()),
        "value_len": len(str(first_value).encode()),
    }
    field = rng.choice(list(truths))
    candidates = (-1, -2, -32768, 0x7FFFFFFF, 32767, 1, 0, len(true_header),
                  len(true_header) + 1, rng.randint(-70000, 70000))  # fmt: skip
    lie = rng.choice([c for c in candidates if c != truths[field]])
    lies = BinaryLies(**{field: lie})
    return Out(frame(SERIALIZE_ROCKETMQ, rocketmq_header(header, lies=lies), seed.body))


def rocketmq_binary(rng: random.Random, seed: Seed, ctx: Context) -> Out:
    """A true binary header, with code/version/opaque/flag drawn from their full width."""
    header = header_copy(seed)
    member = rng.choice(("code", "version", "opaque", "flag", "language", None))
    if member == "language":
        header["language"] = rng.choice(("JAVA", "CPP", "GO", "UNKNOWN"))
    elif member is not None:
        header[member] = rng.randint(-(1 << 31), (1 << 31) - 1)
    return Out(frame(SERIALIZE_ROCKETMQ, rocketmq_header(header), seed.body))


def duplicate_members(rng: random.Random, seed: Seed, ctx: Context) -> Out:
    """The same member twice (a JSON parser keeps one of them; which one differs)."""
    text = dump_json(header_copy(seed))
    member = rng.choice([m for m in (*HEADER_MEMBERS, "extFields") if m in seed.header] or ["code"])
    if member not in seed.header:  # only an empty header lacks every member
        text = f'{{"{member}":0}}'
    extra = f'"{member}":{rng.choice(CONFUSED_VALUES).text}'
    doubled = text[:-1] + "," + extra + "}" if rng.random() < 0.5 else "{" + extra + "," + text[1:]
    return Out(frame(SERIALIZE_JSON, doubled.encode(), seed.body))


def many_fields(rng: random.Random, seed: Seed, ctx: Context) -> Out:
    """A header with up to 200,000 ext fields or one value of up to 8 MiB."""
    header = header_copy(seed)
    if rng.random() < 0.5:
        count = log_uniform(rng, 100, 200_000)
        header["extFields"] = Raw("{" + ",".join([f'"k{i:06d}":"v"' for i in range(count)]) + "}")
    else:
        size = min(log_uniform(rng, 64 * 1024, 8 * MIB), ctx.limits.frame_room - 4096)
        put_somewhere(rng, header, Raw(json.dumps("v" * size)))
    return Out(json_frame(header, seed.body))


def oneway(rng: random.Random, seed: Seed, ctx: Context) -> Out:
    """The oneway bit on any request code: it must never be answered."""
    header = header_copy(seed)
    opaque = SILENT_OPAQUE_BASE + rng.randrange(1 << 24)
    header["opaque"] = opaque
    header["flag"] = (int(header.get("flag") or 0) | FLAG_ONEWAY) & ~FLAG_RESPONSE
    if rng.random() < 0.3:
        header["code"] = rng.choice(CODES)
    return Out(same_type_frame(seed, header, seed.body), opaque)


def response_flag(rng: random.Random, seed: Seed, ctx: Context) -> Out:
    """A request marked as a response: the server must ignore it, never answer it."""
    header = header_copy(seed)
    opaque = SILENT_OPAQUE_BASE + rng.randrange(1 << 24)
    header["opaque"] = opaque
    header["flag"] = rng.choice((FLAG_RESPONSE, FLAG_RESPONSE | FLAG_ONEWAY))
    return Out(same_type_frame(seed, header, seed.body), opaque)


def random_code(rng: random.Random, seed: Seed, ctx: Context) -> Out:
    """Another request code, known or not, with this request's fields and body."""
    header = header_copy(seed)
    header["code"] = rng.choice(CODES) if rng.random() < 0.7 else rng.randint(-(1 << 31), 1 << 31)
    if seed.serialize == SERIALIZE_ROCKETMQ and rng.random() < 0.5:
        return Out(frame(SERIALIZE_ROCKETMQ, rocketmq_header(header), seed.body))
    return Out(json_frame(header, seed.body))
