"""``pynamesrv pipeline``: journal analytics (run), time travel (routes-at), synthetic data.

Spark is imported only inside the commands: ``pynamesrv serve`` must start without PySpark
installed (it is the ``pipeline`` extra).

A failure is one line: what went wrong (the innermost Java cause, not 128 lines of Py4J) and
the file holding the full Python and JVM trace.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import click
import orjson
from rich.console import Console

from pynamesrv.pipeline import TABLES

_EPOCH_MS = re.compile(r"^-?\d+$")


def parse_time(value: str) -> int:
    """Epoch milliseconds from ``1767225600000`` or ISO-8601 (``2026-01-01T00:00:00Z``,
    ``2026-01-01 00:00``, ``2026-01-01``); a time without a zone is UTC."""
    text = value.strip()
    if _EPOCH_MS.match(text):
        return int(text)
    try:
        moment = datetime.fromisoformat(text.replace("z", "Z"))
    except ValueError as exc:
        raise ValueError(f"not epoch ms or ISO-8601: {value!r}") from exc
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return round(moment.timestamp() * 1000)


class TimeParam(click.ParamType):
    name = "TIME"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            return parse_time(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


TIME = TimeParam()
JOURNAL_HELP = (
    "Journal file, directory or glob; any path Spark reads (hdfs://, s3a://). Repeatable."
)
MASTER_HELP = "Spark master (default: the spark-submit one, else local[*] embedded)."


SHARED_HELP = (
    "The --journal and --out paths are plain local paths that every Spark worker sees too "
    "(one machine, NFS); without it they are refused with a cluster master."
)


def _log_path() -> Path:
    directory = Path(os.environ.get("PYNAMESRV_LOG_DIR") or tempfile.gettempdir())
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    return directory / f"pynamesrv-pipeline-{stamp}-{os.getpid()}.log"


def _root_cause(exc: BaseException) -> str:
    """The innermost Java cause of a Spark / Py4J failure, else the exception's first line."""
    java = getattr(exc, "java_exception", None) or getattr(exc, "_origin", None)
    if java is not None:
        try:
            while java.getCause() is not None:
                java = java.getCause()
            text = str(java.toString())
        except Exception:  # the JVM is gone: fall back to the Python side
            text = str(exc)
    else:
        text = str(exc)
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    first = lines[0] if lines else type(exc).__name__
    return first if len(first) <= 400 else first[:397] + "..."


@contextmanager
def _spark_errors() -> Iterator[None]:
    """Everything the operator has to fix is one line; the full trace goes to a log file."""
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    from pynamesrv.pipeline.job import OutputLayoutError, SharedPathError
    from pynamesrv.pipeline.store import JournalError

    try:
        yield
    except (JournalError, SharedPathError, OutputLayoutError) as exc:
        raise click.ClickException(str(exc)) from exc
    except (PySparkException, Py4JError, OSError) as exc:
        log = _log_path()
        try:
            log.write_text(traceback.format_exc(), encoding="utf-8")
            where = f" (details: {log})"
        except OSError:
            where = ""
        raise click.ClickException(f"{_root_cause(exc)}{where}") from exc


def _quiet_pyspark_logging() -> None:
    """PySpark logs every failed query as a JSON line on stderr before raising it; the CLI
    reports failures itself (one line and a log file)."""
    logging.getLogger("DataFrameQueryContextLogger").disabled = True


def _check_shared(
    master: str | None, journals: tuple[str, ...], out: str, shared: bool, spark: Any = None
) -> None:
    """Refuse plain local paths with a cluster master (``job.check_shared``): before Spark
    starts when --master says so, and again with the master spark-submit chose. A plain
    path is always this machine's disk (the job's own file operations read it there)."""
    from pynamesrv.pipeline.job import check_shared

    if shared:
        return
    options = [("--out", out), *(("--journal", j) for j in journals)]
    if spark is None:
        if master is not None:
            check_shared(master, options, _scheme_of)
        return
    check_shared(spark.sparkContext.master, options, _scheme_of)


def _scheme_of(path: str) -> str:
    return path.split("://", 1)[0] if "://" in path else "file"


def _no_active_session() -> bool:
    """True when this command starts Spark itself (and so must stop it); an embedding caller
    (a notebook, the tests) keeps its session."""
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession() is None


# pyproject.toml's "pipeline" extra (a test keeps them equal): pynamesrv is not on PyPI, so
# `pip install pynamesrv[pipeline]` cannot work; this line works in any install.
PIPELINE_EXTRA = "pyspark[connect]>=3.5,<5"


def _require_pyspark() -> None:
    """Spark is the optional 'pipeline' extra: without it, one line says how to get it."""
    try:
        import pyspark  # noqa: F401
    except ImportError as exc:
        raise click.ClickException(
            f"PySpark is not installed: {sys.executable} -m pip install '{PIPELINE_EXTRA}' "
            "(the 'pipeline' extra; Spark also needs Java 17 on the PATH or in JAVA_HOME)"
        ) from exc


