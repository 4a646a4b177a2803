"""Real signed traffic: mqadmin's RocketMQ ACL signatures in the golden corpora verify.

mqadmin 4.9.4 and 5.2.0 signed every request they sent while the corpora were recorded
(their conf/tools.yml holds ``rocketmq2`` / ``12345678``). These tests take those frames as
recorded, decode them with the server's own codec and check them with the server's own
access check, so a difference in how either side builds the signed content shows up here.
Then the recorded admin scenario is replayed against a server that requires signatures: the
signed writes must behave exactly as recorded, the unsigned ones must be refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from pynamesrv.namesrv.acl import (
    ADMIN_WRITE_CODES,
    UNSIGNED_ZONE_FIELDS,
    AccessControl,
    AccessDenied,
    Need,
)
from pynamesrv.namesrv.config import NamesrvConfig
from pynamesrv.namesrv.controller import NamesrvController
from pynamesrv.namesrv.events import Event
from pynamesrv.remoting.acl_sign import signature, signed_content
from pynamesrv.remoting.codec import FrameDecoder
from pynamesrv.remoting.command import RemotingCommand

from .deviations import NO_PERMISSION, Deviation, ReplayPaths
from .golden import (
    SERIALIZE_JSON,
    SERIALIZE_ROCKETMQ,
    Frame,
    build_frame,
    golden_dir,
    json_header_bytes,
    load_scenario,
    shared_dir,
)
from .test_golden_replay import Replayer

STOCK_ACCOUNTS = """\
accounts:
  - accessKey: rocketmq2
    secretKey: 12345678
    whiteRemoteAddress: 127.0.0.1
    admin: true
"""
LOOPBACK = "127.0.0.1:40000"
# The Node client ali-ons signed with accessKeyId golden-ak, whose secret the recording
# does not keep: its one frame cannot be checked.
UNKNOWN_SECRET_KEYS = frozenset({"golden-ak"})


def corpus_scenarios() -> list[tuple[str, Path]]:
    out = []
    for directory in (golden_dir(), shared_dir() / "golden-5x"):
        for path in sorted(directory.glob("*.jsonl")):
            if not path.name.endswith(".events.jsonl"):
                out.append((path.stem, directory))
    return out


def signed_frames() -> list[tuple[str, Frame]]:
    """Every recorded request that carries a Signature, labelled ``dir/scenario seq N``."""
    found = []
    for name, directory in corpus_scenarios():
        for frame in load_scenario(name, directory).frames:
            if frame.is_request and "Signature" in (frame.header or {}).get("extFields", {}):
                found.append((f"{directory.name}/{name} seq {frame.seq}", frame))
    return found


def decoded(raw: bytes) -> RemotingCommand:
    """The request as the server decodes it (its own codec)."""
    (command,) = FrameDecoder().feed(raw)
    return command


@pytest.fixture
def stock_access(tmp_path: Path) -> AccessControl:
    path = tmp_path / "plain_acl.yml"
    path.write_text(STOCK_ACCOUNTS)
    return AccessControl(path)


def test_every_signed_mqadmin_request_verifies_with_the_stock_account(
    stock_access: AccessControl,
) -> None:
    checked: dict[str, int] = {}
    serialize_types = set()
    for label, frame in signed_frames():
        fields = frame.header["extFields"]  # type: ignore[index]
        if fields["AccessKey"] != "rocketmq2":
            continue
        command = decoded(frame.raw)
        assert stock_access.verify(command, LOOPBACK, Need.ADMIN) == "rocketmq2", label
        corpus = label.split("/", 1)[0]
        checked[corpus] = checked.get(corpus, 0) + 1
        serialize_types.add(frame.wire().serialize)
    # 122 frames from 4.9.4 tools (JSON and ROCKETMQ headers), 49 from 5.2.0.
    assert checked == {"golden": 122, "golden-5x": 49}
    assert serialize_types == {SERIALIZE_JSON, SERIALIZE_ROCKETMQ}


def test_every_other_signer_in_the_corpus_follows_the_same_rule() -> None:
    """rocketmq-client-cpp signs with an empty key pair; only ali-ons' secret is unknown."""
    others = [
        (label, frame)
        for label, frame in signed_frames()
        if frame.header["extFields"]["AccessKey"] != "rocketmq2"  # type: ignore[index]
    ]
    unchecked = 0
    for label, frame in others:
        command = decoded(frame.raw)
        fields = command.ext_fields or {}
        if fields["AccessKey"] in UNKNOWN_SECRET_KEYS:
            unchecked += 1
            continue
        expected = signature(signed_content(fields, command.body), "")
        assert expected == fields["Signature"], label
    assert (len(others), unchecked) == (2, 1)


