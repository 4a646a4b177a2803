"""The registration decode's quick ways against the plain ones they stand for.

A decoded REGISTER_BROKER body checks and keeps each topic's routed fields in one loop
(``RegisterBrokerBody.routed``), and a compressed body is read a piece of inflated bytes at a
time. Both must answer exactly what decoding each entry with ``TopicConfig.from_json`` (JSON)
or ``_decode_topic_line`` (compressed), one chunk after the other, answers: the same topics,
the same values, the same error for the same input.
"""

from __future__ import annotations

import struct
import tracemalloc
import zlib
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pynamesrv.namesrv import model
from pynamesrv.namesrv.model import BodyError, DataVersion, RegisterBrokerBody, TopicConfig
from pynamesrv.remoting.codes import Version

_INT32 = struct.Struct(">i")
# The per-topic loops' Python twins, patched in for the "python" runs (else: compiled).
PYTHON_LOOPS = {"_json_loop": model._extend_routed_json, "_lines_loop": model._extend_routed_buffer}

# Values a broker (or a fuzzer) may put in a topic config's number fields: the usual ints,
# the edges of Java's int, and what fastjson would convert or refuse.
_numbers = (
    st.integers(-5, 1024)
    | st.sampled_from([-(2**31), 2**31 - 1, -(2**31) - 1, 2**31, 2**63])
    | st.floats(allow_nan=False, allow_infinity=False, width=32)
    | st.sampled_from(["8", " 8", "x", "", "1e3", True, False, None, [], {}])
)
_names = st.text(max_size=12) | st.sampled_from([None, 5, [], "T"])


@st.composite
def json_entries(draw: st.DrawFn) -> Any:
    """One topicConfigTable value: usually an object with some of the members."""
    if draw(st.integers(0, 20)) == 0:
        return draw(st.sampled_from([None, 1, "T", [1]]))
    entry: dict[str, Any] = {}
    for key, values in (
        ("topicName", _names),
        ("readQueueNums", _numbers),
        ("writeQueueNums", _numbers),
        ("perm", _numbers),
        ("topicSysFlag", _numbers),
        ("order", st.booleans() | st.none()),
        ("topicFilterType", st.sampled_from(["SINGLE_TAG", "MULTI_TAG", "", None, 3])),
        ("attributes", st.none() | st.just({}) | st.just({"+message.type": "FIFO"})),
    ):
        if draw(st.integers(0, 5)):  # most members present
            entry[key] = draw(values)
    return entry


def _outcome(decode: Any) -> tuple[str, Any]:
    try:
        return "ok", decode()
    except BodyError as exc:
        return "error", str(exc)


def _routed_of(configs: list[TopicConfig]) -> list[tuple[str, int, int, int, int]]:
    return [
        (t.topic_name, t.read_queue_nums, t.write_queue_nums, t.perm, t.topic_sys_flag)
        for t in configs
    ]


@settings(max_examples=300, deadline=None)
@given(entries=st.lists(json_entries(), max_size=8))
def test_json_routed_topics_are_what_from_json_makes_of_each_entry(entries: list[Any]) -> None:
    table = {str(i): entry for i, entry in enumerate(entries)}
    raw = orjson.dumps({"topicConfigSerializeWrapper": {"topicConfigTable": table}})

    def reference() -> tuple[list[tuple[str, int, int, int, int]], list[TopicConfig]]:
        configs = [TopicConfig.from_json(entry) for entry in orjson.loads(raw)[
            "topicConfigSerializeWrapper"]["topicConfigTable"].values()]  # fmt: skip
        return _routed_of(configs), configs

    def decoded() -> tuple[list[tuple[str, int, int, int, int]], list[TopicConfig]]:
        body = RegisterBrokerBody.decode(raw, compressed=False, version=401)
        return body.routed, body.topic_configs

    assert _outcome(decoded) == _outcome(reference)


_tokens = st.sampled_from(["T", "8", "-1", "+8", "x", "", "2147483648", "1_0", "SINGLE_TAG"])
_lines = st.lists(_tokens, max_size=7).map(" ".join) | st.sampled_from(
    ["T 8 8 6 SINGLE_TAG", "T 8 8 6 SINGLE_TAG  ", 'T 1 2 6 MULTI_TAG {"a":"b"}', "T 1 2 6"]
)


