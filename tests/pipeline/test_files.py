"""The job's own file layer (pyarrow, no JVM): journal paths as an operator writes them, in the
URI form Spark reads back."""

from __future__ import annotations

from pathlib import Path

import pytest

from pynamesrv.pipeline.files import Files, FilesError
from pynamesrv.pipeline.store import JournalError, find_journal_files


@pytest.fixture
def journal(tmp_path: Path) -> Path:
    for name in (
        "h_1/events-20260101-00.jsonl",
        "h_1/events-20260101-00.jsonl.gz",  # its compressed twin: read instead
        "h 2/events-20260101-01.jsonl",
        "h+3/old/events-20260101-02.jsonl",
        "_out/events-20260101-03.jsonl",  # the pipeline's own output: hidden
        "h_1/notes.txt",
    ):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("{}\n")
    return tmp_path


def test_directories_are_searched_recursively_and_twins_read_once(journal: Path) -> None:
    found = find_journal_files(Files(), [str(journal)])
    assert [(f.instance, f.path) for f in found] == [
        ("h_1", f"file:{journal}/h_1/events-20260101-00.jsonl.gz"),
        ("h 2", f"file:{journal}/h 2/events-20260101-01.jsonl"),
        ("old", f"file:{journal}/h+3/old/events-20260101-02.jsonl"),
    ]
    assert all(f.size == 3 and f.mtime > 0 for f in found)


def test_globs_match_within_one_path_component(journal: Path) -> None:
    files = Files()
    assert [p for p, _ in files.glob(f"{journal}/h?[12]") or []] == [
        f"file:{journal}/h 2",
        f"file:{journal}/h_1",
    ]
    assert [p for p, _ in files.glob(f"{journal}/{{h_1,h+3}}/*.jsonl") or []] == [
        f"file:{journal}/h_1/events-20260101-00.jsonl"
    ]
    assert files.glob(f"{journal}/*/nothing*") == []
    assert files.glob(f"{journal}/missing") is None


def test_a_missing_journal_path_and_an_unknown_scheme_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(JournalError, match=r"^journal path not found: .*/missing$"):
        find_journal_files(Files(), [str(tmp_path / "missing")])
    with pytest.raises(FilesError, match=r'^no filesystem for scheme "nosuchfs"'):
        Files().exists("nosuchfs://bucket/out")


def test_small_files_are_written_once_and_read_back(tmp_path: Path) -> None:
    files = Files()
    target = f"file://{tmp_path}/a/b/manifest.json"
    assert files.read_text(target) is None
    files.write_text(target, "é\n")
    assert files.read_text(target) == (tmp_path / "a/b/manifest.json").read_text() == "é\n"
    assert files.children(str(tmp_path / "a")) == ["b"]
    assert files.directories(str(tmp_path), 2) == ["a/b"]
    files.delete(str(tmp_path / "a"))
    assert not (tmp_path / "a").exists() and files.children(str(tmp_path / "a")) == []
