"""orderTopicConf: route answers carry the ORDER_TOPIC_CONFIG KV value when enabled."""

from __future__ import annotations

from helpers import query_route
from pynamesrv.broker.client import BrokerClient, TopicConfig
from pynamesrv.namesrv import requests
from pynamesrv.remoting import fastjson
from pynamesrv.remoting.client import RemotingClient
from pynamesrv.remoting.codes import ResponseCode


async def test_order_conf_follows_kv_and_order_message_enable(start_namesrv) -> None:
    ns = await start_namesrv()
    broker = BrokerClient(
        namesrv_addrs=[f"127.0.0.1:{ns.port}"],
        cluster="C",
        broker_name="broker-a",
        broker_id=0,
        broker_addr="127.0.0.1:10911",
        topics={"OrderT": TopicConfig("OrderT", 8, 8, 6)},
    )
    [first] = await broker.start()
    assert first.order_topic_config is None  # the namespace does not exist yet
    client = await RemotingClient.connect("127.0.0.1", ns.port)

    put = await client.request(requests.put_kv_config("ORDER_TOPIC_CONFIG", "OrderT", "broker-a:8"))
    assert put.code == ResponseCode.SUCCESS
    answer = await query_route(ns.port, "OrderT")
    assert "orderTopicConf" not in fastjson.loads(answer.body)  # orderMessageEnable is false
    await client.request(requests.update_namesrv_config({"orderMessageEnable": "true"}))
    for version in (401, 121):  # both dialects
        answer = await query_route(ns.port, "OrderT", version=version)
        assert fastjson.loads(answer.body)["orderTopicConf"] == "broker-a:8"
    [again] = await broker.register_all()  # brokers get the whole table back
    assert again.order_topic_config == {"OrderT": "broker-a:8"}
    await client.request(requests.delete_kv_config("ORDER_TOPIC_CONFIG", "OrderT"))
    answer = await query_route(ns.port, "OrderT")
    assert "orderTopicConf" not in fastjson.loads(answer.body)
    await client.close()
    await broker.stop()
