"""What ``serve`` checks before it binds a port or writes a file, shared with ``serve -p``.

``serve -p`` promises that a file it accepts is one ``serve`` starts with, so both run this
one list: the server built as ``serve`` builds it (TLS material, the packages it needs, such
as ``cryptography`` for tls.test.mode.enable, the accounts file), the places it must write
(the KV store, the journal, the log and pid files), and the KV store it loads. Nothing here
creates anything; what only a start can find out (a busy port, another server's lock) is
refused by ``serve`` after this, and leaves nothing behind either.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from pynamesrv.app import NameServer
from pynamesrv.cli import logs
from pynamesrv.namesrv.config import ConfigRegistry, NamesrvConfig
from pynamesrv.namesrv.filestore import path_problem
from pynamesrv.namesrv.kvconfig import KvConfigError, KvConfigManager
from pynamesrv.namesrv.statepaths import creation_problem, write_problems


@dataclass(frozen=True, slots=True)
class Problem:
    """One reason ``serve`` would not start; the exit code is ``serve``'s for it (2: the
    configuration is in the way, 1: the pid file or the KV store)."""

    text: str
    exit_code: int = 2


def check(registry: ConfigRegistry) -> list[Problem]:
    """Every problem ``serve`` would stop at before binding, one each."""
    config = registry.config
    problems = []
    try:
        NameServer(registry)  # what its construction loads and imports, as serve does
    except ValueError as exc:  # TLS files or packages, the accounts file
        problems.append(Problem(str(exc)))
    problems += [Problem(text) for text in write_problems(config, registry.explicit)]
    problems += _log_file(config)
    problems += _pid_file(config)
    problems += _kv_store(config)
    return problems


def notes(registry: ConfigRegistry) -> list[str]:
    """What is fine for a start but worth knowing: a read-only config store, keys of the -c
    file that are not used."""
    out = list(registry.notes)
    store = Path(registry.config.config_store_path)
    if _cannot_write(store):
        out.append(
            f"the config store {store.absolute()} is read-only: updateNamesrvConfig will "
            "answer 'persist failed' (change the file and restart)"
        )
    return out


def _cannot_write(path: Path) -> str | None:
    """Why ``path`` (a file to create or replace) cannot be written, or None."""
    why = creation_problem(path.parent)
    if why is None and path.exists() and not os.access(path, os.W_OK):
        why = f"{path} is not writable by this user"
    return why


def _log_file(config: NamesrvConfig) -> list[Problem]:
    path = logs.resolve_log_file(config.log_file)
    why = _cannot_write(path) if path is not None else None
    if why is None:
        return []
    return [Problem(f"cannot open log file {path}: {why} (set by logFile / --log-file)")]


def _pid_file(config: NamesrvConfig) -> list[Problem]:
    if not config.pid_file:
        return []
    path = Path(config.pid_file)
    why = creation_problem(path.parent)
    if why is None:
        return []
    return [Problem(f"cannot write pid file {path}: {why} (set by pidFile / --pid-file)", 1)]


def _kv_store(config: NamesrvConfig) -> list[Problem]:
    path = Path(config.kv_config_path)
    try:
        KvConfigManager().load(path)
    except KvConfigError as exc:
        return [Problem(f"cannot load the KV store: {exc}", 1)]
    except (FileNotFoundError, NotADirectoryError):
        return []  # no file (its directory is checked as a place to write)
    except OSError as exc:
        return [Problem(f"cannot load the KV store: {path}: {path_problem(path, exc)}", 1)]
    return []
