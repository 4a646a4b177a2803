"""The access check without sockets: signatures, accounts files, address patterns, reload."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from pynamesrv.namesrv.acl import (
    ADMIN_WRITE_CODES,
    REGISTRATION_CODES,
    AccessControl,
    AccessDenied,
    AclFileError,
    Need,
    load_accounts,
    load_tools_yml,
    shown,
)
from pynamesrv.namesrv.addresses import AddressPattern, host_of, is_loopback_host
from pynamesrv.namesrv.config import NamesrvConfig
from pynamesrv.namesrv.signed_fields import BODYLESS, DEFINED
from pynamesrv.remoting.acl_sign import (
    Credentials,
    sign,
    signature,
    signature_matches,
    signed_content,
)
from pynamesrv.remoting.codes import RequestCode
from pynamesrv.remoting.command import RemotingCommand

ACCOUNTS = """\
globalWhiteRemoteAddresses:
accounts:
  - accessKey: rocketmq2
    secretKey: 12345678
    whiteRemoteAddress:
    admin: true
  - accessKey: reader01
    secretKey: reader-secret
    admin: false
  - accessKey: office01
    secretKey: office-secret
    whiteRemoteAddress: 192.168.1.*
    admin: true
"""
BAD_SIGNATURE = "Check signature failed for accessKey=rocketmq2"
ADMIN = Credentials("rocketmq2", "12345678")
READER = Credentials("reader01", "reader-secret")
OFFICE = Credentials("office01", "office-secret")


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def acl_file(tmp_path: Path) -> Path:
    path = tmp_path / "plain_acl.yml"
    path.write_text(ACCOUNTS)
    path.chmod(0o600)
    return path


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def access(acl_file: Path, clock: FakeClock) -> AccessControl:
    return AccessControl(acl_file, clock=clock)


def put_kv(**extra: str) -> RemotingCommand:
    fields = {"namespace": "NS", "key": "k", "value": "v", **extra}
    return RemotingCommand(code=RequestCode.PUT_KV_CONFIG, ext_fields=fields)


def denied(access: AccessControl, request: RemotingCommand, caller: str = "127.0.0.1:4000") -> str:
    with pytest.raises(AccessDenied) as info:
        access.check(request, caller)
    return info.value.remark


# --------------------------------------------------------------------------- signing


def test_signature_covers_values_in_key_order_then_the_body() -> None:
    # The verified example from golden admin.jsonl seq 3 (GET_ROUTEINFO_BY_TOPIC TBW102).
    content = signed_content({"topic": "TBW102", "AccessKey": "rocketmq2"}, b"")
    assert content == b"rocketmq2TBW102"
    assert signature(content, "12345678") == "/u5P/wZUbhjanu4LM/UzEdo2u2I="
    assert signed_content({"b": "2", "a": "1", "Signature": "x"}, b"BODY") == b"12BODY"


def test_key_order_is_java_string_order_not_code_point_order() -> None:
    # U+FF5E sorts after U+1F600 by code point but before it by UTF-16 code unit (TreeMap).
    fields = {"\U0001f600": "emoji", "\uff5e": "tilde"}
    assert signed_content(fields, b"") == b"emojitilde"


def test_sign_adds_access_key_token_and_signature_and_resigns() -> None:
    request = put_kv()
    sign(request, Credentials("rocketmq2", "12345678", security_token="tok"))
    fields = request.ext_fields or {}
    assert (fields["AccessKey"], fields["SecurityToken"]) == ("rocketmq2", "tok")
    expected = signature(signed_content(fields, b""), "12345678")
    assert fields["Signature"] == expected
    # Signing again gives the same signature: the old one is not part of the content.
    sign(request, Credentials("rocketmq2", "12345678"))
    assert request.ext_fields == fields


def test_signature_comparison_takes_any_text() -> None:
    assert signature_matches("abc=", "abc=")
    assert not signature_matches("abc=", "abd=")
    assert not signature_matches("abc=", "ábc=")  # non-ASCII from the wire: no TypeError


def test_credentials_never_print_the_secret() -> None:
    assert "12345678" not in repr(ADMIN)


# --------------------------------------------------------------------------- decisions


def test_admin_signature_passes_every_write_code(access: AccessControl) -> None:
    for code in ADMIN_WRITE_CODES:
        fields = {name: "1" for name in DEFINED[code]}
        body = b"" if code in BODYLESS else b"b"
        request = sign(RemotingCommand(code=code, ext_fields=fields, body=body), ADMIN)
        assert access.check(request, "127.0.0.1:4000") == "rocketmq2"
    assert {int(c) for c in ADMIN_WRITE_CODES} == {100, 102, 318, 205, 327, 216, 217}


@pytest.mark.parametrize(
    ("tamper", "remark"),
    [
        (lambda r: r.ext_fields.update(value="evil"), BAD_SIGNATURE),
        (lambda r: setattr(r, "body", b"x"), BAD_SIGNATURE),
        (lambda r: r.ext_fields.pop("Signature"), BAD_SIGNATURE),
        (lambda r: r.ext_fields.update(extra="1"), BAD_SIGNATURE),
        (lambda r: r.ext_fields.pop("AccessKey"), "No accessKey is configured"),
        (lambda r: r.ext_fields.update(AccessKey=""), "No accessKey is configured"),
        (lambda r: r.ext_fields.update(AccessKey="nobody99"), "No acl config for nobody99"),
    ],
    ids=["field", "body", "no-signature", "added-field", "no-access-key", "empty-key", "unknown"],
)
def test_tampered_or_incomplete_requests_are_denied(access, tamper, remark) -> None:
    request = sign(put_kv(), ADMIN)
    tamper(request)
    assert denied(access, request).startswith(remark)


def test_wrong_secret_is_denied(access: AccessControl) -> None:
    request = sign(put_kv(), Credentials("rocketmq2", "87654321"))
    assert denied(access, request) == "Check signature failed for accessKey=rocketmq2"


def test_non_admin_account_may_not_write(access: AccessControl) -> None:
    request = sign(put_kv(), READER)
    assert denied(access, request) == (
        "Need admin permission for request code=100, but accessKey=reader01 is not"
    )


def test_white_remote_address_restricts_the_account(access: AccessControl) -> None:
    request = sign(put_kv(), OFFICE)
    assert access.check(request, "192.168.1.77:5555") == "office01"
    assert denied(access, request, "192.168.2.77:5555") == (
        "Remote address 192.168.2.77 is not in the whiteRemoteAddress of accessKey=office01"
    )
    assert denied(access, request, "-").startswith("Remote address - is not")


def test_reads_and_registration_are_open_unless_configured(acl_file, clock) -> None:
    access = AccessControl(acl_file, clock=clock)
    unsigned = [RemotingCommand(code=c) for c in (*REGISTRATION_CODES, 105, 106, 219)]
    assert all(access.check(r, "10.0.0.1:1") is None for r in unsigned)

    strict = AccessControl(acl_file, registration_required=True, read_required=True, clock=clock)
    for request in unsigned:
        assert denied(strict, request).startswith("No accessKey is configured")
        assert strict.check(sign(request, READER), "10.0.0.1:1") == "reader01"
    assert strict.need_for(RequestCode.REGISTER_BROKER) is Need.ACCOUNT
    assert strict.need_for(RequestCode.PUT_KV_CONFIG) is Need.ADMIN


def test_remarks_escape_and_cut_what_the_peer_sent(access: AccessControl) -> None:
    request = put_kv(AccessKey="x\nforged log line" + "y" * 200)
    remark = denied(access, request)
    assert "\n" not in remark and len(remark) < 120
    assert shown("a\tb") == "a\\tb"


def test_from_config_is_off_by_default_and_refuses_auth_without_accounts() -> None:
    assert AccessControl.from_config(NamesrvConfig()) is None
    with pytest.raises(AclFileError, match="need aclFile"):
        AccessControl.from_config(NamesrvConfig(acl_registration_required=True))
    with pytest.raises(AclFileError, match="cannot read"):
        AccessControl.from_config(NamesrvConfig(acl_file="/nonexistent/plain_acl.yml"))


def test_status_names_no_secret(access: AccessControl) -> None:
    status = access.status()
    assert status["adminWrites"] == "authenticated"
    assert (status["accounts"], status["admins"]) == (3, 2)
    assert "12345678" not in repr(status) and "rocketmq2" not in repr(status)


# --------------------------------------------------------------------------- reload


def rewrite(path: Path, text: str) -> None:
    """Write and move the mtime on, so even a same-size rewrite within one tick is seen."""
    before = path.stat().st_mtime_ns
    path.write_text(text)
    os.utime(path, ns=(before + 1_000_000_000, before + 1_000_000_000))


def test_changed_file_takes_effect_at_the_next_look(access, acl_file, clock, caplog) -> None:
    newcomer = Credentials("newcomer", "newcomer-secret")
    request = sign(put_kv(), newcomer)
    assert denied(access, request) == "No acl config for newcomer"
    added = "  - {accessKey: newcomer, secretKey: newcomer-secret, admin: true}\n"
    rewrite(acl_file, ACCOUNTS + added)
    clock.now += 0.5  # looked at no more than once a second
    assert denied(access, request) == "No acl config for newcomer"
    clock.now += 0.6
    with caplog.at_level(logging.INFO, logger="pynamesrv.namesrv.acl"):
        assert access.check(request, "127.0.0.1:1") == "newcomer"
    assert "reloaded: 4 accounts, 3 admin" in caplog.text


def test_bad_or_missing_file_keeps_the_last_good_accounts(access, acl_file, clock, caplog) -> None:
    request = sign(put_kv(), ADMIN)
    with caplog.at_level(logging.ERROR, logger="pynamesrv.namesrv.acl"):
        rewrite(acl_file, "accounts: [{accessKey: rocketmq2, secretKey: short}]\n")
        for _ in range(3):  # one error line per bad version, not one per look
            clock.now += 1.5
            assert access.check(request, "127.0.0.1:1") == "rocketmq2"
        acl_file.unlink()
        clock.now += 1.5
        assert access.check(request, "127.0.0.1:1") == "rocketmq2"
        clock.now += 1.5
        access.check(request, "127.0.0.1:1")
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 2, errors
    assert "secretKey must be at least 7 characters; keeping the accounts" in errors[0]
    assert "is gone; keeping the accounts loaded before" in errors[1]
    acl_file.write_text(ACCOUNTS.replace("12345678", "rotated-secret"))
    clock.now += 1.5
    assert denied(access, request) == "Check signature failed for accessKey=rocketmq2"


# --------------------------------------------------------------------------- files


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("just text", "no 'accounts' list"),
        ("accounts: {a: 1}", "'accounts' must be a list"),
        ("accounts: [42]", "accounts[0]: must be a mapping"),
        ("accounts: [{secretKey: 12345678}]", "accounts[0]: accessKey must be a string"),
        ("accounts: [{accessKey: short, secretKey: 12345678}]", "accessKey must be at least 7"),
        ("accounts: [{accessKey: longenough}]", "(longenough): secretKey must be a string"),
        (
            "accounts: [{accessKey: longenough, secretKey: 12345678, admin: maybe}]",
            "admin must be true or false",
        ),
        (
            "accounts: [{accessKey: longenough, secretKey: 12345678, whiteRemoteAddress: 1.2.3}]",
            "whiteRemoteAddress: '1.2.3' is not an IPv4 address or pattern",
        ),
        (
            "accounts: [{accessKey: longenough, secretKey: 12345678},"
            " {accessKey: longenough, secretKey: 87654321}]",
            "accounts[1] (longenough): accessKey is defined twice",
        ),
        ("accounts: [unclosed", "not valid YAML at line 1"),
    ],
)
def test_bad_accounts_files_are_refused_in_one_line(tmp_path, text, message) -> None:
    path = tmp_path / "acl.yml"
    path.write_text(text)
    with pytest.raises(AclFileError) as info:
        load_accounts(path)
    assert message in str(info.value)
    assert "\n" not in str(info.value) and str(path) in str(info.value)


def test_stock_plain_acl_yml_loads_with_warnings(tmp_path: Path) -> None:
    # RocketMQ's distributed conf/plain_acl.yml, abridged to the fields that matter here.
    path = tmp_path / "plain_acl.yml"
    path.write_text(
        "globalWhiteRemoteAddresses:\n  - 10.10.103.*\n  - 192.168.0.*\n"
        "accounts:\n"
        "  - accessKey: RocketMQ\n    secretKey: 12345678\n    whiteRemoteAddress:\n"
        "    admin: false\n    defaultTopicPerm: DENY\n    topicPerms:\n      - topicA=DENY\n"
        "  - accessKey: rocketmq2\n    secretKey: 12345678\n"
        "    whiteRemoteAddress: 192.168.1.*\n    admin: true\n"
    )
    path.chmod(0o644)
    accounts = load_accounts(path)
    assert sorted(accounts.by_key) == ["RocketMQ", "rocketmq2"]
    assert accounts.by_key["rocketmq2"].secret_key == "12345678"  # YAML read it as a number
    assert (accounts.by_key["rocketmq2"].admin, accounts.by_key["RocketMQ"].admin) == (True, False)
    assert any("globalWhiteRemoteAddresses is ignored" in w for w in accounts.warnings)
    assert any("readable by every user" in w for w in accounts.warnings)


def test_oversized_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "big.yml"
    path.write_bytes(b"#" * (1024 * 1024 + 1))
    with pytest.raises(AclFileError, match="larger than"):
        load_accounts(path)


def test_tools_yml_gives_signing_credentials(tmp_path: Path) -> None:
    path = tmp_path / "tools.yml"
    path.write_text("accessKey: rocketmq2\nsecretKey: 12345678\n")
    assert load_tools_yml(path) == Credentials("rocketmq2", "12345678")
    path.write_text("accessKey: rocketmq2\n")
    with pytest.raises(AclFileError, match="secretKey is missing"):
        load_tools_yml(path)


# --------------------------------------------------------------------------- addresses


@pytest.mark.parametrize(
    ("pattern", "inside", "outside"),
    [
        ("", ["1.2.3.4", "::1", "-"], []),
        ("*", ["1.2.3.4", "::1"], []),
        ("*.*.*.*", ["8.8.8.8"], []),
        ("192.168.1.1", ["192.168.1.1", "::ffff:192.168.1.1"], ["192.168.1.2", "garbage"]),
        ("192.168.0.*", ["192.168.0.0", "192.168.0.255"], ["192.168.1.1"]),
        ("192.168.1.1,192.168.1.2", ["192.168.1.1", "192.168.1.2"], ["192.168.1.3"]),
        ("192.168.1.{1,2}", ["192.168.1.1", "192.168.1.2"], ["192.168.1.3"]),
        ("192.168.*.{1,2}", ["192.168.7.1", "192.168.200.2"], ["192.168.7.3"]),
        ("192.168.1.1-10", ["192.168.1.1", "192.168.1.10"], ["192.168.1.11", "192.168.1.0"]),
        ("10.0.1-10.*", ["10.0.5.77"], ["10.0.11.1", "10.1.5.77"]),
        ("10.0.0.{1-3,9}", ["10.0.0.2", "10.0.0.9"], ["10.0.0.4"]),
        ("::1", ["::1", "0:0:0:0:0:0:0:1"], ["127.0.0.1", "::2"]),
        ("2001:db8::*", ["2001:db8::1", "2001:db8::ffff"], ["2001:db8::1:1", "10.0.0.1"]),
        ("2001:db8:0:0:0:0:0:1-ff", ["2001:db8::a"], ["2001:db8::100"]),
        ("fe80::1,10.0.0.1", ["fe80::1", "10.0.0.1"], ["fe80::2"]),
    ],
)
def test_white_remote_address_forms(pattern, inside, outside) -> None:
    parsed = AddressPattern.parse(pattern)
    for host in inside:
        assert parsed.matches(host), (pattern, host)
    for host in outside:
        assert not parsed.matches(host), (pattern, host)


@pytest.mark.parametrize(
    "pattern",
    ["1.2.3", "1.2.3.256", "1.2.3.x", "1.2.3.10-1", "1.2.3.{1,", "1.2.3.4,", "1:2:3", "gg::1",
     "1::2::3", "1.2.3.-1"],
)  # fmt: skip
def test_bad_address_patterns_say_why(pattern: str) -> None:
    with pytest.raises(ValueError) as info:
        AddressPattern.parse(pattern)
    assert "\n" not in str(info.value)


def test_peer_hosts_and_loopback() -> None:
    assert host_of("10.1.2.3:4567") == "10.1.2.3"
    assert host_of("::1:4567") == "::1"
    assert host_of("[fe80::1]:4567") == "fe80::1"
    assert host_of("-") == "-"
    assert all(map(is_loopback_host, ["127.0.0.1", "::1", "localhost", "127.1.2.3"]))
    assert not any(map(is_loopback_host, ["0.0.0.0", "::", "", "10.0.0.1", "example.com"]))


def test_deeply_nested_file_is_refused_in_one_line(tmp_path: Path) -> None:
    path = tmp_path / "deep.yml"
    path.write_text("accounts: " + "[" * 50_000)
    with pytest.raises(AclFileError, match="nested too deeply"):
        load_accounts(path)
