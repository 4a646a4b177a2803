"""Sans-IO frame codec: bytes in, RemotingCommands out, and back (spec/protocol.md §2-6).

No sockets here. ``FrameDecoder.feed`` may be given any slicing of the byte stream: a frame
split across many reads, or many frames in one read. Everything a peer can send wrong raises
``FrameError``; the caller closes the connection without answering, as Java does.
"""

from __future__ import annotations

import struct
import zlib
from typing import Final

import orjson

from pynamesrv.remoting.codes import LanguageCode
from pynamesrv.remoting.command import RemotingCommand, SerializeType

# Netty's LengthFieldBasedFrameDecoder limit in Java counts the 4-byte length word too, so the
# largest accepted value of the length word is this minus 4 (observed: 16777212 waits,
# 16777213 closes).
DEFAULT_MAX_FRAME_LENGTH: Final = 16 * 1024 * 1024

_INT32 = struct.Struct(">i")
_INT32_MIN: Final = -(2**31)
_INT32_MAX: Final = 2**31 - 1
_UINT32 = struct.Struct(">I")
_ROCKETMQ_FIXED = struct.Struct(">hbhiii")  # code, language, version, opaque, flag, remarkLen
_ROCKETMQ_FIXED_LEN: Final = 17
_LANG_BY_BYTE: Final = {lang.value: lang.name for lang in LanguageCode}
_BYTE_BY_LANG: Final = {lang.name: lang.value for lang in LanguageCode}


# One frame, split but not decoded: serialize type, header bytes, body bytes, and the CRC-32
# of the body when the decoder computed it while the body arrived (large frames), else None.
RawFrame = tuple[int, bytes, bytes, int | None]

# Bodies at least this large get their CRC-32 computed piece by piece as they arrive, so no
# single read callback spends milliseconds checksumming a 16 MB registration at the end.
INCREMENTAL_CRC_MIN: Final = 256 * 1024


