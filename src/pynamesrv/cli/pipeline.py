"""``pynamesrv pipeline``: journal analytics (run), time travel (routes-at), synthetic data.

Spark is imported only inside the commands: ``pynamesrv serve`` must start without PySpark
installed (it is the ``pipeline`` extra).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
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


@contextmanager
def _spark_errors() -> Iterator[None]:
    """A missing path or unreadable input is the operator's to fix: one line, no JVM trace."""
    from pyspark.errors import AnalysisException

    try:
        yield
    except AnalysisException as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
        raise click.ClickException(first) from exc


def _no_active_session() -> bool:
    """True when this command starts Spark itself (and so must stop it); an embedding caller
    (a notebook, the tests) keeps its session."""
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession() is None


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
    type=float,
    default=30.0,
    show_default=True,
    help="Seconds after a heartbeat from which a broker counts as stale.",
)
def run(
    journals: tuple[str, ...],
    out: str,
    master: str | None,
    from_ts: int | None,
    to_ts: int | None,
    heartbeat_interval: float,
) -> None:
    """Build the six tables and report.html from the journals."""
    from pynamesrv.pipeline.job import run_pipeline, spark_session

    console = Console(stderr=True, highlight=False)
    if from_ts is not None and to_ts is not None and from_ts >= to_ts:
        raise click.BadParameter("--from must be before --to")
    owned = _no_active_session()
    with console.status("starting Spark…"):
        spark = spark_session(master)
    console.print(f"[dim]Spark {spark.version} on {spark.sparkContext.master}[/dim]")

    def progress(stage: str, seconds: float, detail: str) -> None:
        console.print(f"[green]✓[/green] {stage:<22} {seconds:7.2f} s  {detail}")

    try:
        with console.status("running…"), _spark_errors():
            result = run_pipeline(
                spark,
                list(journals),
                out,
                from_ts=from_ts,
                to_ts=to_ts,
                heartbeat_interval_s=heartbeat_interval,
                progress=progress,
            )
    finally:
        if owned:
            spark.stop()
    rate = result.events / result.seconds if result.seconds else 0.0
    console.print(
        f"[bold]done[/bold] in {result.seconds:.1f} s: {result.events:,} events "
        f"({rate:,.0f}/s) from {result.instances} instance(s) → {out}"
    )


@pipeline.command("routes-at")
@click.option("--journal", "journals", multiple=True, required=True, help=JOURNAL_HELP)
@click.option("--time", "at", type=TIME, required=True, help="Epoch ms or ISO-8601 (UTC).")
@click.option("--instance", default=None, help="Only this instance (its ns, host:port).")
@click.option("--master", default=None, help=MASTER_HELP)
def routes_at_command(
    journals: tuple[str, ...], at: int, instance: str | None, master: str | None
) -> None:
    """Print the route table each instance held at --time, with digests, as JSON."""
    from pynamesrv.pipeline.job import spark_session
    from pynamesrv.pipeline.timetravel import describe, routes_at

    owned = _no_active_session()
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
    sys.stdout.buffer.write(
        orjson.dumps(describe(routes, at), option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS)
    )
    sys.stdout.buffer.write(b"\n")


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

    from pynamesrv.pipeline.generate import generate as generate_journals

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
    files = sorted(out.rglob("events-*.jsonl"))
    size = sum(f.stat().st_size for f in files)
    lines = 0
    for file in files:
        with file.open("rb") as handle:
            lines += sum(
                chunk.count(b"\n") for chunk in iter(lambda h=handle: h.read(1 << 20), b"")
            )
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
