"""Where the name server's state lives, and whether it can be written there.

Everything ``serve`` writes lives under a directory the operator names (``stateDir``, by
default ``~/namesrv``, where Java keeps kvConfig.json): the KV store, the journal, the config
store when there is no ``-c`` file, and their locks. The ``-c`` file may be read-only (a
Kubernetes ConfigMap, /etc under systemd's ProtectSystem=strict): nothing is written beside
it then, and UPDATE_NAMESRV_CONFIG answers "persist failed". ROCKETMQ_HOME plays no part: it
usually names a Java install, and a journal that follows an environment variable is one a
restart without it does not find.

A module of its own because three callers share these rules: the config registry (the
defaults derived from ``stateDir``), ``serve`` and ``serve -p`` (what cannot be written, said
before anything is), and the controller (the start-up line naming each place).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from pynamesrv.namesrv.config import NamesrvConfig

KV_FILE_NAME: Final = "kvConfig.json"
CONFIG_STORE_NAME: Final = "namesrv.properties"
JOURNAL_DIR_NAME: Final = "journal"
_HOUR_FILE_PREFIX: Final = "events-"


def derive_paths(
    config: NamesrvConfig, explicit: Collection[str], config_file: Path | None
) -> None:
    """Give the paths the operator did not set their place under ``stateDir``: kvConfigPath,
    journalDir, and configStorePath when there is no ``-c`` file (with one, the file is the
    config store, as in Java). So ``serve -p`` and GET_NAMESRV_CONFIG name every place."""
    state_dir = Path(config.state_dir)
    if "kvConfigPath" not in explicit:
        config.kv_config_path = str(state_dir / KV_FILE_NAME)
    if not config.journal_dir:
        config.journal_dir = str(state_dir / JOURNAL_DIR_NAME)
    if config_file is None and "configStorePath" not in explicit:
        config.config_store_path = str(state_dir / CONFIG_STORE_NAME)


def journal_root(config: NamesrvConfig) -> Path:
    """The journal's root: journalDir, else ``<stateDir>/journal``."""
    if config.journal_dir:
        return Path(config.journal_dir)
    return Path(config.state_dir) / JOURNAL_DIR_NAME


def creation_problem(directory: Path) -> str | None:
    """Why files could not be created in ``directory`` (made first where it is missing), or
    None when they can; creates nothing. The nearest path that exists decides: a file there
    is "not a directory", a directory must be writable (a read-only mount says so)."""
    path = directory.absolute()
    for candidate in (path, *path.parents):
        try:
            info = os.stat(candidate)
        except (FileNotFoundError, NotADirectoryError):
            continue  # missing, or under a file: an ancestor tells which
        except OSError as exc:
            return f"{candidate}: {os.strerror(exc.errno or 0).lower()}"
        if not stat.S_ISDIR(info.st_mode):
            return f"{candidate} is not a directory"
        if os.access(candidate, os.W_OK | os.X_OK):
            return None
        if os.statvfs(candidate).f_flag & os.ST_RDONLY:
            return f"{candidate} is on a read-only file system"
        return f"{candidate} is not writable by this user"
    return None


def write_problems(config: NamesrvConfig, explicit: Collection[str]) -> list[str]:
    """One line for each place ``serve`` must write and could not (the KV store, the journal
    when it is on), naming the key that puts it there; creates nothing."""
    kv = Path(config.kv_config_path)
    # (key, the path it names, the directory written, whether stateDir placed it there)
    places = [("kvConfigPath", kv, kv.parent, "kvConfigPath" not in explicit)]
    if config.journal_enable:
        root = journal_root(config)
        places.append(("journalDir", root, root, "journalDir" not in explicit))
    problems = []
    for key, shown, directory, derived in places:
        why = creation_problem(directory)
        if why is not None:
            keys = f"stateDir (or {key})" if derived else key
            problems.append(
                f"{key} {shown.absolute()} cannot be written: {why} (set {keys} to a "
                "writable directory)"
            )
    return problems


def has_hour_files(directory: Path) -> bool:
    """Whether a journal instance directory holds any hour file (a new or emptied one does
    not: the server has never journaled there)."""
    try:
        with os.scandir(directory) as entries:
            return any(entry.name.startswith(_HOUR_FILE_PREFIX) for entry in entries)
    except OSError:
        return False


def legacy_journal(
    config: NamesrvConfig, instance_dir: str, explicit: Collection[str]
) -> Path | None:
    """This instance's journal where versions before stateDir put it by default
    (``<rocketmqHome>/journal``, ROCKETMQ_HOME's), when journalDir was not set, that is not
    where it goes now, and it holds hour files; else None."""
    if "journalDir" in explicit:
        return None
    old = Path(config.rocketmq_home) / JOURNAL_DIR_NAME / instance_dir
    new = journal_root(config) / instance_dir
    if old.absolute() == new.absolute() or not has_hour_files(old):
        return None
    return old
