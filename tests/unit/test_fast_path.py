"""The route-query fast path answers exactly what the normal path answers, or declines."""

from __future__ import annotations

import pytest

from pynamesrv.namesrv.config import NamesrvConfig
from pynamesrv.namesrv.controller import NamesrvController
from pynamesrv.namesrv.model import DataVersion, RegisterBrokerBody, TopicConfig
from pynamesrv.remoting.codec import FrameDecoder, encode
from pynamesrv.remoting.command import RemotingCommand


@pytest.fixture
def controller() -> NamesrvController:
    ctrl = NamesrvController(NamesrvConfig(listen_port=0, journal_enable=False, http_port=0))
    register(ctrl, queues=8)
    return ctrl


def register(ctrl: NamesrvController, queues: int, counter: int = 1) -> None:
    register_topics(ctrl, [TopicConfig("T/ö", queues, queues, 6)], counter)


def register_topics(
    ctrl: NamesrvController, topics: list[TopicConfig], counter: int = 1, zone: str | None = None
) -> None:
    """One broker on channel "conn" with ``topics``; ``counter`` is its data version, ``zone``
    the zone it registers in (5.x ``__ZONE_NAME``)."""
    body = RegisterBrokerBody(DataVersion(1, counter), topics, [])
    ctrl.routes.register_broker(
        cluster="C",
        broker_addr="127.0.0.1:10911",
        broker_name="b",
        broker_id=0,
        ha_server_addr=None,
        body_digest=counter,
        load_body=lambda: body,
        channel="conn",
        now_ms=0,
        zone_name=zone,
    )


def header_of(command: RemotingCommand) -> bytes:
    [(_, header, _, _)] = FrameDecoder().feed_raw(encode(command))
    return header


def both_paths(ctrl: NamesrvController, command: RemotingCommand) -> tuple[bytes | None, bytes]:
    fast = ctrl.route_fast_path.answer_one(header_of(command))
    [decoded] = FrameDecoder().feed(encode(command))
    normal = ctrl.processor.process(decoded, "conn")
    return fast, normal if isinstance(normal, bytes) else encode(normal)  # type: ignore[arg-type]


@pytest.mark.parametrize("opaque", [0, 7, 2**31 - 1])
@pytest.mark.parametrize(
    ("version", "ext"),
    [
        (401, {"topic": "T/ö"}),
        (121, {"topic": "T/ö"}),
        (63, {"topic": "T/ö", "acceptStandardJsonOnly": "true"}),
        (317, {"topic": "T/ö", "AccessKey": "ak", "Signature": "sig"}),
        (453, {"topic": "T/ö", "__ZONE_MODE": "false", "__ZONE_NAME": "zoneA"}),  # no filter
        (453, {"topic": "T/ö", "__ZONE_MODE": "true", "__ZONE_NAME": ""}),  # blank: no filter
    ],
)
def test_fast_answer_is_byte_identical_to_the_normal_answer(
    controller: NamesrvController, opaque: int, version: int, ext: dict[str, str]
) -> None:
    command = RemotingCommand(code=105, version=version, opaque=opaque, ext_fields=ext)
    for _ in range(2):  # the first call learns the shape, the second uses it
        fast, normal = both_paths(controller, command)
        assert fast == normal


def test_fast_answer_follows_route_changes(controller: NamesrvController) -> None:
    command = RemotingCommand(code=105, version=401, opaque=1, ext_fields={"topic": "T/ö"})
    before, _ = both_paths(controller, command)
    register(controller, queues=2, counter=2)
    after, normal = both_paths(controller, command)
    assert after == normal and after != before and b'"writeQueueNums":2' in after


@pytest.mark.parametrize(
    "command",
    [
        RemotingCommand(code=105, opaque=1, flag=2, ext_fields={"topic": "T/ö"}),  # oneway
        RemotingCommand(code=105, opaque=1, ext_fields={"topic": "NoSuchTopic"}),  # miss
        RemotingCommand(code=105, opaque=-5, ext_fields={"topic": "T/ö"}),  # negative opaque
        RemotingCommand(code=106, opaque=1),  # another request
        RemotingCommand(code=105, opaque=1),  # no topic
        RemotingCommand(
            code=105,
            opaque=1,
            ext_fields={"topic": "T/ö", "__ZONE_MODE": "True", "__ZONE_NAME": "zoneA"},
        ),
        RemotingCommand(code=105, opaque=2**31, ext_fields={"topic": "T/ö"}),  # no Java int
    ],
    ids=[
        "oneway",
        "miss",
        "negative-opaque",
        "other-code",
        "no-topic",
        "zone-mode",
        "huge",
    ],
)
def test_odd_requests_take_the_normal_path(
    controller: NamesrvController, command: RemotingCommand
) -> None:
    assert controller.route_fast_path.answer_one(header_of(command)) is None
    assert controller.route_fast_path.answer_one(header_of(command)) is None  # also once learned


def test_order_message_enable_sends_queries_the_normal_way(controller: NamesrvController) -> None:
    command = RemotingCommand(code=105, version=401, opaque=1, ext_fields={"topic": "T/ö"})
    assert controller.route_fast_path.answer_one(header_of(command)) is not None
    controller.config.order_message_enable = True
    assert controller.route_fast_path.answer_one(header_of(command)) is None


def test_shapes_are_bounded(controller: NamesrvController) -> None:
    fast_path = controller.route_fast_path
    for i in range(fast_path.MAX_SHAPES + 10):
        command = RemotingCommand(code=105, opaque=1, ext_fields={"topic": f"random-{i}"})
        fast_path.answer_one(header_of(command))
    assert fast_path.shapes == fast_path.MAX_SHAPES


def test_fast_answer_follows_the_acting_master_view(controller: NamesrvController) -> None:
    """supportActingMaster changes answers without a route change: the fast path must not
    keep serving what it cached before (5.x, golden-5x acting-master)."""
    routes = controller.routes
    body = RegisterBrokerBody(DataVersion(1, 1), [TopicConfig("A", 2, 2, 6)], [])
    for broker_id, addr in ((0, "127.0.0.1:34911"), (1, "127.0.0.1:34921")):
        routes.register_broker(
            cluster="C", broker_addr=addr, broker_name="acting", broker_id=broker_id,
            ha_server_addr=None, body_digest=None, load_body=lambda: body, channel=addr,
            now_ms=0, enable_acting_master=True,
        )  # fmt: skip
    command = RemotingCommand(code=105, version=453, opaque=3, ext_fields={"topic": "A"})
    both_paths(controller, command)  # learned and cached with the master
    routes.unregister_broker("C", "127.0.0.1:34911", "acting", 0)
    seen = []
    for support in (False, True, False):
        routes.set_support_acting_master(support)
        fast, normal = both_paths(controller, command)
        assert fast == normal
        seen.append(fast)
    assert b'{"1":"127.0.0.1:34921"}' in seen[0] and b'"perm":4' in seen[0]
    assert b'{"0":"127.0.0.1:34921"}' in seen[1]
    assert seen[2] == seen[0]