class FrameError(ValueError):
    """The peer sent bytes that are not a valid frame; the connection must be closed.

    ``frames`` / ``commands`` hold the good frames that preceded the broken one in the same
    feed: Java processes those before it closes, and so should the caller.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.frames: list[RawFrame] = []
        self.commands: list[RemotingCommand] = []


class FrameDecoder:
    """Incremental decoder of length-prefixed frames.

    One entry point cuts frames, ``feed_raw`` (bytes in, split frames out); ``feed`` also
    decodes their headers. Invariants, and why they matter against a hostile peer:

    * The cost of a call is O(bytes fed) however the stream is sliced. Consumed bytes are
      dropped from the front of the buffer once per call (one memmove of what is left),
      never once per frame, so a read holding thousands of tiny frames is not quadratic;
      and when nothing was buffered, frames are cut straight from the read's bytes.
    * At most one incomplete frame is buffered, and its declared length is checked against
      the limit as soon as its length word arrives, so a peer cannot make us hold more than
      the limit (the server caps what all connections hold together).
    * A large body's CRC-32 is computed as it arrives, so no single call spends
      milliseconds checksumming a 16 MB registration at the end.
    """

    __slots__ = ("_buffer", "_crc", "_crc_upto", "max_frame_length")

    def __init__(self, max_frame_length: int = DEFAULT_MAX_FRAME_LENGTH) -> None:
        self.max_frame_length = max_frame_length
        self._buffer = bytearray()
        # CRC-32 of the incomplete frame at the front of the buffer, over [body start, upto).
        self._crc = 0
        self._crc_upto = 0

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a complete frame."""
        return len(self._buffer)

    def discard(self) -> None:
        """Drop what is buffered (the connection is gone): its memory is freed now, not
        whenever the garbage collector reaches the connection."""
        self._buffer = bytearray()
        self._crc = self._crc_upto = 0

    def feed_raw(self, data: bytes) -> list[RawFrame]:
        """Split complete frames without decoding their headers (the server's fast path
        answers some frames from their raw header bytes).

        Usually nothing is buffered when a read arrives, and the frames are cut straight
        from its bytes; only what follows the last complete frame is kept. Otherwise the
        read joins the buffer and the frames are cut from a view of it.
        """
        buf = self._buffer
        buffered = bool(buf)
        if buffered:
            buf += data
            src: bytes | memoryview = memoryview(buf)
        else:
            src = data
        frames: list[RawFrame] = []
        pos = 0
        end = len(src)
        limit = self.max_frame_length - 4
        try:
            while end - pos >= 4:
                (length,) = _INT32.unpack_from(src, pos)
                if length < 4 or length > limit:
                    raise FrameError(f"frame length {length} outside [4, {limit}]")
                frame_end = pos + 4 + length
                if frame_end > end:
                    break
                (word,) = _UINT32.unpack_from(src, pos + 4)
                serialize, header_len = word >> 24, word & 0xFFFFFF
                if header_len > length - 4:
                    raise FrameError(f"header length {header_len} beyond the frame ({length - 4})")
                if serialize > SerializeType.ROCKETMQ:
                    raise FrameError(f"unknown serialize type {serialize}")
                body_start = pos + 8 + header_len
                header = src[pos + 8 : body_start]
                body = src[body_start:frame_end] if frame_end > body_start else b""
                crc = None
                if buffered:
                    header, body = bytes(header), bytes(body)
                    if pos == 0 and self._crc_upto:  # this frame's CRC was started earlier
                        crc = self._finish_crc(src, body_start, frame_end)  # type: ignore[arg-type]  # buffered: src is the memoryview
                frames.append((serialize, header, body, crc))
                pos = frame_end
        except FrameError as exc:
            exc.frames = frames
            self._keep_rest(src, pos, buffered)
            raise
        self._keep_rest(src, pos, buffered)
        return frames

    def _keep_rest(self, src: bytes | memoryview, pos: int, buffered: bool) -> None:
        """Keep what follows the complete frames for the next read."""
        buf = self._buffer
        if buffered:
            src.release()  # type: ignore[union-attr]  # buffered: src is the memoryview
            if pos:
                del buf[:pos]
        elif pos < len(src):
            buf += src[pos:]
        self._advance_crc(buf)

    def _finish_crc(self, src: memoryview, body_start: int, frame_end: int) -> int:
        """The CRC-32 of the body of the frame at the front, partly computed as it arrived."""
        crc = zlib.crc32(src[max(body_start, self._crc_upto) : frame_end], self._crc)
        self._crc = self._crc_upto = 0
        return crc

    def _advance_crc(self, buf: bytearray) -> None:
        """Checksum what arrived of a large incomplete frame's body (now at offset 0)."""
        if len(buf) < 8:
            return
        (length,) = _INT32.unpack_from(buf, 0)
        body_start = 8 + (_UINT32.unpack_from(buf, 4)[0] & 0xFFFFFF)
        if length - 4 - (body_start - 8) < INCREMENTAL_CRC_MIN:
            return
        start = max(body_start, self._crc_upto)
        if len(buf) > start:
            with memoryview(buf) as view:
                self._crc = zlib.crc32(view[start:], self._crc)
            self._crc_upto = len(buf)

    def feed(self, data: bytes) -> list[RemotingCommand]:
        """Complete frames, decoded."""
        broken: FrameError | None = None
        try:
            frames = self.feed_raw(data)
        except FrameError as exc:
            broken, frames = exc, exc.frames
        commands: list[RemotingCommand] = []
        for serialize, header, body, crc in frames:
            try:
                commands.append(decode_command(serialize, header, body, crc))
            except FrameError as exc:
                broken = exc
                break
        if broken is not None:
            broken.commands = commands
            raise broken
        return commands


