"""stateDir's rules (where each state file goes, what cannot be written) and the lock files
a refused start removes again (issue 35)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pynamesrv.namesrv import filestore
from pynamesrv.namesrv.config import ConfigRegistry
from pynamesrv.namesrv.filestore import FileInUse, discard, lock_beside, unlock
from pynamesrv.namesrv.statepaths import creation_problem, journal_root


def test_every_path_the_operator_leaves_unset_goes_under_the_state_dir(tmp_path: Path) -> None:
    config = ConfigRegistry.from_file(None, {"stateDir": str(tmp_path / "s")}).config
    assert config.kv_config_path == str(tmp_path / "s" / "kvConfig.json")
    assert config.journal_dir == str(tmp_path / "s" / "journal")
    assert config.config_store_path == str(tmp_path / "s" / "namesrv.properties")
    assert journal_root(config) == tmp_path / "s" / "journal"


def test_paths_the_operator_sets_stay_and_the_c_file_is_the_config_store(tmp_path: Path) -> None:
    file = tmp_path / "namesrv.properties"
    file.write_text(f"kvConfigPath={tmp_path / 'kv.json'}\nconfigStorePath=/elsewhere\n")
    registry = ConfigRegistry.from_file(file, {"stateDir": str(tmp_path / "s")})
    config = registry.config
    assert config.kv_config_path == str(tmp_path / "kv.json")
    assert config.journal_dir == str(tmp_path / "s" / "journal")
    assert config.config_store_path == str(file)  # as in Java; the start says so
    assert registry.notes == [
        f"configStorePath=/elsewhere in {file} is not used: the -c file is the config store "
        "(as in Java); stateDir says where the server writes"
    ]


def test_rocketmq_home_moves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROCKETMQ_HOME", str(tmp_path / "rocketmq"))
    config = ConfigRegistry.from_file(None, {"stateDir": str(tmp_path / "s")}).config
    assert config.rocketmq_home == str(tmp_path / "rocketmq")  # reported, as Java does
    assert not journal_root(config).is_relative_to(tmp_path / "rocketmq")


def test_creation_problem_finds_the_nearest_path_that_exists(tmp_path: Path) -> None:
    assert creation_problem(tmp_path / "a" / "b") is None
    (tmp_path / "file").write_text("")
    assert creation_problem(tmp_path / "file" / "b") == f"{tmp_path / 'file'} is not a directory"
    assert not (tmp_path / "a").exists()  # it creates nothing


def test_discard_removes_what_the_lock_created_and_nothing_else(tmp_path: Path) -> None:
    kept = tmp_path / "kept"
    kept.mkdir()
    fresh = lock_beside(kept / "new" / "deeper" / "kvConfig.json")
    discard(fresh)
    assert list(kept.iterdir()) == []
    (kept / "kvConfig.json.lock").write_text("")
    existing = lock_beside(kept / "kvConfig.json")
    discard(existing)  # a lock file that was there stays
    assert [p.name for p in kept.iterdir()] == ["kvConfig.json.lock"]


def test_a_lock_file_discarded_while_another_waited_is_not_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The race a discard opens: another start opened the lock file just before it went.
    Once that one has the lock, the name leads to another file (or none): it takes the lock
    again, so two servers never hold locks on two files of one name."""
    path = tmp_path / "kvConfig.json"
    lock = path.with_name("kvConfig.json.lock")
    lock.write_text("")
    stale = os.open(lock, os.O_RDWR)
    lock.unlink()  # discarded by the start that created it
    real = filestore._open_lock_file
    opened = iter([(stale, False)])
    monkeypatch.setattr(filestore, "_open_lock_file", lambda p: next(opened, None) or real(p))
    taken = lock_beside(path)
    try:
        assert next(opened, None) is None  # it was handed the discarded file first
        assert os.fstat(taken.fd).st_ino == os.stat(lock).st_ino
        with pytest.raises(FileInUse):  # the one on disk is the one held
            lock_beside(path)
    finally:
        unlock(taken)
