"""REGISTER_BROKER bodies (spec/requests.md "103 REGISTER_BROKER"): JSON, compressed, bare.

Golden bodies come from ``<repo>/../shared/golden`` (or ``$PYNAMESRV_SHARED/golden``).
"""

from __future__ import annotations

import base64
import functools
import json
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pynamesrv.namesrv.model import BodyError, DataVersion, RegisterBrokerBody, TopicConfig

REGISTER_BROKER = 103

# --------------------------------------------------------------------------- golden corpus


def _shared_dir() -> Path:
    env = os.environ.get("PYNAMESRV_SHARED")
    return Path(env) if env else Path(__file__).resolve().parents[2].parent / "shared"


@dataclass(frozen=True)
class RegisterRequest:
    scenario: str
    seq: int
    version: int
    compressed: bool
    body_crc32: int
    body: bytes

    @property
    def name(self) -> str:
        return f"{self.scenario}-{self.seq}"


@functools.cache
def register_requests(scenario: str) -> tuple[RegisterRequest, ...]:
    path = _shared_dir() / "golden" / f"{scenario}.jsonl"
    out: list[RegisterRequest] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        rec = json.loads(line)
        header = rec["header"]
        if rec["dir"] != "c2s" or not header or header.get("code") != REGISTER_BROKER:
            continue
        ext = header.get("extFields") or {}
        out.append(
            RegisterRequest(
                scenario=scenario,
                seq=rec["seq"],
                version=header.get("version", 0),
                compressed=ext.get("compressed") == "true",
                body_crc32=int(ext.get("bodyCrc32", "0")),
                body=base64.b64decode(rec["body_b64"]),
            )
        )
    return tuple(out)


def register_request(scenario: str, seq: int) -> RegisterRequest:
    for req in register_requests(scenario):
        if req.seq == seq:
            return req
    raise LookupError(f"no REGISTER_BROKER at {scenario} seq {seq}")


def decode(req: RegisterRequest) -> RegisterBrokerBody:
    return RegisterBrokerBody.decode(req.body, compressed=req.compressed, version=req.version)


def queues(body: RegisterBrokerBody) -> dict[str, tuple[int, int, int, int]]:
    """topic -> (read, write, perm, sysFlag)."""
    return {
        t.topic_name: (t.read_queue_nums, t.write_queue_nums, t.perm, t.topic_sys_flag)
        for t in body.topic_configs
    }


DEFAULT_TOPICS = {
    "SCHEDULE_TOPIC_XXXX": (18, 18, 6, 0),
    "DefaultCluster_REPLY_TOPIC": (1, 1, 6, 0),
    "BenchmarkTest": (1024, 1024, 6, 0),
    "OFFSET_MOVED_EVENT": (1, 1, 6, 0),
    "broker-a": (1, 1, 7, 0),
    "TBW102": (8, 8, 7, 0),
    "SELF_TEST_TOPIC": (1, 1, 6, 0),
    "DefaultCluster": (16, 16, 7, 0),
}

# --------------------------------------------------------------------------- golden bodies


def test_golden_compressed_register_bodies_are_compressed_requests() -> None:
    reqs = register_requests("register-compressed")
    assert [r.seq for r in reqs] == [1, 3, 7]
    for req in reqs:
        assert req.compressed, req.name
        assert req.body[:2] == b"\x78\xda", req.name


def test_golden_compressed_full_registration_decodes() -> None:
    body = decode(register_request("register-compressed", 1))
    assert body.data_version == DataVersion(timestamp=1795313878819, counter=0)
    assert queues(body) == DEFAULT_TOPICS
    assert [t.topic_name for t in body.topic_configs][:2] == [
        "SCHEDULE_TOPIC_XXXX",
        "DefaultCluster_REPLY_TOPIC",
    ], "topics keep the broker's order"
    assert body.filter_server_list == []
    # The compact form carries neither topicSysFlag nor order.
    assert all(not t.order and t.topic_sys_flag == 0 for t in body.topic_configs)
    assert {t.topic_filter_type for t in body.topic_configs} == {"SINGLE_TAG"}


