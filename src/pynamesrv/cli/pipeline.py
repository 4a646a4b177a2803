"""``pynamesrv pipeline``: journal analytics (run), time travel (routes-at), synthetic data.

Spark is imported only inside the commands: ``pynamesrv serve`` must start without PySpark
installed (it is the ``pipeline`` extra).

A failure is one line: what went wrong (the innermost Java cause, not 128 lines of a Java
trace, and never a Java class name) and the file holding the full Python and JVM trace. Input
mistakes (a missing or unreadable path, no journal files, a time the journals do not cover)
exit with 2 and are found before Spark starts wherever the paths are local.
"""

from __future__ import annotations

import glob
import logging
import os
import re
import socket
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import unquote, urlsplit

import click
import orjson
from click.core import ParameterSource
from rich.console import Console

from pynamesrv.namesrv.history import parse_time
from pynamesrv.namesrv.timetravel import DIALECTS
from pynamesrv.pipeline import TABLES

if TYPE_CHECKING:
    from pynamesrv.namesrv.history import HourFile


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
REMOTE_HELP = (
    "Spark Connect server, sc://host:port (default: $SPARK_REMOTE, as pyspark reads it); "
    "excludes --master. Paths are then read and written by the server's Spark."
)


SHARED_HELP = (
    "The --journal and --out paths are plain local paths that every Spark worker sees too "
    "(one machine, NFS); without it they are refused with a cluster master."
)


def _log_path() -> Path:
    directory = Path(os.environ.get("PYNAMESRV_LOG_DIR") or tempfile.gettempdir())
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    return directory / f"pynamesrv-pipeline-{stamp}-{os.getpid()}.log"


class InputError(click.ClickException):
    """A mistake in the command's input (a path, a time): one line, exit code 2 as click's
    own usage errors."""

    exit_code = 2


# A Java class name leading a message ("org.apache.hadoop.fs.ParentNotDirectoryException: "),
# and the SQLSTATE Spark appends: neither tells an operator what to fix.
_JAVA_CLASS: Final = re.compile(r"^(?:[a-z_$][\w$]*\.)+([A-Z][\w$]*)(?::\s*|$)")
_SQLSTATE: Final = re.compile(r"\s*SQLSTATE: \w+\s*$")


def _root_cause(exc: BaseException) -> str:
    """The innermost Java cause of a Spark failure, else the exception's first line; without
    the Java class name (its words stand in for an empty message)."""
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
    first = lines[0] if lines else ""
    named = _JAVA_CLASS.match(first)
    if named is not None:
        first = first[named.end() :] or _words(named.group(1))
    first = _SQLSTATE.sub("", first) or _words(type(exc).__name__)
    return first if len(first) <= 400 else first[:397] + "..."


def _words(class_name: str) -> str:
    """``ParentNotDirectoryException`` -> ``parent not directory``."""
    name = re.sub(r"(Exception|Error)$", "", class_name) or class_name
    return re.sub(r"(?<!^)(?=[A-Z])", " ", name).lower()


def _is_spark_failure(exc: BaseException) -> bool:
    """What Spark raises: PySpark's errors (classic and Connect), the JVM bridge's and gRPC's
    own (a JVM that died, a Connect server gone), and I/O errors."""
    from pyspark.errors import PySparkException

    if isinstance(exc, PySparkException | OSError):
        return True
    return type(exc).__module__.split(".", 1)[0] in {"py4j", "grpc"}


@contextmanager
def _spark_errors() -> Iterator[None]:
    """Everything the operator has to fix is one line; the full trace goes to a log file."""
    from pynamesrv.namesrv.history import OutsideJournals
    from pynamesrv.pipeline.job import OutputLayoutError, SharedPathError
    from pynamesrv.pipeline.store import JournalError

    try:
        yield
    except (JournalError, OutsideJournals, SharedPathError, OutputLayoutError) as exc:
        raise InputError(str(exc)) from exc
    except Exception as exc:
        if not _is_spark_failure(exc):
            raise
        log = _log_path()
        try:
            log.write_text(traceback.format_exc(), encoding="utf-8")
            where = f" (details: {log})"
        except OSError:
            where = ""
        raise click.ClickException(f"{_root_cause(exc)}{where}") from exc


