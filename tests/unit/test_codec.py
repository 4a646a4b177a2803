"""Frame codec: golden 4.9.4 frames, stream slicing, limits, broken frames, header forms.

Pins spec/protocol.md §2 (framing and limits), §3 (JSON header, exact output), §6 (ROCKETMQ
binary header) against ``pynamesrv.remoting.codec``. Golden frames come from
``<repo>/../shared/golden`` (or ``$PYNAMESRV_SHARED/golden``).
"""

from __future__ import annotations

import base64
import functools
import itertools
import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pynamesrv.remoting.codec import (
    DEFAULT_MAX_FRAME_LENGTH,
    FrameDecoder,
    FrameError,
    decode_frame_payload,
    encode,
    encode_frame,
    encode_header,
)
from pynamesrv.remoting.codes import LanguageCode
from pynamesrv.remoting.command import RemotingCommand, SerializeType

# --------------------------------------------------------------------------- golden corpus


SCENARIOS = (
    "register-master-slave",
    "register-compressed",
    "serialize-rocketmq",
    "unregister",
    "admin",
    "clients",
    "errors",
)


def _shared_dir() -> Path:
    env = os.environ.get("PYNAMESRV_SHARED")
    return Path(env) if env else Path(__file__).resolve().parents[2].parent / "shared"


@dataclass(frozen=True)
class GoldenFrame:
    scenario: str
    seq: int
    direction: str
    serialize: str | None
    header: dict[str, Any] | None
    header_raw: bytes | None
    body: bytes
    raw: bytes
    broken: bool

    @property
    def name(self) -> str:
        return f"{self.scenario}-{self.seq}"


@functools.cache
def golden_frames() -> tuple[GoldenFrame, ...]:
    folder = _shared_dir() / "golden"
    frames: list[GoldenFrame] = []
    for path in sorted(folder.glob("*.jsonl")):
        if path.name.endswith(".events.jsonl"):
            continue
        scenario = path.name.removesuffix(".jsonl")
        for line in path.read_text(encoding="utf-8").splitlines():
            rec = json.loads(line)
            serialize = rec["serialize"]
            broken = bool(
                rec.get("incomplete")
                or rec.get("malformed")
                or serialize not in ("JSON", "ROCKETMQ")
            )
            header_b64 = rec.get("header_b64")
            frames.append(
                GoldenFrame(
                    scenario=scenario,
                    seq=rec["seq"],
                    direction=rec["dir"],
                    serialize=serialize,
                    header=rec["header"],
                    header_raw=None if header_b64 is None else base64.b64decode(header_b64),
                    body=base64.b64decode(rec["body_b64"]),
                    raw=base64.b64decode(rec["frame_b64"]),
                    broken=broken,
                )
            )
    return tuple(frames)


def good_frames() -> list[GoldenFrame]:
    return [f for f in golden_frames() if not f.broken]


def golden_frame(scenario: str, seq: int) -> GoldenFrame:
    for frame in golden_frames():
        if frame.scenario == scenario and frame.seq == seq:
            return frame
    raise LookupError(f"no golden frame {scenario} seq {seq}")


@functools.cache
def golden_stream() -> tuple[bytes, tuple[int, ...]]:
    """All good golden frames back to back, and the end offset of each frame."""
    ends: list[int] = []
    total = 0
    for frame in good_frames():
        total += len(frame.raw)
        ends.append(total)
    return b"".join(f.raw for f in good_frames()), tuple(ends)


@functools.cache
def golden_commands() -> tuple[RemotingCommand, ...]:
    """Each good golden frame decoded on its own by a fresh decoder."""
    out: list[RemotingCommand] = []
    for frame in good_frames():
        (cmd,) = FrameDecoder().feed(frame.raw)
        out.append(cmd)
    return tuple(out)


def test_golden_corpus_is_present_with_every_scenario() -> None:
    scenarios = {f.scenario for f in golden_frames()}
    assert scenarios >= set(SCENARIOS), (
        f"golden corpus missing under {_shared_dir()} (set PYNAMESRV_SHARED)"
    )
    assert len(good_frames()) > 400


# --------------------------------------------------------------------------- helpers


