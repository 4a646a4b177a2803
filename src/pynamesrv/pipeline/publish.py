"""Publishing without renames: write-once versions, one write-once manifest per run.

Every output a run writes goes to a directory named after the run, which nothing else ever
writes: ``<out>/<table>/day=YYYY-MM-DD/version=<run>/`` for a table partitioned by day,
``<out>/<table>/version=<run>/`` for the others (state tables under ``_state/`` alike), the event
store's ``_store/day=/instance=/hour=/version=<run>/`` and ``report-<run>.html``. Nothing a reader
may be looking at is modified or moved, so no step needs an atomic rename (object stores copy;
a Spark Connect client cannot rename at all).

The commit point is ``<out>/_manifests/<run>.json``, written once when everything else is
written: per table its schema and which run's directory holds each day (a day the run did
not recompute stays with the run that wrote it), per journal file the run that stored it, and
``complete: true``. Run ids sort by start time; a reader takes the newest manifest that parses
and is complete (``current``), so a run that fails, or dies while writing its manifest,
leaves the previous one current.

Retention (``retain``, at the end of a successful run): the newest ``keep`` complete
manifests stay, with everything they name, so a reader that took an older one finishes
reading. Whatever else belongs to a run older than the current one (superseded versions,
manifests beyond ``keep``, a failed run's leftovers) is removed. One run at a time per output
directory: a run started before the current one is over.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, Final

import orjson

from pynamesrv.pipeline.files import Files
from pynamesrv.pipeline.paths import join_path

MANIFESTS: Final = "_manifests"
KEEP: Final = 3  # complete manifests kept (with what they name): the current one and two more
STORE: Final = "_store"
STORE_DEPTH: Final = 4  # day=/instance=/hour=/version=
REPORT_PREFIX: Final = "report-"
_VERSION: Final = re.compile(r"^version=(.+)$")
_MANIFEST_FILE: Final = re.compile(r"^(.+)\.json$")
_REPORT_FILE: Final = re.compile(rf"^{REPORT_PREFIX}(.+)\.html$")


def new_run_id() -> str:
    """Sortable by start time (to the microsecond), unique across runs."""
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ") + "-" + uuid.uuid4().hex[:8]


def version(relative: str, run_id: str, day: str | None = None) -> str:
    """Where ``run_id`` writes the table ``relative`` (its ``day`` when partitioned)."""
    where = relative if day is None else f"{relative}/day={day}"
    return f"{where}/version={run_id}"


def report_name(run_id: str) -> str:
    return f"{REPORT_PREFIX}{run_id}.html"


def table_versions(entry: dict[str, Any]) -> list[str]:
    """The version directories (relative to the table) of one manifest ``tables`` entry."""
    if entry.get("partitioned"):
        return [f"day={day}/version={run}" for day, run in sorted(entry["days"].items())]
    return [f"version={entry['version']}"] if entry.get("version") else []


def write_manifest(files: Files, out: str, run_id: str, manifest: dict[str, Any]) -> None:
    """The commit point: the run's manifest, written once, marked complete."""
    body = {**manifest, "run": run_id, "complete": True}
    text = orjson.dumps(body, option=orjson.OPT_SORT_KEYS).decode("utf-8")
    files.write_text(join_path(join_path(out, MANIFESTS), f"{run_id}.json"), text)


def _manifests(files: Files, out: str) -> Iterator[tuple[str, dict[str, Any] | None]]:
    """(run id, manifest or None when torn or incomplete), newest first."""
    base = join_path(out, MANIFESTS)
    for name in reversed(files.children(base)):
        match = _MANIFEST_FILE.match(name)
        if match is None:
            continue
        text = files.read_text(join_path(base, name))
        try:
            manifest = orjson.loads(text) if text else None
        except orjson.JSONDecodeError:
            manifest = None
        ok = isinstance(manifest, dict) and manifest.get("complete") is True
        yield match.group(1), manifest if ok else None


def current(files: Files, out: str) -> dict[str, Any] | None:
    """The newest complete manifest (None before the first run)."""
    return next((m for _, m in _manifests(files, out) if m is not None), None)


def kept(files: Files, out: str, keep: int = KEEP) -> list[dict[str, Any]]:
    """The newest ``keep`` complete manifests, newest first."""
    found: list[dict[str, Any]] = []
    for _, manifest in _manifests(files, out):
        if manifest is not None:
            found.append(manifest)
            if len(found) == keep:
                break
    return found


def retain(files: Files, out: str, run_id: str, keep: int = KEEP) -> list[str]:
    """Remove what no kept manifest names and a run older than ``run_id`` wrote; returns the
    removed paths (relative to ``out``)."""
    if keep < 1:
        raise ValueError("retention must keep at least the current manifest")
    manifests = kept(files, out, keep)
    named = {m["run"] for m in manifests}
    used: set[str] = set()
    tables: set[str] = set()
    for m in manifests:
        used.add(m.get("report") or "")
        for relative, entry in (m.get("tables") or {}).items():
            tables.add(relative)
            used.update(join_path(relative, v) for v in table_versions(entry))
        for stats in (m.get("files") or {}).values():
            if stats.get("stored"):
                used.add(join_path(STORE, stats["stored"]))

    def old(run: str) -> bool:
        return run < run_id and run not in named

    removed = []
    for name in files.children(join_path(out, MANIFESTS)):
        match = _MANIFEST_FILE.match(name)
        if match and old(match.group(1)):
            removed.append(f"{MANIFESTS}/{name}")
    for name in files.children(out):
        match = _REPORT_FILE.match(name)
        if match and old(match.group(1)) and name not in used:
            removed.append(name)
    for relative in sorted(tables):
        for depth in (1, 2):
            for leaf in files.directories(join_path(out, relative), depth):
                match = _VERSION.match(leaf.rpartition("/")[2])
                path = join_path(relative, leaf)
                if match and old(match.group(1)) and path not in used:
                    removed.append(path)
    for leaf in files.directories(join_path(out, STORE), STORE_DEPTH):
        match = _VERSION.match(leaf.rpartition("/")[2])
        path = join_path(STORE, leaf)
        if match and old(match.group(1)) and path not in used:
            removed.append(path)
    for path in removed:
        files.delete(join_path(out, path))
    for parent in sorted({p.rpartition("/")[0] for p in removed}, reverse=True):
        _drop_empty(files, out, parent)
    return removed


def _drop_empty(files: Files, out: str, relative: str) -> None:
    """Remove ``relative`` and its parents up to the table while they hold nothing (a day
    whose every version went): partition directories that a plain listing would show."""
    while "=" in relative.rpartition("/")[2] and not files.children(join_path(out, relative)):
        files.delete(join_path(out, relative))
        relative = relative.rpartition("/")[0]
