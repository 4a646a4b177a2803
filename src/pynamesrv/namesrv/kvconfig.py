"""The KV config store (KVConfigManager): namespace -> key -> value, persisted to kvConfigPath.

File format is Java's, ``{"configTable":{"<ns>":{"<k>":"<v>"}}}``, so a file written by a Java
name server loads here and the other way round. The table changes in memory at once (a read
right after sees it); ``snapshot_bytes`` gives what to persist, and the caller writes it with
``filestore.atomic_write`` off the event loop before acknowledging the request.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from pynamesrv.namesrv.events import Event, KvChanged
from pynamesrv.namesrv.filestore import read_bytes
from pynamesrv.remoting import fastjson

ORDER_TOPIC_CONFIG: Final = "ORDER_TOPIC_CONFIG"


class KvConfigError(ValueError):
    """The KV file exists but cannot be loaded; Java refuses to start in that case too."""


class KvConfigManager:
    def __init__(self) -> None:
        self.table: dict[str, dict[str, str]] = {}

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
        return fastjson.dumps({"configTable": self.table})

    def put(self, namespace: str, key: str, value: str | None) -> list[Event]:
        """PUT_KV_CONFIG. A null value behaves as absent (fastjson drops null map values)."""
        entries = self.table.setdefault(namespace, {})
        if value is None:
            entries.pop(key, None)
        else:
            entries[key] = value
        return [KvChanged(namespace=namespace, key=key, op="put")]

    def get(self, namespace: str | None, key: str | None) -> str | None:
        if namespace is None or key is None:
            return None
        return self.table.get(namespace, {}).get(key)

    def delete(self, namespace: str | None, key: str | None) -> list[Event]:
        """DELETE_KV_CONFIG: the namespace is kept even when it becomes empty, like Java."""
        entries = self.table.get(namespace) if namespace is not None else None
        if entries is None or key is None or key not in entries:
            return []
        del entries[key]
        return [KvChanged(namespace=namespace, key=key, op="delete")]  # type: ignore[arg-type]

    def namespace(self, namespace: str | None) -> dict[str, str] | None:
        return self.table.get(namespace) if namespace is not None else None
