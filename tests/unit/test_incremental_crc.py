"""Large bodies are checksummed as they arrive; the result must not depend on the slicing."""

from __future__ import annotations

import zlib
from itertools import pairwise

from hypothesis import given, settings
from hypothesis import strategies as st

from pynamesrv.remoting.codec import INCREMENTAL_CRC_MIN, FrameDecoder, encode
from pynamesrv.remoting.command import RemotingCommand

BIG = bytes(range(256)) * ((INCREMENTAL_CRC_MIN * 2) // 256 + 3)
SMALL = b"small body"
STREAM = b"".join(
    encode(RemotingCommand(code=103, opaque=i, body=body))
    for i, body in enumerate((BIG, SMALL, BIG[: INCREMENTAL_CRC_MIN + 1], BIG))
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=len(STREAM) - 1), max_size=12))
def test_incremental_crc_equals_crc_of_the_body(cuts: list[int]) -> None:
    decoder = FrameDecoder()
    points = [0, *sorted(set(cuts)), len(STREAM)]
    commands = []
    for start, stop in pairwise(points):
        commands += decoder.feed(STREAM[start:stop])
    assert [c.opaque for c in commands] == [0, 1, 2, 3]
    for command in commands:
        assert command.body_crc in (None, zlib.crc32(command.body))


def test_big_body_sent_in_two_halves_has_its_crc() -> None:
    frame = encode(RemotingCommand(code=103, body=BIG))
    decoder = FrameDecoder()
    assert decoder.feed(frame[: len(frame) // 2]) == []
    [command] = decoder.feed(frame[len(frame) // 2 :])
    assert command.body_crc == zlib.crc32(BIG)
