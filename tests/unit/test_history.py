"""Time travel over local files (namesrv.history) and the block reader under it.

The reader (``journal.line_blocks``) is what ``complete_lines`` reads through, so its blocks
must hold exactly the lines that reader yields whatever the read sizes; time travel must read
only the hour files T needs, and say what it skipped of a damaged one.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.journals import ms as at
from pipeline.journals import registered, removed, snapshot, started, write_journal
from pynamesrv.namesrv import journal as journal_module
from pynamesrv.namesrv.history import (
    OutsideJournals,
    hour_files,
    parse_time,
    registries_at,
)
from pynamesrv.namesrv.journal import JournalDamage, complete_lines, hour_file_name, line_blocks
from pynamesrv.namesrv.timetravel import routes_of

A1, A2 = "10.0.0.1:10911", "10.0.0.2:10911"


def expected_lines(data: bytes, max_line: int) -> tuple[list[bytes], int]:
    """What a line reader yields of ``data``: complete lines of at most ``max_line`` bytes
    (newline included), and how many longer ones it skipped (a torn last line as long as
    the limit is one: it cannot be told from the start of a longer line)."""
    pieces = data.split(b"\n")
    complete = [p + b"\n" for p in pieces[:-1]]  # the last piece has no newline: torn
    too_long = sum(len(line) > max_line for line in complete) + (len(pieces[-1]) >= max_line)
    return [line for line in complete if len(line) <= max_line], too_long


@settings(max_examples=200, deadline=None)
@given(
    lengths=st.lists(st.integers(min_value=0, max_value=40), max_size=30),
    torn=st.integers(min_value=0, max_value=30),
    block=st.integers(min_value=1, max_value=50),
)
def test_blocks_hold_exactly_the_lines_a_line_reader_yields(
    tmp_path_factory: pytest.TempPathFactory, lengths: list[int], torn: int, block: int
) -> None:
    """Lines shorter, as long as and longer than the limit, cut anywhere by the reads."""
    max_line = 20
    data = b"".join(b"x" * n + b"\n" for n in lengths) + b"y" * torn
    file = tmp_path_factory.mktemp("blocks") / hour_file_name(at(0))
    file.write_bytes(data)
    lines, too_long = expected_lines(data, max_line)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(journal_module, "_BLOCK", block)
        damage = JournalDamage()
        blocks = list(line_blocks(file, damage, max_line=max_line))
        assert all(b.endswith(b"\n") for b in blocks)
        assert b"".join(blocks) == b"".join(lines)
        assert damage.lines_too_long == too_long
        # The line reader skips empty lines (the blocks keep them: offsets count them).
        assert list(complete_lines(file, max_line=max_line)) == [x for x in lines if x != b"\n"]


def journal_with_an_old_base(root: Path) -> None:
    """One instance: a snapshot in hour 0, a registration in hour 1, a removal in hour 3;
    a second instance with a snapshot in every hour."""
    write_journal(
        root,
        "a:1",
        [
            started(0),
            snapshot(1, {"T": [("bA", 4, 4, 6)]}, brokers=[("C", "bA", 0, A1)]),
            registered(3700, "C", "bB", A2, added={"U": (2, 2, 6)}),
            removed(11000, "C", "bA", A1, "expired", 10900),
        ],
    )
    write_journal(
        root,
        "b:1",
        [started(0)]
        + [
            snapshot(h * 3600 + 1, {"V": [("bA", 1, 1, 6)]}, brokers=[("C", "bA", 0, A1)])
            for h in range(4)
        ],
    )


def test_only_the_hour_files_t_needs_are_read(tmp_path: Path) -> None:
    """A base in the hour of T is found without reading older files (a damaged archive of
    hour 0 stays unread); a base three hours back is found by reading back to it."""
    journal_with_an_old_base(tmp_path)
    damaged = tmp_path / "b_1" / (hour_file_name(at(0)) + ".gz")
    damaged.write_bytes(b"\x1f\x8b\x08\x00 not an archive")  # taken for hour 0 of b:1
    files = hour_files([tmp_path])
    damage = JournalDamage()
    only_b = registries_at(files, at(3 * 3600 + 10), instance="b:1", damage=damage)
    assert set(routes_of(only_b["b:1"])) == {"V"}
    assert not damage, damage.summary()

    damage = JournalDamage()
    both = registries_at(files, at(3 * 3600 + 10), damage=damage)
    assert set(routes_of(both["a:1"])) == {"T", "U"}  # from hour 0's snapshot on
    assert not damage  # b:1 has its base in hour 3: its hour 0 is still unread
    after = registries_at(files, at(11000))
    assert set(routes_of(after["a:1"])) == {"U"}


def test_a_damaged_file_on_the_way_is_counted_and_skipped(tmp_path: Path) -> None:
    journal_with_an_old_base(tmp_path)
    (tmp_path / "a_1" / (hour_file_name(at(3600)) + ".gz")).write_bytes(b"\x1f\x8b junk")
    damage = JournalDamage()
    rebuilt = registries_at(
        hour_files([tmp_path]), at(3 * 3600 + 10), instance="a:1", damage=damage
    )
    assert set(routes_of(rebuilt["a:1"])) == {"T"}  # hour 1's registration was in it
    assert damage.files_unreadable == 1


def test_a_time_outside_the_journals_is_refused_with_their_range(tmp_path: Path) -> None:
    journal_with_an_old_base(tmp_path)
    with pytest.raises(OutsideJournals, match="is after the journals of a:1: they cover"):
        registries_at(hour_files([tmp_path]), at(4 * 3600), instance="a:1")
    assert registries_at(hour_files([tmp_path]), at(4 * 3600), instance="a:1", open_end=True)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1767225600000", 1_767_225_600_000), ("2026-01-01T01:00:00+01:00", 1_767_225_600_000)],
)
def test_times_are_epoch_ms_or_iso8601(text: str, expected: int) -> None:
    assert parse_time(text) == expected
    with pytest.raises(ValueError, match="not epoch ms or ISO-8601"):
        parse_time("yesterday")
