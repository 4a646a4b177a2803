"""How the journal's worker cuts a batch of lines into writes: a long line (a registration
of 100,000 topics, a snapshot: 10-30 MB) is written as it is, never copied into a join."""

from __future__ import annotations

from pynamesrv.namesrv.journal import LONG_LINE_BYTES, _runs, encode_line


def test_long_lines_are_written_alone_and_uncopied() -> None:
    long = b"x" * LONG_LINE_BYTES + b"\n"
    lines = [b"a\n", b"b\n", long, b"c\n", long, long]
    runs = list(_runs(lines))
    assert [(first, data, count) for first, data, count in runs] == [
        (0, b"a\nb\n", 2),
        (2, long, 1),
        (3, b"c\n", 1),
        (4, long, 1),
        (5, long, 1),
    ]
    assert all(data is long for _, data, _ in runs if len(data) > LONG_LINE_BYTES)
    assert b"".join(data for _, data, _ in runs) == b"".join(lines)


def test_short_lines_make_one_write() -> None:
    assert list(_runs([b"a\n", b"b\n"])) == [(0, b"a\nb\n", 2)]
    assert list(_runs([])) == []


def test_a_line_ends_with_one_newline_after_its_fields() -> None:
    line = encode_line(5, "ns:1", 7, "snapshot", {"topics": {"T": [1]}})
    assert line == b'{"ts":5,"ns":"ns:1","seq":7,"type":"snapshot","topics":{"T":[1]}}\n'
