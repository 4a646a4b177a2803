"""Requests built by ``namesrv.requests`` do what they ask of a running name server.

The golden corpora pin the field names of every request Java sends
(tests/conformance/test_request_builders.py); this covers what the corpora cannot: the
5.x-only REGISTER_TOPIC_IN_NAMESRV (never recorded as a request), and answers that depend on
state a builder's fields must select correctly (a broker's data version, its group, its
cluster's topics, a setting whose value needs escaping).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from helpers import query_route
from pynamesrv.broker.client import BrokerClient, TopicConfig
from pynamesrv.namesrv import requests
from pynamesrv.namesrv.controller import NamesrvController
from pynamesrv.namesrv.model import DataVersion, QueueData
from pynamesrv.remoting import fastjson
from pynamesrv.remoting.client import RemotingClient
from pynamesrv.remoting.codes import ResponseCode
from pynamesrv.remoting.command import RemotingCommand

CLUSTER = "BuilderCluster"
MASTER = "127.0.0.1:10911"


@pytest.fixture
async def broker(namesrv: NamesrvController) -> AsyncIterator[BrokerClient]:
    client = BrokerClient(
        namesrv_addrs=[f"127.0.0.1:{namesrv.port}"],
        cluster=CLUSTER,
        broker_name="broker-a",
        broker_id=0,
        broker_addr=MASTER,
        topics={"Orders": TopicConfig("Orders", 4, 4, 6)},
        data_version=DataVersion(timestamp=1_700_000_000_000, counter=7),
    )
    assert all(o.ok for o in await client.start())
    yield client
    await client.stop()


@pytest.fixture
async def client(namesrv: NamesrvController) -> AsyncIterator[RemotingClient]:
    conn = await RemotingClient.connect("127.0.0.1", namesrv.port)
    yield conn
    await conn.close()


async def test_register_topic_adds_queues_to_the_route(
    namesrv: NamesrvController, broker: BrokerClient, client: RemotingClient
) -> None:
    request = requests.register_topic_in_namesrv("Fresh", [QueueData("broker-a", 3, 2, 4, 0)])
    assert (await client.request(request)).code == ResponseCode.SUCCESS
    route = fastjson.loads((await query_route(namesrv.port, "Fresh")).body)
    assert [(q["brokerName"], q["readQueueNums"], q["writeQueueNums"], q["perm"])
            for q in route["queueDatas"]] == [("broker-a", 3, 2, 4)]  # fmt: skip
    gone = await client.request(requests.delete_topic_in_namesrv("Fresh", CLUSTER))
    assert gone.code == ResponseCode.SUCCESS
    assert (await query_route(namesrv.port, "Fresh")).code == ResponseCode.TOPIC_NOT_EXIST


async def test_query_data_version_compares_the_brokers_own_version(
    broker: BrokerClient, client: RemotingClient
) -> None:
    def ask(addr: str, version: DataVersion) -> RemotingCommand:
        return requests.query_data_version(
            cluster=CLUSTER, broker_name="broker-a", broker_addr=addr, broker_id=0,
            data_version=version,
        )  # fmt: skip

    same = await client.request(ask(MASTER, broker.data_version))
    assert (same.code, same.field("changed")) == (ResponseCode.SUCCESS, "false")
    assert DataVersion.from_json(fastjson.loads(same.body)) == broker.data_version
    newer = DataVersion(broker.data_version.timestamp, broker.data_version.counter + 1)
    assert (await client.request(ask(MASTER, newer))).field("changed") == "true"
    assert (await client.request(ask("127.0.0.1:1", newer))).field("changed") == "true"


async def test_member_group_and_cluster_topics_follow_the_registration(
    broker: BrokerClient, client: RemotingClient
) -> None:
    group = await client.request(
        requests.get_broker_member_group(cluster=CLUSTER, broker_name="broker-a")
    )
    assert fastjson.loads(group.body)["brokerMemberGroup"]["brokerAddrs"] == {"0": MASTER}
    topics = await client.request(requests.get_topics_by_cluster(CLUSTER))
    assert fastjson.loads(topics.body)["topicList"] == ["Orders"]
    system = await client.request(requests.get_system_topic_list_from_ns())
    assert sorted(fastjson.loads(system.body)["topicList"]) == [CLUSTER, "broker-a"]


async def test_config_values_survive_the_properties_text(
    namesrv: NamesrvController, client: RemotingClient
) -> None:
    value = "a\\b=c:d #é !"  # each of these means something in a properties file
    update = await client.request(requests.update_namesrv_config({"productEnvName": value}))
    assert update.code == ResponseCode.SUCCESS, update.remark
    assert namesrv.config.product_env_name == value
    shown = await client.request(requests.get_namesrv_config())
    assert f"productEnvName={value}\n" in shown.body.decode("utf-8")
