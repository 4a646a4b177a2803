"""The key table: every value validated the same way, wherever it comes from."""

from __future__ import annotations

from pathlib import Path

import pytest

from pynamesrv.namesrv.config import (
    ConfigFileError,
    ConfigRegistry,
    ConfigUpdateRefused,
    NamesrvConfig,
    Refusal,
    reference_markdown,
)
from pynamesrv.namesrv.settings import BY_KEY, SETTINGS, Applies, SettingError, setting, suggest

REPO = Path(__file__).resolve().parents[2]


def test_configuration_reference_is_current() -> None:
    written = (REPO / "docs" / "configuration.md").read_text()
    assert written == reference_markdown(), "run `make docs` and commit docs/configuration.md"


def test_every_default_passes_its_own_rule() -> None:
    defaults = NamesrvConfig()
    for entry in SETTINGS:
        text = entry.format(defaults.get(entry.key))
        assert entry.parse(text) == defaults.get(entry.key), entry.key


@pytest.mark.parametrize(
    ("key", "text", "value"),
    [
        ("orderMessageEnable", " TRUE ", True),
        ("orderMessageEnable", "false", False),
        ("listenPort", "0", 0),
        ("listenPort", "65535", 65535),
        ("scanNotActiveBrokerInterval", "+500", 500),
        ("tls.server.mode", "Enforcing", "enforcing"),
        ("instanceName", "ns-1.example:9876", "ns-1.example:9876"),
        ("instanceName", "", ""),
        ("nsAddrList", "10.0.0.1:9876; ns2.example:9876", "10.0.0.1:9876;ns2.example:9876"),
        ("bindAddress", "::1", "::1"),
    ],
)
def test_good_values_parse(key: str, text: str, value: object) -> None:
    assert setting(key).parse(text) == value


@pytest.mark.parametrize(
    ("key", "text", "allowed"),
    [
        ("orderMessageEnable", "yes", "true or false"),
        ("listenPort", "99999", "an integer from 0 to 65_535"),
        ("listenPort", "abc", "an integer from 0 to 65_535"),
        ("httpPort", "-1", "an integer from 0 to 65_535"),
        ("scanNotActiveBrokerInterval", "0", "an integer from 100 to 86_400_000"),
        ("scanNotActiveBrokerInterval", "1_000", "an integer from 100 to 86_400_000"),
        ("serverChannelMaxIdleTimeSeconds", "-1", "an integer from 0 to 86_400"),
        ("frameMaxLength", "1", "an integer from 1_048_576 to 1_073_741_824"),
        ("instanceName", "/abs/path", "empty, or 1-128 letters"),
        ("instanceName", "../../x", "empty, or 1-128 letters"),
        ("instanceName", "a..b", "empty, or 1-128 letters"),
        ("nsAddrList", "6.6.6.6", "empty, or host:port entries"),
        ("bindAddress", "not a host!", "an IP address or host name"),
        ("tls.server.mode", "strict", "disabled / permissive / enforcing"),
        ("productEnvName", "line\nbreak", "text of at most 4096 characters"),
    ],
)
def test_bad_values_are_refused_naming_key_value_and_rule(
    key: str, text: str, allowed: str
) -> None:
    with pytest.raises(SettingError) as raised:
        setting(key).parse(text)
    message = str(raised.value)
    assert message.startswith(f"{key}={text!r} is not allowed: ")
    assert allowed in message
    assert "\n" not in message


def test_unknown_keys_get_a_suggestion() -> None:
    assert suggest("listenport") == "listenPort"
    assert suggest("scanNotActiveBrokerIntervall") == "scanNotActiveBrokerInterval"
    assert suggest("zzz") is None
    with pytest.raises(SettingError, match=r"unknown config key 'listenport' \(did you mean"):
        setting("listenport")


def test_remote_keys_never_name_files_addresses_or_limits() -> None:
    for entry in SETTINGS:
        if entry.remote:
            assert entry.kind.value not in ("path", "addresses", "secret", "host"), entry.key
            assert not entry.key.startswith(("tls.", "acl", "journal", "http")), entry.key
    local = {"listenPort", "bindAddress", "nsAddrList", "instanceName", "frameMaxLength",
             "maxConnections", "maxBufferedBytes", "journalDir", "aclFile"}  # fmt: skip
    assert not any(BY_KEY[key].remote for key in local)


def test_an_invalid_file_is_refused_whole(tmp_path: Path) -> None:
    path = tmp_path / "namesrv.properties"
    path.write_text("listenPort=abc\norderMessageEnable=yes\nlistenport=1\nhttpPort=9999\n")
    with pytest.raises(ConfigFileError) as raised:
        ConfigRegistry.from_file(path)
    assert raised.value.problems == [
        "listenPort='abc' is not allowed: an integer from 0 to 65_535",
        "orderMessageEnable='yes' is not allowed: true or false",
        "unknown config key 'listenport' (did you mean 'listenPort'?)",
    ]