def test_zone_fields_added_after_signing_are_left_out(stock_access: AccessControl) -> None:
    """5.x mqadmin in zone mode adds __ZONE_NAME/__ZONE_MODE after its ACL hook signed."""
    zoned = [
        (label, decoded(frame.raw))
        for label, frame in signed_frames()
        if "__ZONE_NAME" in frame.header["extFields"]  # type: ignore[index]
    ]
    assert len(zoned) == 5
    for label, command in zoned:
        fields = command.ext_fields or {}
        full = signature(signed_content(fields, command.body), "12345678")
        assert full != fields["Signature"], label
        assert set(UNSIGNED_ZONE_FIELDS) <= set(fields)
        assert stock_access.verify(command, LOOPBACK, Need.ACCOUNT) == "rocketmq2"


# --------------------------------------------------------------------------- tampering


def golden_request(seq: int) -> Frame:
    frame = load_scenario("admin").by_seq[seq]
    assert frame.is_request
    return frame


def rebuilt(frame: Frame, change: Any = None, body: bytes | None = None) -> RemotingCommand:
    """The frame with its JSON header re-encoded after ``change(header)``, decoded."""
    header = json.loads(json.dumps(frame.header))
    if change is not None:
        change(header)
    raw = build_frame(
        SERIALIZE_JSON, json_header_bytes(header), frame.body if body is None else body
    )
    return decoded(raw)


def denial(access: AccessControl, command: RemotingCommand) -> str:
    with pytest.raises(AccessDenied) as info:
        access.verify(command, LOOPBACK, Need.ADMIN)
    return info.value.remark


def test_tampered_golden_writes_fail(stock_access: AccessControl, tmp_path: Path) -> None:
    put = golden_request(102)  # mqadmin updateKvConfig GoldenNamespace goldenKey
    config = golden_request(133)  # mqadmin updateNamesrvConfig productEnvName=golden
    assert (put.code, config.code) == (100, 318)
    # Re-encoding the header changes nothing that is signed: still valid.
    assert stock_access.verify(rebuilt(put), LOOPBACK, Need.ADMIN) == "rocketmq2"
    assert stock_access.verify(rebuilt(config), LOOPBACK, Need.ADMIN) == "rocketmq2"

    failed = "Check signature failed for accessKey=rocketmq2"
    field = rebuilt(put, lambda h: h["extFields"].update(value="evil"))
    assert denial(stock_access, field) == failed
    body = rebuilt(config, body=b"productEnvName=evil\n")
    assert denial(stock_access, body) == failed
    dropped = rebuilt(put, lambda h: h["extFields"].pop("Signature"))
    assert denial(stock_access, dropped) == failed
    anonymous = rebuilt(put, lambda h: h["extFields"].pop("AccessKey"))
    assert denial(stock_access, anonymous).startswith("No accessKey is configured")

    other_secret = tmp_path / "other.yml"
    other_secret.write_text(STOCK_ACCOUNTS.replace("12345678", "not-the-stock-secret"))
    assert denial(AccessControl(other_secret), decoded(put.raw)) == failed


# --------------------------------------------------------------------------- replay


