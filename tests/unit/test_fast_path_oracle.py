"""The route-query fast path against the normal path: the same random streams (queries of
several layouts for routed and unrouted topics, odd opaques, bodies, other codes, zone-mode
fields, misframed length words), cut into random reads, must produce byte-identical answers
and the same close."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pynamesrv.namesrv.config import NamesrvConfig
from pynamesrv.namesrv.controller import NamesrvController
from pynamesrv.namesrv.fastpath import RouteQueryFastPath
from pynamesrv.namesrv.model import TopicConfig
from pynamesrv.remoting.codec import FrameDecoder, encode, encode_frame
from pynamesrv.remoting.command import RemotingCommand, SerializeType
from pynamesrv.remoting.server import Connection, RemotingServer, ServerLimits

from .test_fast_path import register_topics

# Driven without an event loop: no idle or incomplete-frame timers.
NO_TIMERS = ServerLimits(idle_seconds=0, frame_read_timeout_s=0)
ROUTED = ["TopicA", "TopicB-1", "t%x|y_Z", "T/ö"]
UNROUTED = ["Missing", "X" * 130]


def controller() -> NamesrvController:
    ctrl = NamesrvController(NamesrvConfig(listen_port=0, journal_enable=False, http_port=0))
    register_topics(
        ctrl, [TopicConfig(topic, n + 1, n + 1, 6) for n, topic in enumerate(ROUTED)], zone="zoneA"
    )
    return ctrl


class Wire:
    """The transport side of a Connection: what it wrote, and whether it closed."""

    def __init__(self) -> None:
        self.written = bytearray()
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, name: str) -> None:
        return None

    def set_write_buffer_limits(self, **limits: int) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0  # everything written is taken at once

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def serve(chunks: list[bytes], fast: bool, compiled: bool = True) -> Wire:
    ctrl = controller()
    fast_path = RouteQueryFastPath(
        ctrl.routes,
        ctrl.stats,
        ctrl.processor.cached_answers_valid,
        ctrl.processor.route_template,
        compiled=compiled,
    )
    server = RemotingServer(ctrl.handle, raw_answerer=fast_path if fast else None, limits=NO_TIMERS)
    conn, wire = Connection(server), Wire()
    conn.connection_made(wire)  # type: ignore[arg-type]
    for chunk in chunks:
        if wire.closed:
            break
        conn.data_received(chunk)
    return wire


def java_query(topic: str, opaque: int, version: int = 401) -> bytes:
    return encode(
        RemotingCommand(code=105, version=version, opaque=opaque, ext_fields={"topic": topic})
    )


def zone_query(topic: str, opaque: int, mode: str, zone: str) -> bytes:
    """A 5.x client's query with its zone: filtered when mode is true and zone not blank."""
    ext = {"topic": topic, "__ZONE_MODE": mode, "__ZONE_NAME": zone}
    return encode(RemotingCommand(code=105, version=453, opaque=opaque, ext_fields=ext))


def raw_query(topic: str, digits: str) -> bytes:
    """A Java-layout query with opaque digits Java would not write."""
    header = (
        b'{"code":105,"extFields":{"topic":"' + topic.encode() + b'"},"flag":0,'
        b'"language":"JAVA","opaque":' + digits.encode() + b',"serializeTypeCurrentRPC":'
        b'"JSON","version":401}'
    )
    return encode_frame(SerializeType.JSON, header, b"")


def misframed(frame: bytes, delta: int) -> bytes:
    (length,) = struct.unpack_from(">i", frame)
    return struct.pack(">i", length + delta) + frame[4:]


