"""Typed builders of the requests a name server answers (spec/requests.md), one per code.

The admin CLI, the broker client, the simulator, the benchmarks and the tests all ask the
name server the same questions; each builder here is the one place that knows a request's
code, the exact ``extFields`` names Java's custom headers use (``brokerName``, not
``broker_name``; ``__ZONE_NAME``), how a value is written on the wire (every field is a
string; booleans ``true``/``false``) and how the body is encoded. Fields are added in a fixed
order, so a request encodes to the same bytes every time.

Why here and not in ``remoting``: the bodies are the name server's records
(``RegisterBrokerBody``, ``DataVersion``, ``QueueData`` from ``namesrv.model``), and
``remoting`` knows frames, not routes. This module is the requesting side of what
``processor`` answers, which is why it sits beside it; it has no state and does no I/O.

Who sends (``language``, ``version``) is a keyword of every builder. The version matters to
the server: it picks the JSON dialect of a route answer (>= 4.9.4: standard) and the format
of a registration body, so the default is a 4.9.4 client, as every current client is.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from typing import Final

import javaproperties

from pynamesrv.namesrv.model import DataVersion, QueueData, RegisterBrokerBody
from pynamesrv.remoting import fastjson
from pynamesrv.remoting.codes import RequestCode, Version
from pynamesrv.remoting.command import RemotingCommand

DEFAULT_VERSION: Final = int(Version.V4_9_4)
DEFAULT_LANGUAGE: Final = "JAVA"

# RocketMQ's MixAll.ZONE_MODE / ZONE_NAME: extension fields 5.x clients and brokers add.
ZONE_MODE: Final = "__ZONE_MODE"
ZONE_NAME: Final = "__ZONE_NAME"


def _flag(value: bool) -> str:
    """A Java Boolean header field as it is written on the wire."""
    return "true" if value else "false"


def _command(
    code: RequestCode,
    fields: dict[str, str] | None,
    body: bytes,
    version: int,
    language: str,
) -> RemotingCommand:
    return RemotingCommand(
        code=code, language=language, version=version, ext_fields=fields, body=body
    )


def body_crc32(body: bytes) -> int:
    """The ``bodyCrc32`` of a registration: CRC-32 (IEEE) AND 0x7FFFFFFF, as Java's
    ``UtilAll.crc32`` computes it; the name server refuses a body whose CRC differs."""
    return zlib.crc32(body) & 0x7FFFFFFF


# --------------------------------------------------------------------------- routes


def get_routeinfo_by_topic(
    topic: str,
    *,
    accept_standard_json_only: bool | None = None,
    zone_mode: bool | None = None,
    zone_name: str | None = None,
    version: int = DEFAULT_VERSION,
    language: str = DEFAULT_LANGUAGE,
) -> RemotingCommand:
    """105: a topic's route. ``acceptStandardJsonOnly`` asks for the standard dialect from
    an old client; the zone fields (5.x) filter the answer to one zone's brokers."""
    fields = {"topic": topic}
    if accept_standard_json_only is not None:
        fields["acceptStandardJsonOnly"] = _flag(accept_standard_json_only)
    if zone_mode is not None:
        fields[ZONE_MODE] = _flag(zone_mode)
    if zone_name is not None:
        fields[ZONE_NAME] = zone_name
    return _command(RequestCode.GET_ROUTEINFO_BY_TOPIC, fields, b"", version, language)


def get_broker_cluster_info(
    *, version: int = DEFAULT_VERSION, language: str = DEFAULT_LANGUAGE
) -> RemotingCommand:
    """106: every broker group and cluster (no header)."""
    return _command(RequestCode.GET_BROKER_CLUSTER_INFO, None, b"", version, language)


def get_all_topic_list_from_nameserver(
    *, version: int = DEFAULT_VERSION, language: str = DEFAULT_LANGUAGE
) -> RemotingCommand:
    """206: the name of every topic in the topic table (no header)."""
    return _command(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER, None, b"", version, language)


def get_topics_by_cluster(
    cluster: str, *, version: int = DEFAULT_VERSION, language: str = DEFAULT_LANGUAGE
) -> RemotingCommand:
    """224: the topics with queues on a cluster's brokers (the field is ``cluster``)."""
    return _command(RequestCode.GET_TOPICS_BY_CLUSTER, {"cluster": cluster}, b"", version, language)


def get_system_topic_list_from_ns(
    *, version: int = DEFAULT_VERSION, language: str = DEFAULT_LANGUAGE
) -> RemotingCommand:
    """304: cluster and broker names (the topics brokers create for them)."""
    return _command(RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS, None, b"", version, language)


def get_unit_topic_list(
    *, version: int = DEFAULT_VERSION, language: str = DEFAULT_LANGUAGE
) -> RemotingCommand:
    """311: topics whose first queue data has the unit flag."""
    return _command(RequestCode.GET_UNIT_TOPIC_LIST, None, b"", version, language)


