"""The JSON log line: fixed keys, extra fields where a call passes them, tracebacks as text."""

from __future__ import annotations

import json
import logging

from pynamesrv.cli.logs import JsonFormatter, iso_utc


def record(**kwargs: object) -> logging.LogRecord:
    base = logging.LogRecord(
        "pynamesrv.test", logging.WARNING, __file__, 1, "broker %s", ("a",), None
    )
    base.__dict__.update(kwargs)
    return base


def test_json_line_has_iso_time_level_logger_and_the_merged_message() -> None:
    line = JsonFormatter().format(record(created=1_795_071_600.5))
    assert json.loads(line) == {
        "ts": "2026-11-19T07:00:00.500Z",
        "level": "WARNING",
        "logger": "pynamesrv.test",
        "message": "broker a",
    }
    assert "\n" not in line


def test_extra_fields_are_added_and_values_that_are_not_json_become_text() -> None:
    line = JsonFormatter().format(record(broker="broker-a", topics=3, peer=("10.0.0.1", 5)))
    entry = json.loads(line)
    assert (entry["broker"], entry["topics"], entry["peer"]) == ("broker-a", 3, ["10.0.0.1", 5])
    line = JsonFormatter().format(record(when=object()))
    assert json.loads(line)["when"].startswith("<object object")


def test_an_exception_is_one_field_on_the_same_line() -> None:
    try:
        raise ValueError("bad value")
    except ValueError:
        import sys

        entry = json.loads(JsonFormatter().format(record(exc_info=sys.exc_info())))
    assert entry["exception"].startswith("Traceback (most recent call last):")
    assert entry["exception"].endswith("ValueError: bad value")


def test_iso_utc_keeps_milliseconds() -> None:
    assert iso_utc(0.001) == "1970-01-01T00:00:00.001Z"