def test_flags_are_checked_like_the_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigFileError) as raised:
        ConfigRegistry.from_file(None, {"listenPort": "99999"})
    assert raised.value.source == "command line"


def test_combinations_are_checked(tmp_path: Path) -> None:
    path = tmp_path / "namesrv.properties"
    path.write_text(f"frameMaxLength={64 << 20}\nmaxBufferedBytes={32 << 20}\n")
    with pytest.raises(ConfigFileError, match="at least frameMaxLength"):
        ConfigRegistry.from_file(path)
    path.write_text("enableControllerInNamesrv=true\n")
    with pytest.raises(ConfigFileError, match="standalone Java controller"):
        ConfigRegistry.from_file(path)


def test_an_update_rewrites_only_its_keys_keeping_comments_and_order(tmp_path: Path) -> None:
    path = tmp_path / "namesrv.properties"
    path.write_text("# our name server\nlistenPort=9876\n\n! tuned\norderMessageEnable=false\n")
    registry = ConfigRegistry.from_file(path)
    update = registry.prepare_update(b"orderMessageEnable=true\nwaitSecondsForService=5\n")
    assert update.render().decode() == (
        "# our name server\nlistenPort=9876\n\n! tuned\norderMessageEnable=true\n"
        "waitSecondsForService=5\n"
    )
    assert registry.config.order_message_enable is False  # not live before the write
    registry.commit(update)
    assert registry.config.order_message_enable is True


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"kvConfigPath=/tmp/x\n", Refusal.BLACKLISTED),
        (b"noSuchKey=1\n", Refusal.UNKNOWN),
        (b"listenPort=1\n", Refusal.NOT_REMOTE),
        (b"orderMessageEnable=maybe\n", Refusal.INVALID),
        (b"waitSecondsForService=1\norderMessageEnable=maybe\n", Refusal.INVALID),
    ],
)
def test_refused_updates_change_nothing(body: bytes, reason: Refusal) -> None:
    registry = ConfigRegistry(NamesrvConfig())
    before = registry.all_properties()
    with pytest.raises(ConfigUpdateRefused) as raised:
        registry.prepare_update(body)
    assert raised.value.reason is reason
    assert registry.all_properties() == before


def test_an_update_merges_into_the_file_as_it_is_on_disk_when_written(tmp_path: Path) -> None:
    """Issue 32 finding 8: the operator added aclFile= to the -c file after the start; an
    update rewrote the text read at start and deleted the line (the next start was open)."""
    path = tmp_path / "namesrv.properties"
    path.write_text("# ours\nlistenPort=9876\n")
    registry = ConfigRegistry.from_file(path)
    path.write_text("# ours\nlistenPort=9876\naclFile=/etc/rocketmq/plain_acl.yml\nmystery=1\n")
    update = registry.prepare_update(b"orderMessageEnable=true\n")
    assert update.render().decode() == (
        "# ours\nlistenPort=9876\naclFile=/etc/rocketmq/plain_acl.yml\nmystery=1\n"
        "orderMessageEnable=true\n"
    )
    assert update.changes == ["orderMessageEnable=true (was unset)"] and update.merged_edits


def test_an_update_of_a_file_that_no_longer_parses_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "namesrv.properties"
    path.write_text("listenPort=9876\n")
    registry = ConfigRegistry.from_file(path)
    path.write_bytes(b"broken=\\u12\n")  # a \\u escape without its four hex digits
    update = registry.prepare_update(b"orderMessageEnable=true\n")
    with pytest.raises(OSError, match="cannot merge into"):
        update.render()


def test_restart_only_keys_are_named_in_the_update() -> None:
    registry = ConfigRegistry(NamesrvConfig())
    update = registry.prepare_update(b"serverSocketRcvBufSize=65536\norderMessageEnable=true\n")
    assert update.restart_keys() == ["serverSocketRcvBufSize"]
    assert BY_KEY["orderMessageEnable"].applies is Applies.LIVE


def test_secrets_are_masked_in_reports_but_stored(tmp_path: Path) -> None:
    config = NamesrvConfig(config_store_path=str(tmp_path / "namesrv.properties"))
    config.set("tls.server.keyPassword", "s3cret")
    registry = ConfigRegistry(config, {"tls.server.keyPassword": "s3cret"})
    assert registry.properties()["tls.server.keyPassword"] == "******"
    assert registry.all_properties()["tls.server.keyPassword"] == "******"
    update = registry.prepare_update(b"orderMessageEnable=true\n")
    assert b"tls.server.keyPassword=s3cret\n" in update.render()