def json_frame(header: bytes | str | dict[str, Any], body: bytes = b"") -> bytes:
    if isinstance(header, dict):
        header = json.dumps(header, separators=(",", ":"))
    if isinstance(header, str):
        header = header.encode()
    return encode_frame(SerializeType.JSON, header, body)


def rocketmq_header(
    *,
    code: int = 105,
    language: int = 0,
    version: int = 401,
    opaque: int = 7,
    flag: int = 0,
    remark: bytes = b"",
    ext: list[tuple[bytes, bytes]] | None = None,
    remark_len: int | None = None,
    ext_len: int | None = None,
) -> bytes:
    """A binary header built by hand (independently of the codec's encoder)."""
    entries = b"".join(
        struct.pack(">h", len(k)) + k + struct.pack(">i", len(v)) + v for k, v in ext or []
    )
    return (
        struct.pack(
            ">hbhiii",
            code,
            language,
            version,
            opaque,
            flag,
            len(remark) if remark_len is None else remark_len,
        )
        + remark
        + struct.pack(">i", len(entries) if ext_len is None else ext_len)
        + entries
    )


def decode_one(raw: bytes) -> RemotingCommand:
    decoder = FrameDecoder()
    commands = decoder.feed(raw)
    assert len(commands) == 1
    assert decoder.buffered == 0
    return commands[0]


SAMPLE_ROCKETMQ_HEADER = rocketmq_header(
    remark=b"r\xc3\xa9mark",
    ext=[(b"topic", b"TBW102"), (b"brokerName", b"broker-a")],
)


# --------------------------------------------------------------------------- golden frames


def _header_mismatches(frame: GoldenFrame) -> list[str]:
    cmd = decode_one(frame.raw)
    header = frame.header or {}
    got: dict[str, Any] = {
        "serialize": cmd.serialize_type.name,
        "code": cmd.code,
        "language": cmd.language,
        "version": cmd.version,
        "opaque": cmd.opaque,
        "flag": cmd.flag,
        "remark": cmd.remark,
        "extFields": cmd.ext_fields,
        "body": cmd.body,
    }
    want: dict[str, Any] = {
        "serialize": frame.serialize,
        "code": header.get("code", 0),
        "language": header.get("language", "JAVA"),
        "version": header.get("version", 0),
        "opaque": header.get("opaque", 0),
        "flag": header.get("flag", 0),
        "remark": header.get("remark"),
        "extFields": header.get("extFields"),
        "body": frame.body,
    }
    return [f"{frame.name} {k}: {got[k]!r} != {want[k]!r}" for k in got if got[k] != want[k]]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_golden_frames_decode_to_their_recorded_header_and_body(scenario: str) -> None:
    frames = [f for f in good_frames() if f.scenario == scenario]
    assert frames, f"no golden frames for {scenario}"
    mismatches = [m for frame in frames for m in _header_mismatches(frame)]
    assert mismatches == []


def test_golden_rocketmq_headers_reencode_byte_for_byte() -> None:
    # Holds for the whole corpus: no recorded ROCKETMQ header carries an empty remark or an
    # empty ext value (those decode to null and could not be reproduced).
    frames = [f for f in good_frames() if f.serialize == "ROCKETMQ"]
    assert len(frames) == 37
    for frame in frames:
        cmd = decode_one(frame.raw)
        assert encode_header(cmd) == frame.header_raw, frame.name
        assert encode(cmd) == frame.raw, frame.name


def test_golden_java_json_answers_reencode_byte_for_byte() -> None:
    frames = [f for f in good_frames() if f.serialize == "JSON" and f.direction == "s2c"]
    assert len(frames) > 150
    differing = [f.name for f in frames if encode(decode_one(f.raw)) != f.raw]
    assert differing == []


@pytest.mark.parametrize(
    ("seq", "case"),
    [
        (16, "header not valid JSON"),
        (17, "header is a JSON array"),
        (21, "header length beyond the frame"),
        (22, "serialize type 2"),
        (23, "length word 16777217"),
        (24, "length word 16777216"),
        (26, "length word 16777213"),
        (27, "length word -1"),
        (28, "length word 2"),
    ],
)
def test_golden_broken_frame_raises_frame_error(seq: int, case: str) -> None:
    frame = golden_frame("errors", seq)
    with pytest.raises(FrameError):
        FrameDecoder().feed(frame.raw)