def _quiet_pyspark_logging() -> None:
    """PySpark logs every failed query as a JSON line on stderr before raising it; the CLI
    reports failures itself (one line and a log file). (Its pandas FutureWarning is not
    silenced here: the `pipeline` extra pins a pandas it supports, and a test checks it.)"""
    logging.getLogger("DataFrameQueryContextLogger").disabled = True


def _check_shared(
    where: str | None, journals: tuple[str, ...], out: str, shared: bool, spark: Any = None
) -> None:
    """Refuse plain local paths where executors run elsewhere (``job.check_shared``): before
    Spark starts when --master (or --remote) says so, and again with the master Spark runs
    (spark-submit's, or the Connect server's). A Connect server on another machine reads and
    writes its own disks: local paths are refused with it too."""
    from pynamesrv.pipeline.job import check_shared

    if shared:
        return
    options = [("--out", out), *(("--journal", j) for j in journals)]
    server = None if spark is None else spark.conf.get("spark.master", None)
    master = _master_of(where, server)
    if master is not None:
        check_shared(master, options, _scheme_of)


def _master_of(where: str | None, server: str | None) -> str | None:
    """The master that decides whether local paths are shared, None while unknown: --master,
    else the one Spark runs (``server``: spark-submit's, a Connect server's). A Connect
    server on another machine counts as a cluster whatever its master (its executors are not
    on this machine); on this one, its own master decides."""
    if where is None or not where.startswith("sc://"):
        return where or server
    if _remote_host(where) in {"localhost", "127.0.0.1", "::1"}:
        return server
    return where


def _scheme_of(path: str) -> str:
    return path.split("://", 1)[0] if "://" in path else "file"


def _remote_host(url: str) -> str:
    return urlsplit(url.split(";", 1)[0]).hostname or ""


def _check_remote(url: str) -> None:
    """A Connect URL that names a server, and the server listening: the client itself
    retries an unreachable server for minutes before it fails. ``local[…]`` (pyspark starts
    a Connect server of its own in this process) needs no check."""
    if url.startswith("local"):
        return
    parts = urlsplit(url.split(";", 1)[0])
    try:
        port = parts.port or 15002  # Spark Connect's default port
    except ValueError:
        port = None
    if parts.scheme != "sc" or not parts.hostname or port is None:
        raise InputError(f"--remote {url}: not a Spark Connect URL (sc://host:port)")
    try:
        socket.create_connection((parts.hostname, port), timeout=10).close()
    except OSError as exc:
        reason = exc.strerror or str(exc) or type(exc).__name__
        raise click.ClickException(
            f"no Spark Connect server at {parts.hostname}:{port}: {reason.lower()}"
        ) from exc


def _local_path(path: str) -> Path | None:
    """The local file a path names (plain, or a ``file:`` URI); None on other filesystems."""
    if "://" not in path and not path.startswith("file:"):
        return Path(path)
    parts = urlsplit(path)
    if parts.scheme == "file" and parts.netloc in ("", "localhost"):
        return Path(unquote(parts.path))
    return None


ENVIRONMENT: Final = ParameterSource.ENVIRONMENT
_WILDCARD: Final = re.compile(r"[*?\[]")


def _local_journal_files(journals: tuple[str, ...]) -> list[HourFile] | None:
    """The hour files the --journal paths hold, found before Spark starts (None when a path
    is not local, or a glob Python cannot read: Spark lists those), one per instance
    directory and hour (the compressed one of a pair, as Spark's listing takes it). A
    missing or unreadable path and an input without hour files raise ``InputError``, in the
    words Spark's listing (``store.find_journal_files``) uses."""
    from pynamesrv.namesrv.history import FILE_NAMES, HourFile, hour_of_name

    found: dict[tuple[str, int], HourFile] = {}
    for pattern in journals:
        local = _local_path(pattern)
        if local is None or "{" in pattern:
            return None
        if _WILDCARD.search(str(local)):
            roots = [Path(match) for match in sorted(glob.glob(str(local)))]
        elif local.exists():
            roots = [local]
        else:
            raise InputError(f"journal path not found: {pattern}")
        for root in roots:
            for path in _files_under(root):
                hour = hour_of_name(path.name)
                if hour is None:
                    continue
                file = HourFile(path.parent.name, hour, str(path))
                current = found.get((file.instance, hour))
                if current is None or (
                    path.name.endswith(".gz") and not current.path.endswith(".gz")
                ):
                    found[(file.instance, hour)] = file
    if not found:
        raise InputError(f"no journal files ({FILE_NAMES}) under {', '.join(journals)}")
    return sorted(found.values(), key=lambda f: (f.hour_ms, f.instance))


