"""What the request processor answers as 5.2.0 (the default) and as 4.9.4
(rocketmq.remoting.version=401): versions, shapes, remarks, zone-mode route queries."""

from __future__ import annotations

import orjson
import pytest

from pynamesrv.namesrv.config import JAVA_494_KEYS, JAVA_520_KEYS, NamesrvConfig
from pynamesrv.namesrv.controller import NamesrvController
from pynamesrv.namesrv.model import DataVersion, RegisterBrokerBody, TopicConfig
from pynamesrv.remoting import fastjson
from pynamesrv.remoting.codec import FrameDecoder, encode
from pynamesrv.remoting.command import RemotingCommand

MASTER = "127.0.0.1:34911"


def controller(version: int | None = None, **config: object) -> NamesrvController:
    settings = NamesrvConfig(listen_port=0, journal_enable=False, http_port=0, **config)  # type: ignore[arg-type]
    if version is not None:
        settings.rocketmq_remoting_version = version
    ctrl = NamesrvController(settings)
    body = RegisterBrokerBody(DataVersion(7, 3), [TopicConfig("T", 2, 2, 6)], [])
    for name, addr, zone in (
        ("broker-a", MASTER, "zoneA"),
        ("broker-b", "127.0.0.1:34931", "zoneB"),
    ):
        ctrl.routes.register_broker(
            cluster="C",
            broker_addr=addr,
            broker_name=name,
            broker_id=0,
            ha_server_addr=None,
            body_digest=None,
            load_body=lambda: body,
            channel="conn",
            now_ms=0,
            enable_acting_master=False,
            zone_name=zone,
        )
    return ctrl


def ask(ctrl: NamesrvController, code: int, version: int = 453, body: bytes = b"", **ext: str):
    """The answer as a client decodes it (the bytes the server would write)."""
    request = RemotingCommand(code=code, version=version, opaque=9, ext_fields=ext, body=body)
    [decoded] = FrameDecoder().feed(encode(request))
    answer = ctrl.processor.process(decoded, "conn")
    raw = answer if isinstance(answer, bytes) else encode(answer)  # type: ignore[arg-type]
    [reply] = FrameDecoder().feed(raw)
    return reply


@pytest.mark.parametrize(("version", "expected"), [(None, 453), (401, 401), (453, 453)])
def test_every_answer_carries_the_configured_version(version: int | None, expected: int) -> None:
    ctrl = controller(version)
    for code, ext in ((105, {"topic": "T"}), (105, {"topic": "Nope"}), (106, {}), (9999, {})):
        assert ask(ctrl, code, **ext).version == expected
    fast = ctrl.route_fast_path.answer_one(
        encode(RemotingCommand(code=105, opaque=1, ext_fields={"topic": "T"}))[8:]
    )
    assert fast is not None and f'"version":{expected}}}'.encode() in fast


@pytest.mark.parametrize("version", [401, 453])
def test_broker_data_and_data_version_take_the_versions_shape(version: int) -> None:
    ctrl = controller(version)
    java5 = version >= 413
    broker = fastjson.loads(ask(ctrl, 105, topic="T").body)["brokerDatas"][0]
    assert ("enableActingMaster" in broker) is java5
    cluster = fastjson.loads(ask(ctrl, 106).body)["brokerAddrTable"]["broker-a"]
    assert ("enableActingMaster" in cluster) is java5
    reply = ask(ctrl, 322, body=b'{"counter":3,"timestamp":7}', clusterName="C", brokerAddr=MASTER)
    assert reply.ext_fields == {"changed": "false"}
    assert reply.body == (
        b'{"counter":3,"stateVersion":0,"timestamp":7}' if java5 else b'{"counter":3,"timestamp":7}'
    )


@pytest.mark.parametrize(
    ("version", "url"),
    [(401, "http://rocketmq.apache.org/docs/faq/"),
     (453, "https://rocketmq.apache.org/docs/bestPractice/06FAQ")],
)  # fmt: skip
def test_topic_not_exist_remark_names_the_versions_faq(version: int, url: str) -> None:
    reply = ask(controller(version), 105, topic="Nope")
    assert (reply.code, reply.remark) == (
        17,
        f"No topic route info in name server for the topic: Nope\nSee {url} for further details.",
    )


def test_member_group_answer_has_the_5x_remark() -> None:
    reply = ask(controller(), 901, clusterName="C", brokerName="broker-a")
    assert (reply.code, reply.remark) == (0, "not set any response code")
    assert reply.body == b'{"brokerMemberGroup":{"brokerAddrs":{0:"127.0.0.1:34911"},' \
        b'"brokerName":"broker-a","cluster":"C"}}'  # fmt: skip