def test_golden_partial_frame_with_length_word_16777212_waits() -> None:
    frame = golden_frame("errors", 25)
    decoder = FrameDecoder()
    assert decoder.feed(frame.raw) == []
    assert decoder.buffered == len(frame.raw)


# --------------------------------------------------------------------------- stream slicing


def test_golden_stream_in_one_feed_equals_frame_by_frame_decoding() -> None:
    stream, _ = golden_stream()
    decoder = FrameDecoder()
    assert decoder.feed(stream) == list(golden_commands())
    assert decoder.buffered == 0


def test_golden_stream_fed_one_byte_at_a_time_yields_each_frame_at_its_last_byte() -> None:
    stream, ends = golden_stream()
    decoder = FrameDecoder()
    produced: list[RemotingCommand] = []
    emitted_at: list[int] = []
    for i in range(len(stream)):
        out = decoder.feed(stream[i : i + 1])
        assert len(out) <= 1
        if out:
            emitted_at.append(i + 1)
            produced.extend(out)
    assert produced == list(golden_commands())
    assert emitted_at == list(ends)
    assert decoder.buffered == 0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_golden_stream_split_at_random_points_decodes_the_same_commands(
    data: st.DataObject,
) -> None:
    stream, _ = golden_stream()
    cuts = data.draw(
        st.lists(st.integers(min_value=1, max_value=len(stream) - 1), max_size=80, unique=True)
    )
    bounds = [0, *sorted(cuts), len(stream)]
    decoder = FrameDecoder()
    produced: list[RemotingCommand] = []
    for start, stop in itertools.pairwise(bounds):
        produced.extend(decoder.feed(stream[start:stop]))
    assert produced == list(golden_commands())
    assert decoder.buffered == 0


@pytest.mark.parametrize(
    "raw",
    [
        encode_frame(SerializeType.ROCKETMQ, SAMPLE_ROCKETMQ_HEADER, b"body-bytes"),
        json_frame({"code": 103, "extFields": {"brokerId": "0"}, "opaque": 9}, b"{}"),
    ],
    ids=["rocketmq", "json"],
)
def test_frame_split_at_every_byte_boundary_decodes_once(raw: bytes) -> None:
    expected = decode_one(raw)
    for cut in range(1, len(raw)):
        decoder = FrameDecoder()
        assert decoder.feed(raw[:cut]) == []
        assert decoder.buffered == cut
        assert decoder.feed(raw[cut:]) == [expected]
        assert decoder.buffered == 0


def test_empty_feed_returns_nothing() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(b"") == []
    assert decoder.buffered == 0


# --------------------------------------------------------------------------- limits (§2)

LIMIT_LENGTH_WORD = 16777212


def test_default_limit_is_16_mib_including_the_length_word() -> None:
    assert DEFAULT_MAX_FRAME_LENGTH == 16777216
    assert LIMIT_LENGTH_WORD == DEFAULT_MAX_FRAME_LENGTH - 4


def test_length_word_16777212_waits_for_the_rest_of_the_frame() -> None:
    head = struct.pack(">i", LIMIT_LENGTH_WORD) + struct.pack(">I", 2) + b"{}"
    decoder = FrameDecoder()
    assert decoder.feed(head) == []
    assert decoder.buffered == len(head)
    assert decoder.feed(b"\0" * 1000) == []


def test_length_word_16777212_frame_decodes_once_complete() -> None:
    header = b'{"code":103}'
    body_len = LIMIT_LENGTH_WORD - 4 - len(header)
    raw = json_frame(header, b"\x01" * body_len)
    assert struct.unpack_from(">i", raw)[0] == LIMIT_LENGTH_WORD
    decoder = FrameDecoder()
    assert decoder.feed(raw[:-1]) == []
    (cmd,) = decoder.feed(raw[-1:])
    assert cmd.code == 103
    assert len(cmd.body) == body_len


@pytest.mark.parametrize(
    "length", [16777213, 16777216, 16777217, 2**31 - 1, -1, -(2**31), 0, 1, 2, 3]
)
def test_length_word_outside_limits_raises_as_soon_as_it_arrives(length: int) -> None:
    decoder = FrameDecoder()
    with pytest.raises(FrameError):
        decoder.feed(struct.pack(">i", length))