def _files_under(root: Path) -> Iterator[Path]:
    """``root`` or the files below it, but in directories starting with ``_`` or ``.``."""
    if not root.is_dir():
        yield root
        return

    def unreadable(error: OSError) -> None:
        reason = (error.strerror or "unreadable").lower()
        raise InputError(f"cannot read {error.filename or root}: {reason}")

    for directory, subdirectories, names in os.walk(root, onerror=unreadable):
        subdirectories[:] = [d for d in subdirectories if not d.startswith(("_", "."))]
        yield from (Path(directory) / name for name in names)


def _check_out(out: str) -> None:
    """A local --out must be a directory this process can write, or be creatable in one."""
    local = _local_path(out)
    if local is None:
        return
    target = local.absolute()
    if target.exists() and not target.is_dir():
        raise InputError(f"--out {out} is a file, not a directory")
    existing = target
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise InputError(f"--out {out}: {existing} is a file, not a directory")
    if not os.access(existing, os.R_OK | os.W_OK | os.X_OK):
        raise InputError(f"--out {out}: {existing} is not writable")


def _where(master: str | None, remote: str | None) -> str | None:
    """--master or --remote (SPARK_REMOTE), never both; a Connect server must be listening."""
    if remote is None:
        return master
    if master is not None:
        source = click.get_current_context().get_parameter_source("remote")
        via = " (SPARK_REMOTE is set: unset it for --master)"
        raise InputError(
            f"--master and --remote exclude each other{via if source == ENVIRONMENT else ''}"
        )
    _check_remote(remote)
    return remote


def _session(
    master: str | None, remote: str | None, app_name: str, small_run: bool = False
) -> tuple[Any, bool, Any]:
    """The Spark session, whether this command owns it (and so stops it), and the class
    archive its JVM maps or writes (``classcache``; None: no JVM launched here). A Connect
    session is always owned; a classic one unless an embedding caller (a notebook, the
    tests) has one active."""
    from pynamesrv.pipeline.classcache import class_archive
    from pynamesrv.pipeline.job import spark_session

    launched = remote is None and _no_active_session() and "PYSPARK_GATEWAY_PORT" not in os.environ
    archive = class_archive() if launched else None
    owned = remote is not None or _no_active_session()
    session = spark_session(
        master, remote=remote, app_name=app_name, class_archive=archive, small_run=small_run
    )
    return session, owned, archive


def _stop(spark: Any, archive: Any, console: Console | None = None) -> None:
    """Stop a session this command owns; when its JVM is to write the class archive, end it
    and keep the archive (once: the next runs map it)."""
    from pynamesrv.pipeline.classcache import launched_jvm

    jvm = launched_jvm(spark) if archive is not None and archive.writing is not None else None
    spark.stop()
    if jvm is None:
        return
    if console is None:
        archive.keep(jvm)
        return
    with console.status("saving Spark's classes for the next runs (once)…"):
        kept = archive.keep(jvm)
    if kept:
        console.print(f"[dim]Spark's classes saved for the next runs: {archive.path}[/dim]")


def _describe_session(spark: Any, remote: str | None) -> str:
    master = spark.conf.get("spark.master", None)
    if remote is None:
        return f"Spark {spark.version} on {master}"
    return f"Spark {spark.version} on {remote} (Spark Connect, master {master})"


def _no_active_session() -> bool:
    """True when this command starts Spark itself (and so must stop it); an embedding caller
    (a notebook, the tests) keeps its session."""
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession() is None


# pyproject.toml's "pipeline" extra (a test keeps them equal): pynamesrv is not on PyPI, so
# `pip install pynamesrv[pipeline]` cannot work; this line works in any install.
PIPELINE_EXTRA = ("pyspark[connect]>=4.0,<5", "pandas>=2.2,<3")


def _console(stderr: bool = False) -> Console:
    """Rich output whose lines are never wrapped off a terminal: a pipe or a file (cron, CI
    logs) has no width, and rich's default of 80 columns split a progress line in two. At a
    terminal, lines fold to the window as usual."""
    console = Console(stderr=stderr, highlight=False)
    console.soft_wrap = not console.is_terminal
    return console


