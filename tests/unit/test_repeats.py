"""Repeated requests: ``FrameDecoder.take_repeats`` finds exactly the frames that repeat one
header with another opaque, and the fast path answers them byte for byte like one by one."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pynamesrv.namesrv.config import NamesrvConfig
from pynamesrv.namesrv.controller import NamesrvController
from pynamesrv.remoting.codec import FrameDecoder, encode, encode_frame
from pynamesrv.remoting.command import RemotingCommand, SerializeType
from pynamesrv.remoting.repeats import OpaqueRun

from .test_fast_path import header_of, register

PREFIX = b'{"code":105,"extFields":{"topic":"T/\xc3\xb6"},"flag":0,"language":"JAVA","opaque":'
SUFFIX = b',"serializeTypeCurrentRPC":"JSON","version":401}'
ORACLE = re.compile(re.escape(PREFIX) + rb"(0|[1-9][0-9]{0,9})" + re.escape(SUFFIX))


def query(opaque: str, topic_prefix: bytes = PREFIX, suffix: bytes = SUFFIX) -> bytes:
    return encode_frame(SerializeType.JSON, topic_prefix + opaque.encode() + suffix, b"")


def expected_repeats(stream: bytes) -> tuple[list[bytes], int]:
    """The oracle: decode frame by frame, stop at the first that is not a repeat."""
    opaques, consumed = [], 0
    decoder = FrameDecoder()
    for serialize, header, body, _ in decoder.feed_raw(stream):
        match = ORACLE.fullmatch(header)
        if serialize != SerializeType.JSON or body or match is None:
            break
        opaques.append(match[1])
        consumed += 8 + len(header)
    return opaques, consumed


def take(stream: bytes) -> tuple[list[OpaqueRun], FrameDecoder]:
    decoder = FrameDecoder()
    decoder.push(stream)
    return decoder.take_repeats(PREFIX, SUFFIX), decoder


OTHER_TOPIC = PREFIX.replace(b"T/\xc3\xb6", b"T/xx")  # the same length, another request
OTHER_VERSION = SUFFIX.replace(b"401", b"402")
opaques = st.one_of(
    st.integers(0, 2**31 - 1).map(str),
    st.sampled_from(["007", "00", "12345678901", "-1", " 1"]),  # not what Java sends
)
frames = st.one_of(
    opaques.map(query),
    opaques.map(lambda o: query(o, OTHER_TOPIC)),
    opaques.map(lambda o: query(o, PREFIX, OTHER_VERSION)),
    st.just(encode_frame(SerializeType.JSON, PREFIX + b"1" + SUFFIX, b"body")),
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.one_of(opaques.map(query), frames), max_size=40)
    .filter(bool)
    .map(
        lambda frames: frames * 3 if len(frames) < 8 else frames  # blocks of 8 or more, too
    ),
    st.integers(0, 200),
)
def test_takes_exactly_the_leading_repeats(stream_frames: list[bytes], cut: int) -> None:
    stream = b"".join(stream_frames)
    stream = stream[: len(stream) - cut] if cut < len(stream) else stream
    want, consumed = expected_repeats(stream)
    runs, decoder = take(stream)
    assert [o for run in runs for o in run.opaques] == want
    assert decoder.buffered == len(stream) - consumed


def test_long_runs_split_where_the_opaques_grow_a_digit() -> None:
    stream = b"".join(query(str(n)) for n in range(99_990, 100_010)) + query("5", OTHER_TOPIC)
    runs, decoder = take(stream)
    assert [(run.size, len(run.opaques)) for run in runs] == [(5, 10), (6, 10)]
    assert [frame[1] for frame in decoder.feed_raw(b"")] == [OTHER_TOPIC + b"5" + SUFFIX]


@pytest.mark.parametrize(
    "odd", [query("1000037", OTHER_TOPIC), query("1000037", PREFIX, OTHER_VERSION)]
)
def test_a_different_frame_inside_a_block_stops_the_scan_right_before_it(odd: bytes) -> None:
    stream = b"".join(query(str(1_000_000 + n)) for n in range(37)) + odd + query("1000038")
    runs, decoder = take(stream)
    assert sum(len(run.opaques) for run in runs) == 37
    assert [header for _, header, _, _ in decoder.feed_raw(b"")] == [odd[8:], query("1000038")[8:]]


def fast_path_controller() -> NamesrvController:
    ctrl = NamesrvController(NamesrvConfig(listen_port=0, journal_enable=False, http_port=0))
    register(ctrl, queues=8)
    return ctrl


@given(st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=50))
@settings(max_examples=50, deadline=None)
def test_answers_to_repeats_equal_answers_one_by_one(numbers: list[int]) -> None:
    ctrl = fast_path_controller()
    fast_path = ctrl._route_fast_path
    one_by_one = [fast_path(header_of_query(n)) for n in numbers]
    shape = fast_path.last_shape
    runs, _ = take(b"".join(query(str(n)) for n in numbers))
    assert fast_path.answer_repeats(shape, runs) == b"".join(one_by_one)  # type: ignore[arg-type]


def header_of_query(opaque: int) -> bytes:
    return query(str(opaque))[8:]


def test_repeats_are_counted_in_hits_and_latency() -> None:
    ctrl = fast_path_controller()
    fast_path = ctrl._route_fast_path
    fast_path(header_of_query(1))
    runs, _ = take(b"".join(query(str(n)) for n in range(100, 120)))
    fast_path.answer_repeats(fast_path.last_shape, runs)  # type: ignore[arg-type]
    assert ctrl.stats.route_query_hits == 21
    assert ctrl.stats.requests[105].count == 21


def test_header_helper_matches_the_encoder() -> None:
    command = RemotingCommand(code=105, version=401, opaque=42, ext_fields={"topic": "T/ö"})
    assert header_of(command) == header_of_query(42)
    assert encode(command) == query("42")


def test_a_leading_zero_inside_a_block_stops_the_scan_right_before_it() -> None:
    numbers = [str(1_000_000 + n) for n in range(20)]
    numbers[12] = "0123456"  # as long as the others, but not a number Java writes
    runs, decoder = take(b"".join(query(n) for n in numbers))
    assert [o for run in runs for o in run.opaques] == [n.encode() for n in numbers[:12]]
    assert len(decoder.feed_raw(b"")) == 8


def test_a_different_first_frame_is_not_taken_however_many_repeats_follow() -> None:
    stream = query("1000000", OTHER_TOPIC) + b"".join(query(str(1_000_001 + n)) for n in range(20))
    runs, decoder = take(stream)
    assert runs == [] and decoder.buffered == len(stream)


def test_a_different_suffix_on_the_last_frame_of_a_block_is_not_taken() -> None:
    odd = query("1000007", PREFIX, OTHER_VERSION)
    stream = b"".join(query(str(1_000_000 + n)) for n in range(7)) + odd
    runs, decoder = take(stream)
    assert sum(len(run.opaques) for run in runs) == 7 and decoder.buffered == len(odd)