@pytest.mark.parametrize("length", [16777213, 16777217])
def test_configured_larger_limit_lets_a_larger_frame_through(length: int) -> None:
    header = b'{"code":103}'
    raw = json_frame(header, b"\x02" * (length - 4 - len(header)))
    with pytest.raises(FrameError):
        FrameDecoder().feed(raw[:4])
    decoder = FrameDecoder(max_frame_length=32 * 1024 * 1024)
    (cmd,) = decoder.feed(raw)
    assert cmd.code == 103
    assert len(cmd.body) == length - 4 - len(header)


def test_configured_smaller_limit_counts_the_length_word() -> None:
    decoder = FrameDecoder(max_frame_length=64)
    assert decoder.feed(struct.pack(">i", 60)) == []
    with pytest.raises(FrameError):
        FrameDecoder(max_frame_length=64).feed(struct.pack(">i", 61))


# --------------------------------------------------------------------------- broken headers


def test_header_length_beyond_the_frame_raises() -> None:
    header = b'{"code":105}'
    raw = struct.pack(">i", 4 + len(header)) + struct.pack(">I", len(header) + 1) + header
    with pytest.raises(FrameError):
        FrameDecoder().feed(raw)


@pytest.mark.parametrize("serialize", [2, 3, 0x7F, 0xFF])
def test_unknown_serialize_type_raises(serialize: int) -> None:
    with pytest.raises(FrameError):
        FrameDecoder().feed(encode_frame(serialize, b'{"code":105}'))


@pytest.mark.parametrize(
    "header",
    [b"", b'{"code":105', b"{code:105}", b"\xff\xfe", b"nul", b'{"code":105}}'],
)
def test_json_header_that_is_not_json_raises(header: bytes) -> None:
    with pytest.raises(FrameError):
        FrameDecoder().feed(json_frame(header))


@pytest.mark.parametrize("header", [b"[1,2,3]", b'"code"', b"105", b"null", b"true"])
def test_json_header_that_is_not_an_object_raises(header: bytes) -> None:
    with pytest.raises(FrameError):
        FrameDecoder().feed(json_frame(header))


def test_json_header_with_non_object_ext_fields_raises() -> None:
    with pytest.raises(FrameError):
        FrameDecoder().feed(json_frame(b'{"code":105,"extFields":["topic"]}'))


@pytest.mark.parametrize("cut", range(len(SAMPLE_ROCKETMQ_HEADER)))
def test_truncated_rocketmq_header_raises_at_every_truncation_point(cut: int) -> None:
    truncated = SAMPLE_ROCKETMQ_HEADER[:cut]
    with pytest.raises(FrameError):
        FrameDecoder().feed(encode_frame(SerializeType.ROCKETMQ, truncated))
    # The same with the cut-off bytes left in the frame as body: the header is parsed from
    # its declared length only.
    rest = SAMPLE_ROCKETMQ_HEADER[cut:]
    with pytest.raises(FrameError):
        FrameDecoder().feed(encode_frame(SerializeType.ROCKETMQ, truncated, rest))


@pytest.mark.parametrize(
    "header",
    [
        rocketmq_header(remark=b"abc", remark_len=4),
        rocketmq_header(remark=b"abc", remark_len=10_000),
        rocketmq_header(remark=b"abc", remark_len=-1),
        rocketmq_header(ext=[(b"k", b"v")], ext_len=11),
        rocketmq_header(ext=[(b"k", b"v")], ext_len=-1),
        rocketmq_header(ext=[(b"k", b"v")], ext_len=2**31 - 1),
    ],
    ids=[
        "remark+1",
        "remark-huge",
        "remark-negative",
        "ext+1",
        "ext-negative",
        "ext-huge",
    ],
)
def test_rocketmq_remark_or_ext_length_beyond_header_raises(header: bytes) -> None:
    with pytest.raises(FrameError):
        FrameDecoder().feed(encode_frame(SerializeType.ROCKETMQ, header))