@click.group()
def pipeline() -> None:
    """Analyse name-server journals with Spark (PySpark, the 'pipeline' extra)."""


@pipeline.command()
@click.option("--journal", "journals", multiple=True, required=True, help=JOURNAL_HELP)
@click.option("--out", required=True, help="Output directory (Parquet tables, report.html).")
@click.option("--master", default=None, help=MASTER_HELP)
@click.option("--from", "from_ts", type=TIME, default=None, help="Keep events at or after T.")
@click.option("--to", "to_ts", type=TIME, default=None, help="Keep events before T.")
@click.option(
    "--heartbeat-interval",
    type=click.FloatRange(0, 3600, min_open=True),
    default=30.0,
    show_default=True,
    help="Seconds after a heartbeat from which a broker counts as stale.",
)
@click.option("--full", is_flag=True, help="Recompute every table from all ingested history.")
@click.option(
    "--keep",
    type=click.IntRange(1),
    default=3,
    show_default=True,
    help="Published runs kept for readers (manifests and what they name); older ones go.",
)
@click.option("--shared-path", is_flag=True, help=SHARED_HELP)
def run(
    journals: tuple[str, ...],
    out: str,
    master: str | None,
    from_ts: int | None,
    to_ts: int | None,
    heartbeat_interval: float,
    full: bool,
    keep: int,
    shared_path: bool,
) -> None:
    """Bring the six tables and report.html up to date with the journals.

    Only hour files that are new or changed since the last run are parsed, and only the days
    their data can change are recomputed; all outputs are published together.
    """
    _require_pyspark()
    from pynamesrv.pipeline.job import run_pipeline, spark_session

    _quiet_pyspark_logging()
    console = Console(stderr=True, highlight=False)
    if from_ts is not None and to_ts is not None and from_ts >= to_ts:
        raise click.BadParameter("--from must be before --to")
    with _spark_errors():
        _check_shared(master, journals, out, shared_path)
    owned = _no_active_session()
    with console.status("starting Spark…"), _spark_errors():
        spark = spark_session(master)
    console.print(f"[dim]Spark {spark.version} on {spark.sparkContext.master}[/dim]")

    def progress(stage: str, seconds: float, detail: str) -> None:
        console.print(f"[green]✓[/green] {stage:<22} {seconds:7.2f} s  {detail}")

    try:
        with console.status("running…"), _spark_errors():
            _check_shared(master, journals, out, shared_path, spark)
            result = run_pipeline(
                spark,
                list(journals),
                out,
                from_ts=from_ts,
                to_ts=to_ts,
                heartbeat_interval_s=heartbeat_interval,
                full=full,
                keep=keep,
                progress=progress,
            )
    finally:
        if owned:
            spark.stop()
    skipped = ""
    if result.malformed or result.invalid:
        skipped = (
            f"; skipped {result.malformed:,} malformed line(s) and {result.invalid:,} "
            "without ts/ns/type"
        )
    if result.nothing_new:
        console.print(
            f"[bold]nothing new[/bold]: {result.events:,} events from {result.instances} "
            f"instance(s) already in {out}{skipped}"
        )
        return
    since = (
        "all days"
        if result.start is None
        else datetime.fromtimestamp(result.start / 1000, UTC).strftime("from %Y-%m-%d")
    )
    console.print(
        f"[bold]done[/bold] in {result.seconds:.1f} s: {result.ingested:,} hour file(s) "
        f"parsed, {since} recomputed; {result.events:,} events from {result.instances} "
        f"instance(s) → {out}{skipped}"
    )
    click.echo(f"report: {result.report}")
    click.echo(f"tables: pynamesrv pipeline tables --out {out}")


