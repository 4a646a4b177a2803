"""Which extension fields a signed request may carry: its code's own, and nothing else.

An ACL 1.0 signature covers field values and the body, not the request code: a signed
request sent again under another code verifies as long as the values are the same. Refusing,
on signed requests, any field the code does not define stops a signature from moving to a
code with fewer fields (a route query carrying ``ReqT`` as a topic deletion, a registration
as an unregistration). It does not stop moves between codes with the same fields (205 and
327 both carry one ``brokerName``) nor a shifted boundary between two values: pynamesrv's
request binding (``remoting.acl_binding``) does. Admin writes get only their header's fields;
reads and broker requests also the extras real tools add (learnt from the golden corpora and
5.x's RpcRequestHeader), which no admin write defines.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from pynamesrv.remoting.acl_binding import BINDING
from pynamesrv.remoting.acl_sign import ACCESS_KEY, SECURITY_TOKEN, SIGNATURE
from pynamesrv.remoting.codes import RequestCode as C

# What signing adds to any request.
SIGNING_FIELDS: Final = frozenset({ACCESS_KEY, SIGNATURE, SECURITY_TOKEN, BINDING})
# Added by tools' RPC hooks to reads and broker requests: ONS's ``OnsChannel``, the Java
# client's ``ReqT`` (both seen signed on route queries), 5.x zone mode, and 5.x's
# RpcRequestHeader (namespace, broker name, oneway, logical-queue flag).
TOOL_EXTRAS: Final = frozenset(
    {"OnsChannel", "ReqT", "__ZONE_NAME", "__ZONE_MODE", "ns", "nsd", "bname", "oway", "lo"}
)
_REGISTRATION = ("brokerName", "brokerAddr", "clusterName", "brokerId")
# Each served code's request header fields (Java's *RequestHeader classes, 4.9.4 and 5.x).
DEFINED: Final[Mapping[int, frozenset[str]]] = {
    code: frozenset(names)
    for code, names in {
        C.PUT_KV_CONFIG: ("namespace", "key", "value"),
        C.GET_KV_CONFIG: ("namespace", "key"),
        C.DELETE_KV_CONFIG: ("namespace", "key"),
        C.REGISTER_BROKER: (
            *_REGISTRATION,
            "haServerAddr",
            "heartbeatTimeoutMillis",
            "enableActingMaster",
            "compressed",
            "bodyCrc32",
        ),
        C.UNREGISTER_BROKER: _REGISTRATION,
        C.GET_ROUTEINFO_BY_TOPIC: ("topic", "acceptStandardJsonOnly"),
        C.GET_BROKER_CLUSTER_INFO: (),
        C.WIPE_WRITE_PERM_OF_BROKER: ("brokerName",),
        C.ADD_WRITE_PERM_OF_BROKER: ("brokerName",),
        C.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: (),
        C.DELETE_TOPIC_IN_NAMESRV: ("topic", "clusterName"),
        C.REGISTER_TOPIC_IN_NAMESRV: ("topic",),
        C.GET_KVLIST_BY_NAMESPACE: ("namespace",),
        C.GET_TOPICS_BY_CLUSTER: ("cluster",),
        C.GET_SYSTEM_TOPIC_LIST_FROM_NS: (),
        C.GET_UNIT_TOPIC_LIST: (),
        C.GET_HAS_UNIT_SUB_TOPIC_LIST: (),
        C.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST: (),
        C.UPDATE_NAMESRV_CONFIG: (),
        C.GET_NAMESRV_CONFIG: (),
        C.QUERY_DATA_VERSION: _REGISTRATION,
        C.GET_BROKER_MEMBER_GROUP: ("clusterName", "brokerName"),
        C.BROKER_HEARTBEAT: (
            *_REGISTRATION,
            "epoch",
            "maxOffset",
            "confirmOffset",
            "heartbeatTimeoutMills",
            "electionPriority",
        ),
    }.items()
}
# Codes whose request has no body: a signed one with a body is another request's signature.
BODYLESS: Final = frozenset(
    code
    for code in DEFINED
    if code
    not in (
        C.REGISTER_BROKER,
        C.QUERY_DATA_VERSION,
        C.UPDATE_NAMESRV_CONFIG,
        C.REGISTER_TOPIC_IN_NAMESRV,
    )
)


def undefined_field(
    code: int, fields: Mapping[str, str], body: bytes | None, *, strict: bool
) -> str | None:
    """The first field (or ``body``) a signed request of ``code`` must not carry, or None.
    ``strict``: an admin write, which gets no tool extras. Codes not served: None."""
    defined = DEFINED.get(code)
    if defined is None:
        return None
    for name in sorted(fields):
        if name in defined or name in SIGNING_FIELDS:
            continue
        if not strict and name in TOOL_EXTRAS:
            continue
        return name
    if body and code in BODYLESS:
        return "body"
    return None