topics = st.sampled_from(ROUTED + UNROUTED)
# Short opaques too: answer heads are built per digit count, and odd digits ("007") only
# meet a built head of their length if such opaques are common.
opaques = st.one_of(st.integers(0, 999), st.integers(0, 2**31 - 1))
zone_modes = st.sampled_from(["true", "TRUE", "false", ""])
zones = st.sampled_from(["zoneA", "ZONEA", "zoneB", " "])
routed_queries = st.one_of(
    st.builds(java_query, st.sampled_from(ROUTED[:3]), opaques),
    st.builds(zone_query, st.sampled_from(ROUTED[:3]), opaques, zone_modes, zones),
)
frames = st.one_of(
    st.builds(zone_query, topics, opaques, zone_modes, zones),
    st.builds(java_query, topics, opaques),  # unrouted topics too
    st.builds(java_query, topics, opaques, st.sampled_from([317, 402])),  # other layouts
    st.builds(
        raw_query,
        topics,
        st.sampled_from(["007", "00", "-1", "12345678901", " 5", "2147483648", "1e3", "5 "]),
    ),
    st.builds(lambda o: encode(RemotingCommand(code=106, opaque=o)), opaques),
    st.builds(lambda t: java_query(t, 1)[:-1] + b"x", topics),  # with a one-byte body
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 9), routed_queries, frames).map(lambda t: t[1 + (t[0] > 7)]),
        min_size=2,
        max_size=60,
    ),
    st.lists(st.integers(1, 4000), min_size=1, max_size=20),
    st.one_of(st.none(), st.tuples(st.integers(0, 59), st.sampled_from([-3, -1, 1, 2]))),
)
def test_answers_equal_the_normal_path(
    stream_frames: list[bytes], cuts: list[int], broken: tuple[int, int] | None
) -> None:
    """Mostly queries of one layout for routed topics, some odd frames among them; the first
    frame arrives alone (so the connection may know a layout), the rest in reads of the
    given sizes, over and over."""
    if broken is not None:
        at = broken[0] % len(stream_frames)
        stream_frames[at] = misframed(stream_frames[at], broken[1])
    stream = b"".join(stream_frames[1:])
    chunks, at = [stream_frames[0]], 0
    for cut in cuts * (len(stream) // sum(cuts) + 1):
        chunks.append(stream[at : at + cut])
        at += cut
    normal = serve(chunks, fast=False)
    for compiled in (True, False):  # the compiled loop and its pure-Python reference
        fast = serve(chunks, fast=True, compiled=compiled)
        assert (bytes(fast.written), fast.closed) == (bytes(normal.written), normal.closed)


ODD_DIGITS = ["007", "00", "-1", "-0", "12345678901", "2147483648", " 5", "5 ", "1e3", "0x1"]


@pytest.mark.parametrize("digits", ODD_DIGITS)
def test_odd_opaques_are_declined_by_both_loops(digits: str) -> None:
    """Once a shape and its heads for every digit count are built, an odd opaque in the
    same header must still go to the normal path, in C as in Python."""
    for compiled in (True, False):
        ctrl = controller()
        fast_path = RouteQueryFastPath(
            ctrl.routes,
            ctrl.stats,
            ctrl.processor.cached_answers_valid,
            ctrl.processor.route_template,
            compiled=compiled,
        )
        for opaque in (1, 10, 100, 1000, 2**31 - 1, 1_234_567_890):
            assert fast_path.answer_read(raw_query("TopicA", str(opaque))) is not None
        assert fast_path.answer_read(raw_query("TopicA", digits)) is None, (compiled, digits)


def test_the_compiled_loop_is_built_and_used() -> None:
    """setup.py builds it wherever pynamesrv is installed with a C compiler (make test's
    machines have one); without it the oracle above would test the Python path twice."""
    ctrl = controller()
    assert ctrl.route_fast_path.compiled, "pynamesrv.namesrv._fastpath was not built"


def test_a_read_of_queries_for_many_topics_is_answered_by_the_fast_path() -> None:
    ctrl = controller()
    server = RemotingServer(ctrl.handle, raw_answerer=ctrl.route_fast_path, limits=NO_TIMERS)
    conn, wire = Connection(server), Wire()
    conn.connection_made(wire)  # type: ignore[arg-type]
    conn.data_received(b"".join(java_query(ROUTED[n % 3], 2 + n) for n in range(30)))
    assert ctrl.route_fast_path.shapes == 3  # learned once each, then answered from bytes
    assert ctrl.stats.route_query_hits == 30 and conn.decoder.buffered == 0
    assert len(FrameDecoder().feed(bytes(wire.written))) == 30


def test_a_read_whose_answers_pass_the_limit_is_left_to_the_normal_path() -> None:
    """Pipelined queries whose answers would be longer than ``max_answer_bytes`` (the write
    buffer's high-water mark) are declined by both loops, counting no hit: the normal path
    answers them only as fast as the peer reads (issue 24)."""
    for compiled in (True, False):
        ctrl = controller()
        fast_path = RouteQueryFastPath(
            ctrl.routes,
            ctrl.stats,
            ctrl.processor.cached_answers_valid,
            ctrl.processor.route_template,
            compiled=compiled,
        )
        first = fast_path.answer_read(java_query("TopicA", 1))  # learns the shape
        assert first is not None
        fast_path.max_answer_bytes = 3 * len(first)
        three = b"".join(java_query("TopicA", n) for n in (2, 3, 4))
        four = b"".join(java_query("TopicA", n) for n in (5, 6, 7, 8))
        assert fast_path.answer_read(three) is not None
        fast_path.take_hits()
        assert fast_path.answer_read(four) is None, compiled
        assert fast_path.take_hits() == {}
        if compiled:
            from pynamesrv.namesrv import _fastpath

            generation = ctrl.routes.route_generation
            shapes = fast_path._shapes
            assert _fastpath.answer_read(four, shapes, generation, 4 * len(first)) is not None
            assert _fastpath.answer_read(four, shapes, generation, 4 * len(first) - 1) is None
            assert _fastpath.answer_read(four, shapes, generation, None) is not None