def _compact(lines: list[str], *, count: int | None = None) -> bytes:
    def chunk(data: bytes) -> bytes:
        return _INT32.pack(len(data)) + data

    parts = [chunk(b'{"counter":1,"timestamp":2}'), _INT32.pack(len(lines) if count is None
             else count)]  # fmt: skip
    parts += [chunk(line.encode()) for line in lines]
    parts.append(chunk(b"[]"))
    return zlib.compress(b"".join(parts))


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(_lines, max_size=8))
def test_compressed_routed_topics_are_what_each_line_decodes_to(lines: list[str]) -> None:
    def reference() -> tuple[list[tuple[str, int, int, int, int]], list[TopicConfig]]:
        configs = [model._decode_topic_line(line) for line in lines]
        return _routed_of(configs), configs

    def decoded() -> tuple[list[tuple[str, int, int, int, int]], list[TopicConfig]]:
        body = RegisterBrokerBody.decode(_compact(lines), compressed=True, version=401)
        return body.routed, body.topic_configs

    assert _outcome(decoded) == _outcome(reference)


@pytest.mark.parametrize("loops", ["compiled", "python"])
@pytest.mark.parametrize("step", [1, 5, 13, 64])
@settings(max_examples=40, deadline=None)
@given(
    lines=st.lists(
        st.from_regex(
            r"[A-Za-z0-9_%|-]{1,20} [0-9]{1,3} [0-9]{1,3} [0-9] (SINGLE|MULTI)_TAG", fullmatch=True
        ),
        max_size=30,
    )
)
def test_compressed_body_reads_the_same_in_any_inflate_step(
    loops: str, step: int, lines: list[str]
) -> None:
    """Pieces of a few bytes cut every chunk and every length prefix somewhere: each chunk
    is still read whole, once, in order, and the stepwise decode pauses along the way."""
    raw = _compact(lines)
    expected = RegisterBrokerBody.decode(raw, compressed=True, version=401)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(model, "INFLATE_STEP", step)
        if loops == "python":
            for name, loop in PYTHON_LOOPS.items():
                patch.setattr(model, name, loop)
        steps = RegisterBrokerBody.decode_steps(raw, compressed=True, version=401)
        pauses = 0
        while True:
            try:
                next(steps)
                pauses += 1
            except StopIteration as done:
                body = done.value
                break
    assert body == expected
    assert body.routed == expected.routed == _routed_of(expected.topic_configs)
    assert [t.topic_name for t in body.topic_configs] == [line.split(" ")[0] for line in lines]
    if len(zlib.decompress(raw)) > 2 * step + 64:
        assert pauses > 0


