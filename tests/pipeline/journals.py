"""Hand-made journals for the pipeline tests, written exactly as the real writer lays them out.

Times are seconds after ``T0`` (2026-01-01 00:00 UTC) so that expected rows can be computed
by hand; ``seq`` counts lines per process and restarts at each ``server_started``, as the
writer's counter does.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from datetime import date
from pathlib import Path
from typing import Any

import orjson

from pynamesrv.namesrv.journal import hour_file_name, instance_dir_name

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def ms(seconds: float) -> int:
    """Epoch ms of ``seconds`` after T0."""
    return T0 + round(seconds * 1000)


def write_journal(root: Path, ns: str, events: Iterable[dict[str, Any]]) -> list[Path]:
    """Write ``events`` (each with ``t`` in seconds after T0) as ``ns``'s hour files."""
    directory = root / instance_dir_name(ns)
    directory.mkdir(parents=True, exist_ok=True)
    seq = 0
    by_file: dict[Path, list[bytes]] = {}
    for event in events:
        record = dict(event)
        ts = ms(record.pop("t"))
        if record["type"] == "server_started":
            seq = 0
        seq += 1
        line = orjson.dumps({"ts": ts, "ns": ns, "seq": seq, **record}) + b"\n"
        by_file.setdefault(directory / hour_file_name(ts), []).append(line)
    for path, lines in by_file.items():
        with path.open("ab") as handle:
            handle.write(b"".join(lines))
    return sorted(by_file)


# ----------------------------------------------------------------------------- events


def started(t: float) -> dict[str, Any]:
    return {"t": t, "type": "server_started", "version": "test", "config": {}}


def stopped(t: float) -> dict[str, Any]:
    return {"t": t, "type": "server_stopped", "version": "test", "config": {}}


def snapshot(
    t: float,
    topics: dict[str, list[tuple[str, int, int, int]]] | None = None,
    brokers: Sequence[tuple[str, str, int, str]] = (),
) -> dict[str, Any]:
    return {
        "t": t,
        "type": "snapshot",
        "brokers": [
            {
                "cluster": c,
                "broker_name": n,
                "broker_id": i,
                "broker_addr": a,
                "last_heartbeat_ts": ms(t),
            }
            for c, n, i, a in brokers
        ],
        "topics": {
            topic: [{"broker_name": b, "read": r, "write": w, "perm": p} for b, r, w, p in queues]
            for topic, queues in (topics or {}).items()
        },
    }


def registered(
    t: float,
    cluster: str,
    name: str,
    addr: str,
    *,
    first: bool = True,
    broker_id: int = 0,
    added: dict[str, tuple[int, int, int]] | None = None,
    changed: dict[str, tuple[int, int, int]] | None = None,
    recovered: bool = False,
    timeout_ms: int = 120_000,
) -> dict[str, Any]:
    added, changed = added or {}, changed or {}
    return {
        "t": t,
        "type": "broker_registered",
        "cluster": cluster,
        "broker_name": name,
        "broker_id": broker_id,
        "broker_addr": addr,
        "ha_addr": None,
        "first": first,
        "data_version": {"counter": 0, "timestamp": 0},
        "topics_added": list(added),
        "topics_removed": [],
        "topics_changed": list(changed),
        "topic_count": len(added) + len(changed),
        "topic_configs": {
            topic: {"read": r, "write": w, "perm": p}
            for topic, (r, w, p) in {**added, **changed}.items()
        },
        "timeout_ms": timeout_ms,
        "recovered": recovered,
    }


def warm_started(t: float, brokers: int) -> dict[str, Any]:
    """A ``server_started`` of a run that recovered ``brokers`` broker addresses."""
    loaded = {"from_ts": ms(t), "snapshot_ts": None, "events": 0, "brokers": brokers,
              "topics": 0, "expired_on_load": 0, "load_ms": 1}  # fmt: skip
    return {**started(t), "recovered": loaded}


def broker_recovered(
    t: float,
    cluster: str,
    name: str,
    addr: str,
    last_heartbeat: float,
    broker_id: int = 0,
    timeout_ms: int = 120_000,
) -> dict[str, Any]:
    """A warm restart's provisional broker (one line per broker after server_started)."""
    return {
        "t": t,
        "type": "broker_recovered",
        "cluster": cluster,
        "broker_name": name,
        "broker_id": broker_id,
        "broker_addr": addr,
        "last_heartbeat_ts": ms(last_heartbeat),
        "timeout_ms": timeout_ms,
    }