def decode_command(
    serialize: int, header: bytes, body: bytes, body_crc: int | None = None
) -> RemotingCommand:
    """Decode one split frame's header (JSON or ROCKETMQ) into a command with its body."""
    if serialize == SerializeType.JSON:
        cmd = _decode_json_header(header)
    elif serialize == SerializeType.ROCKETMQ:
        cmd = _decode_rocketmq_header(header)
    else:
        raise FrameError(f"unknown serialize type {serialize}")
    cmd.body = body
    cmd.body_crc = body_crc
    return cmd


def decode_frame_payload(payload: memoryview | bytes) -> RemotingCommand:
    """Decode one frame without its length word: header word, header, body."""
    (word,) = _UINT32.unpack_from(payload, 0)
    header_len = word & 0xFFFFFF
    if header_len > len(payload) - 4:
        raise FrameError(f"header length {header_len} beyond the frame ({len(payload) - 4})")
    return decode_command(
        word >> 24, bytes(payload[4 : 4 + header_len]), bytes(payload[4 + header_len :])
    )


def _int_member(obj: dict[str, object], name: str) -> int:
    """A Java ``int`` member: what does not fit 32 bits (``1e30``, ``-1e19``) is refused, as
    fastjson refuses it, instead of becoming a number no answer header could carry."""
    value = obj.get(name)
    if value is None:
        return 0
    if isinstance(value, bool):
        raise FrameError(f"header member {name} is not a number")
    try:
        # Any JSON value: what int() refuses is caught below.
        number = int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError, OverflowError) as exc:  # OverflowError: inf
        raise FrameError(f"header member {name} is not a number") from exc
    if not _INT32_MIN <= number <= _INT32_MAX:
        raise FrameError(f"header member {name} {value!r} outside the 32-bit range")
    return number


def _ext_value(value: object) -> str:
    """fastjson coerces scalar extFields values to their string form (and nested ones to
    their JSON text, which orjson cannot write past 254 levels: a frame error)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return str(value)
    try:
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError as exc:
        raise FrameError(f"extFields value cannot be written back: {exc}") from exc


def _decode_json_header(header: bytes) -> RemotingCommand:
    try:
        obj = orjson.loads(header)
    except orjson.JSONDecodeError as exc:
        raise FrameError(f"header is not JSON: {exc}") from exc
    if not isinstance(obj, dict):
        raise FrameError("header is not a JSON object")
    language = obj.get("language")
    if language is None:
        language = "JAVA"
    elif not isinstance(language, str):
        language = (
            _LANG_BY_BYTE.get(language, str(language)) if isinstance(language, int) else "OTHER"
        )
    remark = obj.get("remark")
    raw_ext = obj.get("extFields")
    ext: dict[str, str] | None
    if isinstance(raw_ext, dict):
        ext = {str(k): _ext_value(v) for k, v in raw_ext.items() if v is not None}
    elif raw_ext is None:
        ext = None
    else:
        raise FrameError("extFields is not an object")
    return RemotingCommand(
        code=_int_member(obj, "code"),
        language=language,
        version=_int_member(obj, "version"),
        opaque=_int_member(obj, "opaque"),
        flag=_int_member(obj, "flag"),
        remark=remark if isinstance(remark, str) else None,
        ext_fields=ext,
        serialize_type=SerializeType.JSON,
    )


def _decode_rocketmq_header(header: bytes) -> RemotingCommand:
    """Binary header; zero-length strings read as null, as Java's decoder does."""
    size = len(header)
    if size < _ROCKETMQ_FIXED_LEN:
        raise FrameError("ROCKETMQ header shorter than its fixed part")
    code, lang, version, opaque, flag, remark_len = _ROCKETMQ_FIXED.unpack_from(header, 0)
    pos = _ROCKETMQ_FIXED_LEN
    if remark_len < 0 or remark_len > size - pos:
        raise FrameError(f"remark length {remark_len} beyond the header")
    remark = header[pos : pos + remark_len].decode("utf-8", "replace") if remark_len else None
    pos += remark_len
    if size - pos < 4:
        raise FrameError("ROCKETMQ header truncated before the ext length")
    (ext_len,) = _INT32.unpack_from(header, pos)
    pos += 4
    if ext_len < 0 or ext_len > size - pos:
        raise FrameError(f"ext length {ext_len} beyond the header")
    ext: dict[str, str] | None = None
    if ext_len:
        ext = {}
        stop = pos + ext_len
        while pos < stop:
            if stop - pos < 2:
                raise FrameError("ROCKETMQ ext entry truncated")
            key_len = int.from_bytes(header[pos : pos + 2], "big", signed=True)
            pos += 2
            if key_len < 0 or stop - pos < key_len + 4:
                raise FrameError("ROCKETMQ ext key truncated")
            key = header[pos : pos + key_len].decode("utf-8", "replace")
            pos += key_len
            (value_len,) = _INT32.unpack_from(header, pos)
            pos += 4
            if value_len < 0 or stop - pos < value_len:
                raise FrameError("ROCKETMQ ext value truncated")
            value = header[pos : pos + value_len].decode("utf-8", "replace")
            pos += value_len
            if key and value:
                ext[key] = value
    return RemotingCommand(
        code=code,
        language=_LANG_BY_BYTE.get(lang, "OTHER"),
        version=version,
        opaque=opaque,
        flag=flag,
        remark=remark,
        ext_fields=ext,
        serialize_type=SerializeType.ROCKETMQ,
    )