@pytest.mark.parametrize("step", [1, 7, 64])
def test_compressed_errors_are_the_same_in_any_inflate_step(
    step: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A line cut short, a count above the lines there are, a bad number after good lines:
    the error of the first bad thing in the stream, whatever the pieces."""
    cases = [
        _compact(["A 1 1 6 SINGLE_TAG", "B 1 1 6 SINGLE_TAG"], count=3),
        _compact(["A 1 1 6 SINGLE_TAG", "B x 1 6 SINGLE_TAG", "C 1"]),
        _compact(["A 1 1 6 SINGLE_TAG", "B 1 1", "C x 1 6 SINGLE_TAG"]),
        zlib.compress(zlib.decompress(_compact(["A 1 1 6 SINGLE_TAG"] * 5))[:-20]),
    ]
    expected = [_outcome(lambda raw=raw: RegisterBrokerBody.decode(raw, compressed=True,
                version=401)) for raw in cases]  # fmt: skip
    assert all(kind == "error" for kind, _ in expected)
    with monkeypatch.context() as patch:
        patch.setattr(model, "INFLATE_STEP", step)
        got = [_outcome(lambda raw=raw: RegisterBrokerBody.decode(raw, compressed=True,
               version=401)) for raw in cases]  # fmt: skip
    assert got == expected


def test_a_body_built_from_topic_configs_routes_their_current_values() -> None:
    config = TopicConfig("T", 4, 4, 6)
    body = RegisterBrokerBody(model.DataVersion(), [config], None)
    assert body.routed == [("T", 4, 4, 6, 0)]
    config.perm = 4  # the broker's side changes its own objects between registrations
    assert body.routed == [("T", 4, 4, 4, 0)]


@pytest.mark.parametrize("field", ["readQueueNums", "writeQueueNums", "perm", "topicSysFlag"])
@pytest.mark.parametrize("value", [-(2**31) - 1, -(2**31), 2**31 - 1, 2**31, 1.5, "7", True, None])
def test_json_number_edges_route_as_from_json_decides(field: str, value: Any) -> None:
    """Java's int range ends exactly where fastjson's does; what is not a plain int is
    converted (or refused) by ``from_json`` alone."""
    entry = {"topicName": "T", "readQueueNums": 8, "writeQueueNums": 8, "perm": 6, field: value}
    raw = orjson.dumps({"topicConfigSerializeWrapper": {"topicConfigTable": {"T": entry}}})

    def reference() -> list[tuple[str, int, int, int, int]]:
        return _routed_of([TopicConfig.from_json(entry)])

    def decoded() -> list[tuple[str, int, int, int, int]]:
        return RegisterBrokerBody.decode(raw, compressed=False, version=401).routed

    assert _outcome(decoded) == _outcome(reference)
    refused = value is True or value in (-(2**31) - 1, 2**31)  # out of range, or a boolean
    assert _outcome(reference)[0] == ("error" if refused else "ok")


@pytest.mark.parametrize("position", [1, 2, 3])
@pytest.mark.parametrize("value", ["-2147483649", "-2147483648", "2147483647", "2147483648"])
def test_compressed_number_edges_route_as_the_line_decoder_decides(
    position: int, value: str
) -> None:
    tokens = ["T", "8", "8", "6", "SINGLE_TAG"]
    tokens[position] = value
    line = " ".join(tokens)

    def reference() -> list[tuple[str, int, int, int, int]]:
        return _routed_of([model._decode_topic_line(line)])

    def decoded() -> list[tuple[str, int, int, int, int]]:
        return RegisterBrokerBody.decode(_compact([line]), compressed=True, version=401).routed

    assert _outcome(decoded) == _outcome(reference)
    assert _outcome(reference)[0] == ("ok" if value in ("-2147483648", "2147483647") else "error")


# --------------------------------------------------------------------------- compiled loops


def test_the_compiled_loops_are_built_and_used() -> None:
    assert model._compiled is not None, "pynamesrv.namesrv._routed was not built"
    assert model._json_loop is model._compiled.extend_routed_json
    assert model._lines_loop is model._compiled.extend_routed_buffer


@settings(max_examples=300, deadline=None)
@given(entries=st.lists(json_entries(), max_size=8), start=st.integers(0, 9))
def test_compiled_json_loop_stops_where_the_python_twin_stops(
    entries: list[Any], start: int
) -> None:
    assert model._compiled is not None
    compiled: list[tuple[str, int, int, int, int]] = [("before", 0, 0, 0, 0)]
    python = list(compiled)
    stop = model._compiled.extend_routed_json(entries, start, compiled)
    assert stop == model._extend_routed_json(entries, start, python)
    assert compiled == python


_odd_tokens = st.sampled_from(
    ["T", "8", "-1", "+8", "-", "x", "", "\t8", "2147483647", "-2147483648", "2147483648",
     "00000000008", "0000000008", "1_0", "٣", "T/ö", "SINGLE_TAG"]
)  # fmt: skip
_odd_lines = st.lists(_odd_tokens, max_size=7).map(" ".join) | st.sampled_from(
    ["T 8 8 6 SINGLE_TAG", "T 8 8 6 SINGLE_TAG ", "T  8 8 6 X", "ö 1 1 6 X", "T 1 1 6 \x00"]
)


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(_odd_lines, max_size=10),
    cut=st.integers(0, 8),
    limit=st.integers(0, 12),
    start=st.integers(0, 3),
)
def test_compiled_lines_loop_takes_only_lines_the_general_way_reads_alike(
    lines: list[str], cut: int, limit: int, start: int
) -> None:
    """Each line the compiled loop takes has the row and text the general way gives it, and
    it stops at the limit, at a chunk the buffer cuts short, or at a line the general way
    must look at (it may be fine, or an error)."""
    assert model._compiled is not None
    chunks = [_INT32.pack(len(line.encode())) + line.encode() for line in lines]
    buffer = bytearray(b"\x00" * start + b"".join(chunks))
    del buffer[len(buffer) - min(cut, len(buffer) - start) :]  # the piece ends mid-chunk
    routed: list[tuple[str, int, int, int, int]] = []
    texts: list[str] = []
    pos = model._compiled.extend_routed_buffer(buffer, start, limit, routed, texts)
    taken = len(texts)
    assert texts == lines[:taken] and taken <= limit
    assert pos == start + sum(len(chunk) for chunk in chunks[:taken])
    assert routed == _routed_of([model._decode_topic_line(line) for line in lines[:taken]])
    complete = pos + (len(chunks[taken]) if taken < len(lines) else 0) <= len(buffer)
    if taken < min(limit, len(lines)) and complete:
        line = lines[taken]
        tokens = line.split(" ")
        usual = (
            line.isascii()
            and len(tokens) == 5
            and tokens[4] != ""
            and all(t.lstrip("-").isdigit() and len(t.lstrip("-")) <= 10 for t in tokens[1:4])
            and all(t.count("-") <= 1 and not t.endswith("-") for t in tokens[1:4])
            and all(-(2**31) <= int(t) <= 2**31 - 1 for t in tokens[1:4])
        )
        assert not usual, f"the compiled loop left a usual line: {line!r}"


def _decoded_with(loops: str, raw: bytes, *, compressed: bool) -> tuple[str, Any]:
    """The outcome (``_outcome``) of decoding ``raw``: its routed rows and topic configs, with
    the compiled loops or (``loops == "python"``) their Python twins."""

    def decoded() -> tuple[list[tuple[str, int, int, int, int]], list[TopicConfig]]:
        body = RegisterBrokerBody.decode(raw, compressed=compressed, version=401)
        return body.routed, body.topic_configs

    with pytest.MonkeyPatch.context() as patch:
        if loops == "python":
            for name, loop in PYTHON_LOOPS.items():
                patch.setattr(model, name, loop)
        return _outcome(decoded)


@pytest.mark.parametrize("loops", ["compiled", "python"])
@settings(max_examples=150, deadline=None)
@given(lines=st.lists(_odd_lines, max_size=10))
def test_compressed_decode_is_the_same_with_either_loop(loops: str, lines: list[str]) -> None:
    got = _decoded_with(loops, _compact(lines), compressed=True)

    def reference() -> tuple[list[tuple[str, int, int, int, int]], list[TopicConfig]]:
        configs = [model._decode_topic_line(line) for line in lines]
        return _routed_of(configs), configs

    assert got == _outcome(reference)


@pytest.mark.parametrize("loops", ["compiled", "python"])
@settings(max_examples=150, deadline=None)
@given(entries=st.lists(json_entries(), max_size=8))
def test_json_decode_is_the_same_with_either_loop(loops: str, entries: list[Any]) -> None:
    table = {str(i): entry for i, entry in enumerate(entries)}
    raw = orjson.dumps({"topicConfigSerializeWrapper": {"topicConfigTable": table}})
    got = _decoded_with(loops, raw, compressed=False)
    configs = _outcome(lambda: [TopicConfig.from_json(entry) for entry in table.values()])
    expected = configs if configs[0] == "error" else ("ok", (_routed_of(configs[1]), configs[1]))
    assert got == expected


def test_a_decoded_json_body_keeps_its_rows_not_the_parsed_json() -> None:
    """The parsed JSON of a 100,000-topic body (50 MB) is let go before the tables are
    filled (kept, it left Python's memory pools fragmented); the full topic configs are
    decoded again when read."""
    topics = 20_000
    configs = [TopicConfig(f"T{i:05d}", 8, 8, 6, 0) for i in range(topics)]
    body = RegisterBrokerBody(DataVersion(1, 0), configs, []).encode(compressed=False)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        decoded = RegisterBrokerBody.decode(body, compressed=False, version=Version.V4_9_4)
        kept_per_topic = (tracemalloc.get_traced_memory()[0] - before) / topics
    finally:
        tracemalloc.stop()
    assert kept_per_topic < 250, "a row and its name (150 B); the parsed entry took 340 more"
    assert decoded.topic_configs == configs