@pipeline.command("routes-at")
@click.option("--journal", "journals", multiple=True, required=True, help=JOURNAL_HELP)
@click.option("--time", "at", type=TIME, required=True, help="Epoch ms or ISO-8601 (UTC).")
@click.option("--instance", default=None, help="Only this instance (its ns, host:port).")
@click.option("--topic", default=None, help="Only this topic's route.")
@click.option("--master", default=None, help=MASTER_HELP)
def routes_at_command(
    journals: tuple[str, ...],
    at: int,
    instance: str | None,
    topic: str | None,
    master: str | None,
) -> None:
    """Print the route table each instance held at --time, with digests, as JSON.

    Reads the hour files from the last snapshot at or before --time on. Compare a topic's
    digest with a live server's: pynamesrv admin -n HOST:PORT topicRoute -t TOPIC --digest.
    """
    _require_pyspark()
    from pynamesrv.pipeline.job import spark_session
    from pynamesrv.pipeline.timetravel import describe, routes_at

    _quiet_pyspark_logging()
    owned = _no_active_session()
    with _spark_errors():
        spark = spark_session(master, app_name="pynamesrv-routes-at")
    try:
        with _spark_errors():
            routes = routes_at(spark, list(journals), at, instance=instance)
    finally:
        if owned:
            spark.stop()
    if instance is not None and instance not in routes:
        click.echo(f"no journal lines of {instance} at or before {at}", err=True)
        sys.exit(1)
    answer = describe(routes, at, topic)
    if topic is not None and not any(entry["topics"] for entry in answer.values()):
        click.echo(f"no route of {topic} at {at}", err=True)
        sys.exit(1)
    sys.stdout.buffer.write(orjson.dumps(answer, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
    sys.stdout.buffer.write(b"\n")


@pipeline.command()
@click.option("--out", required=True, help="The output directory of `pipeline run`.")
@click.option("--table", default=None, type=click.Choice(TABLES), help="Only this table.")
@click.option("--json", "as_json", is_flag=True, help="Tables, base paths and paths as JSON.")
def tables(out: str, table: str | None, as_json: bool) -> None:
    """Print the paths of the current version of the tables, one per line.

    Read them with spark.read.option("basePath", OUT/TABLE).parquet(*paths); a plain read of
    OUT/TABLE would mix the versions a run keeps for readers that are still reading.
    """
    _require_pyspark()  # pyarrow comes with it (the 'pipeline' extra)
    from pynamesrv.pipeline.paths import join_path
    from pynamesrv.pipeline.tables import NoTablesError, current_manifest, table_paths

    try:
        manifest = current_manifest(out)
        names = [table] if table else list(TABLES)
        paths = {name: table_paths(out, name, manifest) for name in names}
    except NoTablesError as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(2)
    except OSError as exc:
        click.echo(f"Error: {out}: {exc}", err=True)
        sys.exit(2)
    if as_json:
        answer = {
            "run": manifest["run"],
            "report": join_path(out, manifest["report"]),
            "tables": {n: {"basePath": join_path(out, n), "paths": p} for n, p in paths.items()},
        }
        sys.stdout.buffer.write(orjson.dumps(answer, option=orjson.OPT_INDENT_2) + b"\n")
        return
    for name in names:
        for path in paths[name]:
            click.echo(path)


@pipeline.command()
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path))
@click.option("--brokers", type=int, default=100, show_default=True)
@click.option("--instances", type=int, default=2, show_default=True)
@click.option("--hours", type=float, default=1.0, show_default=True)
@click.option("--seed", type=int, default=1, show_default=True)
@click.option("--heartbeat-interval", type=float, default=30.0, show_default=True)
def generate(
    out: Path, brokers: int, instances: int, hours: float, seed: int, heartbeat_interval: float
) -> None:
    """Write synthetic journals and their expected tables (ground_truth.json)."""
    import time

    from pynamesrv.testing import generate as generate_journals

    console = Console(highlight=False)
    start = time.perf_counter()
    with console.status("generating…"):
        truth = generate_journals(
            out,
            brokers=brokers,
            instances=instances,
            hours=hours,
            seed=seed,
            heartbeat_s=heartbeat_interval,
        )
    seconds = time.perf_counter() - start
    files = sorted(out.rglob("events-*.jsonl*"))
    size = sum(f.stat().st_size for f in files)
    lines = 0
    for file in files:
        with file.open("rb") as handle:
            lines += sum(chunk.count(b"\n") for chunk in iter(partial(handle.read, 1 << 20), b""))
    console.print(
        f"wrote {lines:,} journal lines ({size / 1e6:,.1f} MB, {len(files)} files) of "
        f"{instances} instance(s) and {brokers} broker(s) over {hours:g} h in {seconds:.1f} s"
    )
    console.print(f"expected rows in {out / 'ground_truth.json'}:")
    for name in TABLES:
        console.print(f"  {name:<22} {len(truth.table(name)):>8,}")
    if truth.injected:
        kinds: dict[str, int] = {}
        for item in truth.injected:
            kind = str(item.get("kind", item.get("type", "?")))
            kinds[kind] = kinds.get(kind, 0) + 1
        console.print("injected: " + ", ".join(f"{k} {n}" for k, n in sorted(kinds.items())))
    # The command to copy: one line however long the path (rich would wrap it at 80
    # columns in a pipe, and read brackets in the path as markup).
    click.echo(
        f"run: pynamesrv pipeline run --journal {out} --out OUT "
        f"--heartbeat-interval {heartbeat_interval:g}"
    )


def main() -> None:
    """Entry point for ``spark-submit``: see ``pynamesrv/pipeline/__main__.py``."""
    pipeline(prog_name="pynamesrv pipeline")