def encode_header(cmd: RemotingCommand) -> bytes:
    """The header bytes in the command's serialize type."""
    if cmd.serialize_type == SerializeType.ROCKETMQ:
        return _encode_rocketmq_header(cmd)
    return _encode_json_header(cmd)


def _encode_json_header(cmd: RemotingCommand) -> bytes:
    # Members in fastjson's alphabetical order; null members omitted, as Java emits them.
    obj: dict[str, object] = {"code": cmd.code}
    if cmd.ext_fields is not None:
        obj["extFields"] = cmd.ext_fields
    obj["flag"] = cmd.flag
    obj["language"] = cmd.language
    obj["opaque"] = cmd.opaque
    if cmd.remark is not None:
        obj["remark"] = cmd.remark
    obj["serializeTypeCurrentRPC"] = "JSON"
    obj["version"] = cmd.version
    return orjson.dumps(obj)


def _encode_rocketmq_header(cmd: RemotingCommand) -> bytes:
    remark = cmd.remark.encode() if cmd.remark else b""
    ext = bytearray()
    for key, value in (cmd.ext_fields or {}).items():
        if key is None or value is None:
            continue
        k = key.encode()
        v = value.encode()
        ext += len(k).to_bytes(2, "big") + k + _INT32.pack(len(v)) + v
    return b"".join(
        (
            _ROCKETMQ_FIXED.pack(
                cmd.code,
                _BYTE_BY_LANG.get(cmd.language, LanguageCode.OTHER),
                cmd.version,
                cmd.opaque,
                cmd.flag,
                len(remark),
            ),
            remark,
            _INT32.pack(len(ext)),
            bytes(ext),
        )
    )


_FRAME_HEAD = struct.Struct(">iI")


def frame_head(serialize_type: int, header_length: int, body_length: int) -> bytes:
    """The 8 bytes before a header: the frame's length word and the header-length word."""
    return _FRAME_HEAD.pack(4 + header_length + body_length, (serialize_type << 24) | header_length)


def encode_frame(serialize_type: int, header: bytes, body: bytes = b"") -> bytes:
    """Assemble a frame from an already encoded header (used by cached answers too)."""
    return b"".join((frame_head(serialize_type, len(header), len(body)), header, body))


def encode(cmd: RemotingCommand) -> bytes:
    """One whole frame for ``cmd``."""
    return encode_frame(cmd.serialize_type, encode_header(cmd), cmd.body)


def encode_head(cmd: RemotingCommand) -> bytes:
    """The frame for ``cmd`` without its body: written before the body itself, a large body
    (a cached topic list) is sent without being copied into each answer."""
    header = encode_header(cmd)
    return frame_head(cmd.serialize_type, len(header), len(cmd.body)) + header
