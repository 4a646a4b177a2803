"""Unit tests of the golden loader and comparator.

Mostly about failing: a comparator that accepts everything would make the replay test
worthless, so each rule is shown to reject a mutated copy of a recorded answer, and each
tolerance (hash order, volatile config keys, Java exception text) to accept only what it
should.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from .deviations import DEVIATIONS, DEVIATIONS_5X, deviations_for
from .golden import (
    SCENARIOS,
    SCENARIOS_5X,
    SERIALIZE_JSON,
    SERIALIZE_ROCKETMQ,
    Dialect,
    Event,
    Frame,
    Problem,
    Scenario,
    WireFrame,
    build_answer,
    build_frame,
    compare_answer,
    compare_body,
    decode_rocketmq_header,
    dialect_of,
    encode_rocketmq_header,
    golden_5x_dir,
    golden_dir,
    load_scenario,
    quote_bare_keys,
    shared_dir,
)

FRAME_COUNTS = {
    "register-master-slave": 29,
    "register-compressed": 20,
    "serialize-rocketmq": 37,
    "unregister": 44,
    "admin": 235,
    "clients": 22,
    "errors": 67,
}

_CACHE: dict[str, Scenario] = {}


def scenario(name: str) -> Scenario:
    if name not in _CACHE:
        _CACHE[name] = load_scenario(name)
    return _CACHE[name]


def recorded(name: str, seq: int) -> tuple[WireFrame, int | None]:
    """A recorded s2c frame and the code of the request it answers."""
    sc = scenario(name)
    frame = sc.by_seq[seq]
    assert frame.dir == "s2c"
    return frame.wire(), sc.request_of[seq].code


def with_json(
    wire: WireFrame,
    header: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    body: bytes | None = None,
    *,
    raw_header: bytes | None = None,
) -> WireFrame:
    """A copy of a JSON answer with the header transformed and/or the body replaced."""
    if raw_header is None:
        raw_header = wire.header_raw
        if header is not None:
            new = header(dict(wire.header()))
            raw_header = json.dumps(new, separators=(",", ":"), ensure_ascii=False).encode()
    return WireFrame.parse(
        build_frame(wire.serialize, raw_header, wire.body if body is None else body)
    )


def fields(problems: list[Problem]) -> set[str]:
    return {p.field for p in problems}


def check(name: str, seq: int, mutated: WireFrame) -> list[Problem]:
    wire, code = recorded(name, seq)
    return compare_answer(wire, mutated, request_code=code)


# ---------------------------------------------------------------------- loader


def test_shared_dir_follows_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    monkeypatch.setenv("PYNAMESRV_SHARED", str(tmp_path))
    assert shared_dir() == tmp_path
    assert golden_dir() == tmp_path / "golden"
    monkeypatch.delenv("PYNAMESRV_SHARED")
    assert shared_dir().name == "shared"


@pytest.mark.parametrize("name", SCENARIOS)
def test_scenario_loads_and_pairs(name: str) -> None:
    """All frames load, every recorded answer pairs with one request of its (conn, opaque)."""
    sc = scenario(name)
    assert len(sc.frames) == FRAME_COUNTS[name]
    answers = [f for f in sc.frames if f.dir == "s2c"]
    assert len(sc.request_of) == len(answers)
    for answer in answers:
        request = sc.request_of[answer.seq]
        assert request.seq < answer.seq
        assert (request.conn, request.opaque) == (answer.conn, answer.opaque)
        assert sc.answer_of[request.seq] is answer


def test_pairing_takes_the_latest_request() -> None:
    """errors conn 8 sends '{}' (opaque 0) and then a real request with opaque 0."""
    sc = scenario("errors")
    assert sc.by_seq[18].header == {}
    assert sc.request_of[20].seq == 19
    assert 18 not in sc.answer_of


def test_unanswered_requests_are_the_documented_ones() -> None:
    expected = {
        "register-master-slave": {29},
        "serialize-rocketmq": {29},
        "admin": {141},
        "errors": {1, 4, 15, 18, 65},
    }
    for name in SCENARIOS:
        sc = scenario(name)
        silent = {f.seq for f in sc.frames if f.dir == "c2s" and f.seq not in sc.answer_of}
        broken = {f.seq for f in sc.frames if f.dir == "c2s" and f.header is None}
        broken |= {f.seq for f in sc.frames if f.incomplete or f.malformed}
        assert silent - broken == expected.get(name, set()), name


def test_timeline_puts_events_after_their_frame() -> None:
    items = list(scenario("errors").timeline())
    assert isinstance(items[0], Event) and items[0].after_seq == 0
    last_seq = 0
    for item in items:
        if isinstance(item, Frame):
            assert item.seq == last_seq + 1
            last_seq = item.seq
        else:
            assert item.after_seq == last_seq
    assert last_seq == FRAME_COUNTS["errors"]


def test_first_close_tells_who_hung_up() -> None:
    closes = scenario("errors").first_close()
    assert closes[1].by == "client"
    assert closes[6].by == "server"  # broken JSON header
    assert closes[13].by == "client"  # 16777212: the Java server waits for the rest


def test_rocketmq_headers_roundtrip() -> None:
    for frame in scenario("serialize-rocketmq").frames:
        wire = frame.wire()
        assert wire.serialize == SERIALIZE_ROCKETMQ
        assert decode_rocketmq_header(wire.header_raw) == frame.header
        assert encode_rocketmq_header(frame.header or {}) == wire.header_raw


@pytest.mark.parametrize("name", SCENARIOS)
def test_recorded_answers_match_themselves(name: str) -> None:
    """No false positives: each recorded answer compared with itself is clean."""
    sc = scenario(name)
    for frame in sc.frames:
        if frame.dir == "s2c":
            wire = frame.wire()
            assert compare_answer(wire, wire, request_code=sc.request_of[frame.seq].code) == []


def test_deviations_point_at_requests() -> None:
    """Each listed deviation names a real request frame of its scenario."""
    for dev in DEVIATIONS:
        assert dev.reason and dev.instead
        if dev.scenario is None:
            continue
        frame = scenario(dev.scenario).by_seq[dev.seq or 0]
        assert frame.dir == "c2s" and frame.is_request, (dev.scenario, dev.seq)
        assert deviations_for(dev.scenario)[dev.seq or 0] is dev


# ---------------------------------------------------------------------- header rules


def test_missing_extfields_detected() -> None:
    """Master REGISTER_BROKER answer: extFields {} must be present, not absent."""
    mutated = with_json(recorded("register-master-slave", 2)[0], lambda h: h.pop("extFields") and h)
    problems = check("register-master-slave", 2, mutated)
    assert "header.extFields" in fields(problems)


def test_extra_extfields_detected() -> None:
    """Plain answers carry no extFields; an empty {} is a difference."""
    mutated = with_json(recorded("admin", 104)[0], lambda h: {**h, "extFields": {}})
    assert "header.extFields" in fields(check("admin", 104, mutated))


def test_extfields_value_detected_but_order_ignored() -> None:
    wire, _ = recorded("register-master-slave", 4)
    swapped = with_json(
        wire, lambda h: {**h, "extFields": dict(reversed(list(h["extFields"].items())))}
    )
    assert check("register-master-slave", 4, swapped) == []
    wrong = with_json(
        wire, lambda h: {**h, "extFields": {**h["extFields"], "masterAddr": "127.0.0.1:1"}}
    )
    assert "header.extFields.masterAddr" in fields(check("register-master-slave", 4, wrong))


def test_extfields_number_instead_of_string_detected() -> None:
    """Go maps extFields to map[string]string: 13 is not "13"."""
    wire, _ = recorded("admin", 147)
    mutated = with_json(wire, lambda h: {**h, "extFields": {"wipeTopicCount": 13}})
    assert "header.extFields.wipeTopicCount" in fields(check("admin", 147, mutated))


@pytest.mark.parametrize(
    ("member", "value"),
    [("code", 1), ("code", "0"), ("flag", 3), ("opaque", 99), ("version", 400),
     ("language", "PYTHON"), ("remark", "hello")],
)  # fmt: skip
def test_header_members_detected(member: str, value: Any) -> None:
    mutated = with_json(recorded("admin", 104)[0], lambda h: {**h, member: value})
    assert f"header.{member}" in fields(check("admin", 104, mutated))


def test_serialize_type_member_presence_detected() -> None:
    wire, _ = recorded("admin", 104)
    mutated = with_json(
        wire, lambda h: {k: v for k, v in h.items() if k != "serializeTypeCurrentRPC"}
    )
    assert "header.serializeTypeCurrentRPC" in fields(check("admin", 104, mutated))


def test_header_member_order_and_whitespace_detected() -> None:
    wire, _ = recorded("admin", 104)
    reordered = with_json(wire, lambda h: dict(reversed(list(h.items()))))
    assert "header.memberOrder" in fields(check("admin", 104, reordered))
    spaced = with_json(wire, raw_header=json.dumps(wire.header()).encode())
    assert "header.whitespace" in fields(check("admin", 104, spaced))


def test_topic_not_exist_remark_detected() -> None:
    wire, _ = recorded("admin", 213)
    mutated = with_json(wire, lambda h: {**h, "remark": h["remark"].split("\n")[0]})
    assert "header.remark" in fields(check("admin", 213, mutated))


def test_java_exception_remark_is_not_compared_but_code_is() -> None:
    wire, _ = recorded("errors", 46)
    other_text = with_json(wire, lambda h: {**h, "remark": "ValueError: not json"})
    assert check("errors", 46, other_text) == []
    other_code = with_json(wire, lambda h: {**h, "code": 0})
    assert "header.code" in fields(check("errors", 46, other_code))


def test_plain_system_error_remark_is_compared() -> None:
    """'crc32 not match' is not an exception text: it must match exactly."""
    wire, _ = recorded("errors", 30)
    mutated = with_json(wire, lambda h: {**h, "remark": "crc32 mismatch"})
    assert "header.remark" in fields(check("errors", 30, mutated))


def test_undecodable_header_detected() -> None:
    wire, _ = recorded("admin", 104)
    broken = with_json(wire, raw_header=wire.header_raw[:-1])
    assert "header" in fields(check("admin", 104, broken))


# ---------------------------------------------------------------------- ROCKETMQ answers


def test_rocketmq_answer_as_json_detected() -> None:
    wire, _ = recorded("serialize-rocketmq", 4)
    as_json = build_answer(SERIALIZE_JSON, {**wire.header(), "serializeTypeCurrentRPC": "JSON"})
    assert fields(check("serialize-rocketmq", 4, as_json)) == {"serializeType"}


def test_rocketmq_header_fields_detected() -> None:
    wire, _ = recorded("serialize-rocketmq", 4)
    header = wire.header()
    no_ext = build_answer(SERIALIZE_ROCKETMQ, {k: v for k, v in header.items() if k != "extFields"})
    assert "header.extFields" in fields(check("serialize-rocketmq", 4, no_ext))
    wrong = build_answer(
        SERIALIZE_ROCKETMQ, {**header, "extFields": {**header["extFields"], "haServerAddr": "x"}}
    )
    assert "header.extFields.haServerAddr" in fields(check("serialize-rocketmq", 4, wrong))
    lang = build_answer(SERIALIZE_ROCKETMQ, {**header, "language": "CPP"})
    assert "header.language" in fields(check("serialize-rocketmq", 4, lang))
    assert check("serialize-rocketmq", 4, build_answer(SERIALIZE_ROCKETMQ, header)) == []


def test_rocketmq_body_still_compared() -> None:
    wire, _ = recorded("serialize-rocketmq", 20)
    mutated = WireFrame.parse(
        build_frame(wire.serialize, wire.header_raw, wire.body.replace(b'"perm":6', b'"perm":2'))
    )
    assert any(f.endswith(".perm") for f in fields(check("serialize-rocketmq", 20, mutated)))


# ---------------------------------------------------------------------- bodies


def test_changed_perm_detected() -> None:
    wire, _ = recorded("register-master-slave", 19)
    assert b'"perm":6' in wire.body
    mutated = with_json(wire, body=wire.body.replace(b'"perm":6', b'"perm":7'))
    assert fields(check("register-master-slave", 19, mutated)) == {"body.queueDatas.broker-a.perm"}


def test_missing_and_extra_body_member_detected() -> None:
    wire, _ = recorded("register-master-slave", 19)
    no_filter = with_json(wire, body=wire.body.replace(b'"filterServerTable":{},', b""))
    assert "body.filterServerTable" in fields(check("register-master-slave", 19, no_filter))
    extra = with_json(
        wire, body=wire.body.replace(b'"filterServerTable":{}', b'"filterServerTable":{},"x":1')
    )
    assert "body.x" in fields(check("register-master-slave", 19, extra))


def test_quoted_keys_where_java_writes_bare_ones_detected() -> None:
    """C++ client (version 63) got {0:"..."}; quoted keys are the other dialect."""
    wire, _ = recorded("clients", 20)
    assert b'{0:"127.0.0.1:19620"}' in wire.body
    quoted = with_json(wire, body=wire.body.replace(b"{0:", b'{"0":'))
    assert fields(check("clients", 20, quoted)) == {
        "body.dialect.bare_numeric_keys",
        "body.dialect.quoted_numeric_keys",
    }


def test_bare_keys_where_java_writes_quoted_ones_detected() -> None:
    wire, _ = recorded("admin", 207)
    assert b'{"0":"127.0.0.1:19520"}' in wire.body
    bare = with_json(wire, body=wire.body.replace(b'{"0":', b"{0:"))
    assert "body.dialect.bare_numeric_keys" in fields(check("admin", 207, bare))


def test_cluster_info_keys_must_stay_bare() -> None:
    wire, _ = recorded("register-master-slave", 28)
    quoted = with_json(wire, body=wire.body.replace(b"{0:", b'{"0":').replace(b",1:", b',"1":'))
    assert "body.dialect.quoted_numeric_keys" in fields(check("register-master-slave", 28, quoted))


def test_changed_broker_address_detected() -> None:
    wire, _ = recorded("register-master-slave", 28)
    mutated = with_json(
        wire, body=wire.body.replace(b'1:"127.0.0.1:19130"', b'2:"127.0.0.1:19130"')
    )
    problems = fields(check("register-master-slave", 28, mutated))
    assert "body.brokerAddrTable.broker-a.brokerAddrs.1" in problems
    assert "body.brokerAddrTable.broker-a.brokerAddrs.2" in problems


def test_topic_list_order_ignored_but_content_checked() -> None:
    wire, _ = recorded("admin", 235)
    topics = json.loads(wire.body)["topicList"]
    reordered = with_json(
        wire, body=json.dumps({"topicList": topics[::-1]}, separators=(",", ":")).encode()
    )
    assert check("admin", 235, reordered) == []
    missing = with_json(
        wire, body=json.dumps({"topicList": topics[1:]}, separators=(",", ":")).encode()
    )
    assert "body.topicList" in fields(check("admin", 235, missing))
    duplicate = with_json(
        wire, body=json.dumps({"topicList": [*topics, topics[0]]}, separators=(",", ":")).encode()
    )
    assert "body.topicList" in fields(check("admin", 235, duplicate))


def test_multi_broker_route_order_ignored() -> None:
    """brokerDatas/queueDatas of several brokers come in HashMap order (json-dialect.md)."""
    a = (
        b'{"brokerDatas":[{"brokerAddrs":{"0":"127.0.0.1:10921","1":"127.0.0.1:10931"},'
        b'"brokerName":"broker-b","cluster":"DefaultCluster"},{"brokerAddrs":{"0":"127.0.0.1:10911"},'
        b'"brokerName":"broker-a","cluster":"DefaultCluster"}],"filterServerTable":{},"queueDatas":'
        b'[{"brokerName":"broker-b","perm":7,"readQueueNums":8,"topicSysFlag":0,"writeQueueNums":8},'
        b'{"brokerName":"broker-a","perm":7,"readQueueNums":8,"topicSysFlag":0,"writeQueueNums":8}]}'
    )
    data = json.loads(a)
    data["brokerDatas"].reverse()
    data["queueDatas"].reverse()
    b = json.dumps(data, separators=(",", ":")).encode()
    assert compare_body(a, b, request_code=105) == []
    data["queueDatas"][0]["writeQueueNums"] = 4
    c = json.dumps(data, separators=(",", ":")).encode()
    assert fields(compare_body(a, c, request_code=105)) == {
        "body.queueDatas.broker-a.writeQueueNums"
    }


def test_cluster_set_order_ignored() -> None:
    a = b'{"brokerAddrTable":{},"clusterAddrTable":{"DefaultCluster":["broker-b","broker-a"]}}'
    b = b'{"brokerAddrTable":{},"clusterAddrTable":{"DefaultCluster":["broker-a","broker-b"]}}'
    c = b'{"brokerAddrTable":{},"clusterAddrTable":{"DefaultCluster":["broker-a"]}}'
    assert compare_body(a, b, request_code=106) == []
    assert fields(compare_body(a, c, request_code=106)) == {"body.clusterAddrTable.DefaultCluster"}


def test_plain_lists_keep_their_order() -> None:
    a, b = b'{"filterServerList":["x","y"]}', b'{"filterServerList":["y","x"]}'
    assert compare_body(a, b, request_code=None) != []


def test_body_presence_detected() -> None:
    wire, _ = recorded("admin", 233)
    assert wire.body == b'{"table":{}}'
    assert "body" in fields(check("admin", 233, with_json(wire, body=b"")))
    wire2, _ = recorded("admin", 2)
    assert "body" in fields(check("admin", 2, with_json(wire2, body=b'{"table":{}}')))


def test_data_version_value_detected() -> None:
    wire, _ = recorded("admin", 16)
    mutated = with_json(wire, body=wire.body.replace(b'"counter":3', b'"counter":4'))
    assert fields(check("admin", 16, mutated)) == {"body.counter"}


def test_unparseable_body_detected() -> None:
    wire, _ = recorded("admin", 16)
    assert "body" in fields(check("admin", 16, with_json(wire, body=b"{counter:")))


# ---------------------------------------------------------------------- dialect


def test_dialect_of_spec_examples() -> None:
    legacy = (
        '{"brokerAddrs":{0:"10.0.0.3:10911",2:"a"},"brokerName":"bröker-x","cluster":"Clu/ster"}'
    )
    standard = (
        '{"brokerAddrs":{"0":"10.0.0.3:10911","2":"a"},"brokerName":"br\\u00F6ker-x",'
        '"cluster":"Clu\\/ster"}'
    )
    assert dialect_of(legacy) == Dialect(bare_numeric_keys=True, raw_slash=True, raw_non_ascii=True)
    assert dialect_of(standard) == Dialect(
        quoted_numeric_keys=True, escaped_slash=True, unicode_escapes=True
    )
    assert dialect_of('{"a": 1}') == Dialect(whitespace=True)
    assert dialect_of('{"a":"\\u00f6"}').lowercase_unicode_escapes
    assert dialect_of('["0",{"k":"0"}]') == Dialect()  # numeric *values* are not keys


def test_escaping_differences_detected() -> None:
    a = b'{"cluster":"Clu\\/ster","name":"br\\u00F6ker"}'
    raw = '{"cluster":"Clu/ster","name":"bröker"}'.encode()
    problems = fields(compare_body(a, raw, request_code=105))
    assert problems == {
        "body.dialect.escaped_slash",
        "body.dialect.raw_slash",
        "body.dialect.unicode_escapes",
        "body.dialect.raw_non_ascii",
    }
    spaced = b'{"cluster": "Clu\\/ster", "name": "br\\u00F6ker"}'
    assert fields(compare_body(a, spaced, request_code=105)) == {"body.dialect.whitespace"}


# ---------------------------------------------------------------------- GET_NAMESRV_CONFIG


def _config_answer() -> tuple[WireFrame, dict[str, str]]:
    wire, _ = recorded("admin", 132)
    lines = dict(line.split("=", 1) for line in wire.body.decode().splitlines())
    return wire, lines


def _config_body(lines: dict[str, str]) -> bytes:
    return "".join(f"{k}={v}\n" for k, v in lines.items()).encode()


def test_config_volatile_keys_and_order_ignored() -> None:
    wire, lines = _config_answer()
    assert "serverWorkerThreads" in lines
    changed = {**lines, "listenPort": "1", "rocketmqHome": "/x", "kvConfigPath": "/k",
               "configStorePath": "/c"}  # fmt: skip
    reordered = dict(sorted(changed.items()))
    assert check("admin", 132, with_json(wire, body=_config_body(reordered))) == []


def test_config_values_detected() -> None:
    wire, lines = _config_answer()
    changed = with_json(wire, body=_config_body({**lines, "serverWorkerThreads": "9"}))
    assert fields(check("admin", 132, changed)) == {"body.config.serverWorkerThreads"}
    missing = with_json(
        wire, body=_config_body({k: v for k, v in lines.items() if k != "productEnvName"})
    )
    assert fields(check("admin", 132, missing)) == {"body.config.productEnvName"}
    extra = with_json(wire, body=_config_body({**lines, "enableTopicList": "true"}))
    assert fields(check("admin", 132, extra)) == {"body.config.enableTopicList"}


def test_config_exact_pins_ignored_keys() -> None:
    wire, lines = _config_answer()
    ours = _config_body({**lines, "kvConfigPath": "/tmp/kv.json"})
    ok = compare_answer(wire, with_json(wire, body=ours), request_code=319,
                        config_exact={"kvConfigPath": "/tmp/kv.json"})  # fmt: skip
    assert ok == []
    bad = compare_answer(wire, with_json(wire, body=ours), request_code=319,
                         config_exact={"kvConfigPath": "/elsewhere"})  # fmt: skip
    assert fields(bad) == {"body.config.kvConfigPath"}


# ---------------------------------------------------------------------- golden-5x (5.2.0)

FRAME_COUNTS_5X = {  # golden-5x/README.md
    "register-admin": 358,
    "acting-master": 687,
    "zone-route": 134,
    "split-register": 96,
    "compat-old-namesrv": 350,
    "namesrv-restart": 100,
}


def scenario_5x(name: str) -> Scenario:
    key = f"5x/{name}"
    if key not in _CACHE:
        _CACHE[key] = load_scenario(name, golden_5x_dir())
    return _CACHE[key]


@pytest.mark.parametrize("name", SCENARIOS_5X)
def test_5x_scenario_loads_pairs_and_is_timed(name: str) -> None:
    sc = scenario_5x(name)
    assert len(sc.frames) == FRAME_COUNTS_5X[name]
    assert all(f.t is not None for f in sc.frames)
    times = [f.t for f in sc.frames]
    assert times == sorted(times)  # the scripted clock never runs backwards
    for answer in (f for f in sc.frames if f.dir == "s2c"):
        request = sc.request_of[answer.seq]
        assert (request.conn, request.opaque) == (answer.conn, answer.opaque)
        wire = answer.wire()
        assert compare_answer(wire, wire, request_code=request.code) == []


def test_5x_deviations_point_at_requests() -> None:
    for dev in DEVIATIONS_5X:
        assert dev.reason and dev.instead
        if dev.seq is None:
            continue
        assert dev.scenario in SCENARIOS_5X
        frame = scenario_5x(dev.scenario).by_seq[dev.seq]
        assert frame.dir == "c2s" and frame.is_request, (dev.scenario, dev.seq)
        assert deviations_for(dev.scenario)[dev.seq] is dev
        if dev.answer_like is not None:
            assert scenario_5x(dev.scenario).by_seq[dev.answer_like].dir == "s2c"


def test_quoting_bare_keys_leaves_strings_alone() -> None:
    text = '{"brokerAddrs":{0:"127.0.0.1:34911",1:"a,2:b"},"x":[{-3:4}]}'
    assert quote_bare_keys(text) == (
        '{"brokerAddrs":{"0":"127.0.0.1:34911","1":"a,2:b"},"x":[{"-3":4}]}'
    )
    assert dialect_of(quote_bare_keys(text)) == Dialect(quoted_numeric_keys=True, raw_slash=False)
