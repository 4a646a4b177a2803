"""fastjson dialects: the literal examples of spec/json-dialect.md, escapes, lenient parsing.

Dialect A (``standard=False``): fastjson's default, bare integer map keys, raw non-ASCII.
Dialect B (``standard=True``): quoted keys, every map sorted, ASCII only, ``/`` escaped.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pynamesrv.remoting import fastjson

# --------------------------------------------------------------------------- §4 literal examples

# The "fastjson test with non-trivial data" of json-dialect.md §4. The spec elides queueDatas
# as "[...]"; QUEUE_DATAS stands in for it, and its two encodings replace "[...]".
SPEC_NONTRIVIAL_A = (
    '{"brokerDatas":[{"brokerAddrs":{0:"10.0.0.3:10911",2:"10.0.0.2:10911",10:"10.0.0.1:10911"}'
    ',"brokerName":"bröker-x","cluster":"Clu/ster"}],"filterServerTable":{"z:1":["f1"],'
    '"a:1":["f2"]},"orderTopicConf":"b:8;a<8>","queueDatas":[...]}'
)
SPEC_NONTRIVIAL_B = (
    '{"brokerDatas":[{"brokerAddrs":{"0":"10.0.0.3:10911","2":"10.0.0.2:10911",'
    '"10":"10.0.0.1:10911"},"brokerName":"br\\u00F6ker-x","cluster":"Clu\\/ster"}],'
    '"filterServerTable":{"a:1":["f2"],"z:1":["f1"]},"orderTopicConf":"b:8;a<8>",'
    '"queueDatas":[...]}'
)
QUEUE_DATAS: list[dict[str, Any]] = [
    {
        "brokerName": "bröker-x",
        "perm": 6,
        "readQueueNums": 8,
        "topicSysFlag": 0,
        "writeQueueNums": 8,
    }
]
QUEUE_DATAS_A = (
    '[{"brokerName":"bröker-x","perm":6,"readQueueNums":8,"topicSysFlag":0,"writeQueueNums":8}]'
)
QUEUE_DATAS_B = (
    '[{"brokerName":"br\\u00F6ker-x","perm":6,"readQueueNums":8,"topicSysFlag":0,'
    '"writeQueueNums":8}]'
)


def nontrivial_route(broker_addrs: dict[int, str], filters: dict[str, list[str]]) -> Any:
    return {
        "brokerDatas": [
            {"brokerAddrs": broker_addrs, "brokerName": "bröker-x", "cluster": "Clu/ster"}
        ],
        "filterServerTable": filters,
        "orderTopicConf": "b:8;a<8>",
        "queueDatas": QUEUE_DATAS,
    }


def test_nontrivial_route_in_dialect_a_matches_the_fastjson_example() -> None:
    # Dialect A keeps the map's own iteration order (here: as given).
    route = nontrivial_route(
        {0: "10.0.0.3:10911", 2: "10.0.0.2:10911", 10: "10.0.0.1:10911"},
        {"z:1": ["f1"], "a:1": ["f2"]},
    )
    expected = SPEC_NONTRIVIAL_A.replace("[...]", QUEUE_DATAS_A)
    assert fastjson.dumps(route, standard=False) == expected.encode()
    assert fastjson.dumps(route) == expected.encode(), "dialect A is the default"


def test_nontrivial_route_in_dialect_b_matches_the_fastjson_example() -> None:
    # Maps given out of order: dialect B sorts them (numerically: 0, 2, 10).
    route = nontrivial_route(
        {10: "10.0.0.1:10911", 0: "10.0.0.3:10911", 2: "10.0.0.2:10911"},
        {"z:1": ["f1"], "a:1": ["f2"]},
    )
    expected = SPEC_NONTRIVIAL_B.replace("[...]", QUEUE_DATAS_B)
    assert fastjson.dumps(route, standard=True) == expected.encode()


def test_nontrivial_examples_parse_back_to_the_same_data() -> None:
    a = SPEC_NONTRIVIAL_A.replace("[...]", QUEUE_DATAS_A)
    b = SPEC_NONTRIVIAL_B.replace("[...]", QUEUE_DATAS_B)
    parsed_a = fastjson.loads(a)
    assert parsed_a["brokerDatas"][0]["brokerAddrs"] == {
        "0": "10.0.0.3:10911",
        "2": "10.0.0.2:10911",
        "10": "10.0.0.1:10911",
    }
    assert parsed_a["brokerDatas"][0]["brokerName"] == "bröker-x"
    assert fastjson.loads(b) == parsed_a
    assert json.loads(b) == parsed_a


CAPTURED_ROUTE_B = (
    '{"brokerDatas":[{"brokerAddrs":{"0":"127.0.0.1:10921","1":"127.0.0.1:10931"},'
    '"brokerName":"broker-b","cluster":"DefaultCluster"},{"brokerAddrs":{"0":"127.0.0.1:10911"},'
    '"brokerName":"broker-a","cluster":"DefaultCluster"}],"filterServerTable":{},"queueDatas":'
    '[{"brokerName":"broker-b","perm":7,"readQueueNums":8,"topicSysFlag":0,"writeQueueNums":8},'
    '{"brokerName":"broker-a","perm":7,"readQueueNums":8,"topicSysFlag":0,"writeQueueNums":8}]}'
)
CAPTURED_ROUTE_A = (
    '{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:10921",1:"127.0.0.1:10931"},'
    '"brokerName":"broker-b","cluster":"DefaultCluster"},{"brokerAddrs":{0:"127.0.0.1:10911"},'
    '"brokerName":"broker-a","cluster":"DefaultCluster"}],"filterServerTable":{},'
    '"orderTopicConf":"broker-b:8","queueDatas":[{"brokerName":"broker-b","perm":6,'
    '"readQueueNums":8,"topicSysFlag":0,"writeQueueNums":8},{"brokerName":"broker-a","perm":6,'
    '"readQueueNums":8,"topicSysFlag":0,"writeQueueNums":8}]}'
)


def _route(perm: int, order_conf: str | None) -> dict[str, Any]:
    return {
        # Lists keep their order in both dialects: broker-b stays before broker-a.
        "brokerDatas": [
            {
                "brokerAddrs": {0: "127.0.0.1:10921", 1: "127.0.0.1:10931"},
                "brokerName": "broker-b",
                "cluster": "DefaultCluster",
            },
            {
                "brokerAddrs": {0: "127.0.0.1:10911"},
                "brokerName": "broker-a",
                "cluster": "DefaultCluster",
            },
        ],
        "filterServerTable": {},
        "orderTopicConf": order_conf,
        "queueDatas": [
            {
                "brokerName": name,
                "perm": perm,
                "readQueueNums": 8,
                "topicSysFlag": 0,
                "writeQueueNums": 8,
            }
            for name in ("broker-b", "broker-a")
        ],
    }


def test_captured_route_reply_in_dialect_b_is_reproduced() -> None:
    assert fastjson.dumps(_route(7, None), standard=True) == CAPTURED_ROUTE_B.encode()


def test_captured_route_reply_in_dialect_a_is_reproduced() -> None:
    assert fastjson.dumps(_route(6, "broker-b:8")) == CAPTURED_ROUTE_A.encode()


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (
            {
                "brokerAddrTable": {
                    "broker-b": {
                        "brokerAddrs": {0: "127.0.0.1:10921", 1: "127.0.0.1:10931"},
                        "brokerName": "broker-b",
                        "cluster": "DefaultCluster",
                    },
                    "broker-a": {
                        "brokerAddrs": {0: "127.0.0.1:10911"},
                        "brokerName": "broker-a",
                        "cluster": "DefaultCluster",
                    },
                },
                "clusterAddrTable": {"DefaultCluster": ["broker-b", "broker-a"]},
            },
            '{"brokerAddrTable":{"broker-b":{"brokerAddrs":{0:"127.0.0.1:10921",1:"127.0.0.1:10931"}'
            ',"brokerName":"broker-b","cluster":"DefaultCluster"},"broker-a":{"brokerAddrs":'
            '{0:"127.0.0.1:10911"},"brokerName":"broker-a","cluster":"DefaultCluster"}},'
            '"clusterAddrTable":{"DefaultCluster":["broker-b","broker-a"]}}',
        ),
        (
            {
                "brokerAddr": "127.0.0.1:10921",
                "topicList": ["broker-b", "broker-a", "DefaultCluster"],
            },
            '{"brokerAddr":"127.0.0.1:10921","topicList":["broker-b","broker-a","DefaultCluster"]}',
        ),
        ({"brokerAddr": None, "topicList": []}, '{"topicList":[]}'),
        (
            {"table": {"OrderTopicA": "broker-b:8;broker-a:8"}},
            '{"table":{"OrderTopicA":"broker-b:8;broker-a:8"}}',
        ),
        ({"table": {}}, '{"table":{}}'),
        (
            {"counter": 3, "timestamp": 1795313277672},
            '{"counter":3,"timestamp":1795313277672}',
        ),
        (
            {"counter": 3, "stateVersion": 0, "timestamp": 1795313277672},
            '{"counter":3,"stateVersion":0,"timestamp":1795313277672}',
        ),
    ],
    ids=["cluster-info", "system-topics", "empty-topic-list", "kv", "kv-empty", "dv4", "dv5"],
)
def test_dialect_a_reproduces_captured_bodies(value: Any, expected: str) -> None:
    assert fastjson.dumps(value) == expected.encode()


SPEC_REGISTER_BODY = (
    '{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":1,'
    '"timestamp":1795313273366},"topicConfigTable":{"OrderTopicA":{"order":false,"perm":6,'
    '"readQueueNums":8,"topicFilterType":"SINGLE_TAG","topicName":"OrderTopicA",'
    '"topicSysFlag":0,"writeQueueNums":8}}}}'
)


def test_captured_register_body_survives_loads_then_dumps_unchanged() -> None:
    parsed = fastjson.loads(SPEC_REGISTER_BODY)
    topic = parsed["topicConfigSerializeWrapper"]["topicConfigTable"]["OrderTopicA"]
    assert topic["order"] is False
    assert topic["perm"] == 6
    assert fastjson.dumps(parsed) == SPEC_REGISTER_BODY.encode()


# --------------------------------------------------------------------------- string escapes


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('q"b\\', '"q\\"b\\\\"'),
        ("\b\f\n\r\t", '"\\b\\f\\n\\r\\t"'),
        ("\x00\x01\x1a\x1f", '"\\u0000\\u0001\\u001A\\u001F"'),
        ("\x7f", '"\\u007F"'),
        ("\u2028\u2029", '"\\u2028\\u2029"'),
        ("a/b", '"a/b"'),
        ("bröker é", '"bröker é"'),
        ("\U0001f600", '"\U0001f600"'),
        ("\u00a0\u0080\ufeff", '"\u00a0\u0080\ufeff"'),
        ("<8>&'", '"<8>&\'"'),
    ],
    ids=[
        "quote",
        "short",
        "control",
        "del",
        "separators",
        "slash",
        "latin",
        "emoji",
        "misc",
        "html",
    ],
)
def test_dialect_a_string_escapes(text: str, expected: str) -> None:
    assert fastjson.legacy_str(text) == expected
    assert fastjson.dumps(text) == expected.encode()
    assert fastjson.dumps({text: 1}) == ("{" + expected + ":1}").encode()
    assert fastjson.loads(expected) == text


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('q"b\\', '"q\\"b\\\\"'),
        ("\b\f\n\r\t", '"\\b\\f\\n\\r\\t"'),
        ("\x00\x01\x1a\x1f", '"\\u0000\\u0001\\u001A\\u001F"'),
        # 0x7F keeps dialect A's escape: §2 lists only the differences from A.
        ("\x7f", '"\\u007F"'),
        ("\u2028\u2029", '"\\u2028\\u2029"'),
        ("a/b/", '"a\\/b\\/"'),
        ("bröker é", '"br\\u00F6ker \\u00E9"'),
        ("\U0001f600", '"\\uD83D\\uDE00"'),
        ("\u00a0\u0080\ufeff", '"\\u00A0\\u0080\\uFEFF"'),
        ("<8>&'", '"<8>&\'"'),
    ],
    ids=[
        "quote",
        "short",
        "control",
        "del",
        "separators",
        "slash",
        "latin",
        "emoji",
        "misc",
        "html",
    ],
)
def test_dialect_b_string_escapes(text: str, expected: str) -> None:
    assert fastjson.standard_str(text) == expected
    assert fastjson.dumps(text, standard=True) == expected.encode()
    assert fastjson.dumps({text: 1}, standard=True) == ("{" + expected + ":1}").encode()
    assert json.loads(expected) == text


@pytest.mark.parametrize("text", ["\\u00ab", "C:\\ufeed", "x\\\\u0041", "\\uabcd\\u1234"])
@pytest.mark.parametrize("standard", [False, True], ids=["A", "B"])
def test_literal_backslash_u_text_is_not_rewritten(text: str, standard: bool) -> None:
    # A backslash in the data is escaped as "\\"; the letters after it are data and must keep
    # their case. Uppercasing "\\u00ab" to "\\u00AB" changes the string.
    encoded = fastjson.dumps(text, standard=standard)
    assert json.loads(encoded) == text, (
        f"BUG in fastjson: {text!r} encodes as {encoded!r}, which reads back as "
        f"{json.loads(encoded)!r} (hex-uppercasing touched escaped backslashes)"
    )


# --------------------------------------------------------------------------- structure


def test_none_members_and_map_entries_are_dropped_in_both_dialects() -> None:
    value = {"a": None, "b": 1, "nested": {"x": None, 5: None, 6: "six"}, "z": None}
    assert fastjson.dumps(value) == b'{"b":1,"nested":{6:"six"}}'
    assert fastjson.dumps(value, standard=True) == b'{"b":1,"nested":{"6":"six"}}'


def test_zero_false_and_empty_members_are_kept() -> None:
    value = {"counter": 0, "order": False, "list": [], "map": {}, "text": ""}
    assert fastjson.dumps(value) == b'{"counter":0,"order":false,"list":[],"map":{},"text":""}'


def test_dialect_a_keeps_map_order_and_dialect_b_sorts_every_map() -> None:
    value = {"z": {10: "a", 2: "b", -1: "c"}, "a": {"y": 1, "b": 2}, "m": [{"k": 1, "c": 2}]}
    assert (
        fastjson.dumps(value)
        == b'{"z":{10:"a",2:"b",-1:"c"},"a":{"y":1,"b":2},"m":[{"k":1,"c":2}]}'
    )
    assert (
        fastjson.dumps(value, standard=True)
        == b'{"a":{"b":2,"y":1},"m":[{"c":2,"k":1}],"z":{"-1":"c","2":"b","10":"a"}}'
    )


def test_dialect_b_keeps_list_order() -> None:
    assert fastjson.dumps({"q": ["b", "a", "c"]}, standard=True) == b'{"q":["b","a","c"]}'


def test_large_longs_are_plain_numbers() -> None:
    assert fastjson.dumps({"timestamp": 2**62, "neg": -(2**40)}) == (
        b'{"timestamp":4611686018427387904,"neg":-1099511627776}'
    )


# --------------------------------------------------------------------------- lenient loads


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{0:"a",1:"b"}', {"0": "a", "1": "b"}),
        ('{ 0 : "a" ,\n 10:"b"}', {"0": "a", "10": "b"}),
        ('{-1:"x"}', {"-1": "x"}),
        ('{"m":{0:{1:[{2:3}]}}}', {"m": {"0": {"1": [{"2": 3}]}}}),
        ('{0:"a","1":"b"}', {"0": "a", "1": "b"}),
    ],
    ids=["flat", "whitespace", "negative", "nested", "mixed"],
)
def test_loads_accepts_bare_integer_keys_as_string_keys(text: str, expected: Any) -> None:
    assert fastjson.loads(text) == expected
    assert fastjson.loads(text.encode()) == expected
    assert fastjson.loads(bytearray(text.encode())) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{0:"{1:2}"}', {"0": "{1:2}"}),
        ('{0:"a,1:b"}', {"0": "a,1:b"}),
        ('{0:"x\\"{1:2}"}', {"0": 'x"{1:2}'}),
        ('{"{3:4}":"v",5:"w"}', {"{3:4}": "v", "5": "w"}),
        ('{"k":"{1:2}"}', {"k": "{1:2}"}),
        ('{0:"\\\\",1:"{2:3}"}', {"0": "\\", "1": "{2:3}"}),
    ],
    ids=["value", "comma-in-value", "escaped-quote", "key", "rfc", "escaped-backslash"],
)
def test_loads_leaves_bare_key_lookalikes_inside_strings_alone(text: str, expected: Any) -> None:
    assert fastjson.loads(text) == expected


@pytest.mark.parametrize("text", ['{0:"a"', "{0:}", "{0:1,}", "", "[1,2"])
def test_loads_rejects_broken_json(text: str) -> None:
    with pytest.raises(ValueError):
        fastjson.loads(text)


# --------------------------------------------------------------------------- round trips

_int64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
_scalars = st.text(max_size=20) | _int64 | st.booleans()


def _unique_keys(d: dict[Any, Any]) -> bool:
    """No int key collides with a str key once int keys become strings."""
    return len({str(k) for k in d}) == len(d)


_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=10) | _int64, inner, max_size=4).filter(_unique_keys)
    ),
    max_leaves=12,
)


def _stringify_keys(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _stringify_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_stringify_keys(v) for v in value]
    return value


@settings(max_examples=100, deadline=None)
@given(value=_values, standard=st.booleans())
def test_loads_of_dumps_returns_the_data_with_int_keys_as_strings(
    value: Any, standard: bool
) -> None:
    assert fastjson.loads(fastjson.dumps(value, standard=standard)) == _stringify_keys(value)


@settings(max_examples=100, deadline=None)
@given(value=_values)
def test_dialect_b_output_is_ascii_rfc_json(value: Any) -> None:
    encoded = fastjson.dumps(value, standard=True)
    assert encoded.isascii()
    assert json.loads(encoded) == _stringify_keys(value)


def _has_int_key(value: Any) -> bool:
    if isinstance(value, dict):
        return any(isinstance(k, int) or _has_int_key(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_int_key(v) for v in value)
    return False


@settings(max_examples=80, deadline=None)
@given(value=_values.filter(lambda v: not _has_int_key(v)))
def test_dialect_a_without_int_keys_is_rfc_json(value: Any) -> None:
    assert json.loads(fastjson.dumps(value)) == value


@settings(max_examples=80, deadline=None)
@given(text=st.text(max_size=40))
def test_string_literals_read_back_unchanged(text: str) -> None:
    assert json.loads(fastjson.legacy_str(text)) == text
    assert json.loads(fastjson.standard_str(text)) == text
