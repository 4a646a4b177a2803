"""The fuzzer's own view of the wire: assemble frames, predict framing, read answer opaques.

Deliberately independent of ``pynamesrv.remoting.codec``: the fuzzer must be able to build
frames the server's encoder refuses (lying lengths, non-JSON tokens, binary headers whose
field lengths lie), and its predictions must not share a bug with the decoder under test.
JSON headers are written as text from ``Raw`` tokens so that a mutator controls every byte
(``1e30``, ``NaN``, a 1,000-deep array) instead of what a JSON library would write.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final

SERIALIZE_JSON: Final = 0
SERIALIZE_ROCKETMQ: Final = 1
FLAG_RESPONSE: Final = 1
FLAG_ONEWAY: Final = 2

# LanguageCode bytes of the ROCKETMQ header, in order (spec/protocol.md §9).
LANGUAGES: Final = (
    "JAVA", "CPP", "DOTNET", "PYTHON", "DELPHI", "ERLANG", "RUBY", "OTHER", "HTTP", "GO",
    "PHP", "OMS", "RUST", "NODE_JS",
)  # fmt: skip

_WORDS = struct.Struct(">iI")
_INT32 = struct.Struct(">i")
_ROCKETMQ_FIXED = struct.Struct(">hbhiii")  # code, language, version, opaque, flag, remarkLen


@dataclass(frozen=True, slots=True)
class Raw:
    """JSON text written verbatim: a token no JSON library would produce."""

    text: str


def dump_json(value: Any) -> str:
    """Compact JSON text of ``value``; ``Raw`` parts verbatim, dict order kept.

    Iterative over the top two levels only (headers are flat but for ``extFields``), so a
    deep value must come as ``Raw``: the fuzzer never recurses as deep as it nests.
    """
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, dict):
        return (
            "{" + ",".join(f"{json.dumps(str(k))}:{dump_json(v)}" for k, v in value.items()) + "}"
        )
    if isinstance(value, list):
        return "[" + ",".join(dump_json(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def frame(serialize: int, header: bytes, body: bytes = b"") -> bytes:
    """A frame with truthful length words."""
    return _WORDS.pack(4 + len(header) + len(body), (serialize << 24) | len(header)) + header + body


@dataclass(frozen=True, slots=True)
class Split:
    """One frame cut into its parts (the length words are not kept: they are recomputed)."""

    serialize: int
    header: bytes
    body: bytes


def split(raw: bytes) -> Split:
    """Cut a whole, truthful frame; ValueError otherwise (the corpus is checked on load)."""
    if len(raw) < 8:
        raise ValueError(f"frame of {len(raw)} bytes is shorter than its two length words")
    length, word = _WORDS.unpack_from(raw, 0)
    header_len = word & 0xFFFFFF
    if length != len(raw) - 4 or 8 + header_len > len(raw):
        raise ValueError("length words do not match the frame")
    return Split(word >> 24, raw[8 : 8 + header_len], raw[8 + header_len :])


# ------------------------------------------------------------------ ROCKETMQ binary header


@dataclass(frozen=True, slots=True)
class BinaryLies:
    """Length fields of a ROCKETMQ header to write instead of the true ones (None: true)."""

    remark_len: int | None = None
    ext_len: int | None = None
    key_len: int | None = None  # of the first ext entry
    value_len: int | None = None  # of the first ext entry


def rocketmq_header(
    header: Mapping[str, Any],
    *,
    raw_ext: Sequence[tuple[bytes, bytes]] | None = None,
    remark: bytes | None = None,
    lies: BinaryLies = BinaryLies(),
) -> bytes:
    """Binary header from a decoded header dict; ``raw_ext``/``remark`` give raw bytes
    (bad UTF-8), ``lies`` overrides length fields. Numbers are wrapped into their field
    width, as a Java ``short``/``int`` cast would."""
    remark_bytes = remark if remark is not None else str(header.get("remark") or "").encode()
    entries = raw_ext
    if entries is None:
        entries = [
            (str(k).encode(), str(v).encode()) for k, v in (header.get("extFields") or {}).items()
        ]
    ext = bytearray()
    for index, (key, value) in enumerate(entries):
        key_len = lies.key_len if index == 0 and lies.key_len is not None else len(key)
        value_len = lies.value_len if index == 0 and lies.value_len is not None else len(value)
        ext += _wrap(key_len, 16).to_bytes(2, "big", signed=True) + key
        ext += _INT32.pack(_wrap(value_len, 32)) + value
    language = header.get("language", "JAVA")
    fixed = _ROCKETMQ_FIXED.pack(
        _wrap(_as_int(header.get("code")), 16),
        LANGUAGES.index(language) if language in LANGUAGES else 7,
        _wrap(_as_int(header.get("version")), 16),
        _wrap(_as_int(header.get("opaque")), 32),
        _wrap(_as_int(header.get("flag")), 32),
        _wrap(lies.remark_len if lies.remark_len is not None else len(remark_bytes), 32),
    )
    ext_len = lies.ext_len if lies.ext_len is not None else len(ext)
    return fixed + remark_bytes + _INT32.pack(_wrap(ext_len, 32)) + bytes(ext)


def decode_rocketmq_header(raw: bytes) -> dict[str, Any]:
    """The corpus' ROCKETMQ headers as dicts (strict: the corpus holds only valid ones)."""
    code, lang, version, opaque, flag, remark_len = _ROCKETMQ_FIXED.unpack_from(raw, 0)
    pos = _ROCKETMQ_FIXED.size
    out: dict[str, Any] = {
        "code": code,
        "language": LANGUAGES[lang] if 0 <= lang < len(LANGUAGES) else "OTHER",
        "version": version,
        "opaque": opaque,
        "flag": flag,
    }
    if remark_len:
        out["remark"] = raw[pos : pos + remark_len].decode()
    pos += remark_len
    (ext_len,) = _INT32.unpack_from(raw, pos)
    pos += 4
    end = pos + ext_len
    ext: dict[str, str] = {}
    while pos < end:
        key_len = int.from_bytes(raw[pos : pos + 2], "big", signed=True)
        key = raw[pos + 2 : pos + 2 + key_len].decode()
        pos += 2 + key_len
        (value_len,) = _INT32.unpack_from(raw, pos)
        ext[key] = raw[pos + 4 : pos + 4 + value_len].decode()
        pos += 4 + value_len
    if ext:
        out["extFields"] = ext
    return out