def test_golden_compressed_incremental_registration_decodes() -> None:
    body = decode(register_request("register-compressed", 7))
    assert body.data_version.counter == 1
    assert queues(body) == {"GoldenCompressedTopic": (2, 2, 6, 0)}


def test_golden_json_master_and_slave_registrations_decode() -> None:
    master = decode(register_request("register-master-slave", 1))
    slave = decode(register_request("register-master-slave", 3))
    assert queues(master) == DEFAULT_TOPICS
    assert queues(slave) == DEFAULT_TOPICS
    assert master.data_version == DataVersion(timestamp=1795313762190, counter=0)
    assert slave.data_version == DataVersion(timestamp=1795313764536, counter=0)
    assert master.filter_server_list == []


def test_golden_json_incremental_and_oneway_registrations_decode() -> None:
    incremental = decode(register_request("register-master-slave", 14))
    assert incremental.data_version.counter == 1
    assert queues(incremental) == {"GoldenTopicA": (4, 4, 6, 0)}
    oneway = decode(register_request("register-master-slave", 29))
    assert oneway.data_version.counter == 2
    assert queues(oneway) == {
        **DEFAULT_TOPICS,
        "RMQ_SYS_TRANS_HALF_TOPIC": (1, 1, 6, 0),
        "GoldenTopicA": (4, 4, 6, 0),
    }


def test_golden_json_registration_keeps_topic_sys_flag() -> None:
    flags = {seq: queues(decode(register_request("admin", seq))) for seq in (9, 13, 19)}
    assert flags == {
        9: {"GoldenUnitTopic": (1, 1, 6, 1)},
        13: {"GoldenUnitSubTopic": (1, 1, 6, 2)},
        19: {"GoldenUnitBothTopic": (1, 1, 6, 3)},
    }


@pytest.mark.parametrize(
    "scenario", ["register-master-slave", "serialize-rocketmq", "unregister", "admin", "clients"]
)
def test_golden_json_register_bodies_reencode_byte_for_byte(scenario: str) -> None:
    reqs = register_requests(scenario)
    assert reqs
    for req in reqs:
        body = decode(req)
        assert body.encode(compressed=False) == req.body, req.name
        assert zlib.crc32(req.body) & 0x7FFFFFFF == req.body_crc32, req.name


def test_golden_compressed_register_bodies_reencode_to_the_same_plaintext() -> None:
    for req in register_requests("register-compressed"):
        encoded = decode(req).encode(compressed=True)
        assert encoded[:2] == b"\x78\xda", "zlib stream at level 9 like Java's Deflater"
        assert zlib.decompress(encoded) == zlib.decompress(req.body), req.name


def test_golden_not_json_register_body_raises_body_error() -> None:
    req = register_request("errors", 45)
    assert req.body == b"not json"
    with pytest.raises(BodyError, match="Failed to decode RegisterBrokerBody"):
        decode(req)


# --------------------------------------------------------------------------- round trips

_json_topic_names = st.text(min_size=1, max_size=30)
_compact_topic_names = st.from_regex(r"[A-Za-z0-9_%|-]{1,40}", fullmatch=True)
_filter_servers = st.lists(st.from_regex(r"[0-9.]{1,15}:[0-9]{1,5}", fullmatch=True), max_size=3)
_long = st.integers(min_value=0, max_value=2**63 - 1)


@st.composite
def data_versions(draw: st.DrawFn) -> DataVersion:
    return DataVersion(
        timestamp=draw(_long),
        counter=draw(_long),
        state_version=draw(st.just(0) | st.integers(0, 2**31 - 1)),
    )


