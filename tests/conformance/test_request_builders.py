"""The request builders against every request real Java programs sent (golden corpora).

Each recorded request whose code has a builder is rebuilt from the values it carried; the
builder must produce the same code, language, version, exactly the same extension fields
(names and values) and the same body bytes (5.x broker bodies aside: they carry fields our
records do not keep). Fields that RPC hooks add around the header (ACL
signature, ali-ons' channel, the request-type tag) are not the builders' business.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import javaproperties
import pytest

from pynamesrv.namesrv import requests
from pynamesrv.namesrv.model import DataVersion, QueueData, RegisterBrokerBody
from pynamesrv.remoting import fastjson
from pynamesrv.remoting.codes import RequestCode
from pynamesrv.remoting.command import RemotingCommand

from .golden import CODE_SYSTEM_ERROR as SYSTEM_ERROR
from .golden import Frame, golden_dir, load_scenario, shared_dir

# Added by RPC hooks or client wrappers, not by the request's header class.
DECORATIONS = frozenset({"AccessKey", "Signature", "SecurityToken", "ReqT", "OnsChannel"})
# Codes whose builder takes the 5.x zone; other requests carry it only as a decoration.
ZONED = frozenset({RequestCode.REGISTER_BROKER, RequestCode.UNREGISTER_BROKER, 105})
# Java parses Booleans ignoring case (the recording probes "TRUE"); builders write lower case.
BOOLEANS = frozenset({"acceptStandardJsonOnly", "compressed", "enableActingMaster", "__ZONE_MODE"})

# Bodies of 5.x brokers carry fields our records do not keep (attributes, stateVersion,
# static-topic mappings), so rebuilding them from the records cannot give the same bytes.
FIVE_X_RECORDS = frozenset({RequestCode.REGISTER_BROKER, RequestCode.QUERY_DATA_VERSION})

Fields = dict[str, str]
Builder = Callable[[Fields, bytes, dict[str, Any]], RemotingCommand]


def _flag(fields: Fields, name: str) -> bool | None:
    value = fields.get(name)
    return None if value is None else value == "true"


def _broker(fields: Fields) -> dict[str, Any]:
    return {
        "cluster": fields["clusterName"],
        "broker_name": fields["brokerName"],
        "broker_addr": fields["brokerAddr"],
    }


def _register_broker(fields: Fields, body: bytes, sender: dict[str, Any]) -> RemotingCommand:
    compressed = fields["compressed"] == "true"
    decoded = RegisterBrokerBody.decode(body, compressed=compressed, version=sender["version"])
    timeout = fields.get("heartbeatTimeoutMillis")
    return requests.register_broker(
        **_broker(fields),
        broker_id=int(fields["brokerId"]),
        ha_server_addr=fields["haServerAddr"],
        body=decoded,
        compressed=compressed,
        heartbeat_timeout_ms=None if timeout is None else int(timeout),
        enable_acting_master=_flag(fields, "enableActingMaster"),
        zone_name=fields.get("__ZONE_NAME"),
        **sender,
    )


def _register_topic(fields: Fields, body: bytes, sender: dict[str, Any]) -> RemotingCommand:
    queues = [
        QueueData(q["brokerName"], q["readQueueNums"], q["writeQueueNums"], q["perm"],
                  q["topicSysFlag"])
        for q in fastjson.loads(body)["queueDatas"]
    ]  # fmt: skip
    return requests.register_topic_in_namesrv(fields["topic"], queues, **sender)


BUILDERS: dict[int, Builder] = {
    RequestCode.PUT_KV_CONFIG: lambda f, b, s: requests.put_kv_config(
        f["namespace"], f["key"], f["value"], **s
    ),
    RequestCode.GET_KV_CONFIG: lambda f, b, s: requests.get_kv_config(
        f["namespace"], f["key"], **s
    ),
    RequestCode.DELETE_KV_CONFIG: lambda f, b, s: requests.delete_kv_config(
        f["namespace"], f["key"], **s
    ),
    RequestCode.REGISTER_BROKER: _register_broker,
    RequestCode.UNREGISTER_BROKER: lambda f, b, s: requests.unregister_broker(
        **_broker(f), broker_id=int(f["brokerId"]), zone_name=f.get("__ZONE_NAME"), **s
    ),
    RequestCode.GET_ROUTEINFO_BY_TOPIC: lambda f, b, s: requests.get_routeinfo_by_topic(
        f["topic"],
        accept_standard_json_only=_flag(f, "acceptStandardJsonOnly"),
        zone_mode=_flag(f, "__ZONE_MODE"),
        zone_name=f.get("__ZONE_NAME"),
        **s,
    ),
    RequestCode.GET_BROKER_CLUSTER_INFO: lambda f, b, s: requests.get_broker_cluster_info(**s),
    RequestCode.WIPE_WRITE_PERM_OF_BROKER: lambda f, b, s: requests.wipe_write_perm_of_broker(
        f["brokerName"], **s
    ),
    RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: (
        lambda f, b, s: requests.get_all_topic_list_from_nameserver(**s)
    ),
    RequestCode.DELETE_TOPIC_IN_NAMESRV: lambda f, b, s: requests.delete_topic_in_namesrv(
        f["topic"], f.get("clusterName"), **s
    ),
    RequestCode.REGISTER_TOPIC_IN_NAMESRV: _register_topic,
    RequestCode.GET_KVLIST_BY_NAMESPACE: lambda f, b, s: requests.get_kvlist_by_namespace(
        f["namespace"], **s
    ),
    RequestCode.GET_TOPICS_BY_CLUSTER: lambda f, b, s: requests.get_topics_by_cluster(
        f["cluster"], **s
    ),
    RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS: (
        lambda f, b, s: requests.get_system_topic_list_from_ns(**s)
    ),
    RequestCode.GET_UNIT_TOPIC_LIST: lambda f, b, s: requests.get_unit_topic_list(**s),
    RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST: (
        lambda f, b, s: requests.get_has_unit_sub_topic_list(**s)
    ),
    RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST: (
        lambda f, b, s: requests.get_has_unit_sub_ununit_topic_list(**s)
    ),
    RequestCode.UPDATE_NAMESRV_CONFIG: lambda f, b, s: requests.update_namesrv_config(
        javaproperties.loads(b.decode("iso-8859-1")), **s
    ),
    RequestCode.GET_NAMESRV_CONFIG: lambda f, b, s: requests.get_namesrv_config(**s),
    RequestCode.QUERY_DATA_VERSION: lambda f, b, s: requests.query_data_version(
        **_broker(f),
        broker_id=int(f["brokerId"]),
        data_version=DataVersion.from_json(fastjson.loads(b)),
        **s,
    ),
    RequestCode.ADD_WRITE_PERM_OF_BROKER: lambda f, b, s: requests.add_write_perm_of_broker(
        f["brokerName"], **s
    ),
    RequestCode.GET_BROKER_MEMBER_GROUP: lambda f, b, s: requests.get_broker_member_group(
        cluster=f["clusterName"], broker_name=f["brokerName"], **s
    ),
    RequestCode.BROKER_HEARTBEAT: lambda f, b, s: requests.broker_heartbeat(**_broker(f), **s),
}


def recorded_requests() -> Iterator[tuple[str, str, Frame]]:
    """(corpus, scenario, frame) for every complete request of both corpora, but those the
    Java server refused as broken (SYSTEM_ERROR: a wrong CRC sent on purpose, a body that
    is not one): they are what a builder must never produce."""
    for directory in (golden_dir(), shared_dir() / "golden-5x"):
        for path in sorted(Path(directory).glob("*.jsonl")):
            if path.name.endswith(".events.jsonl"):
                continue
            scenario = load_scenario(path.stem, directory)
            for frame in scenario.frames:
                answer = scenario.answer_of.get(frame.seq)
                if frame.is_request and (answer is None or answer.code != SYSTEM_ERROR):
                    yield directory.name, path.stem, frame


def header_fields(frame: Frame) -> Fields:
    fields = dict((frame.header or {}).get("extFields") or {})
    for name in DECORATIONS:
        fields.pop(name, None)
    if frame.code not in ZONED:
        fields.pop("__ZONE_NAME", None)
    return {k: v.lower() if k in BOOLEANS else v for k, v in fields.items()}


def rebuilt(frame: Frame) -> RemotingCommand | None:
    """The builder's request from the frame's values; None when the frame lacks a field its
    header class needs (the corpus holds deliberately incomplete requests)."""
    header = frame.header or {}
    sender = {"version": header.get("version", 0), "language": header.get("language", "JAVA")}
    try:
        return BUILDERS[frame.code](header_fields(frame), frame.body, sender)  # type: ignore[index]
    except KeyError:
        return None


def test_every_builder_rebuilds_what_java_sent() -> None:
    checked: Counter[str] = Counter()
    for corpus, name, frame in recorded_requests():
        if frame.code not in BUILDERS:
            continue
        command = rebuilt(frame)
        if command is None:
            continue
        header = frame.header or {}
        where = f"{corpus}/{name} seq {frame.seq}"
        assert command.code == frame.code, where
        assert (command.language, command.version) == (
            header.get("language", "JAVA"),
            header.get("version", 0),
        ), where
        built, sent = dict(command.ext_fields or {}), header_fields(frame)
        if "bodyCrc32" in sent and (sent["bodyCrc32"] == "0" or command.body != frame.body):
            # The CRC of our own body ("0", "do not check", only the recording's raw probe
            # sends; 5.x bodies carry fields our records do not keep).
            assert built.pop("bodyCrc32") == str(requests.body_crc32(command.body)), where
            del sent["bodyCrc32"]
        assert built == sent, where
        if not (corpus == "golden-5x" and frame.code in FIVE_X_RECORDS):
            assert command.body == frame.body, where
        checked[RequestCode(command.code).name] += 1
    # Codes the corpora hold in a complete form; the rest are checked against the server in
    # tests/e2e/test_request_builders.py (217 is never recorded as a request).
    unchecked = {c.name for c in BUILDERS} - set(checked)  # type: ignore[attr-defined]
    assert unchecked == {"REGISTER_TOPIC_IN_NAMESRV"}, checked
    assert checked["REGISTER_BROKER"] >= 100 and checked["GET_ROUTEINFO_BY_TOPIC"] >= 200


@pytest.mark.parametrize("corpus", ["golden", "golden-5x"])
def test_registration_crc_is_javas(corpus: str) -> None:
    """``body_crc32`` of each recorded body is the bodyCrc32 the broker sent with it."""
    bodies = [
        frame
        for name_corpus, _, frame in recorded_requests()
        if name_corpus == corpus and frame.code == RequestCode.REGISTER_BROKER and frame.body
    ]
    assert bodies
    for frame in bodies:
        crc = (frame.header or {})["extFields"]["bodyCrc32"]
        if crc != "0":
            assert requests.body_crc32(frame.body) == int(crc)


def test_4_9_4_broker_bodies_are_rebuilt_byte_for_byte() -> None:
    """From the decoded records, the builder writes exactly what a 4.9.4 broker wrote: JSON
    and compressed registration bodies, and the DataVersion of QUERY_DATA_VERSION."""
    same: Counter[tuple[str, bool]] = Counter()
    for corpus, _, frame in recorded_requests():
        if corpus != "golden" or frame.code not in (103, 322):
            continue
        command = rebuilt(frame)
        if command is None:
            continue
        assert command.body == frame.body, frame.seq
        compressed = (frame.header or {})["extFields"].get("compressed") == "true"
        same[(RequestCode(frame.code).name, compressed)] += 1
    assert set(same) == {
        ("REGISTER_BROKER", False),
        ("REGISTER_BROKER", True),
        ("QUERY_DATA_VERSION", False),
    }
