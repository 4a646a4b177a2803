"""``topicRoute`` prints a route byte for byte as mqadmin does (fastjson 1.2.x pretty format).

The expected texts are written out by hand from fastjson's serializers (JavaBeanSerializer,
ListSerializer, MapSerializer) and agree with mqadmin output published by its users: tabs,
members in name order, ``"brokerAddrs":{0:"..."`` with its closing brace on a line of its
own. The inputs are route bodies as real Java name servers send them (golden corpus).
"""

from __future__ import annotations

from pynamesrv.cli.admin.mqadmin_json import hashmap_order, route_text
from pynamesrv.remoting import fastjson

# Java 4.9.4 NameServer's answer to mqadmin 4.9.4 topicRoute (golden register-master-slave).
GOLDEN_494 = (
    b'{"brokerDatas":[{"brokerAddrs":{"0":"127.0.0.1:19120","1":"127.0.0.1:19130"},'
    b'"brokerName":"broker-a","cluster":"DefaultCluster"}],"filterServerTable":{},'
    b'"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,'
    b'"writeQueueNums":4}]}'
)
EXPECTED_494 = """{
\t"brokerDatas":[
\t\t{
\t\t\t"brokerAddrs":{0:"127.0.0.1:19120",1:"127.0.0.1:19130"
\t\t\t},
\t\t\t"brokerName":"broker-a",
\t\t\t"cluster":"DefaultCluster"
\t\t}
\t],
\t"filterServerTable":{},
\t"queueDatas":[
\t\t{
\t\t\t"brokerName":"broker-a",
\t\t\t"perm":6,
\t\t\t"readQueueNums":4,
\t\t\t"topicSysFlag":0,
\t\t\t"writeQueueNums":4
\t\t}
\t]
}"""

# Java 5.2.0 in zone mode (golden-5x zone-route): bare keys, 5.x BrokerData members.
GOLDEN_5X = (
    b'{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:34931",1:"127.0.0.1:34941"},'
    b'"brokerName":"broker-b","cluster":"DefaultCluster","enableActingMaster":false,'
    b'"zoneName":"zoneB"}],"filterServerTable":{},"orderTopicConf":"broker-b:2",'
    b'"queueDatas":[{"brokerName":"broker-b","perm":6,"readQueueNums":2,"topicSysFlag":0,'
    b'"writeQueueNums":2}]}'
)
EXPECTED_5X = """{
\t"brokerDatas":[
\t\t{
\t\t\t"brokerAddrs":{0:"127.0.0.1:34931",1:"127.0.0.1:34941"
\t\t\t},
\t\t\t"brokerName":"broker-b",
\t\t\t"cluster":"DefaultCluster",
\t\t\t"enableActingMaster":false,
\t\t\t"zoneName":"zoneB"
\t\t}
\t],
\t"filterServerTable":{},
\t"orderTopicConf":"broker-b:2",
\t"queueDatas":[
\t\t{
\t\t\t"brokerName":"broker-b",
\t\t\t"perm":6,
\t\t\t"readQueueNums":2,
\t\t\t"topicSysFlag":0,
\t\t\t"writeQueueNums":2
\t\t}
\t]
}"""


def test_golden_494_route_prints_as_mqadmin_prints_it() -> None:
    assert route_text(fastjson.loads(GOLDEN_494)) == EXPECTED_494


def test_golden_5x_route_keeps_its_members_in_name_order() -> None:
    assert route_text(fastjson.loads(GOLDEN_5X)) == EXPECTED_5X


def test_members_are_sorted_nulls_left_out_and_string_maps_in_hash_order() -> None:
    route = {
        "queueDatas": [],
        "orderTopicConf": None,
        "filterServerTable": {"a:1": ["f2", "f3"], "z:1": ["f1"]},
        "brokerDatas": [],
    }
    # A HashMap<String, ...> iterates by String.hashCode bucket: "z:1" (bucket 0) before
    # "a:1" (bucket 9), the order Java 4.9.4 wrote this table in (spec/json-dialect.md).
    assert route_text(route) == (
        "{\n"
        '\t"brokerDatas":[],\n'
        '\t"filterServerTable":{\n'
        '\t\t"z:1":[\n\t\t\t"f1"\n\t\t],\n'
        '\t\t"a:1":[\n\t\t\t"f2",\n\t\t\t"f3"\n\t\t]\n'
        "\t},\n"
        '\t"queueDatas":[]\n'
        "}"
    )


def test_strings_are_escaped_as_fastjson_does_and_non_ascii_is_written_raw() -> None:
    route = {"brokerDatas": [], "orderTopicConf": 'bröker "x"\\\n\u2028', "queueDatas": []}
    assert '\t"orderTopicConf":"bröker \\"x\\"\\\\\\n\\u2028",\n' in route_text(route)


def test_broker_ids_come_out_in_java_hashmap_order() -> None:
    # Buckets of a 16-slot table: 16 shares bucket 0 with 0 and follows it; 17 follows 1.
    assert hashmap_order([1, 17, 16, 0], lambda k: k) == [16, 0, 1, 17]
    # 13 entries exceed 0.75 x 16: the table has 32 slots and 16 has a bucket of its own;
    # with 12 it still shares bucket 0.
    assert hashmap_order([*range(12), 16], lambda k: k) == [*range(12), 16]
    assert hashmap_order([*range(11), 16], lambda k: k) == [0, 16, *range(1, 11)]
    text = route_text({"brokerDatas": [{"brokerAddrs": {"16": "c", "1": "b", "0": "a"}}]})
    assert '{16:"c",0:"a",1:"b"\n' in text