def _require_pyspark() -> None:
    """Spark is the optional 'pipeline' extra: without it, one line says how to get it."""
    try:
        import pyspark  # noqa: F401
    except ImportError as exc:
        raise click.ClickException(
            f"PySpark is not installed: {sys.executable} -m pip install "
            + " ".join(f"'{requirement}'" for requirement in PIPELINE_EXTRA)
            + " "
            "(the 'pipeline' extra; Spark also needs Java 17 on the PATH or in JAVA_HOME)"
        ) from exc


@click.group()
def pipeline() -> None:
    """Analyse name-server journals with Spark (PySpark, the 'pipeline' extra)."""


@pipeline.command()
@click.option("--journal", "journals", multiple=True, required=True, help=JOURNAL_HELP)
@click.option("--out", required=True, help="Output directory (Parquet tables, report.html).")
@click.option("--master", default=None, help=MASTER_HELP)
@click.option("--remote", default=None, envvar="SPARK_REMOTE", help=REMOTE_HELP)
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
    remote: str | None,
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
    from pynamesrv.pipeline.job import is_small_run, run_pipeline

    _quiet_pyspark_logging()
    console = _console(stderr=True)
    if from_ts is not None and to_ts is not None and from_ts >= to_ts:
        raise InputError("--from must be before --to")
    _local_journal_files(journals)
    _check_out(out)
    where = _where(master, remote)
    with _spark_errors():
        _check_shared(where, journals, out, shared_path)
    with console.status("starting Spark…"), _spark_errors():
        small = remote is None and is_small_run(list(journals), out, full)
        spark, owned, archive = _session(master, remote, "pynamesrv-pipeline", small)
    console.print(f"[dim]{_describe_session(spark, remote)}[/dim]")

    def progress(stage: str, seconds: float, detail: str) -> None:
        console.print(f"[green]✓[/green] {stage:<22} {seconds:7.2f} s  {detail}")

    try:
        with console.status("running…"), _spark_errors():
            _check_shared(where, journals, out, shared_path, spark)
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
            _stop(spark, archive, console)
    skipped = ""
    if result.malformed or result.invalid:
        skipped = (
            f"; skipped {result.malformed:,} malformed line(s) and {result.invalid:,} "
            "without ts/ns/type"
        )
    if result.nothing_new:
        console.print(
            f"[bold]nothing new[/bold]: {result.events:,} events from {result.instances} "
            f"instance(s) already in {result.out}{skipped}"
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
        f"instance(s) → {result.out}{skipped}"
    )
    click.echo(f"report: {result.report}")
    click.echo(f"tables: pynamesrv pipeline tables --out {result.out}")


