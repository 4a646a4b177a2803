"""Replay the Java 5.2.0 corpus (golden-5x) against a fresh in-process name server.

Each scenario's server is configured as the recorded Java one was (golden-5x/README.md) and
answers as pynamesrv does by default (rocketmq.remoting.version 453 = 5.2.0). The scenarios
are minutes long and some depend on time (broker expiry, the start-up wait), so the replay
runs on a scripted clock: every frame is sent at once, with the server's clock set to the
frame's recorded moment; no replay sleeps for the recorded time.

The 905 notification the acting-master scenario causes is not on the recorded connections
(the README says how Java's was observed); here a stand-in for the broker records it.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from pynamesrv.namesrv.config import NamesrvConfig
from pynamesrv.namesrv.controller import NamesrvController
from pynamesrv.remoting.codes import ResponseCode
from pynamesrv.remoting.command import RemotingCommand

from .deviations import ReplayPaths, deviations_for
from .golden import SCENARIOS_5X, golden_5x_dir, load_scenario
from .test_golden_replay import Replayer, ScriptedClock, Timing

# The recorded servers' settings beyond the common ones (golden-5x/README.md "Scenarios").
SCENARIO_CONFIG: dict[str, dict[str, Any]] = {
    "acting-master": {"support_acting_master": True, "notify_min_broker_id_changed": True},
    "namesrv-restart": {"need_wait_for_service": True, "wait_seconds_for_service": 15},
}
BASE_MS = 1_795_413_000_000  # any epoch: the recorded moments are relative to it
# namesrv-restart: "t 0 = 0.3 s after it printed boot success", i.e. after it started.
STARTED_BEFORE_T0_MS = 300


class RecordingBroker:
    """The brokers' side of NOTIFY_MIN_BROKER_ID_CHANGE: keeps each request, answers SUCCESS."""

    def __init__(self) -> None:
        self.received: list[tuple[str, RemotingCommand]] = []

    async def __call__(self, addr: str, command: RemotingCommand, timeout_s: float) -> Any:
        self.received.append((addr, command))
        return RemotingCommand.response_to(command, ResponseCode.SUCCESS)


@contextlib.asynccontextmanager
async def recorded_server(
    name: str, tmp_path: Path, broker: RecordingBroker
) -> AsyncIterator[tuple[NamesrvController, ReplayPaths, Timing]]:
    work = tmp_path / "work"
    work.mkdir(exist_ok=True)
    paths = ReplayPaths(
        workdir=work,
        kv_config_path=tmp_path / "namesrv" / "kvConfig.json",
        config_store_path=tmp_path / "namesrv.properties",
    )
    config = NamesrvConfig(
        listen_port=0,
        bind_address="127.0.0.1",  # set in the recorded server's properties file
        kv_config_path=str(paths.kv_config_path),
        config_store_path=str(paths.config_store_path),
        rocketmq_home="rmq",
        http_port=0,
        **SCENARIO_CONFIG.get(name, {}),
    )
    clock = ScriptedClock(BASE_MS - STARTED_BEFORE_T0_MS)
    ctrl = NamesrvController(
        config, host="127.0.0.1", clock_ms=clock, auto_expiry=False, notify_send=broker
    )
    await ctrl.start()
    try:
        yield ctrl, paths, Timing(clock, BASE_MS, ctrl)
    finally:
        await ctrl.stop()


@pytest.mark.parametrize("name", SCENARIOS_5X)
async def test_golden_5x_replay(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Our answers match the Java 5.2.0 answers, except the listed deviations."""
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    scenario = load_scenario(name, golden_5x_dir())
    broker = RecordingBroker()
    async with recorded_server(name, tmp_path, broker) as (ctrl, paths, timing):
        problems = await Replayer(scenario, ctrl.port, paths, timing).run()
        notified = [(addr, dict(cmd.ext_fields or {})) for addr, cmd in broker.received]
    for dev in deviations_for(name).values():
        if dev.post_check is not None:
            problems.extend(dev.post_check(paths))
    if name == "acting-master":  # the master's expiry: "min broker id changed to 1"
        expected = {
            "minBrokerId": "1",
            "brokerName": "broker-a",
            "minBrokerAddr": "127.0.0.1:34921",
            "offlineBrokerAddr": "127.0.0.1:34911",
        }
        if notified != [("127.0.0.1:34921", expected)]:
            problems.append(
                f"{name}: NOTIFY_MIN_BROKER_ID_CHANGE: expected {expected}, got {notified}"
            )
    elif notified:
        problems.append(f"{name}: NOTIFY_MIN_BROKER_ID_CHANGE sent, notify is off: {notified}")
    assert not problems, f"{len(problems)} difference(s) in {name}:\n" + "\n".join(problems)
