"""The writer-worker link's messages (``namesrv.workerlink``): written as parts, read back
whole however the stream is cut."""

from __future__ import annotations

import socket
from types import SimpleNamespace
from typing import Any

import pytest

from pynamesrv.namesrv import requests
from pynamesrv.namesrv import workerlink as link
from pynamesrv.namesrv.model import DataVersion, RegisterBrokerBody, TopicConfig
from pynamesrv.namesrv.workers import WorkerLink
from pynamesrv.remoting.codec import decode_frame_payload, encode_head


def _register() -> tuple[bytes, bytes]:
    request = requests.register_broker(
        cluster="C", broker_name="b", broker_addr="10.0.0.1:10911", broker_id=0,
        ha_server_addr=None,
        body=RegisterBrokerBody(
            DataVersion(1, 1), [TopicConfig(f"T{i}") for i in range(500)], None
        ),
    )  # fmt: skip
    return encode_head(request), request.body


@pytest.mark.parametrize("cut", [1, 7, 4096, 1 << 20])
def test_messages_written_as_parts_are_read_back_whole_however_the_stream_is_cut(
    cut: int,
) -> None:
    head, body = _register()
    stream = b"".join(
        [
            *link.framed_parts(link.REQUEST, {"id": 1, "crc": 5}, (head, body)),
            *link.batch_message(123, b'[1,["x"]]'),
            link.framed_message(link.REPLY, {"id": 1}, b""),
            *link.parts_message(link.IMAGE, (b"{}",)),
        ]
    )
    decoder = link.LinkDecoder()
    messages = []
    for start in range(0, len(stream), cut):
        messages += decoder.feed(stream[start : start + cut])
    assert [kind for kind, _ in messages] == [link.REQUEST, link.BATCH, link.REPLY, link.IMAGE]
    forwarded, frame = link.split_framed_view(messages[0][1])
    assert forwarded == {"id": 1, "crc": 5}
    request = decode_frame_payload(frame[4:])
    assert request.body == body and request.field("brokerName") == "b"
    published_ns, batch = link.split_batch(messages[1][1])
    assert (published_ns, bytes(batch)) == (123, b'[1,["x"]]')
    assert link.split_framed(messages[2][1]) == ({"id": 1}, b"")
    assert messages[3][1] == b"{}"
    assert decoder.feed(b"") == []


def test_a_length_no_message_has_breaks_the_link() -> None:
    with pytest.raises(link.LinkError):
        link.LinkDecoder().feed(b"\x00\x00\x00\x00\x03")


def test_a_large_forwarded_body_travels_as_a_message_of_its_own() -> None:
    """A forwarded request's large body is the whole payload of a BODY message after the
    REQUEST (read back as the bytes the writer decodes, not copied out of a larger one); a
    small one stays in the REQUEST's frame."""
    request = requests.get_routeinfo_by_topic("T")
    small, large = b"s" * 10, b"L" * link.SEPARATE_BODY_MIN
    decoder = link.LinkDecoder()
    messages = decoder.feed(
        b"".join(
            link.request_parts({"id": 1}, encode_head(request), small)
            + link.request_parts({"id": 2}, encode_head(request), large)
        )
    )
    assert [kind for kind, _ in messages] == [link.REQUEST, link.REQUEST, link.BODY]
    first, frame = link.split_framed_view(messages[0][1])
    assert "body" not in first and bytes(frame).endswith(small)
    second, frame = link.split_framed_view(messages[1][1])
    assert second == {"id": 2, "body": True} and not bytes(frame).endswith(b"L")
    assert messages[2][1] == large


def test_acknowledgements_read_back_whole_and_in_order() -> None:
    data = b"".join(link.ack(position) for position in (3, 4, 70_000))
    assert link.ack_positions(data) == [3, 4, 70_000]
    assert link.ack_positions(data[:-3]) == [3, 4]  # a torn last one is not a position


def test_hand_over_returns_once_the_worker_acknowledged_the_batch() -> None:
    """The writer waits for the worker on its core until it acknowledged the position (or
    the bound passes, or the worker is gone): never on a worker that will not answer."""
    pool: Any = SimpleNamespace()
    worker = WorkerLink(pool, 1)
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    worker.acks = ours
    theirs.sendall(link.ack(4) + link.ack(5))
    worker.hand_over(5)
    assert worker._acked == 5
    worker.hand_over(6)  # nothing comes: back after the bound
    assert worker._acked == 5 and worker.acks is ours
    theirs.close()
    worker.hand_over(6)  # the worker is gone: its socket is closed, nothing waits on it
    assert worker.acks is None
