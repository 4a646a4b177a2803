"""End to end with real third-party producers: they must find a broker through our route.

Each test registers a topic with 4 write queues for a master whose address is a broker
double, runs one real client in a subprocess against our in-process name server, and checks
that the double received the message body, for that topic, on a queue the route advertised.
A client that could not parse our route body (dialect A: bare numeric ``brokerAddrs`` keys,
which both clients get because of their old ``version``) never reaches the double.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fake_broker import SEND_MESSAGE, SEND_MESSAGE_V2, ReceivedMessage
from peer_helpers import ClientRun, PeerRoute, run_client

pytestmark = pytest.mark.peers

# Seconds. The send scripts stop themselves after their hard timeout; the outer limit only
# catches a script that cannot even do that.
CPP_HARD_TIMEOUT = 30.0
NODE_HARD_TIMEOUT = 30.0
OUTER_GRACE = 15.0


def advertised_write_queues(route: PeerRoute) -> int:
    """writeQueueNums of the route's queue data for our broker, as the client saw it."""
    nums = [
        int(qd["writeQueueNums"])
        for qd in route.route.get("queueDatas") or []
        if qd.get("brokerName") == route.broker_name
    ]
    assert nums, f"route has no queueData for {route.broker_name}: {route.route}"
    return nums[0]


def check_delivery(
    run: ClientRun, route: PeerRoute, body: str, request_code: int, extra: str = ""
) -> ReceivedMessage:
    """The client succeeded and the double holds exactly our message on an advertised queue."""
    broker = route.broker
    diag = run.describe(
        f" broker saw codes {broker.codes_seen()}, rejected {broker.rejected}\n"
        f" route body (as asked with version 63): {route.route_body!r}\n{extra}"
    )
    assert not run.timed_out, f"client hung\n{diag}"
    assert run.returncode == 0, f"client failed\n{diag}"
    result = run.result
    assert result is not None and result.get("ok") is True, f"no success result\n{diag}"
    assert len(broker.messages) == 1, f"broker double got {broker.messages}\n{diag}"
    message = broker.messages[0]
    assert message.topic == route.topic, diag
    assert message.body == body.encode(), diag
    assert message.request_code == request_code, diag
    assert message.serialize == "JSON", diag
    advertised = advertised_write_queues(route)
    assert advertised == route.write_queue_nums, f"route advertises {advertised} queues\n{diag}"
    assert 0 <= message.queue_id < advertised, diag
    return message


def cpp_log_tail(home: Path, lines: int = 60) -> str:
    """The end of the C++ client's own log ($HOME/logs/rocketmq-cpp), for failure messages."""
    logs = sorted((home / "logs" / "rocketmq-cpp").glob("*.log*"))
    if not logs:
        return " (no rocketmq-cpp log written)"
    text = logs[-1].read_text(encoding="utf-8", errors="replace").splitlines()
    return f" {logs[-1].name} (tail):\n" + "\n".join(text[-lines:])


async def test_rocketmq_client_cpp_sends_through_our_route(
    cpp_client: list[str], peer_route: PeerRoute, tmp_path: Path
) -> None:
    """PyPI rocketmq 0.4.4 (librocketmq.so) sends SEND_MESSAGE to the advertised master."""
    home = tmp_path / "cpp-home"
    home.mkdir()
    body = "hello from rocketmq-client-cpp via pynamesrv"
    argv = [
        *cpp_client,
        "--namesrv", peer_route.namesrv_addr,
        "--topic", peer_route.topic,
        "--body", body,
        "--group", "PeerCppProducer",
        "--hard-timeout", str(CPP_HARD_TIMEOUT),
    ]  # fmt: skip
    env = {**os.environ, "HOME": str(home)}
    run = await run_client(argv, timeout=CPP_HARD_TIMEOUT + OUTER_GRACE, env=env)
    message = check_delivery(run, peer_route, body, SEND_MESSAGE, extra=cpp_log_tail(home))
    assert message.language == "CPP"
    assert message.producer_group == "PeerCppProducer"
    assert message.tags == "TagCpp"


async def test_ali_ons_sends_through_our_route(
    node_client: list[str], peer_route: PeerRoute
) -> None:
    """Node ali-ons 3.12.0 parses our route with JSON2 and sends SEND_MESSAGE_V2."""
    body = "hello from ali-ons via pynamesrv"
    argv = [
        *node_client,
        peer_route.namesrv_addr,
        peer_route.topic,
        body,
        "PeerNodeProducer",
        "TagNode",
        str(int(NODE_HARD_TIMEOUT * 1000)),
    ]
    run = await run_client(argv, timeout=NODE_HARD_TIMEOUT + OUTER_GRACE)
    message = check_delivery(run, peer_route, body, SEND_MESSAGE_V2)
    assert message.language == "JAVA"  # ali-ons says JAVA, version 121
    assert message.producer_group == "PeerNodeProducer"
    assert message.tags == "TagNode"
    result = run.result or {}
    queue = result.get("messageQueue") or {}
    assert queue.get("brokerName") == peer_route.broker_name, run.describe()
    assert queue.get("queueId") == message.queue_id, run.describe()
