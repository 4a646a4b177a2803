"""Numeric vocabularies of the RocketMQ remoting protocol (spec/protocol.md §8-10, requests.md).

The values are fixed by the Java enums and constants; names follow RocketMQ so that an
engineer grepping for ``GET_ROUTEINFO_BY_TOPIC`` finds the same word here.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Final


class RequestCode(IntEnum):
    """Request codes a name server receives or sends (RequestCode.java)."""

    GET_CLIENT_CONFIG = 47
    PUT_KV_CONFIG = 100
    GET_KV_CONFIG = 101
    DELETE_KV_CONFIG = 102
    REGISTER_BROKER = 103
    UNREGISTER_BROKER = 104
    GET_ROUTEINFO_BY_TOPIC = 105
    GET_BROKER_CLUSTER_INFO = 106
    WIPE_WRITE_PERM_OF_BROKER = 205
    GET_ALL_TOPIC_LIST_FROM_NAMESERVER = 206
    DELETE_TOPIC_IN_NAMESRV = 216
    REGISTER_TOPIC_IN_NAMESRV = 217
    GET_KVLIST_BY_NAMESPACE = 219
    GET_TOPICS_BY_CLUSTER = 224
    GET_SYSTEM_TOPIC_LIST_FROM_NS = 304
    GET_UNIT_TOPIC_LIST = 311
    GET_HAS_UNIT_SUB_TOPIC_LIST = 312
    GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST = 313
    UPDATE_NAMESRV_CONFIG = 318
    GET_NAMESRV_CONFIG = 319
    QUERY_DATA_VERSION = 322
    ADD_WRITE_PERM_OF_BROKER = 327
    GET_BROKER_MEMBER_GROUP = 901
    BROKER_HEARTBEAT = 904
    NOTIFY_MIN_BROKER_ID_CHANGE = 905


class ResponseCode(IntEnum):
    """Response codes the name server answers with (RemotingSysResponseCode + ResponseCode)."""

    SUCCESS = 0
    SYSTEM_ERROR = 1
    SYSTEM_BUSY = 2
    REQUEST_CODE_NOT_SUPPORTED = 3
    NO_PERMISSION = 16
    TOPIC_NOT_EXIST = 17
    QUERY_NOT_FOUND = 22
    GO_AWAY = 1500


class LanguageCode(IntEnum):
    """Sender language: a name in JSON headers, a byte in ROCKETMQ headers."""

    JAVA = 0
    CPP = 1
    DOTNET = 2
    PYTHON = 3
    DELPHI = 4
    ERLANG = 5
    RUBY = 6
    OTHER = 7
    HTTP = 8
    GO = 9
    PHP = 10
    OMS = 11
    RUST = 12
    NODE_JS = 13


class Version(IntEnum):
    """Ordinals of MQVersion.Version that change server behaviour (protocol.md §10)."""

    V3_0_11 = 37
    V4_0_0 = 213
    V4_6_0 = 333
    V4_9_4 = 401
    V5_0_0 = 413
    V5_2_0 = 453
    V5_3_1 = 475
    V5_3_3 = 479


# The version ordinal a response carries unless its sender says otherwise: the newest
# protocol pynamesrv implements (5.2.0). The name server's own answers take the configured
# ``rocketmq.remoting.version`` instead; no client behaves differently for either value.
SERVER_VERSION: Final = int(Version.V5_2_0)

FLAG_RESPONSE: Final = 0x1
FLAG_ONEWAY: Final = 0x2

# Broker id of a master (MixAll.MASTER_ID).
MASTER_ID: Final = 0


class Perm:
    """PermName bits."""

    PRIORITY: Final = 8
    READ: Final = 4
    WRITE: Final = 2
    INHERIT: Final = 1


class TopicSysFlag:
    """TopicSysFlag bits used by the unit-topic lists."""

    UNIT: Final = 1
    UNIT_SUB: Final = 2