@pytest.mark.parametrize(
    "entries",
    [
        b"\x00",  # half a key length
        b"\x00\x05key",  # key shorter than its length
        b"\x00\x01k\x00\x00",  # half a value length
        b"\x00\x01k\x00\x00\x00\x09value",  # value shorter than its length
        b"\xff\xff\x00\x00\x00\x00",  # negative key length
        b"\x00\x01k\xff\xff\xff\xff",  # negative value length
    ],
    ids=["keylen", "key", "valuelen", "value", "keylen-negative", "valuelen-negative"],
)
def test_rocketmq_ext_entry_overrunning_the_ext_section_raises(entries: bytes) -> None:
    header = rocketmq_header()[:-4] + struct.pack(">i", len(entries)) + entries
    with pytest.raises(FrameError):
        FrameDecoder().feed(encode_frame(SerializeType.ROCKETMQ, header))


# --------------------------------------------------------------------------- FrameError.commands


def test_frame_error_carries_the_good_frames_decoded_before_the_broken_one() -> None:
    good1 = json_frame({"code": 206, "opaque": 1})
    good2 = encode_frame(SerializeType.ROCKETMQ, SAMPLE_ROCKETMQ_HEADER, b"x")
    bad = json_frame(b"[1,2,3]")
    trailing_good = json_frame({"code": 106, "opaque": 3})
    with pytest.raises(FrameError) as info:
        FrameDecoder().feed(good1 + good2 + bad + trailing_good)
    assert info.value.commands == [decode_one(good1), decode_one(good2)]


def test_frame_error_commands_hold_only_frames_of_the_failing_feed() -> None:
    good1 = json_frame({"code": 206, "opaque": 1})
    good2 = json_frame({"code": 106, "opaque": 2})
    decoder = FrameDecoder()
    assert decoder.feed(good1) == [decode_one(good1)]
    with pytest.raises(FrameError) as info:
        decoder.feed(good2 + struct.pack(">i", -1))
    assert info.value.commands == [decode_one(good2)]


def test_frame_error_on_first_frame_carries_no_commands() -> None:
    with pytest.raises(FrameError) as info:
        FrameDecoder().feed(encode_frame(2, b"{}") + json_frame({"code": 206}))
    assert info.value.commands == []


# --------------------------------------------------------------------------- lenient JSON (§3)


def test_minimal_json_header_takes_defaults_for_missing_members() -> None:
    assert decode_one(json_frame(b'{"code":106,"opaque":3}')) == RemotingCommand(
        code=106,
        language="JAVA",
        version=0,
        opaque=3,
        flag=0,
        remark=None,
        ext_fields=None,
        body=b"",
        serialize_type=SerializeType.JSON,
    )


def test_empty_json_object_header_is_a_request_with_code_zero() -> None:
    cmd = decode_one(json_frame(b"{}"))
    assert (cmd.code, cmd.flag, cmd.opaque, cmd.language) == (0, 0, 0, "JAVA")


def test_unknown_language_string_is_accepted_verbatim() -> None:
    cmd = decode_one(json_frame(b'{"code":106,"language":"FOO","opaque":3}'))
    assert (cmd.code, cmd.opaque, cmd.language) == (106, 3, "FOO")


def test_numeric_language_is_accepted_as_its_language_name() -> None:
    cmd = decode_one(json_frame(b'{"code":106,"language":9,"opaque":3}'))
    assert (cmd.code, cmd.opaque) == (106, 3)
    assert cmd.language == "GO", "language byte 9 is GO (protocol.md §9)"


def test_ext_field_numbers_and_booleans_are_coerced_to_strings() -> None:
    cmd = decode_one(
        json_frame(b'{"code":105,"extFields":{"n":5,"yes":true,"no":false,"s":"x","neg":-12}}')
    )
    assert cmd.ext_fields == {"n": "5", "yes": "true", "no": "false", "s": "x", "neg": "-12"}


def test_null_ext_field_value_reads_as_missing() -> None:
    cmd = decode_one(json_frame(b'{"code":105,"extFields":{"topic":null,"a":"b"}}'))
    assert cmd.field("topic") is None
    assert cmd.field("a") == "b"


def test_json_header_with_trailing_newline_decodes() -> None:
    cmd = decode_one(json_frame(b'{"code":105,"extFields":{"topic":"T"},"opaque":4}\n', b"b"))
    assert (cmd.code, cmd.opaque, cmd.field("topic"), cmd.body) == (105, 4, "T", b"b")


