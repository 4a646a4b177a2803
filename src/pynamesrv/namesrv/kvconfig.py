"""The KV config store (KVConfigManager): namespace -> key -> value, persisted to kvConfigPath.

File format is Java's, ``{"configTable":{"<ns>":{"<k>":"<v>"}}}``, so a file written by a Java
name server loads here and the other way round.

A change is planned first (``plan_put`` / ``plan_delete``: validated, the new table and its
file bytes computed, nothing live yet), written by the caller with ``filestore.atomic_write``
off the event loop, and only then applied (``apply``): a client never sees, and the journal
never records, a change that is not on disk. Everything a remote client can put is bounded:
names (no path separators or control characters, short), values, and the whole file.

A namespace's GET_KVLIST_BY_NAMESPACE body is encoded once and kept until the namespace
changes (``namespace_body``): up to the whole file's 16 MB, it is the largest answer a
client can ask for again and again.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final

from pynamesrv.namesrv.events import Event, KvChanged
from pynamesrv.namesrv.filestore import read_bytes
from pynamesrv.remoting import fastjson

ORDER_TOPIC_CONFIG: Final = "ORDER_TOPIC_CONFIG"
# Longest namespace/key and value a KV request may carry: far above any real use (order
# confs are a few hundred bytes) and far below what could bloat the file and the log.
MAX_KV_NAME: Final = 256
MAX_KV_VALUE: Final = 64 * 1024
# The whole file: each change rewrites it (and fsyncs), so it must stay small.
MAX_KV_FILE_BYTES: Final = 16 * 1024 * 1024
_FORBIDDEN_NAME_CHARS: Final = frozenset("/\\\x00") | {chr(c) for c in range(0x20)}


class KvConfigError(ValueError):
    """The KV file exists but cannot be loaded; Java refuses to start in that case too."""


class KvRejected(ValueError):
    """A KV change that is not allowed; the message is the answer's remark."""


@dataclass(slots=True)
class KvChange:
    """A validated change: the table after it, the file bytes to write, the events."""

    table: dict[str, dict[str, str]]
    file_bytes: bytes
    events: list[Event]


class KvConfigManager:
    def __init__(self) -> None:
        self.table: dict[str, dict[str, str]] = {}
        # Encoded ``{"table": ...}`` bodies by namespace, each with the entries it encodes: a
        # change gives its namespace a new entries dict (the others keep theirs), so an
        # entry is current while it holds the very dict the table holds.
        self._bodies: dict[str, tuple[dict[str, str], bytes]] = {}

    def load(self, path: Path) -> None:
        """Load at start: missing or empty file (or literal null) means an empty store."""
        data = read_bytes(path)
        if data is None or not data.strip():
            return
        try:
            obj = fastjson.loads(data)
        except ValueError as exc:
            raise KvConfigError(f"{path}: not JSON: {exc}") from exc
        if obj is None:
            return
        table = obj.get("configTable") if isinstance(obj, dict) else None
        if not isinstance(table, dict):
            raise KvConfigError(f"{path}: no configTable object")
        for namespace, entries in table.items():
            if not isinstance(entries, dict):
                raise KvConfigError(f"{path}: namespace {namespace!r} is not an object")
            self.table[str(namespace)] = {
                str(k): str(v) for k, v in entries.items() if v is not None
            }

    def snapshot_bytes(self) -> bytes:
        return _file_bytes(self.table)

    # ------------------------------------------------------------------ changes

    def plan_put(self, namespace: str | None, key: str | None, value: str | None) -> KvChange:
        """PUT_KV_CONFIG. A null value behaves as absent (fastjson drops null map values)."""
        if namespace is None or key is None:
            raise KvRejected("namespace or key is null")
        _check_name(namespace, "namespace")
        _check_name(key, "key")
        if value is not None and len(value) > MAX_KV_VALUE:
            raise KvRejected(f"illegal value: longer than {MAX_KV_VALUE} characters")
        entries = dict(self.table.get(namespace, {}))
        if value is None:
            entries.pop(key, None)
        else:
            entries[key] = value
        return self._plan(namespace, entries, KvChanged(namespace=namespace, key=key, op="put"))

    def plan_delete(self, namespace: str | None, key: str | None) -> KvChange | None:
        """DELETE_KV_CONFIG, or None when there is nothing to delete. The namespace is kept
        even when it becomes empty, like Java."""
        if namespace is None or key is None:
            return None
        entries = self.table.get(namespace)
        if entries is None or key not in entries:
            return None
        left = {k: v for k, v in entries.items() if k != key}
        return self._plan(namespace, left, KvChanged(namespace=namespace, key=key, op="delete"))

    def _plan(self, namespace: str, entries: dict[str, str], event: KvChanged) -> KvChange:
        table = {**self.table, namespace: entries}
        data = _file_bytes(table)
        if len(data) > MAX_KV_FILE_BYTES:
            raise KvRejected(f"illegal change: the KV store would exceed {MAX_KV_FILE_BYTES} bytes")
        return KvChange(table, data, [event])

    def apply(self, change: KvChange) -> list[Event]:
        """Make a planned change live (after its file write succeeded)."""
        self.table = change.table
        # The changed namespace's body goes (its entries are a new dict); the others stay.
        self._bodies = {
            name: cached
            for name, cached in self._bodies.items()
            if change.table.get(name) is cached[0]
        }
        return change.events

    # ------------------------------------------------------------------ reads

    def get(self, namespace: str | None, key: str | None) -> str | None:
        if namespace is None or key is None:
            return None
        return self.table.get(namespace, {}).get(key)

    def namespace(self, namespace: str | None) -> dict[str, str] | None:
        return self.table.get(namespace) if namespace is not None else None

    def namespace_body(self, namespace: str | None) -> bytes | None:
        """``{"table": {key: value}}`` of ``namespace`` encoded (the body of
        GET_KVLIST_BY_NAMESPACE, and of a registration's order configs), or None when there
        is no such namespace. Encoded once per change of the namespace."""
        entries = self.table.get(namespace) if namespace is not None else None
        if entries is None or namespace is None:
            return None
        cached = self._bodies.get(namespace)
        if cached is not None and cached[0] is entries:
            return cached[1]
        body = fastjson.dumps({"table": entries})
        self._bodies[namespace] = (entries, body)
        return body


def _file_bytes(table: dict[str, dict[str, str]]) -> bytes:
    return fastjson.dumps({"configTable": table})


def _check_name(value: str, what: str) -> None:
    if len(value) > MAX_KV_NAME or _FORBIDDEN_NAME_CHARS.intersection(value):
        raise KvRejected(
            f"illegal {what}: at most {MAX_KV_NAME} characters, no path separators, "
            "NUL or control characters"
        )
