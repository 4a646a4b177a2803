"""A damaged journal directory is read up to the damage, counted, never a crash or a hang.

FIFOs, devices and symlinks named like hour files are not opened; a bit-flipped or bombed
archive yields the lines before the damage; an over-long line is skipped without being held
whole; the writer starts beside all of them.
"""

from __future__ import annotations

import gzip
import os
import tracemalloc
import zlib
from pathlib import Path

import orjson
import pytest

from pynamesrv.namesrv import journal as journal_module
from pynamesrv.namesrv.journal import (
    Journal,
    JournalDamage,
    complete_lines,
    hour_file_name,
    instance_dir_name,
    journal_files,
    read_records,
)

HOUR = 3_600_000
T0 = 1_795_000_000_000 // HOUR * HOUR  # an hour boundary in 2026
INSTANCE = "127.0.0.1:19876"


def lines(*keys: str) -> bytes:
    return b"".join(
        orjson.dumps({"ts": T0, "ns": INSTANCE, "seq": i, "type": "kv_changed", "key": key}) + b"\n"
        for i, key in enumerate(keys, 1)
    )


def keys_of(records: list[dict]) -> list[str]:
    return [r["key"] for r in records]


def bit_flipped_archive(data: bytes) -> bytes:
    """``data`` gzip-compressed, with one byte of the deflate stream changed so that zlib
    itself fails (not only the CRC at the end): what a bad disk block does."""
    packed = gzip.compress(data, compresslevel=6)
    for pos in range(len(packed) // 2, len(packed) - 8):
        broken = bytearray(packed)
        broken[pos] ^= 0x55
        try:
            gzip.decompress(bytes(broken))
        except zlib.error:
            return bytes(broken)
        except (OSError, EOFError):
            continue
    raise AssertionError("no flip found that breaks the deflate stream")


@pytest.fixture
def damaged(tmp_path: Path) -> Path:
    """An instance directory with good hours around every kind of damage."""
    directory = tmp_path / instance_dir_name(INSTANCE)
    directory.mkdir()
    (directory / hour_file_name(T0)).write_bytes(lines("good-0"))
    many = lines(*(f"lost-{i}" for i in range(20_000)))
    (directory / (hour_file_name(T0 + HOUR) + ".gz")).write_bytes(bit_flipped_archive(many))
    os.mkfifo(directory / hour_file_name(T0 + 2 * HOUR))  # would hang an open() for reading
    (directory / hour_file_name(T0 + 3 * HOUR)).symlink_to("/dev/zero")  # endless
    outside = tmp_path / "elsewhere.jsonl"
    outside.write_bytes(lines("outside"))
    (directory / hour_file_name(T0 + 4 * HOUR)).symlink_to(outside)  # leaves the directory
    (directory / hour_file_name(T0 + 5 * HOUR)).write_bytes(
        lines("good-5a") + b'{"key":"' + b"x" * (3 * 1024 * 1024) + b'"}\n' + lines("good-5b")
    )
    (directory / hour_file_name(T0 + 6 * HOUR)).write_bytes(lines("good-6") + b"[1,2]\nnot json\n")
    return directory


@pytest.mark.timeout(60)  # the old reader hung on the FIFO (a hang is the failure)
def test_readers_return_the_good_lines_and_count_the_damage(
    damaged: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(journal_module, "MAX_LINE_BYTES", 1024 * 1024)
    damage = JournalDamage()
    files = journal_files(damaged.parent, damage)
    assert [f.name for f in files] == [
        hour_file_name(T0),
        hour_file_name(T0 + HOUR) + ".gz",
        hour_file_name(T0 + 5 * HOUR),
        hour_file_name(T0 + 6 * HOUR),
    ]
    assert damage.to_record() == {"files_skipped": 3}  # the FIFO and both symlinks
    records = list(read_records(files, damage=damage))
    got = keys_of(records)
    assert got[0] == "good-0"
    assert got[-3:] == ["good-5a", "good-5b", "good-6"]
    lost = got[1:-3]
    assert lost == [f"lost-{i}" for i in range(len(lost))]  # what was read before the flip
    assert len(lost) < 20_000
    assert damage.to_record() == {
        "files_skipped": 3,
        "files_unreadable": 1,
        "lines_too_long": 1,
        "lines_unparsable": 2,
    }
    assert damage.total == 7 and damage
    assert str(damaged / hour_file_name(T0 + 2 * HOUR)) in damage.files
    assert "3 files skipped" in damage.summary()


def test_without_an_accumulator_the_readers_work_as_before(damaged: Path) -> None:
    records = list(read_records(journal_files(damaged)))
    assert keys_of(records)[0] == "good-0" and keys_of(records)[-1] == "good-6"
    assert not JournalDamage() and JournalDamage().to_record() == {}
    assert JournalDamage().summary() == "no damage"
    with pytest.raises(ValueError, match="unknown journal damage"):
        JournalDamage().add("lines_lost")


def test_symlinked_files_are_not_read_even_when_named_directly(damaged: Path) -> None:
    """``complete_lines`` checks for itself (recovery calls it per file)."""
    damage = JournalDamage()
    for hour in (2, 3, 4):  # the FIFO, /dev/zero, the file outside
        assert list(complete_lines(damaged / hour_file_name(T0 + hour * HOUR), damage)) == []
    assert damage.to_record() == {"files_skipped": 3}


def test_an_over_long_line_is_skipped_without_holding_it(tmp_path: Path) -> None:
    line_cap, long_line = 1024 * 1024, 8 * 1024 * 1024
    file = tmp_path / hour_file_name(T0)
    file.write_bytes(lines("before") + b"x" * long_line + b"\n" + lines("after"))
    damage = JournalDamage()
    tracemalloc.start()
    try:
        got = [orjson.loads(raw)["key"] for raw in complete_lines(file, damage, max_line=line_cap)]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got == ["before", "after"]
    assert damage.to_record() == {"lines_too_long": 1}
    assert peak < long_line // 2  # the old reader held the whole 8 MiB line


def test_a_gzip_bomb_is_read_only_up_to_its_inflation_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(journal_module, "MIN_INFLATED_LIMIT", 1024 * 1024)
    file = tmp_path / (hour_file_name(T0) + ".gz")
    with gzip.open(file, "wb") as bomb:
        bomb.write(lines("first"))
        for _ in range(64):  # 64 MiB of newlines: no line too long, only too much
            bomb.write(b"\n" * (1024 * 1024))
        bomb.write(lines("never"))
    assert file.stat().st_size * journal_module.MAX_INFLATION < 64 * 1024 * 1024
    damage = JournalDamage()
    assert keys_of(list(read_records([file], damage=damage))) == ["first"]
    assert damage.files_unreadable == 1


def test_empty_lines_are_not_lines(tmp_path: Path) -> None:
    """Runs of empty lines, anywhere in a file and across read blocks, are skipped as Spark's
    JSON reader skips them: not damage, and not one step each (the bomb above)."""
    file = tmp_path / hour_file_name(T0)
    file.write_bytes(b"\n" * 3 + lines("a") + b"\n" + lines("b") + b"\n" * (3 << 20) + lines("c"))
    assert [raw[:1] for raw in complete_lines(file)] == [b"{"] * 3
    damage = JournalDamage()
    assert keys_of(list(read_records([file], damage=damage))) == ["a", "b", "c"]
    assert damage.to_record() == {}


def test_a_truncated_archive_yields_what_it_holds(tmp_path: Path) -> None:
    file = tmp_path / (hour_file_name(T0) + ".gz")
    packed = gzip.compress(lines(*(f"k{i}" for i in range(5000))))
    file.write_bytes(packed[: len(packed) * 3 // 4])
    damage = JournalDamage()
    got = keys_of(list(read_records([file], damage=damage)))
    assert got and got == [f"k{i}" for i in range(len(got))]
    assert damage.to_record() == {"files_unreadable": 1}


@pytest.mark.timeout(60)  # the old writer's archiver opened the FIFO and hung the stop
async def test_the_writer_starts_and_stops_beside_damaged_files(damaged: Path) -> None:
    outside = damaged.parent / "elsewhere.jsonl"
    before = outside.read_bytes()
    journal = Journal(damaged.parent, INSTANCE, clock_ms=lambda: T0 + 8 * HOUR)
    await journal.start()
    journal.record("kv_changed", namespace="n", key="new", op="put")
    await journal.stop()
    assert outside.read_bytes() == before  # a symlink's target is never touched
    for hour in (2, 3, 4):  # left as they are: not the journal's files
        path = damaged / hour_file_name(T0 + hour * HOUR)
        assert path.is_symlink() or path.is_fifo()
        assert not path.with_name(path.name + ".gz").exists()
    records = list(read_records(journal_files(damaged)))
    assert keys_of(records)[-1] == "new"