def _as_int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError, OverflowError):
        return 0


def _wrap(value: int, bits: int) -> int:
    """Two's-complement wrap into a signed field of ``bits`` bits."""
    value &= (1 << bits) - 1
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


# ------------------------------------------------------------------ predicting the server


class Fate(Enum):
    """What a peer that frames like Java does with the bytes of one connection so far."""

    OPEN = "open"  # every byte belongs to a complete frame with a readable header
    WAITING = "waiting"  # a frame is incomplete: the server waits for the rest
    CLOSING = "closing"  # framing or header is broken: the server closes the connection


class StreamModel:
    """Follows what one connection has sent, frame by frame, as the server will read it.

    The runner asks it after every write whether the connection is still worth writing to:
    after a broken frame the server closes (and drops whatever follows), after an incomplete
    one it waits for bytes that will never come, so the next frame goes to a new connection.
    Only framing and header well-formedness are judged; what the server does with a frame
    is the server's business.
    """

    __slots__ = ("_pending", "max_frame_length")

    def __init__(self, max_frame_length: int) -> None:
        self.max_frame_length = max_frame_length
        self._pending = b""

    def feed(self, data: bytes) -> Fate:
        buf = self._pending + data if self._pending else data
        pos, end = 0, len(buf)
        while end - pos >= 4:
            (length,) = _INT32.unpack_from(buf, pos)
            if length < 4 or length > self.max_frame_length - 4:
                return Fate.CLOSING
            if end - pos - 4 < length:
                break
            (word,) = struct.unpack_from(">I", buf, pos + 4)
            header_len = word & 0xFFFFFF
            if header_len > length - 4 or not header_is_readable(
                word >> 24, buf[pos + 8 : pos + 8 + header_len]
            ):
                return Fate.CLOSING
            pos += 4 + length
        self._pending = buf[pos:]
        return Fate.WAITING if self._pending else Fate.OPEN