def get_has_unit_sub_topic_list(
    *, version: int = DEFAULT_VERSION, language: str = DEFAULT_LANGUAGE
) -> RemotingCommand:
    """312: topics whose first queue data has the unit-subscription flag."""
    return _command(RequestCode.GET_HAS_UNIT_SUB_TOPIC_LIST, None, b"", version, language)


def get_has_unit_sub_ununit_topic_list(
    *, version: int = DEFAULT_VERSION, language: str = DEFAULT_LANGUAGE
) -> RemotingCommand:
    """313: topics with the unit-subscription flag and without the unit flag."""
    return _command(RequestCode.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST, None, b"", version, language)


# --------------------------------------------------------------------------- admin writes


def wipe_write_perm_of_broker(
    broker_name: str, *, version: int = DEFAULT_VERSION, language: str = DEFAULT_LANGUAGE
) -> RemotingCommand:
    """205: make a broker's queues read-only in the routes (answer: ``wipeTopicCount``)."""
    fields = {"brokerName": broker_name}
    return _command(RequestCode.WIPE_WRITE_PERM_OF_BROKER, fields, b"", version, language)


def add_write_perm_of_broker(
    broker_name: str, *, version: int = DEFAULT_VERSION, language: str = DEFAULT_LANGUAGE
) -> RemotingCommand:
    """327: give a broker's queues perm 6 again (answer: ``addTopicCount``)."""
    fields = {"brokerName": broker_name}
    return _command(RequestCode.ADD_WRITE_PERM_OF_BROKER, fields, b"", version, language)


def delete_topic_in_namesrv(
    topic: str,
    cluster: str | None = None,
    *,
    version: int = DEFAULT_VERSION,
    language: str = DEFAULT_LANGUAGE,
) -> RemotingCommand:
    """216: drop a topic's route; with ``cluster`` only that cluster's brokers' queues."""
    fields = {"topic": topic}
    if cluster:
        fields["clusterName"] = cluster
    return _command(RequestCode.DELETE_TOPIC_IN_NAMESRV, fields, b"", version, language)


def register_topic_in_namesrv(
    topic: str,
    queue_datas: Sequence[QueueData],
    *,
    version: int = DEFAULT_VERSION,
    language: str = DEFAULT_LANGUAGE,
) -> RemotingCommand:
    """217 (5.x): add queues to a topic's route. The body is a TopicRouteData of which the
    server reads only ``queueDatas``, written as a 5.x broker writes it."""
    body = fastjson.dumps(
        {
            "brokerDatas": [],
            "filterServerTable": {},
            "queueDatas": [queue.to_json() for queue in queue_datas],
        }
    )
    fields = {"topic": topic}
    return _command(RequestCode.REGISTER_TOPIC_IN_NAMESRV, fields, body, version, language)


# --------------------------------------------------------------------------- KV config


def put_kv_config(
    namespace: str,
    key: str,
    value: str,
    *,
    version: int = DEFAULT_VERSION,
    language: str = DEFAULT_LANGUAGE,
) -> RemotingCommand:
    """100: set one KV value (the server answers after its KV file is written)."""
    fields = {"namespace": namespace, "key": key, "value": value}
    return _command(RequestCode.PUT_KV_CONFIG, fields, b"", version, language)


def get_kv_config(
    namespace: str, key: str, *, version: int = DEFAULT_VERSION, language: str = DEFAULT_LANGUAGE
) -> RemotingCommand:
    """101: one KV value (answer field ``value``; QUERY_NOT_FOUND when absent)."""
    fields = {"namespace": namespace, "key": key}
    return _command(RequestCode.GET_KV_CONFIG, fields, b"", version, language)


def delete_kv_config(
    namespace: str, key: str, *, version: int = DEFAULT_VERSION, language: str = DEFAULT_LANGUAGE
) -> RemotingCommand:
    """102: delete one KV key (succeeds when it is absent too)."""
    fields = {"namespace": namespace, "key": key}
    return _command(RequestCode.DELETE_KV_CONFIG, fields, b"", version, language)


def get_kvlist_by_namespace(
    namespace: str, *, version: int = DEFAULT_VERSION, language: str = DEFAULT_LANGUAGE
) -> RemotingCommand:
    """219: a whole KV namespace (body ``{"table":{...}}``)."""
    fields = {"namespace": namespace}
    return _command(RequestCode.GET_KVLIST_BY_NAMESPACE, fields, b"", version, language)


# --------------------------------------------------------------------------- name-server config