@contextlib.asynccontextmanager
async def acl_server(
    tmp_path: Path, events: list[Event]
) -> AsyncIterator[tuple[NamesrvController, ReplayPaths]]:
    """A fresh name server (as the golden replay starts it) that requires signed writes."""
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    accounts = tmp_path / "plain_acl.yml"
    accounts.write_text(STOCK_ACCOUNTS)
    paths = ReplayPaths(
        workdir=work,
        kv_config_path=tmp_path / "namesrv" / "kvConfig.json",
        config_store_path=tmp_path / "namesrv.properties",
    )
    config = NamesrvConfig(
        listen_port=0,
        kv_config_path=str(paths.kv_config_path),
        config_store_path=str(paths.config_store_path),
        rocketmq_home="rmq",
        acl_file=str(accounts),
        rocketmq_remoting_version=401,
        http_port=0,  # answer as the recorded 4.9.4 server does
    )
    ctrl = NamesrvController(config, host="127.0.0.1")
    ctrl.add_listener(events.extend)
    await ctrl.start()
    try:
        yield ctrl, paths
    finally:
        await ctrl.stop()


def refused_unsigned(seq: int, code: int) -> Deviation:
    return Deviation(
        scenario="admin",
        seq=seq,
        reason="the accounts file requires an admin signature; our raw client did not sign",
        instead="NO_PERMISSION, nothing changed",
        header_overrides={
            "code": NO_PERMISSION,
            "extFields": None,
            "remark": f"No accessKey is configured: request code={code} must be signed by an "
            "admin account (AccessKey and Signature)",
        },
    )


async def test_admin_scenario_replays_with_signed_writes_required(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mqadmin's signed writes work unchanged; the two unsigned ones are refused."""
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    scenario = load_scenario("admin")
    events: list[Event] = []
    async with acl_server(tmp_path, events) as (ctrl, paths):
        replayer = Replayer(scenario, ctrl.port, paths)
        replayer.deviations = {
            **replayer.deviations,
            162: refused_unsigned(162, 205),
            164: refused_unsigned(164, 327),
        }
        problems = await replayer.run()
    # GET_NAMESRV_CONFIG reports every key that differs from its default: aclFile too.
    reported = [p for p in problems if "body.config.aclFile: expected '<absent>'" in p]
    assert len(reported) == 2 and all(str(tmp_path / "plain_acl.yml") in p for p in reported)
    problems = [p for p in problems if p not in reported]
    assert not problems, f"{len(problems)} difference(s):\n" + "\n".join(problems)
    audited = [e for e in events if getattr(e, "caller", None) is not None]
    kinds = {type(e).__name__ for e in audited}
    assert {"KvChanged", "ConfigChanged", "PermChanged", "TopicRemoved"} <= kinds
    assert {e.access_key for e in audited} == {"rocketmq2"}  # type: ignore[attr-defined]
    assert all(e.caller.startswith("127.0.0.1:") for e in audited)  # type: ignore[attr-defined]


async def answers_to(port: int, frames: list[Frame]) -> list[tuple[int, str | None]]:
    """Send each recorded frame verbatim on its own connection (as mqadmin did); the
    (code, remark) of each answer."""
    out = []
    for frame in frames:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(frame.raw)
            await writer.drain()
            head = await asyncio.wait_for(reader.readexactly(4), 5)
            rest = await asyncio.wait_for(reader.readexactly(int.from_bytes(head, "big")), 5)
        finally:
            writer.close()
        answer = decoded(head + rest)
        out.append((answer.code, answer.remark))
    return out


async def test_5x_signed_writes_answer_as_on_an_open_server(
    tmp_path: Path, start_namesrv: Any
) -> None:
    """mqadmin 5.2.0's signed writes get the same answers and make the same changes with
    the stock account required as on a server that checks nothing."""
    scenario = load_scenario("register-admin", shared_dir() / "golden-5x")
    writes = [f for f in scenario.frames if f.is_request and f.code in ADMIN_WRITE_CODES]
    assert [f.code for f in writes] == [318, 318, 318, 205, 327, 100, 102, 216]
    accounts = tmp_path / "plain_acl.yml"
    accounts.write_text(STOCK_ACCOUNTS)
    accounts.chmod(0o600)
    checked = await start_namesrv(aclFile=str(accounts))
    open_ = await start_namesrv()
    got = await answers_to(checked.port, writes)
    assert got == await answers_to(open_.port, writes)
    # The only refusals are the config handler's own (no ACL remark among them).
    assert [remark for code, remark in got if code != 0] == [
        "Can not update config in black list.",
    ]
    assert checked.config.product_env_name == open_.config.product_env_name == "golden5"
    assert checked.kv.table == open_.kv.table
