"""Topic searches never hold the serving loop (issue 32, finding 3).

A search over every topic used to run in one step on the loop that answers route queries:
64 connections searching 300,000 topics cut route answers to 5 %. Searches now walk the table
in slices that yield to the loop, and at most ``httpMaxSearches`` run at once. The tests pin
the order of events, not durations: slices are made one name long so a search over 20,000
topics takes 20,000 turns of the loop, and a route query sent after it began must be answered
before it ends. ``bench/http_search.py`` measures the route latency under a search flood.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import test_http
from test_http import HttpOf, broker, get_json, scrape, start_all, value

from pynamesrv.http import search
from pynamesrv.namesrv import requests
from pynamesrv.remoting.client import RemotingClient
from pynamesrv.remoting.codes import ResponseCode
from waiting import wait_for

http_of = test_http.http_of  # the fixture
TOPICS = 20_000


@pytest.fixture
def one_name_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every name of a search is a slice of its own: a search lasts many turns of the loop."""
    monkeypatch.setattr(search, "SLICE_S", 0.0)
    monkeypatch.setattr(search, "CHUNK", 1)


async def _routed(start_namesrv: Any, http_of: HttpOf, **config: Any) -> Any:
    ctrl = await start_namesrv(**config)
    http = await http_of(ctrl)
    topics = {f"T{n:05d}": (4, 4, 6) for n in range(TOPICS)}
    client = broker(ctrl, "C", "broker-a", 0, 10911, topics)
    await start_all(client)
    return ctrl, http, client


async def test_a_route_query_is_answered_while_a_large_search_runs(
    start_namesrv: Any, http_of: HttpOf, one_name_slices: None
) -> None:
    ctrl, http, client = await _routed(start_namesrv, http_of)
    remoting = await RemotingClient.connect("127.0.0.1", ctrl.port)
    order: list[str] = []

    async def searching() -> Any:
        status, data = await get_json(http.port, "/api/topics?q=t1&limit=3")
        order.append("search answered")
        assert status == 200
        return data

    try:
        task = asyncio.create_task(searching())
        await wait_for(lambda: http.searches.running == 1, "the search running")
        answer = await remoting.request(requests.get_routeinfo_by_topic("T00042", version=401))
        order.append("route answered")
        assert answer.code == ResponseCode.SUCCESS
        data = await task
    finally:
        await remoting.close()
        await client.stop()
    assert order == ["route answered", "search answered"]
    # The sliced search answers what the one-step search did: T10000..T19999 contain "t1".
    assert (data["total"], data["matched"], data["truncated"]) == (TOPICS, 10_000, True)
    assert [t["topic"] for t in data["topics"]] == ["T10000", "T10001", "T10002"]


async def test_searches_past_the_cap_are_answered_429(
    start_namesrv: Any, http_of: HttpOf, one_name_slices: None
) -> None:
    _, http, client = await _routed(start_namesrv, http_of, httpMaxSearches=1)
    try:
        first = asyncio.create_task(get_json(http.port, "/api/topics?q=T"))
        await wait_for(lambda: http.searches.running == 1, "the first search running")
        status, busy = await get_json(http.port, "/api/topics?q=T0")
        assert status == 429
        assert busy == {
            "error": "1 topic searches or broker listings are running (httpMaxSearches 1); "
            "retry in a moment"
        }
        status, _ = await get_json(http.port, "/api/clusters")  # the same cap
        assert status == 429
        status, data = await first
        assert (status, data["matched"]) == (200, TOPICS)
        samples, _ = await scrape(http.port)
        assert value(samples, "pynamesrv_http_searches_refused_total") == 2
        assert value(samples, "pynamesrv_http_searches_running") == 0
        # The cap is on searches at once, not in all: the next one is answered.
        status, data = await get_json(http.port, "/api/topics?q=T0")
        assert (status, data["matched"]) == (200, 10_000)
    finally:
        await client.stop()
