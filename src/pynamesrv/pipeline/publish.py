"""Publishing a run's outputs together: staged, committed by one file, then swapped in.

A run writes every table partition, state table, report and manifest it changes under
``<out>/_staging/<run>/`` first; nothing a reader sees changes while Spark works, so a failed
run leaves the published tables exactly as they were. When everything is staged, one file,
``_COMMIT.json``, lists the renames and removals that publish it, and is written atomically:
that is the commit point. The renames then run (milliseconds on a local disk or HDFS); if the
process dies among them, the next run (or ``recover``) replays the list, which is idempotent,
before it does anything else. The manifest is the last rename: a reader that wants a
consistent view while a publish may be under way reads the run id in ``_manifest.json``
before and after reading the tables.

Paths in the commit file are relative to ``<out>``, so the output directory can be moved.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Final

import orjson

from pynamesrv.pipeline.fs import HadoopFS
from pynamesrv.pipeline.paths import join_path

MANIFEST: Final = "_manifest.json"
STAGING: Final = "_staging"
COMMIT: Final = "_COMMIT.json"


def new_run_id() -> str:
    """Sortable by start time, unique across concurrent runs."""
    return time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()) + "-" + uuid.uuid4().hex[:8]


@dataclass
class Staging:
    """One run's staged outputs and the operations that will publish them."""

    fs: HadoopFS
    out: str
    run_id: str = field(default_factory=new_run_id)
    ops: list[tuple[str, ...]] = field(default_factory=list)

    @property
    def root(self) -> str:
        return join_path(join_path(self.out, STAGING), self.run_id)

    def path(self, relative: str) -> str:
        """Where to stage what will be published at ``<out>/<relative>``."""
        return join_path(self.root, relative)

    def replace(self, relative: str) -> None:
        """Publish the staged ``relative`` (file or directory) over the live one."""
        self.ops.append(("move", f"{STAGING}/{self.run_id}/{relative}", relative))

    def remove(self, relative: str) -> None:
        """Remove the live ``relative`` (a partition that has no rows any more)."""
        self.ops.append(("delete", relative))

    def commit(self, manifest: dict[str, Any]) -> None:
        """Stage the manifest, write the commit file (the commit point), publish, clean up."""
        self.fs.write_text(self.path(MANIFEST), _dumps(manifest))
        self.replace(MANIFEST)
        self.fs.write_text(self.path(COMMIT), _dumps({"ops": [list(op) for op in self.ops]}))
        apply(self.fs, self.out, self.ops)
        self.fs.delete(self.root)

    def abandon(self) -> None:
        """Forget everything staged (the run failed before its commit point)."""
        self.fs.delete(self.root)


def apply(fs: HadoopFS, out: str, ops: list[tuple[str, ...]] | list[list[str]]) -> None:
    """Run publish operations; safe to run again after a partial run (a move whose source is
    gone already happened)."""
    for op in ops:
        if op[0] == "delete":
            fs.delete(join_path(out, op[1]))
        elif op[0] == "move":
            source = join_path(out, op[1])
            if fs.exists(source):
                fs.move(source, join_path(out, op[2]))
        else:
            raise ValueError(f"unknown publish operation {op!r}")


def recover(fs: HadoopFS, out: str) -> list[str]:
    """Finish the publishes that reached their commit point; drop the staging of runs that
    did not. Returns the run ids that were finished."""
    finished = []
    base = join_path(out, STAGING)
    for run_id in fs.children(base):
        root = join_path(base, run_id)
        text = fs.read_text(join_path(root, COMMIT))
        if text is not None:
            apply(fs, out, orjson.loads(text)["ops"])
            finished.append(run_id)
        fs.delete(root)
    return finished


def read_manifest(fs: HadoopFS, out: str) -> dict[str, Any] | None:
    text = fs.read_text(join_path(out, MANIFEST))
    return None if text is None else orjson.loads(text)


def _dumps(value: Any) -> str:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode("utf-8")