def test_empty_json_remark_stays_an_empty_string() -> None:
    cmd = decode_one(json_frame(b'{"code":105,"remark":""}'))
    assert cmd.remark == ""


def test_cpp_client_golden_request_with_empty_remark_and_access_key_decodes() -> None:
    cmd = decode_one(golden_frame("clients", 19).raw)
    assert cmd.language == "CPP"
    assert cmd.remark == ""
    assert cmd.field("AccessKey") == ""


def test_serialize_member_in_json_header_is_ignored() -> None:
    cmd = decode_one(json_frame(b'{"code":105,"serializeTypeCurrentRPC":"ROCKETMQ","x":[1]}'))
    assert cmd.serialize_type == SerializeType.JSON


def test_response_flag_is_decoded_from_a_request_frame() -> None:
    cmd = decode_one(golden_frame("errors", 65).raw)
    assert cmd.is_response
    assert not cmd.is_oneway


# --------------------------------------------------------------------------- ROCKETMQ header (§6)

# protocol.md §6: observed 4.9.4 ROCKETMQ answer to GET_KV_CONFIG (42 header bytes).
SPEC_ROCKETMQ_HEADER = (
    bytes.fromhex("0000 00 0191 0000004f 00000001 00000000 00000015 0005")
    + b"value"
    + bytes.fromhex("0000000a")
    + b"broker-b:8"
)


def test_spec_rocketmq_header_example_decodes_and_reencodes() -> None:
    assert len(SPEC_ROCKETMQ_HEADER) == 42
    cmd = decode_one(encode_frame(SerializeType.ROCKETMQ, SPEC_ROCKETMQ_HEADER))
    assert cmd == RemotingCommand(
        code=0,
        language="JAVA",
        version=401,
        opaque=79,
        flag=1,
        remark=None,
        ext_fields={"value": "broker-b:8"},
        serialize_type=SerializeType.ROCKETMQ,
    )
    assert encode_header(cmd) == SPEC_ROCKETMQ_HEADER


def test_rocketmq_zero_length_remark_and_ext_decode_to_none() -> None:
    cmd = decode_one(encode_frame(SerializeType.ROCKETMQ, rocketmq_header()))
    assert cmd.remark is None
    assert cmd.ext_fields is None


def test_rocketmq_empty_ext_value_or_key_reads_as_missing() -> None:
    header = rocketmq_header(ext=[(b"topic", b""), (b"", b"orphan"), (b"k", b"v")])
    cmd = decode_one(encode_frame(SerializeType.ROCKETMQ, header))
    assert cmd.field("topic") is None
    assert cmd.ext_fields == {"k": "v"}


def test_rocketmq_body_starts_after_declared_header_length() -> None:
    cmd = decode_one(encode_frame(SerializeType.ROCKETMQ, SAMPLE_ROCKETMQ_HEADER, b"\x00body"))
    assert cmd.body == b"\x00body"
    assert cmd.remark == "rémark"
    assert cmd.ext_fields == {"topic": "TBW102", "brokerName": "broker-a"}


def test_rocketmq_unknown_language_byte_decodes_as_other() -> None:
    cmd = decode_one(encode_frame(SerializeType.ROCKETMQ, rocketmq_header(language=100)))
    assert cmd.language == "OTHER"


# --------------------------------------------------------------------------- JSON output (§3)

SPEC_JSON_EXAMPLES = [
    (
        RemotingCommand.response_to(RemotingCommand(code=206, opaque=1), 0, version=401),
        '{"code":0,"flag":1,"language":"JAVA","opaque":1,'
        '"serializeTypeCurrentRPC":"JSON","version":401}',
    ),
    (
        RemotingCommand.response_to(
            RemotingCommand(code=103, opaque=0), 0, ext_fields={}, version=401
        ),
        '{"code":0,"extFields":{},"flag":1,"language":"JAVA","opaque":0,'
        '"serializeTypeCurrentRPC":"JSON","version":401}',
    ),
    (
        RemotingCommand.response_to(
            RemotingCommand(code=103, opaque=10, version=121, language="CPP"),
            0,
            ext_fields={"haServerAddr": "127.0.0.1:10922", "masterAddr": "127.0.0.1:10921"},
            version=401,
        ),
        '{"code":0,"extFields":{"haServerAddr":"127.0.0.1:10922","masterAddr":"127.0.0.1:10921"},'
        '"flag":1,"language":"JAVA","opaque":10,"serializeTypeCurrentRPC":"JSON","version":401}',
    ),
    (
        RemotingCommand.response_to(
            RemotingCommand(code=105, opaque=0),
            17,
            remark="No topic route info in name server for the topic: NoSuchTopic\n"
            "See http://rocketmq.apache.org/docs/faq/ for further details.",
            version=401,
        ),
        '{"code":17,"flag":1,"language":"JAVA","opaque":0,"remark":"No topic route info in name'
        " server for the topic: NoSuchTopic\\nSee http://rocketmq.apache.org/docs/faq/ for further"
        ' details.","serializeTypeCurrentRPC":"JSON","version":401}',
    ),
]