def update_namesrv_config(
    settings: Mapping[str, str],
    *,
    version: int = DEFAULT_VERSION,
    language: str = DEFAULT_LANGUAGE,
) -> RemotingCommand:
    """318: change settings. The body is Java properties text, one ``key=value`` line per
    setting, escaped so that the server's properties parser reads back exactly the keys and
    values given (mqadmin sends them raw, which mangles backslashes and non-ASCII text)."""
    text = "".join(
        javaproperties.join_key_value(key, value, separator="=") + "\n"
        for key, value in settings.items()
    )
    return _command(
        RequestCode.UPDATE_NAMESRV_CONFIG, None, text.encode("ascii"), version, language
    )


def get_namesrv_config(
    *, version: int = DEFAULT_VERSION, language: str = DEFAULT_LANGUAGE
) -> RemotingCommand:
    """319: every setting as ``key=value`` lines (no header)."""
    return _command(RequestCode.GET_NAMESRV_CONFIG, None, b"", version, language)


# --------------------------------------------------------------------------- brokers


def _broker_fields(
    cluster: str, broker_name: str, broker_addr: str, broker_id: int | None
) -> dict[str, str]:
    """The identity every broker request starts with, in one order (so: the same bytes)."""
    fields = {"brokerName": broker_name, "brokerAddr": broker_addr, "clusterName": cluster}
    if broker_id is not None:
        fields["brokerId"] = str(broker_id)
    return fields


def register_broker(
    *,
    cluster: str,
    broker_name: str,
    broker_addr: str,
    broker_id: int,
    ha_server_addr: str | None,
    body: RegisterBrokerBody,
    compressed: bool = False,
    heartbeat_timeout_ms: int | None = None,
    enable_acting_master: bool | None = None,
    zone_name: str | None = None,
    version: int = DEFAULT_VERSION,
    language: str = DEFAULT_LANGUAGE,
) -> RemotingCommand:
    """103: a broker's registration with its topic table, JSON or compressed, and its CRC.

    ``heartbeatTimeoutMillis``, ``enableActingMaster`` and ``__ZONE_NAME`` are 5.x fields,
    sent only when given.
    """
    encoded = body.encode(compressed=compressed)
    fields = _broker_fields(cluster, broker_name, broker_addr, broker_id)
    fields["haServerAddr"] = ha_server_addr or ""
    fields["compressed"] = _flag(compressed)
    fields["bodyCrc32"] = str(body_crc32(encoded))
    if heartbeat_timeout_ms is not None:
        fields["heartbeatTimeoutMillis"] = str(heartbeat_timeout_ms)
    if enable_acting_master is not None:
        fields["enableActingMaster"] = _flag(enable_acting_master)
    if zone_name is not None:
        fields[ZONE_NAME] = zone_name
    return _command(RequestCode.REGISTER_BROKER, fields, encoded, version, language)


def unregister_broker(
    *,
    cluster: str,
    broker_name: str,
    broker_addr: str,
    broker_id: int,
    zone_name: str | None = None,
    version: int = DEFAULT_VERSION,
    language: str = DEFAULT_LANGUAGE,
) -> RemotingCommand:
    """104: a broker's graceful goodbye (5.x brokers add their zone)."""
    fields = _broker_fields(cluster, broker_name, broker_addr, broker_id)
    if zone_name is not None:
        fields[ZONE_NAME] = zone_name
    return _command(RequestCode.UNREGISTER_BROKER, fields, b"", version, language)


def query_data_version(
    *,
    cluster: str,
    broker_name: str,
    broker_addr: str,
    broker_id: int,
    data_version: DataVersion,
    version: int = DEFAULT_VERSION,
    language: str = DEFAULT_LANGUAGE,
) -> RemotingCommand:
    """322: "has my topic table changed for you?" (answer field ``changed``); the body is
    the broker's DataVersion. An unchanged answer counts as a heartbeat."""
    fields = _broker_fields(cluster, broker_name, broker_addr, broker_id)
    body = fastjson.dumps(data_version.to_json())
    return _command(RequestCode.QUERY_DATA_VERSION, fields, body, version, language)


def broker_heartbeat(
    *,
    cluster: str,
    broker_name: str,
    broker_addr: str,
    version: int = DEFAULT_VERSION,
    language: str = DEFAULT_LANGUAGE,
) -> RemotingCommand:
    """904 (5.x): a liveness refresh, sent oneway by brokers. The controller-only fields
    (epoch, offsets, election priority) are left out, as a broker without a controller
    leaves them null."""
    fields = _broker_fields(cluster, broker_name, broker_addr, None)
    return _command(RequestCode.BROKER_HEARTBEAT, fields, b"", version, language)


def get_broker_member_group(
    *,
    cluster: str,
    broker_name: str,
    version: int = DEFAULT_VERSION,
    language: str = DEFAULT_LANGUAGE,
) -> RemotingCommand:
    """901 (5.x): the addresses of a broker group's members, by broker id."""
    fields = {"clusterName": cluster, "brokerName": broker_name}
    return _command(RequestCode.GET_BROKER_MEMBER_GROUP, fields, b"", version, language)
