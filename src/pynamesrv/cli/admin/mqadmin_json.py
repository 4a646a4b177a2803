"""A topic route printed as mqadmin prints it: ``JSON.toJSONString(topicRouteData, true)``.

Scripts written against mqadmin parse ``topicRoute``'s output, so it is reproduced byte for
byte (fastjson 1.2.x's pretty format, which RocketMQ 4.9.x and 5.x both use):

* one tab per level; beans (TopicRouteData, BrokerData, QueueData) list their members in
  name order, one per line, ``"name":value`` without a space; null members are left out;
* a list puts every element on its own line (``[]`` when empty);
* a map keyed by strings (``filterServerTable``) looks like a bean, ``{}`` when empty;
* a map keyed by numbers (``brokerAddrs``, ``HashMap<Long, String>``) writes its bare keys
  on the opening line, ``{0:"host:port",1:"host:port"``, and only the closing brace on a
  line of its own: fastjson starts a new line before a string key only;
* maps are not sorted (``SortField`` sorts bean members, not maps): mqadmin parsed them into
  ``java.util.HashMap``s, so their entries come out in Java's hash-bucket order, which is
  modelled here (small broker ids come out ascending);
* strings are escaped as fastjson's default writer escapes them (non-ASCII written as is).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Final

from pynamesrv.remoting.fastjson import legacy_str

# Members that are Java maps, by what their keys are; any other object is a bean.
_NUMBER_KEYED: Final = frozenset({"brokerAddrs", "currIdMap"})
_STRING_KEYED: Final = frozenset({"filterServerTable", "topicQueueMappingByBroker"})
_INDENT: Final = "\t"
_HASHMAP_CAPACITY: Final = 16
_HASHMAP_LOAD: Final = 0.75


def route_text(route: dict[str, Any]) -> str:
    """The route as mqadmin's ``topicRoute`` prints it (without the final newline)."""
    parts: list[str] = []
    _bean(route, 0, parts)
    return "".join(parts)


def _newline(level: int, parts: list[str]) -> None:
    parts.append("\n" + _INDENT * level)


def _value(name: str | None, value: Any, level: int, parts: list[str]) -> None:
    if isinstance(value, dict):
        if name in _NUMBER_KEYED:
            _number_map(value, level, parts)
        elif name in _STRING_KEYED:
            _string_map(value, level, parts)
        else:
            _bean(value, level, parts)
    elif isinstance(value, list):
        _list(value, level, parts)
    elif isinstance(value, str):
        parts.append(legacy_str(value))
    elif value is True or value is False:
        parts.append("true" if value else "false")
    elif value is None:
        parts.append("null")
    else:
        parts.append(str(value))


def _bean(bean: dict[str, Any], level: int, parts: list[str]) -> None:
    members = sorted((k, v) for k, v in bean.items() if v is not None)
    parts.append("{")
    _newline(level + 1, parts)
    for index, (name, value) in enumerate(members):
        if index:
            parts.append(",")
            _newline(level + 1, parts)
        parts.append(legacy_str(name) + ":")
        _value(name, value, level + 1, parts)
    _newline(level, parts)
    parts.append("}")


def _list(items: list[Any], level: int, parts: list[str]) -> None:
    if not items:
        parts.append("[]")
        return
    parts.append("[")
    for index, item in enumerate(items):
        if index:
            parts.append(",")
        _newline(level + 1, parts)
        _value(None, item, level + 1, parts)
    _newline(level, parts)
    parts.append("]")


def _string_map(table: dict[str, Any], level: int, parts: list[str]) -> None:
    parts.append("{")
    first = True
    for key in hashmap_order(table, _string_hash):
        if table[key] is None:
            continue
        if not first:
            parts.append(",")
        first = False
        _newline(level + 1, parts)
        parts.append(legacy_str(key) + ":")
        _value(None, table[key], level + 1, parts)
    if table:
        _newline(level, parts)
    parts.append("}")


def _number_map(table: dict[str, Any], level: int, parts: list[str]) -> None:
    numbered = {_as_long(k): v for k, v in table.items()}
    parts.append("{")
    first = True
    for key in hashmap_order(numbered, _long_hash):
        if numbered[key] is None:
            continue
        if not first:
            parts.append(",")
        first = False
        parts.append(f"{key}:")
        _value(None, numbered[key], level + 1, parts)
    if table:
        _newline(level, parts)
    parts.append("}")


def _as_long(key: Any) -> Any:
    try:
        return int(key)
    except (TypeError, ValueError):
        return key  # not a number after all: written as fastjson writes the key it got


def _long_hash(key: Any) -> int:
    if not isinstance(key, int):
        return _string_hash(str(key))
    value = key & 0xFFFFFFFFFFFFFFFF
    return (value ^ (value >> 32)) & 0xFFFFFFFF


def _string_hash(key: Any) -> int:
    """``String.hashCode``: over UTF-16 code units, 32-bit wrap-around."""
    h = 0
    data = str(key).encode("utf-16-be", "surrogatepass")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h


def hashmap_order(keys: Iterable[Any], hash_of: Callable[[Any], int]) -> list[Any]:
    """The iteration order of a ``java.util.HashMap`` filled with ``keys`` in this order:
    buckets ascending, insertion order within a bucket (resizes keep it)."""
    ordered = list(keys)
    capacity = _HASHMAP_CAPACITY
    while len(ordered) > capacity * _HASHMAP_LOAD:
        capacity *= 2

    def bucket(key: Any) -> int:
        h = hash_of(key)
        return (h ^ (h >> 16)) & (capacity - 1)

    placed = sorted(enumerate(ordered), key=lambda item: (bucket(item[1]), item[0]))
    return [key for _, key in placed]