@pytest.mark.parametrize(("cmd", "expected"), SPEC_JSON_EXAMPLES, ids=["ok", "ext", "slave", "17"])
def test_json_header_matches_the_exact_java_examples(cmd: RemotingCommand, expected: str) -> None:
    assert encode_header(cmd) == expected.encode()
    raw = encode(cmd)
    assert raw[8:] == expected.encode()
    assert struct.unpack(">iI", raw[:8]) == (4 + len(expected), len(expected))


def test_json_header_omits_remark_and_ext_fields_when_none() -> None:
    text = encode_header(RemotingCommand(code=105, remark=None, ext_fields=None)).decode()
    assert "remark" not in text
    assert "extFields" not in text
    assert " " not in text


def test_json_header_keys_are_alphabetical() -> None:
    cmd = RemotingCommand(code=1, remark="r", ext_fields={"a": "1"}, opaque=5, flag=1)
    keys = list(json.loads(encode_header(cmd)))
    assert keys == sorted(keys)
    assert keys == [
        "code",
        "extFields",
        "flag",
        "language",
        "opaque",
        "remark",
        "serializeTypeCurrentRPC",
        "version",
    ]


def test_frame_layout_has_length_word_and_serialize_byte() -> None:
    cmd = RemotingCommand(code=105, serialize_type=SerializeType.ROCKETMQ, body=b"abc")
    raw = encode(cmd)
    header = encode_header(cmd)
    length, word = struct.unpack_from(">iI", raw)
    assert length == len(raw) - 4 == 4 + len(header) + 3
    assert word >> 24 == 1
    assert word & 0xFFFFFF == len(header)
    assert raw.endswith(b"abc")
    assert decode_frame_payload(raw[4:]) == cmd


def test_response_echoes_request_opaque_and_serialize_type() -> None:
    request = RemotingCommand(
        code=105, opaque=77, version=63, serialize_type=SerializeType.ROCKETMQ
    )
    response = RemotingCommand.response_to(request, 0)
    assert (response.opaque, response.flag, response.version) == (77, 1, 453)  # V5_2_0
    assert RemotingCommand.response_to(request, 0, version=401).version == 401
    assert response.serialize_type == SerializeType.ROCKETMQ
    assert struct.unpack_from(">I", encode(response), 4)[0] >> 24 == 1


# --------------------------------------------------------------------------- round trip

_text = st.text(min_size=1, max_size=30)


@st.composite
def commands(draw: st.DrawFn) -> RemotingCommand:
    return RemotingCommand(
        code=draw(st.integers(-(2**15), 2**15 - 1)),
        language=draw(st.sampled_from([lang.name for lang in LanguageCode])),
        version=draw(st.integers(-(2**15), 2**15 - 1)),
        opaque=draw(st.integers(-(2**31), 2**31 - 1)),
        flag=draw(st.integers(-(2**31), 2**31 - 1)),
        remark=draw(st.none() | _text),
        ext_fields=draw(st.none() | st.dictionaries(_text, _text, min_size=1, max_size=6)),
        body=draw(st.binary(max_size=64)),
        serialize_type=draw(st.sampled_from(SerializeType)),
    )


@settings(max_examples=150, deadline=None)
@given(cmd=commands())
def test_encoded_command_decodes_to_itself(cmd: RemotingCommand) -> None:
    assert decode_one(encode(cmd)) == cmd