def heartbeat(t: float, cluster: str, name: str, addr: str, broker_id: int = 0) -> dict[str, Any]:
    return {
        "t": t,
        "type": "broker_heartbeat",
        "cluster": cluster,
        "broker_name": name,
        "broker_id": broker_id,
        "broker_addr": addr,
        "data_version": {"counter": 0, "timestamp": 0},
    }


def removed(
    t: float,
    cluster: str,
    name: str,
    addr: str,
    reason: str,
    last_heartbeat: float | None,
    broker_id: int = 0,
    group_gone: bool | None = None,
) -> dict[str, Any]:
    """``group_gone`` None: the older line without the field (topic_removed lines follow)."""
    line = {
        "t": t,
        "type": "broker_removed",
        "cluster": cluster,
        "broker_name": name,
        "broker_id": broker_id,
        "broker_addr": addr,
        "reason": reason,
        "last_heartbeat_ts": None if last_heartbeat is None else ms(last_heartbeat),
    }
    if group_gone is not None:
        line["group_gone"] = group_gone
    return line


def topic_removed(t: float, topic: str, reason: str = "no_broker") -> dict[str, Any]:
    return {"t": t, "type": "topic_removed", "topic": topic, "reason": reason}


def perm_changed(t: float, name: str, op: str, count: int = 1) -> dict[str, Any]:
    return {"t": t, "type": "perm_changed", "broker_name": name, "op": op, "topic_count": count}


def route_queries(t: float, counts: dict[str, int], window_s: float = 60) -> dict[str, Any]:
    return {
        "t": t,
        "type": "route_queries",
        "window_ms": round(window_s * 1000),
        "counts": counts,
        "misses": {},
    }


# ----------------------------------------------------------------------------- comparison


def _normal(value: Any) -> Any:
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, list | tuple):
        return tuple(_normal(v) for v in value)
    return value


def _sort_key(row: tuple[Any, ...]) -> tuple[Any, ...]:
    def one(value: Any) -> tuple[int, Any]:
        if value is None:
            return (0, 0)
        if isinstance(value, bool):
            return (1, int(value))
        if isinstance(value, int | float):
            return (2, round(float(value), 4))
        if isinstance(value, tuple):
            return (3, tuple(one(v) for v in value))
        return (4, str(value))

    return tuple(one(v) for v in row)


def as_tuples(rows: Iterable[Any], columns: Sequence[str]) -> list[tuple[Any, ...]]:
    """Spark Rows or dicts as tuples in ``columns`` order (dates as ISO strings)."""
    out = []
    for row in rows:
        data = row if isinstance(row, dict) else row.asDict(recursive=True)
        out.append(tuple(_normal(data[c]) for c in columns))
    return out


def _equal(a: Any, b: Any, tolerance: float) -> bool:
    if a is None or b is None:
        return a is b
    if isinstance(a, float) or isinstance(b, float):
        if isinstance(a, bool) or isinstance(b, bool):
            return a == b
        return math.isclose(float(a), float(b), rel_tol=0.0, abs_tol=tolerance)
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_equal(x, y, tolerance) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def _exact_part(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """The row with doubles blanked: rows can only match within the same exact part."""
    return tuple(
        None if isinstance(v, float) else _exact_part(v) if isinstance(v, tuple) else v for v in row
    )


def assert_same_rows(
    actual: Iterable[Any],
    expected: Iterable[Any],
    columns: Sequence[str],
    tolerance: float = 1e-6,
) -> None:
    """Equal as multisets of tuples; doubles within ``tolerance``."""
    got = as_tuples(actual, columns)
    want = as_tuples(expected, columns)
    buckets: dict[tuple[Any, ...], list[tuple[Any, ...]]] = {}
    for row in want:
        buckets.setdefault(_exact_part(row), []).append(row)
    extra = []
    for row in got:
        bucket = buckets.get(_exact_part(row), [])
        match = next((i for i, w in enumerate(bucket) if _equal(row, w, tolerance)), None)
        if match is None:
            extra.append(row)
        else:
            bucket.pop(match)
    missing = sorted((r for b in buckets.values() for r in b), key=_sort_key)
    extra.sort(key=_sort_key)
    assert not missing and not extra, (
        f"{len(got)} rows, {len(want)} expected\n"
        + "missing:\n  "
        + "\n  ".join(map(repr, missing[:20]))
        + "\nunexpected:\n  "
        + "\n  ".join(map(repr, extra[:20]))
    )
