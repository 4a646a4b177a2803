"""rocketmq-client-cpp finds the name server through our address service, then sends.

The producer is given no name-server address at all, only the URL of /rocketmq/nsaddr
(``set_namesrv_domain``). It fetches it with its own HTTP/1.0 client (Host without a port,
body read from what arrives with the headers), takes the ``host:port`` list, asks that name
server for the route and sends to the broker double. Delivery on an advertised queue proves
every step; the server's request counter proves the address really came from HTTP.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fake_broker import SEND_MESSAGE
from peer_helpers import PeerRoute, run_client
from pynamesrv.http.app import HttpServer
from pynamesrv.namesrv.controller import NamesrvController

pytestmark = pytest.mark.peers

CPP_HARD_TIMEOUT = 30.0
OUTER_GRACE = 15.0


async def test_rocketmq_client_cpp_finds_us_through_nsaddr(
    cpp_client: list[str], namesrv: NamesrvController, peer_route: PeerRoute, tmp_path: Path
) -> None:
    http = HttpServer(namesrv.view)
    await http.start("127.0.0.1", 0)
    home = tmp_path / "cpp-home"
    home.mkdir()
    body = "hello from rocketmq-client-cpp via /rocketmq/nsaddr"
    argv = [
        *cpp_client,
        "--namesrv-domain", f"http://127.0.0.1:{http.port}/rocketmq/nsaddr",
        "--topic", peer_route.topic,
        "--body", body,
        "--group", "PeerCppDomainProducer",
        "--hard-timeout", str(CPP_HARD_TIMEOUT),
    ]  # fmt: skip
    try:
        before = http.nsaddr_requests
        run = await run_client(
            argv, timeout=CPP_HARD_TIMEOUT + OUTER_GRACE, env={**os.environ, "HOME": str(home)}
        )
    finally:
        await http.stop()

    broker = peer_route.broker
    logs = sorted((home / "logs" / "rocketmq-cpp").glob("*.log*"))
    log_tail = "\n".join(logs[-1].read_text(errors="replace").splitlines()[-60:]) if logs else ""
    diag = run.describe(
        f" nsaddr requests: {http.nsaddr_requests - before}\n"
        f" broker saw codes {broker.codes_seen()}, rejected {broker.rejected}\n"
        f" cpp log tail:\n{log_tail}"
    )
    assert http.nsaddr_requests > before, f"the client never asked the address service\n{diag}"
    assert not run.timed_out, f"client hung\n{diag}"
    assert run.returncode == 0, f"client failed\n{diag}"
    assert (run.result or {}).get("ok") is True, diag
    assert len(broker.messages) == 1, f"broker double got {broker.messages}\n{diag}"
    message = broker.messages[0]
    assert (message.topic, message.body) == (peer_route.topic, body.encode()), diag
    assert message.request_code == SEND_MESSAGE, diag
    assert message.language == "CPP", diag
    assert message.producer_group == "PeerCppDomainProducer", diag
    advertised = [
        int(qd["writeQueueNums"])
        for qd in peer_route.route.get("queueDatas") or []
        if qd.get("brokerName") == peer_route.broker_name
    ]
    assert advertised == [peer_route.write_queue_nums], peer_route.route
    assert 0 <= message.queue_id < advertised[0], diag
