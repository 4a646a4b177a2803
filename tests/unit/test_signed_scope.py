"""Issue 24 finding 3: an ACL 1.0 signature does not cover the request code or the field
names. Undefined fields are refused on signed requests; pynamesrv's request binding stops
moves between codes with the same fields, shifted field boundaries and old signatures."""

from __future__ import annotations

from pathlib import Path

import pytest

from pynamesrv.namesrv.acl import AccessControl, AccessDenied, Need
from pynamesrv.remoting.acl_binding import BINDING
from pynamesrv.remoting.acl_sign import Credentials, sign, signature, signed_content
from pynamesrv.remoting.codes import RequestCode
from pynamesrv.remoting.command import RemotingCommand

ACCOUNTS = "accounts:\n  - accessKey: rocketmq2\n    secretKey: 12345678\n    admin: true\n"
ADMIN = Credentials("rocketmq2", "12345678")
NOW_S = 1_700_000_000.0
CALLER = "127.0.0.1:4000"


@pytest.fixture
def make_access(tmp_path: Path):  # type: ignore[no-untyped-def]
    path = tmp_path / "plain_acl.yml"
    path.write_text(ACCOUNTS)
    path.chmod(0o600)

    def make(**kwargs: object) -> AccessControl:
        return AccessControl(path, wall_clock=lambda: NOW_S, **kwargs)  # type: ignore[arg-type]

    return make


def moved(request: RemotingCommand, code: int) -> RemotingCommand:
    return RemotingCommand(code=code, ext_fields=dict(request.ext_fields or {}), body=request.body)


def denial(access: AccessControl, request: RemotingCommand) -> str:
    with pytest.raises(AccessDenied) as info:
        access.verify(request, CALLER, Need.ADMIN)
    return info.value.remark


def signed(code: int, bound: bool = True, **fields: str) -> RemotingCommand:
    request = RemotingCommand(code=code, ext_fields=fields)
    return sign(request, ADMIN, bound_at_ms=int(NOW_S * 1000) if bound else None)


def test_a_route_query_with_a_tool_field_cannot_become_a_topic_deletion(make_access) -> None:
    access = make_access()
    query = signed(RequestCode.GET_ROUTEINFO_BY_TOPIC, bound=False, topic="T", ReqT="1")
    assert access.verify(query, CALLER, Need.ACCOUNT) == "rocketmq2"
    remark = denial(access, moved(query, RequestCode.DELETE_TOPIC_IN_NAMESRV))
    assert remark.startswith("Signed request code=216 carries ReqT, which that code")


def test_a_data_version_query_cannot_become_an_unregistration(make_access) -> None:
    access = make_access()
    fields = {"brokerName": "b", "brokerAddr": "a:1", "clusterName": "c", "brokerId": "0"}
    query = RemotingCommand(code=RequestCode.QUERY_DATA_VERSION, ext_fields=fields, body=b"{}")
    sign(query, ADMIN)
    remark = denial(access, moved(query, RequestCode.UNREGISTER_BROKER))
    assert "carries body" in remark


@pytest.mark.parametrize(
    ("source", "target", "fields"),
    [
        (205, 327, {"brokerName": "broker-a"}),
        (105, 216, {"topic": "Orders"}),
        (101, 102, {"namespace": "N", "key": "k"}),
    ],
    ids=["wipe-as-add", "route-as-delete", "get-as-delete"],
)
def test_a_bound_signature_holds_for_its_code_only(make_access, source, target, fields) -> None:
    access = make_access()
    request = signed(source, **fields)
    assert access.verify(request, CALLER, Need.ADMIN) == "rocketmq2"
    assert denial(access, moved(request, target)) == (
        f"{BINDING} was signed for request code={source}, sent as code={target}"
    )


def test_a_shifted_field_boundary_is_refused_when_bound(make_access) -> None:
    access = make_access()
    put = signed(RequestCode.PUT_KV_CONFIG, key="ab", namespace="N", value="v")
    shifted = moved(put, RequestCode.PUT_KV_CONFIG)
    shifted.ext_fields.update(key="a", namespace="bN")  # type: ignore[union-attr]
    assert denial(access, shifted) == f"{BINDING} does not describe the fields and body sent"
    # Unbound, ACL 1.0 cannot tell: the same content, the same signature.
    loose = signed(RequestCode.PUT_KV_CONFIG, bound=False, key="ab", namespace="N", value="v")
    loose.ext_fields.update(key="a", namespace="bN")  # type: ignore[union-attr]
    assert access.verify(loose, CALLER, Need.ADMIN) == "rocketmq2"


def test_a_binding_cannot_absorb_a_neighbour(make_access) -> None:
    """Moving text between the binding and the next field breaks its grammar."""
    access = make_access()
    put = signed(RequestCode.PUT_KV_CONFIG, key="k", namespace="N", value="v")
    fields = put.ext_fields
    assert fields is not None
    fields[BINDING], fields["AccessKey"] = fields[BINDING][:-1], "." + fields["AccessKey"]
    assert denial(access, put).startswith("No acl config for")


def test_an_old_binding_is_refused(make_access) -> None:
    access = make_access(binding_window_s=300)
    request = sign(
        RemotingCommand(code=205, ext_fields={"brokerName": "b"}),
        ADMIN,
        bound_at_ms=int((NOW_S - 301) * 1000),
    )
    assert denial(access, request).startswith(f"{BINDING} was signed 301 s away")
    fresh = sign(request, ADMIN, bound_at_ms=int((NOW_S - 299) * 1000))
    assert access.verify(fresh, CALLER, Need.ADMIN) == "rocketmq2"


def test_required_binding_refuses_unbound_admin_writes_only(make_access) -> None:
    access = make_access(binding_required=True)
    unbound = signed(RequestCode.WIPE_WRITE_PERM_OF_BROKER, bound=False, brokerName="b")
    assert denial(access, unbound).startswith(f"Request code=205 must carry {BINDING}")
    read = signed(RequestCode.GET_ROUTEINFO_BY_TOPIC, bound=False, topic="T")
    assert access.verify(read, CALLER, Need.ACCOUNT) == "rocketmq2"
    assert access.verify(signed(205, brokerName="b"), CALLER, Need.ADMIN) == "rocketmq2"


def test_a_malformed_binding_is_refused(make_access) -> None:
    access = make_access()
    fields = {"brokerName": "b", BINDING: "1;205;x", "AccessKey": "rocketmq2"}
    fields["Signature"] = signature(signed_content(fields, b""), "12345678")
    request = RemotingCommand(code=205, ext_fields=fields)
    assert denial(access, request).startswith(f"{BINDING} is malformed")