@pipeline.command("routes-at")
@click.option("--journal", "journals", multiple=True, required=True, help=JOURNAL_HELP)
@click.option("--time", "at", type=TIME, required=True, help="Epoch ms or ISO-8601 (UTC).")
@click.option("--instance", default=None, help="Only this instance (its ns, host:port).")
@click.option("--topic", default=None, help="Only this topic's route.")
@click.option(
    "--dialect",
    type=click.Choice(sorted(DIALECTS)),
    default="standard",
    show_default=True,
    help="JSON dialect of the bodies, as the server answers: standard to clients of RocketMQ "
    "4.9.4 and later (and those asking for it), legacy (fastjson's: bare numeric keys) to "
    "older ones.",
)
@click.option(
    "--raw",
    is_flag=True,
    help="Print only the body of --topic, byte for byte as the server sent it (its digest "
    "on stderr); needs --topic, and --instance when several instances route the topic.",
)
@click.option("--master", default=None, help=MASTER_HELP)
@click.option("--remote", default=None, envvar="SPARK_REMOTE", help=REMOTE_HELP)
def routes_at_command(
    journals: tuple[str, ...],
    at: int,
    instance: str | None,
    topic: str | None,
    dialect: str,
    raw: bool,
    master: str | None,
    remote: str | None,
) -> None:
    """Print the GET_ROUTEINFO_BY_TOPIC bodies each instance answered at --time, with
    digests, as JSON.

    Reads the hour files from the last snapshot at or before --time on. Journals on this
    machine are read without Spark (a second or so); --master, --remote or journals on
    cluster storage (hdfs://, s3a://) read them through Spark, with the same answer. Compare
    a topic's digest with a live server's: pynamesrv admin -n HOST:PORT topicRoute -t TOPIC
    --digest.
    """
    from pynamesrv.namesrv.history import iso_time
    from pynamesrv.namesrv.timetravel import describe, route_bodies

    if raw and topic is None:
        raise InputError("--raw prints one route body: give --topic")
    files = _local_journal_files(journals)
    if files is not None and master is None and remote is None:
        registries = _local_registries(files, at, instance)
    else:
        registries = _spark_registries(journals, files, at, instance, master, remote)
    if instance is not None and instance not in registries:
        raise InputError(f"no journal lines of {instance} at or before {iso_time(at)}")
    if not registries:
        raise InputError(f"no journal lines at or before {iso_time(at)}")
    bodies = {ns: route_bodies(r, DIALECTS[dialect], topic) for ns, r in registries.items()}
    answer = describe(bodies, at, topic)
    routed = [ns for ns, entry in answer.items() if entry["topics"]]
    if topic is not None and not routed:
        click.echo(f"no route of {topic} at {iso_time(at)}", err=True)
        sys.exit(1)
    if raw:
        if len(routed) > 1:
            raise InputError(
                f"--raw prints one route body: {topic} has one on {', '.join(routed)} "
                "(give --instance)"
            )
        [ns] = routed
        sys.stdout.buffer.write(bodies[ns][str(topic)])
        sys.stdout.buffer.flush()
        click.echo(f"digest: {answer[ns]['topics'][topic]['digest']}", err=True)
        return
    sys.stdout.buffer.write(orjson.dumps(answer, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
    sys.stdout.buffer.write(b"\n")


def _local_registries(files: list[HourFile], at: int, instance: str | None) -> dict[str, Any]:
    """The registries at ``at`` from local hour files, without Spark (``namesrv.history``);
    what a damaged journal made it skip is said on stderr, in one line."""
    from pynamesrv.namesrv.history import OutsideJournals, registries_at
    from pynamesrv.namesrv.journal import JournalDamage

    damage = JournalDamage()
    try:
        registries = registries_at(files, at, instance=instance, damage=damage)
    except OutsideJournals as exc:
        raise InputError(str(exc)) from exc
    if damage:
        click.echo(f"warning: the journal is damaged; skipped {damage.summary()}", err=True)
    return registries


def _spark_registries(
    journals: tuple[str, ...],
    files: list[HourFile] | None,
    at: int,
    instance: str | None,
    master: str | None,
    remote: str | None,
) -> dict[str, Any]:
    """The registries at ``at`` through Spark: journals on cluster storage, --master,
    --remote (``pipeline.timetravel``)."""
    _require_pyspark()
    from pynamesrv.namesrv.history import check_time
    from pynamesrv.pipeline.timetravel import registries_at

    _quiet_pyspark_logging()
    if files is not None:
        with _spark_errors():
            check_time(files, at, instance)
    _where(master, remote)
    with _spark_errors():
        spark, owned, archive = _session(master, remote, "pynamesrv-routes-at")
    try:
        with _spark_errors():
            return registries_at(spark, list(journals), at, instance=instance)
    finally:
        if owned:
            _stop(spark, archive)


@pipeline.command()
@click.option("--out", required=True, help="The output directory of `pipeline run`.")
@click.option("--table", default=None, type=click.Choice(TABLES), help="Only this table.")
@click.option("--json", "as_json", is_flag=True, help="Tables, base paths and paths as JSON.")
def tables(out: str, table: str | None, as_json: bool) -> None:
    """Print the paths of the current version of the tables, one per line.

    Read them with spark.read.option("basePath", OUT/TABLE).parquet(*paths); a plain read of
    OUT/TABLE would mix the versions a run keeps for readers that are still reading. Paths
    are absolute URIs (file:/..., hdfs://...), so a Spark Connect server reads them as named.
    """
    _require_pyspark()  # pyarrow comes with it (the 'pipeline' extra)
    from pynamesrv.pipeline.tables import (
        NoTablesError,
        current_manifest,
        published_paths,
        qualified,
        table_paths,
    )

    try:
        manifest = current_manifest(out)
        names = [table] if table else list(TABLES)
        paths = {name: table_paths(out, name, manifest) for name in names}
        answer = published_paths(qualified(out), manifest)
    except NoTablesError as exc:
        click.echo(f"Error: {exc}", err=True)
        sys.exit(2)
    except OSError as exc:
        click.echo(f"Error: {out}: {exc}", err=True)
        sys.exit(2)
    if as_json:
        answer["tables"] = {n: answer["tables"][n] for n in names}
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

    console = _console()
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