@st.composite
def register_bodies(draw: st.DrawFn, compressed: bool) -> RegisterBrokerBody:
    names = draw(
        st.lists(
            _compact_topic_names if compressed else _json_topic_names, unique=True, max_size=12
        )
    )
    topics = [
        TopicConfig(
            topic_name=name,
            read_queue_nums=draw(st.integers(0, 1024)),
            write_queue_nums=draw(st.integers(0, 1024)),
            perm=draw(st.integers(0, 15)),
            topic_sys_flag=0 if compressed else draw(st.integers(0, 3)),
            order=False if compressed else draw(st.booleans()),
            topic_filter_type=draw(st.sampled_from(["SINGLE_TAG", "MULTI_TAG"])),
            attributes=None
            if compressed
            else draw(
                st.none()
                | st.dictionaries(st.text(min_size=1, max_size=8), st.text(max_size=8), max_size=3)
            ),
        )
        for name in names
    ]
    return RegisterBrokerBody(draw(data_versions()), topics, draw(_filter_servers))


@settings(max_examples=60, deadline=None)
@given(body=register_bodies(compressed=False))
def test_json_register_body_round_trips(body: RegisterBrokerBody) -> None:
    encoded = body.encode(compressed=False)
    assert RegisterBrokerBody.decode(encoded, compressed=False, version=401) == body


@settings(max_examples=60, deadline=None)
@given(body=register_bodies(compressed=True))
def test_compressed_register_body_round_trips(body: RegisterBrokerBody) -> None:
    encoded = body.encode(compressed=True)
    assert RegisterBrokerBody.decode(encoded, compressed=True, version=401) == body


def test_compressed_form_drops_sys_flag_order_and_attributes() -> None:
    body = RegisterBrokerBody(
        DataVersion(5, 6),
        [TopicConfig("T", 3, 4, 6, topic_sys_flag=3, order=True, attributes={"a": "b"})],
        None,
    )
    decoded = RegisterBrokerBody.decode(body.encode(compressed=True), compressed=True, version=401)
    assert decoded.topic_configs == [TopicConfig("T", 3, 4, 6)]
    assert decoded.filter_server_list == []


# --------------------------------------------------------------------------- body forms

BARE_WRAPPER = (
    b'{"dataVersion":{"counter":4,"timestamp":1700000000000},"topicConfigTable":{"OldTopic":'
    b'{"order":false,"perm":6,"readQueueNums":2,"topicFilterType":"SINGLE_TAG",'
    b'"topicName":"OldTopic","topicSysFlag":0,"writeQueueNums":3}}}'
)


def test_version_below_37_reads_the_bare_topic_config_wrapper() -> None:
    body = RegisterBrokerBody.decode(BARE_WRAPPER, compressed=False, version=36)
    assert body.data_version == DataVersion(timestamp=1700000000000, counter=4)
    assert queues(body) == {"OldTopic": (2, 3, 6, 0)}
    assert body.filter_server_list is None, "no filter-server list below V3_0_11"


def test_version_37_reads_the_register_broker_body_wrapper() -> None:
    full = b'{"filterServerList":["1.2.3.4:5"],"topicConfigSerializeWrapper":' + BARE_WRAPPER + b"}"
    body = RegisterBrokerBody.decode(full, compressed=False, version=37)
    assert queues(body) == {"OldTopic": (2, 3, 6, 0)}
    assert body.filter_server_list == ["1.2.3.4:5"]
    assert RegisterBrokerBody.decode(full, compressed=False, version=36).topic_configs == []


@pytest.mark.parametrize("compressed", [False, True])
@pytest.mark.parametrize("version", [0, 36, 401, 479])
def test_empty_body_is_an_empty_table_with_version_zero(compressed: bool, version: int) -> None:
    body = RegisterBrokerBody.decode(b"", compressed=compressed, version=version)
    assert body.topic_configs == []
    assert body.data_version == DataVersion(timestamp=0, counter=0)


def test_json_topic_config_missing_members_take_java_defaults() -> None:
    raw = b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"T":{"topicName":"T"}}}}'
    (topic,) = RegisterBrokerBody.decode(raw, compressed=False, version=401).topic_configs
    assert topic == TopicConfig("T", 16, 16, 6, 0, False, "SINGLE_TAG", None)


