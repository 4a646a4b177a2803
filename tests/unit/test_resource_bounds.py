"""Issue 24: what the descriptor limit and remote input may make the server hold or say."""

from __future__ import annotations

import asyncio
import errno
import logging
import socket

import pytest

from pynamesrv.http.metrics import MAX_CLUSTER_LABELS, OTHER_CLUSTER, bounded_clusters
from pynamesrv.remoting.accept_errors import ACCEPT_FAILED
from pynamesrv.remoting.fdbudget import RESERVE, http_cap, remoting_cap
from pynamesrv.remoting.ratelog import RateLimitedLog
from pynamesrv.remoting.server import RemotingServer
from pynamesrv.remoting.slots import SourceCounts, source_of


def test_cluster_labels_from_registrations_are_bounded() -> None:
    """2,000 made-up clusters make at most MAX_CLUSTER_LABELS series and ``other``; the
    clusters with the most live brokers keep theirs."""
    live = {f"fake{i:04}": 1 for i in range(2000)} | {"prod": 6, "staging": 2}
    bounded = bounded_clusters(live)
    assert len(bounded) == MAX_CLUSTER_LABELS + 1
    assert bounded["prod"] == 6 and bounded["staging"] == 2
    assert sum(bounded.values()) == sum(live.values())
    assert bounded[OTHER_CLUSTER] == 2000 - (MAX_CLUSTER_LABELS - 2)
    assert bounded_clusters({"a": 1, "b": 2}) == {"a": 1, "b": 2}


def test_the_descriptor_budget_leaves_remoting_its_share() -> None:
    assert http_cap(256, 1024) == 256
    assert http_cap(10_000, 1024) == 256  # a quarter of the limit
    assert remoting_cap(10_000, 1024) == 1024 - 256 - RESERVE
    assert http_cap(256, 1024) + remoting_cap(10_000, 1024) + RESERVE == 1024
    assert remoting_cap(50, 1024) == 50 and http_cap(8, None) == 8


def test_the_rate_limited_log_says_how_many_it_left_out(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    limited = RateLimitedLog(logging.getLogger("t"), 60.0, clock=lambda: now[0])
    caplog.set_level(logging.INFO, logger="t")
    assert limited.hit("k", logging.ERROR, "out of descriptors")
    assert not any(limited.hit("k", logging.ERROR, "out of descriptors") for _ in range(5))
    now[0] = 61.0
    assert limited.hit("k", logging.ERROR, "out of descriptors")
    assert [r.getMessage() for r in caplog.records] == [
        "out of descriptors",
        "out of descriptors; 5 more since the last such line",
    ]
    assert limited.counts["k"] == 7


async def test_a_failed_remoting_accept_is_counted_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """What asyncio's accept loop does on EMFILE: it hands the error to the loop's exception
    handler (and retries a second later). The server counts it and logs one line a minute,
    not a traceback a second; other errors still reach the handler set before."""
    loop = asyncio.get_running_loop()
    seen: list[str] = []
    loop.set_exception_handler(lambda lp, context: seen.append(context["message"]))
    server = RemotingServer(lambda request, conn: None)
    await server.start("127.0.0.1", 0)
    emfile = OSError(errno.EMFILE, "Too many open files")
    caplog.set_level(logging.INFO, logger="pynamesrv")
    try:
        assert server._server is not None
        listening = server._server.sockets[0]
        for _ in range(3):
            loop.call_exception_handler(
                {"message": ACCEPT_FAILED, "exception": emfile, "socket": listening}
            )
        with socket.socket() as other:  # not this server's socket
            loop.call_exception_handler(
                {"message": ACCEPT_FAILED, "exception": emfile, "socket": other}
            )
        loop.call_exception_handler({"message": "something else"})
    finally:
        await server.stop()
    assert server.accept_errors == 3
    assert [r.getMessage() for r in caplog.records if "cannot accept" in r.getMessage()] == [
        "cannot accept remoting connections: Too many open files (EMFILE); 0 open, "
        "retrying every second"
    ]
    assert seen == [ACCEPT_FAILED, "something else"]


def test_connections_count_by_source_ipv6_by_its_64_loopback_included() -> None:
    """maxConnectionsPerSource counts an address; a host that holds a whole IPv6 /64 is one
    source, and an IPv4-mapped address is the IPv4 host it is (dual-stack sockets)."""
    assert source_of("127.0.0.1") == "127.0.0.1"
    assert source_of("::ffff:10.0.0.1") == "10.0.0.1"
    assert source_of("2001:db8::1") == source_of("2001:db8::ffff:7") == "2001:db8::/64"
    assert source_of("2001:db8:0:1::1") == "2001:db8:0:1::/64"
    assert source_of("fe80::1%eth0") == "fe80::/64"
    counts = SourceCounts(2)
    assert counts.admit("127.0.0.1") and counts.admit("127.0.0.1")
    assert not counts.admit("127.0.0.1") and counts.admit("127.0.0.2")
    counts.release("127.0.0.1")
    assert counts.admit("127.0.0.1") and counts.counts == {"127.0.0.1": 2, "127.0.0.2": 1}
    assert all(SourceCounts(0).admit("::1") for _ in range(5))  # 0: no cap
