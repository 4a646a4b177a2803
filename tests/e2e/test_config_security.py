"""No request makes the server write anywhere but kvConfigPath and configStorePath.

CVE-2023-33246 / CVE-2023-37582: a 4.9.4 name server lets UPDATE_NAMESRV_CONFIG move its
config and KV files to any path and then writes there. We refuse every key that names a file,
keys we do not know, and KV names that look like paths or are huge.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from helpers import query_route
from pynamesrv.namesrv import requests
from pynamesrv.namesrv.config import ConfigRegistry
from pynamesrv.namesrv.controller import NamesrvController
from pynamesrv.remoting.client import RemotingClient
from pynamesrv.remoting.codes import RequestCode, ResponseCode
from pynamesrv.remoting.command import RemotingCommand

ALLOWED_FILES = {
    "kvConfig.json",
    "kvConfig.json.bak",
    "namesrv.properties",
    "namesrv.properties.bak",
    "kvConfig.json.lock",  # held while the server runs: one server per state file
    "namesrv.properties.lock",
}
LOCKS = {"ns0/kvConfig.json.lock", "ns0/namesrv.properties.lock"}


async def ask(ns: NamesrvController, request: RemotingCommand) -> RemotingCommand:
    client = await RemotingClient.connect("127.0.0.1", ns.port)
    try:
        return await client.request(request, timeout=10)
    finally:
        await client.close()


def raw_config_update(text: bytes) -> RemotingCommand:
    """UPDATE_NAMESRV_CONFIG with properties text as an attacker writes it (the builder
    would escape the line breaks that smuggle a second key in)."""
    return RemotingCommand(code=RequestCode.UPDATE_NAMESRV_CONFIG, body=text)


def files_under(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


@pytest.fixture
def evil(tmp_path: Path) -> Path:
    return tmp_path / "evil"


PATH_KEY_UPDATES = [
    "configStorePath={evil}/namesrv.properties",
    "kvConfigPath={evil}/kvConfig.json",
    "rocketmqHome={evil}",
    "stateDir={evil}",
    "journalDir={evil}/journal",
    "configBlackList=",
    "kvConfigPath=../../evil.json",
    "orderMessageEnable=true\nconfigStorePath={evil}/sneaky.properties",
]


@pytest.mark.parametrize("update", PATH_KEY_UPDATES)
async def test_config_path_updates_are_refused(
    namesrv: NamesrvController, evil: Path, tmp_path: Path, update: str
) -> None:
    cwd_before = set(os.listdir())
    answer = await ask(namesrv, raw_config_update(update.format(evil=evil).encode()))
    assert (answer.code, answer.remark) == (
        ResponseCode.NO_PERMISSION,
        "Can not update config in black list.",
    )
    assert namesrv.config.order_message_enable is False  # nothing of the request applied
    assert namesrv.config.kv_config_path == str(tmp_path / "ns0" / "kvConfig.json")
    assert not evil.exists()
    assert set(os.listdir()) == cwd_before
    assert (await query_route(namesrv.port, "T")).code == ResponseCode.TOPIC_NOT_EXIST


async def test_unknown_config_key_is_refused(namesrv: NamesrvController) -> None:
    answer = await ask(namesrv, requests.update_namesrv_config({"noSuchKey": "1"}))
    assert answer.code == ResponseCode.NO_PERMISSION
    assert "noSuchKey" in (answer.remark or "")


async def test_runtime_config_update_is_applied_and_persisted(
    namesrv: NamesrvController,
) -> None:
    answer = await ask(namesrv, requests.update_namesrv_config({"orderMessageEnable": "true"}))
    assert answer.code == ResponseCode.SUCCESS
    assert namesrv.config.order_message_enable is True
    stored = Path(namesrv.config.config_store_path).read_text()
    assert "orderMessageEnable=true\n" in stored
    shown = await ask(namesrv, requests.get_namesrv_config())
    assert b"orderMessageEnable=true\n" in shown.body


BAD_KV_REQUESTS = {
    "namespace with a path": {"namespace": "../../etc", "key": "k", "value": "v"},
    "key with a slash": {"namespace": "ns", "key": "a/b", "value": "v"},
    "key with a backslash": {"namespace": "ns", "key": "a\\b", "value": "v"},
    "key with NUL": {"namespace": "ns", "key": "a\x00b", "value": "v"},
    "namespace of a megabyte": {"namespace": "n" * 1_000_000, "key": "k", "value": "v"},
    "value of four megabytes": {"namespace": "ns", "key": "k", "value": "v" * 4_000_000},
}


@pytest.mark.parametrize("case", list(BAD_KV_REQUESTS))
async def test_hostile_kv_requests_get_errors_and_touch_nothing(
    namesrv: NamesrvController, tmp_path: Path, case: str
) -> None:
    answer = await ask(namesrv, requests.put_kv_config(**BAD_KV_REQUESTS[case]))
    assert answer.code == ResponseCode.SYSTEM_ERROR, case
    assert answer.remark and answer.remark.startswith("illegal ")
    assert namesrv.kv.table == {}
    assert files_under(tmp_path) <= {f"ns0/{name}" for name in ALLOWED_FILES}
    ok = await ask(namesrv, requests.put_kv_config("ns", "k", "v"))
    assert ok.code == ResponseCode.SUCCESS
    assert files_under(tmp_path) == {"ns0/kvConfig.json", *LOCKS}


async def test_megabytes_of_config_text_are_refused(namesrv: NamesrvController) -> None:
    settings = {f"key{i}": "x" * 1000 for i in range(3000)}
    answer = await ask(namesrv, requests.update_namesrv_config(settings))
    assert answer.code == ResponseCode.NO_PERMISSION
    assert answer.remark is not None and answer.remark.endswith("and 2995 more")
    assert (await query_route(namesrv.port, "T")).code == ResponseCode.TOPIC_NOT_EXIST


async def test_a_remote_update_keeps_what_the_operator_added_to_the_file_since(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 32 finding 8: the `-c` file gained `aclFile=` after the start (for the next
    restart); a remote update rewrote the text read at start and deleted that line, so the
    next restart came up with admin writes open."""
    home = tmp_path / "home"
    path = tmp_path / "namesrv.properties"
    path.write_text(
        f"# production\nlistenPort=0\nhttpPort=0\njournalEnable=false\nstateDir={home}\n"
        f"kvConfigPath={home}/kvConfig.json\n"
    )
    ns = NamesrvController(registry=ConfigRegistry.from_file(path), host="127.0.0.1")
    await ns.start()
    try:
        with path.open("a") as file:
            file.write("# closed from the next restart on\naclFile=/etc/rocketmq/plain_acl.yml\n")
        caplog.set_level(logging.INFO, logger="pynamesrv.namesrv.config")
        answer = await ask(ns, requests.update_namesrv_config({"productEnvName": "prod"}))
        assert answer.code == ResponseCode.SUCCESS
    finally:
        await ns.stop()
    stored = path.read_text()
    assert "\naclFile=/etc/rocketmq/plain_acl.yml\n" in stored
    assert stored.startswith("# production\n") and stored.endswith("productEnvName=prod\n")
    assert ConfigRegistry.from_file(path).config.acl_file == "/etc/rocketmq/plain_acl.yml"
    assert f"config store {path} updated: productEnvName=prod (was unset)" in caplog.text
    assert "it changed since this server read it" in caplog.text