def test_json_body_accepts_5x_members_and_bare_integer_keys() -> None:
    raw = (
        b'{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":3,'
        b'"stateVersion":2,"timestamp":9},"mappingDataVersion":{"counter":0,"timestamp":1},'
        b'"topicConfigTable":{"T":{"attributes":{"+message.type":"FIFO"},"order":false,"perm":6,'
        b'"readQueueNums":8,"topicFilterType":"SINGLE_TAG","topicName":"T","topicSysFlag":0,'
        b'"writeQueueNums":8}},"topicQueueMappingDetailMap":{"T":{"currIdMap":{0:1}}}}}'
    )
    body = RegisterBrokerBody.decode(raw, compressed=False, version=479)
    assert body.data_version == DataVersion(timestamp=9, counter=3, state_version=2)
    assert body.topic_configs[0].attributes == {"+message.type": "FIFO"}


# --------------------------------------------------------------------------- compact form by hand


def chunk(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


def compact_plaintext(
    lines: list[str],
    *,
    data_version: bytes = b'{"counter":1,"timestamp":2}',
    filters: bytes = b"[]",
    count: int | None = None,
    tail: bytes = b"",
) -> bytes:
    return (
        chunk(data_version)
        + struct.pack(">i", len(lines) if count is None else count)
        + b"".join(chunk(line.encode()) for line in lines)
        + chunk(filters)
        + tail
    )


def compact(lines: list[str], **kwargs: Any) -> bytes:
    return zlib.compress(compact_plaintext(lines, **kwargs), 9)


def test_compressed_5x_six_token_lines_with_attributes_are_accepted() -> None:
    raw = compact(
        [
            'Fifo 4 4 6 SINGLE_TAG {"+message.type":"FIFO"}',
            'Spaced 2 2 6 SINGLE_TAG {"+a": "b c"}',
            "NoJson 1 1 6 SINGLE_TAG not-json",
            "Plain 8 8 7 SINGLE_TAG",
        ],
        data_version=b'{"counter":1,"stateVersion":7,"timestamp":2}',
        tail=struct.pack(">i", 1) + chunk(b'{"topic":"Fifo","currIdMap":{0:0}}'),
    )
    body = RegisterBrokerBody.decode(raw, compressed=True, version=479)
    assert body.data_version == DataVersion(timestamp=2, counter=1, state_version=7)
    assert queues(body) == {
        "Fifo": (4, 4, 6, 0),
        "Spaced": (2, 2, 6, 0),
        "NoJson": (1, 1, 6, 0),
        "Plain": (8, 8, 7, 0),
    }
    attributes = {t.topic_name: t.attributes for t in body.topic_configs}
    assert attributes == {
        "Fifo": {"+message.type": "FIFO"},
        "Spaced": {"+a": "b c"},
        "NoJson": None,
        "Plain": None,
    }


def test_compressed_line_trailing_spaces_are_dropped() -> None:
    body = RegisterBrokerBody.decode(compact(["T 1 2 6 MULTI_TAG  "]), compressed=True, version=401)
    assert body.topic_configs == [TopicConfig("T", 1, 2, 6, topic_filter_type="MULTI_TAG")]


@pytest.mark.parametrize(
    "line",
    ["T 1 1 6", "T 1 1", "T", "", "T x 1 6 SINGLE_TAG", "T 1 1 six SINGLE_TAG"],
    ids=["4-tokens", "3-tokens", "1-token", "empty", "bad-read", "bad-perm"],
)
def test_compressed_bad_topic_line_raises_body_error(line: str) -> None:
    with pytest.raises(BodyError):
        RegisterBrokerBody.decode(compact([line]), compressed=True, version=401)


def test_truncated_compressed_stream_raises_body_error() -> None:
    raw = compact(["TBW102 8 8 7 SINGLE_TAG", "T 1 1 6 SINGLE_TAG"])
    for cut in range(len(raw)):
        with pytest.raises(BodyError):
            RegisterBrokerBody.decode(raw[:cut] or b"\x78", compressed=True, version=401)


def test_truncated_compact_plaintext_raises_body_error() -> None:
    plain = compact_plaintext(["TBW102 8 8 7 SINGLE_TAG", "T 1 1 6 SINGLE_TAG"])
    for cut in range(len(plain)):
        with pytest.raises(BodyError):
            RegisterBrokerBody.decode(zlib.compress(plain[:cut]), compressed=True, version=401)


@pytest.mark.parametrize(
    "raw",
    [
        compact(["T 1 1 6 SINGLE_TAG"], count=-1),
        compact(["T 1 1 6 SINGLE_TAG"], count=2),
        compact(["T 1 1 6 SINGLE_TAG"], filters=b'{"a":1}'),
        compact(["T 1 1 6 SINGLE_TAG"], filters=b"[oops"),
        compact(["T 1 1 6 SINGLE_TAG"], data_version=b"[1]"),
        compact(["T 1 1 6 SINGLE_TAG"], data_version=b"{"),
        zlib.compress(
            compact_plaintext(["T 1 1 6 SINGLE_TAG"])[:-6] + struct.pack(">i", 9) + b"[]"
        ),
    ],
    ids=[
        "negative-count",
        "count-too-high",
        "filters-object",
        "filters-broken",
        "dv-array",
        "dv-broken",
        "filters-length-overrun",
    ],
)
def test_inconsistent_compact_plaintext_raises_body_error(raw: bytes) -> None:
    with pytest.raises(BodyError):
        RegisterBrokerBody.decode(raw, compressed=True, version=401)


@pytest.mark.parametrize(
    "raw", [b"not json", b"\x00\x01\x02", b"\x78\xda\x00\x00garbage", b"{}"], ids=repr
)
def test_garbage_compressed_body_raises_body_error(raw: bytes) -> None:
    with pytest.raises(BodyError):
        RegisterBrokerBody.decode(raw, compressed=True, version=401)


@pytest.mark.parametrize(
    "raw",
    [b"not json", b"{", b"\xff\xfe", b'{"filterServerList":[]'],
    ids=["text", "open-brace", "binary", "unterminated"],
)
@pytest.mark.parametrize("version", [36, 401])
def test_garbage_json_body_raises_body_error(raw: bytes, version: int) -> None:
    with pytest.raises(BodyError):
        RegisterBrokerBody.decode(raw, compressed=False, version=version)


@pytest.mark.parametrize(
    "raw",
    [
        b"[1,2]",
        b"42",
        b'"body"',
        b"true",
        b'{"topicConfigSerializeWrapper":[]}',
        b'{"topicConfigSerializeWrapper":{"topicConfigTable":[{"topicName":"T"}]}}',
        b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"T":7}}}',
        b'{"topicConfigSerializeWrapper":{"topicConfigTable":{"T":{"perm":6}}}}',
        b'{"topicConfigSerializeWrapper":{"dataVersion":5}}',
        b'{"topicConfigSerializeWrapper":{"dataVersion":{"counter":"x"}}}',
    ],
    ids=[
        "array",
        "number",
        "string",
        "bool",
        "wrapper-array",
        "table-array",
        "topic-number",
        "topic-no-name",
        "dv-number",
        "dv-counter-text",
    ],
)
def test_non_object_json_body_raises_body_error(raw: bytes) -> None:
    with pytest.raises(BodyError):
        RegisterBrokerBody.decode(raw, compressed=False, version=401)


@pytest.mark.parametrize("raw", [b"[1,2]", b"42", b'{"topicConfigTable":[{"topicName":"T"}]}'])
def test_non_object_bare_wrapper_raises_body_error(raw: bytes) -> None:
    with pytest.raises(BodyError):
        RegisterBrokerBody.decode(raw, compressed=False, version=36)
