"""Issue 32 finding 13: peer-supplied text reaches a log line only escaped (one record, one
line), whatever validation let through before it."""

from __future__ import annotations

import logging

import pytest

from pynamesrv.namesrv.audit import Auditor
from pynamesrv.remoting.codes import RequestCode
from pynamesrv.remoting.command import RemotingCommand
from pynamesrv.remoting.server import RemotingServer

FORGED = "fe80::1%\n2026-01-01 00:00:00,000 INFO pynamesrv.audit - admin write by root"


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records]


def test_a_closing_line_escapes_the_peer_and_the_detail(caplog: pytest.LogCaptureFixture) -> None:
    server = RemotingServer(lambda request, conn: None)
    with caplog.at_level(logging.INFO, logger="pynamesrv.remoting.server"):
        server.refuse("malformed_frame", f"{FORGED}:1", f"detail\r\n{FORGED}")
    (line,) = messages(caplog)
    assert "\n" not in line and "\r" not in line
    assert line.startswith("closing fe80::1%\\n2026-01-01")


def test_a_denial_escapes_the_remark_and_the_claimed_key(caplog: pytest.LogCaptureFixture) -> None:
    request = RemotingCommand(code=RequestCode.PUT_KV_CONFIG, ext_fields={"AccessKey": FORGED})
    with caplog.at_level(logging.WARNING, logger="pynamesrv.audit"):
        Auditor().denied(request, "192.0.2.7:1", f"No acl config for\n{FORGED}")
    (line,) = messages(caplog)
    assert "\n" not in line and line.startswith("denied PUT_KV_CONFIG by 192.0.2.7:1")