def header_is_readable(serialize: int, header: bytes) -> bool:
    """Whether a Java-like decoder can read this header at all (its values may still be
    nonsense: that is for the request processor to answer)."""
    if serialize == SERIALIZE_JSON:
        try:
            return isinstance(json.loads(header), dict)
        except (ValueError, RecursionError):
            return False
    if serialize == SERIALIZE_ROCKETMQ:
        return _rocketmq_readable(header)
    return False


def _rocketmq_readable(raw: bytes) -> bool:
    size = len(raw)
    if size < _ROCKETMQ_FIXED.size + 4:
        return False
    remark_len = _INT32.unpack_from(raw, 13)[0]
    pos = _ROCKETMQ_FIXED.size
    if remark_len < 0 or remark_len > size - pos - 4:
        return False
    pos += remark_len
    (ext_len,) = _INT32.unpack_from(raw, pos)
    pos += 4
    if ext_len < 0 or ext_len > size - pos:
        return False
    stop = pos + ext_len
    while pos < stop:
        if stop - pos < 2:
            return False
        key_len = int.from_bytes(raw[pos : pos + 2], "big", signed=True)
        pos += 2
        if key_len < 0 or stop - pos < key_len + 4:
            return False
        pos += key_len
        (value_len,) = _INT32.unpack_from(raw, pos)
        pos += 4
        if value_len < 0 or stop - pos < value_len:
            return False
        pos += value_len
    return True


# ------------------------------------------------------------------ reading answers


class AnswerReader:
    """Splits what the server sends into frames and reads each one's opaque and flag.

    The fuzzer does not judge most answers (a fuzzed request has no single right answer),
    but it must see which request an answer belongs to: an answer to a oneway request is a
    finding, and the canary query's answer must arrive.
    """

    __slots__ = ("_buffer", "frames", "unreadable")

    def __init__(self) -> None:
        self._buffer = bytearray()
        self.frames = 0
        self.unreadable = 0  # answers whose header the fuzzer could not read (a finding)

    def feed(self, data: bytes) -> list[tuple[int, int, bytes]]:
        """(opaque, code, frame bytes) of each complete answer frame in ``data``."""
        buf = self._buffer
        buf += data
        out: list[tuple[int, int, bytes]] = []
        pos = 0
        while len(buf) - pos >= 8:
            (length,) = _INT32.unpack_from(buf, pos)
            if length < 4:
                self.unreadable += 1
                buf.clear()
                return out
            if len(buf) - pos - 4 < length:
                break
            raw = bytes(buf[pos : pos + 4 + length])
            pos += 4 + length
            self.frames += 1
            parsed = answer_opaque_code(raw)
            if parsed is None:
                self.unreadable += 1
            else:
                out.append((parsed[0], parsed[1], raw))
        del buf[:pos]
        return out


def answer_opaque_code(raw: bytes) -> tuple[int, int] | None:
    """(opaque, code) of an answer frame, or None when its header is unreadable."""
    try:
        parts = split(raw)
        if parts.serialize == SERIALIZE_JSON:
            header = json.loads(parts.header)
            return int(header.get("opaque", 0)), int(header.get("code", 0))
        if parts.serialize == SERIALIZE_ROCKETMQ:
            code, _, _, opaque, _, _ = _ROCKETMQ_FIXED.unpack_from(parts.header, 0)
            return opaque, code
    except (ValueError, TypeError, AttributeError, struct.error):
        return None
    return None


def answer_body(raw: bytes) -> bytes:
    """The body of an answer frame (the canary compares it with the expected route)."""
    return split(raw).body


def reflagged(raw: bytes, *, flag: int, opaque: int) -> bytes:
    """The same request with another flag and opaque, in its own serialize type (used to
    follow a oneway frame with the same request made normal, whose answer must come)."""
    parts = split(raw)
    if parts.serialize == SERIALIZE_ROCKETMQ:
        header = decode_rocketmq_header(parts.header)
        header.update(flag=flag, opaque=opaque)
        return frame(SERIALIZE_ROCKETMQ, rocketmq_header(header), parts.body)
    header = json.loads(parts.header)
    header.update(flag=flag, opaque=opaque)
    return frame(SERIALIZE_JSON, dump_json(header).encode(), parts.body)
