"""What a cold pipeline run (a new process, as cron starts it) is spared: the class-data-
sharing archive of the Spark JVM a pipeline command launches (written once when that JVM
exits, then mapped by every later one; never a failure of the run), and C2 for a run that
parses little (decided before Spark starts, from what the run will parse).

A child process stands in for the JVM here (the other side: it writes the file it was told
to when its standard input closes, as the JVM writes the archive when it exits); the real
JVM's use of it is what bench/pipeline.py measures.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pynamesrv.pipeline.classcache import QUIET, class_archive

WRITER = "import sys, pathlib; sys.stdin.read(); pathlib.Path(sys.argv[1]).write_bytes(b'classes')"


@pytest.fixture(autouse=True)
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PYNAMESRV_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("PYNAMESRV_CLASS_ARCHIVE", raising=False)
    return tmp_path / "cache"


def jvm(writes: Path, code: str = WRITER) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", code, str(writes)], stdin=subprocess.PIPE)


def test_the_first_run_writes_the_archive_and_the_next_ones_map_it(cache: Path) -> None:
    first = class_archive()
    assert first is not None and first.writing is not None
    assert first.path.parent == cache and not first.path.exists()
    assert first.java_options() == f"-XX:ArchiveClassesAtExit={first.writing} {QUIET}"
    assert first.keep(jvm(first.writing))
    assert first.path.read_bytes() == b"classes" and not first.writing.exists()

    later = class_archive()
    assert later is not None and later.writing is None and later.path == first.path
    assert later.java_options() == f"-XX:SharedArchiveFile={first.path} {QUIET}"
    assert not later.keep(jvm(cache / "unused"))  # nothing to write


def test_a_jvm_that_fails_leaves_no_archive_and_the_next_run_writes_one(cache: Path) -> None:
    first = class_archive()
    assert first is not None and first.writing is not None
    failing = "import sys, pathlib; pathlib.Path(sys.argv[1]).write_bytes(b'half'); sys.exit(3)"
    assert not first.keep(jvm(first.writing, failing))
    assert not first.path.exists() and not first.writing.exists()
    again = class_archive()
    assert again is not None and again.writing is not None


def test_it_can_be_switched_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYNAMESRV_CLASS_ARCHIVE", "off")
    assert class_archive() is None


def test_a_run_is_small_when_the_files_new_since_the_last_run_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The JIT is chosen before Spark starts from what the run will parse: the hour files the
    last manifest does not record as they are (``store.changed_files``), compressed ones at
    the bytes they inflate to."""
    from pynamesrv.pipeline.files import Files
    from pynamesrv.pipeline.job import GZIP_RATIO, is_small_run
    from pynamesrv.pipeline.publish import new_run_id, write_manifest
    from pynamesrv.pipeline.store import FileStats, find_journal_files

    journal, out = tmp_path / "journal", tmp_path / "out"
    (journal / "a_1").mkdir(parents=True)
    old, new = (
        journal / "a_1" / "events-20260101-00.jsonl",
        journal / "a_1" / "events-20260101-01.jsonl",
    )
    old.write_bytes(b"x" * 5000)
    new.write_bytes(b"x" * 1000)
    monkeypatch.setenv("PYNAMESRV_SMALL_RUN_BYTES", "4000")
    assert not is_small_run([str(journal)], str(out))  # no run yet: all 6,000 bytes
    [recorded, _] = find_journal_files(Files(), [str(journal)])
    stats = FileStats(recorded.path, recorded.size, recorded.mtime, 1, 1, 0, 0, 0, 0, ("a:1",))
    write_manifest(
        Files(), Files().uri(str(out)), new_run_id(), {"files": {recorded.key: stats.to_json()}}
    )
    assert is_small_run([str(journal)], str(out))  # only the 1,000 new bytes
    assert not is_small_run([str(journal)], str(out), full=True)
    monkeypatch.setenv("PYNAMESRV_SMALL_RUN_BYTES", str(1000 * GZIP_RATIO - 1))
    new.rename(new.with_name(new.name + ".gz"))  # a .gz inflates about GZIP_RATIO times
    assert not is_small_run([str(journal)], str(out))