@pytest.mark.parametrize(("version", "keys"), [(401, JAVA_494_KEYS), (453, JAVA_520_KEYS)])
def test_get_namesrv_config_reports_the_versions_keys(version: int, keys: frozenset[str]) -> None:
    body = ask(controller(version), 319).body.decode()
    reported = {line.partition("=")[0] for line in body.splitlines()}
    # the Java version's keys, plus the pynamesrv keys this test set (not defaults)
    assert reported - {"httpPort", "journalEnable", "rocketmq.remoting.version"} == keys
    assert len(keys) == (20 if version == 401 else 39)


# ---------------------------------------------------------------------- zone mode


@pytest.mark.parametrize(
    ("ext", "version", "brokers", "quoted"),
    [
        ({"__ZONE_MODE": "true", "__ZONE_NAME": "zoneA"}, 453, ["broker-a"], True),
        ({"__ZONE_MODE": "TRUE", "__ZONE_NAME": "zonea"}, 401, ["broker-a"], True),
        ({"__ZONE_MODE": "true", "__ZONE_NAME": "zoneB"}, 400, ["broker-b"], False),
        ({"__ZONE_MODE": "true", "__ZONE_NAME": "zoneB", "acceptStandardJsonOnly": "true"},
         400, ["broker-b"], True),
        ({"__ZONE_MODE": "true", "__ZONE_NAME": "zoneC"}, 453, [], True),
        ({"__ZONE_MODE": "false", "__ZONE_NAME": "zoneA"}, 453, ["broker-a", "broker-b"], True),
        ({"__ZONE_NAME": "zoneA"}, 453, ["broker-a", "broker-b"], True),
        ({"__ZONE_MODE": "true", "__ZONE_NAME": " \t"}, 453, ["broker-a", "broker-b"], True),
        ({"__ZONE_MODE": "yes", "__ZONE_NAME": "zoneA"}, 453, ["broker-a", "broker-b"], True),
    ],
    ids=["member", "case", "legacy", "standard-asked", "unknown", "mode-false", "no-mode",
         "blank-zone", "not-boolean"],
)  # fmt: skip
def test_zone_mode_filters_in_the_dialect_asked_for(
    ext: dict[str, str], version: int, brokers: list[str], quoted: bool
) -> None:
    ctrl = controller()
    reply = ask(ctrl, 105, version=version, topic="T", **ext)
    answer = fastjson.loads(reply.body)
    assert reply.code == 0
    assert sorted(b["brokerName"] for b in answer["brokerDatas"]) == brokers
    assert sorted(q["brokerName"] for q in answer["queueDatas"]) == brokers
    if brokers:
        assert (b'{"0":' in reply.body) is quoted and (b"{0:" in reply.body) is not quoted
    # what the normal path answered, the fast path answers byte for byte, or declines
    request = RemotingCommand(code=105, version=version, opaque=9, ext_fields={"topic": "T", **ext})
    fast = ctrl.route_fast_path.answer_one(encode(request)[8:])
    if fast is not None:
        normal = ctrl.processor.process(FrameDecoder().feed(encode(request))[0], "c")
        assert fast == (normal if isinstance(normal, bytes) else encode(normal))  # type: ignore[arg-type]
        assert ext.get("__ZONE_MODE", "").lower() != "true" or not ext["__ZONE_NAME"].strip()
    else:
        assert brokers != ["broker-a", "broker-b"]  # only filtered answers are declined


def test_zone_mode_miss_is_topic_not_exist() -> None:
    reply = ask(controller(), 105, topic="Nope", __ZONE_MODE="true", __ZONE_NAME="zoneA")
    assert reply.code == 17


def test_fast_path_declines_zone_fields_it_cannot_read_as_the_decoder_does() -> None:
    """A JSON ``true`` becomes "true" in the decoder: the fast path must not guess."""
    ctrl = controller()
    header = orjson.dumps(
        {"code": 105, "extFields": {"topic": "T", "__ZONE_MODE": True, "__ZONE_NAME": "zoneA"},
         "flag": 0, "language": "JAVA", "opaque": 1, "serializeTypeCurrentRPC": "JSON",
         "version": 453}
    )  # fmt: skip
    assert ctrl.route_fast_path.answer_one(header) is None
    [decoded] = FrameDecoder().feed(encode(RemotingCommand(code=105)))  # any request
    decoded.ext_fields = {"topic": "T", "__ZONE_MODE": "true", "__ZONE_NAME": "zoneA"}
    answer = fastjson.loads(FrameDecoder().feed(ctrl.processor.process(decoded, "c"))[0].body)  # type: ignore[arg-type]
    assert [b["brokerName"] for b in answer["brokerDatas"]] == ["broker-a"]
