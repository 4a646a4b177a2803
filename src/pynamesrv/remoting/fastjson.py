"""The fastjson dialects Java RocketMQ speaks (spec/json-dialect.md), in one small module.

Two output dialects:

* **legacy** (fastjson default, "dialect A"): compact, object members in the order given
  (callers pass bean members alphabetically), integer map keys written bare (``{0:"a"}``,
  not RFC 8259 JSON), non-ASCII written raw, U+007F/U+2028/U+2029 escaped.
* **standard** ("dialect B", route answers to clients >= 4.9.4): integer keys quoted, every
  map sorted by key (integers numerically), every non-ASCII character and ``/`` escaped.

Both drop ``None`` members and map entries, as fastjson does. Input is parsed leniently:
RFC JSON plus bare integer object keys, which 5.x brokers send inside static-topic mappings.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

# A string literal (skipped as a whole) or a bare integer key after '{' or ','.
_BARE_KEY = re.compile(rb'"(?:[^"\\]|\\.)*"|([{,])\s*(-?\d+)\s*:', re.DOTALL)
_SHORT_ESCAPES = {"\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
# Characters each dialect writes as an escape (besides the quote and the backslash).
_LEGACY_ESCAPED = re.compile("[\x00-\x1f\x7f\u2028\u2029]")
_STANDARD_ESCAPED = re.compile("[\x00-\x1f\x7f-\U0010ffff]")


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """Parse JSON text that may use fastjson's bare integer keys (they come back as str)."""
    raw = data.encode() if isinstance(data, str) else bytes(data)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        quoted = _BARE_KEY.sub(_quote_key, raw)
        if quoted == raw:
            raise
        return orjson.loads(quoted)


def _quote_key(match: re.Match[bytes]) -> bytes:
    if match.group(1) is None:
        return match.group(0)
    return match.group(1) + b'"' + match.group(2) + b'":'


def _escape(match: re.Match[str]) -> str:
    char = match.group(0)
    short = _SHORT_ESCAPES.get(char)
    if short is not None:
        return short
    code = ord(char)
    if code > 0xFFFF:  # a UTF-16 surrogate pair, as Java strings hold it
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04X}\\u{0xDC00 + (code & 0x3FF):04X}"
    return f"\\u{code:04X}"


def legacy_str(value: str) -> str:
    """A string literal as fastjson's default serializer writes it (non-ASCII raw)."""
    out = value.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + _LEGACY_ESCAPED.sub(_escape, out) + '"'


def standard_str(value: str) -> str:
    """A string literal in the browser-compatible form: ASCII only, ``/`` escaped."""
    out = value.replace("\\", "\\\\").replace('"', '\\"').replace("/", "\\/")
    return '"' + _STANDARD_ESCAPED.sub(_escape, out) + '"'


def _scalar(value: Any) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    raise TypeError(f"cannot encode {type(value).__name__}")


def _encode(value: Any, standard: bool, parts: list[str]) -> None:
    if isinstance(value, str):
        parts.append(standard_str(value) if standard else legacy_str(value))
    elif isinstance(value, dict):
        items = [(k, v) for k, v in value.items() if v is not None]
        if standard:
            items.sort(key=_sort_key)
        parts.append("{")
        first = True
        for key, item in items:
            if not first:
                parts.append(",")
            first = False
            if isinstance(key, int):
                parts.append(f'"{key}":' if standard else f"{key}:")
            else:
                parts.append((standard_str(key) if standard else legacy_str(key)) + ":")
            _encode(item, standard, parts)
        parts.append("}")
    elif isinstance(value, (list, tuple, set, frozenset)):
        parts.append("[")
        first = True
        for item in value:
            if not first:
                parts.append(",")
            first = False
            _encode(item, standard, parts)
        parts.append("]")
    elif value is None:
        parts.append("null")
    else:
        parts.append(_scalar(value))


def _sort_key(item: tuple[Any, Any]) -> tuple[int, Any, Any]:
    key = item[0]
    return (0, key, "") if isinstance(key, int) else (1, 0, key)


def dumps(value: Any, *, standard: bool = False) -> bytes:
    """Encode plain data (dicts, lists, str, int, bool) in the legacy or standard dialect.

    Integer dict keys are the Java Long/Integer-keyed maps; string keys are String-keyed
    maps and bean members.
    """
    parts: list[str] = []
    _encode(value, standard, parts)
    return "".join(parts).encode()
