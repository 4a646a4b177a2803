"""Shared fixtures: an in-process name server on a free loopback port, TLS certificates."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest
import uvloop

from pynamesrv.namesrv.config import NamesrvConfig
from pynamesrv.namesrv.controller import NamesrvController
from tls_pki import TlsFiles, make_pki

StartNamesrv = Callable[..., Awaitable[NamesrvController]]


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> dict:
    """Run the suite on uvloop, the loop ``pynamesrv serve`` uses."""
    return {"uvloop": uvloop.new_event_loop}


# A Spark job on a shared two-core machine can take minutes where a remoting test takes
# seconds: pipeline tests get a longer guard than pyproject's 120 s default.
PIPELINE_TIMEOUT_S = 900


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "pipeline" in item.path.parts and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(PIPELINE_TIMEOUT_S))


@pytest.fixture(autouse=True)
def private_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test, and every ``pynamesrv`` it starts, gets a home of its own: defaults such
    as ~/namesrv/kvConfig.json, the journal under ROCKETMQ_HOME and ~/logs never touch the
    real home (nor leak from one test, or one developer's experiment, into another)."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("ROCKETMQ_HOME", str(home / "namesrv"))
    return home


@pytest.fixture
async def start_namesrv(tmp_path: Path) -> AsyncIterator[StartNamesrv]:
    """Start name servers with config overrides (Java key names); all stop at teardown."""
    started: list[NamesrvController] = []

    async def start(**overrides: str | int | bool) -> NamesrvController:
        home = tmp_path / f"ns{len(started)}"
        config = NamesrvConfig(
            listen_port=0,
            state_dir=str(home),
            kv_config_path=str(home / "kvConfig.json"),
            config_store_path=str(home / "namesrv.properties"),
        )
        overrides = {"httpPort": 0, "journalEnable": False, **overrides}
        for key, value in overrides.items():
            config.set(key, str(value).lower() if isinstance(value, bool) else str(value))
        controller = NamesrvController(config, host="127.0.0.1")
        await controller.start()
        started.append(controller)
        return controller

    yield start
    for controller in reversed(started):
        await controller.stop()


@pytest.fixture
async def namesrv(start_namesrv: StartNamesrv) -> NamesrvController:
    return await start_namesrv()


@pytest.fixture(scope="session")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> TlsFiles:
    """Generated once per run (EC keys: milliseconds). Tests that change files copy them."""
    return make_pki(tmp_path_factory.mktemp("pki"))
