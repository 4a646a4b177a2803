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

import json
import re
from typing import Any

import orjson

# A string literal (skipped as a whole) or a bare integer key after '{' or ','.
_BARE_KEY = re.compile(rb'"(?:[^"\\]|\\.)*"|([{,])\s*(-?\d+)\s*:', re.DOTALL)
_LOWER_U_ESCAPE = re.compile(r"\\u([0-9a-f]{4})")
_LEGACY_EXTRA = {"\x7f": "\\u007F", "\u2028": "\\u2028", "\u2029": "\\u2029"}
_LEGACY_EXTRA_RE = re.compile("[\x7f\u2028\u2029]")


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


def _upper_hex(text: str) -> str:
    return _LOWER_U_ESCAPE.sub(lambda m: "\\u" + m.group(1).upper(), text)


def legacy_str(value: str) -> str:
    """A string literal as fastjson's default serializer writes it."""
    out = orjson.dumps(value).decode()
    if "\\u" in out:
        out = _upper_hex(out)
    if _LEGACY_EXTRA_RE.search(out):
        out = _LEGACY_EXTRA_RE.sub(lambda m: _LEGACY_EXTRA[m.group(0)], out)
    return out


def standard_str(value: str) -> str:
    """A string literal in the browser-compatible form: ASCII only, ``/`` escaped."""
    out = json.dumps(value, ensure_ascii=True)
    if "\\u" in out:
        out = _upper_hex(out)
    if "/" in out:
        out = out.replace("/", "\\/")
    if "\x7f" in out:
        out = out.replace("\x7f", "\\u007F")
    return out


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


def _sort_key(item: tuple[Any, Any]) -> tuple[int, Any]:
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
