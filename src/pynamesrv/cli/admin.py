"""``pynamesrv admin``: the name-server half of mqadmin, plus ``diff`` for diverged servers.

Operators already know mqadmin's command names and options, so the subcommands keep them
(camelCase names, ``-t`` topic, ``-c`` cluster, ``-b`` broker name, ``-s`` namespace, ``-k``
key, ``-v`` value) and send the same requests mqadmin sends (golden scenario 5). What mqadmin
lacks is added: machine output (``--json``), exit codes a script can branch on, one-line
errors instead of Java stack traces, and ``diff``, which compares the routing tables of
several name servers (they never talk to each other and drift apart silently when a broker
cannot reach one of them; RocketMQ issue #4807).

Reads ask the name servers in the order given and take the first answer; writes go to every
name server given, as mqadmin does, because each one keeps its own copy of everything.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, NoReturn

import click
import javaproperties
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from pynamesrv.remoting import fastjson
from pynamesrv.remoting.client import RemotingClient, RemotingError, RemotingTimeout
from pynamesrv.remoting.codes import Perm, RequestCode, ResponseCode, Version
from pynamesrv.remoting.command import RemotingCommand

# Exit codes (documented in the group's help; scripts depend on them, never renumber).
EXIT_OK: Final = 0
EXIT_ERROR_ANSWER: Final = 1
EXIT_USAGE: Final = 2
EXIT_UNREACHABLE: Final = 3
EXIT_TIMEOUT: Final = 4
EXIT_DIFFERENT: Final = 5

DEFAULT_TIMEOUT_S: Final = 3.0
DEFAULT_DIFF_CONCURRENCY: Final = 16
# Version ordinal we claim: >= 4.9.4 makes route answers use the standard JSON dialect, which
# is what every current client asks for. The lenient parser reads either dialect anyway.
CLIENT_VERSION: Final = int(Version.V4_9_4)
CLIENT_LANGUAGE: Final = "PYTHON"
RETRY_PREFIX: Final = "%RETRY%"
DLQ_PREFIX: Final = "%DLQ%"
ABSENT: Final = "absent"


# --------------------------------------------------------------------------- failures


class AdminFailure(Exception):
    """A failure that ends the command with a one-line message and a documented exit code."""

    exit_code = EXIT_UNREACHABLE

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class Unreachable(AdminFailure):
    """Connection refused, reset or closed: the server is down or the address is wrong."""

    exit_code = EXIT_UNREACHABLE


class NoAnswer(AdminFailure):
    """Connected (or tried to) but nothing came back in time: a hung or overloaded server."""

    exit_code = EXIT_TIMEOUT


class ErrorAnswer(AdminFailure):
    """The server answered with a non-success code; the code and remark are the diagnosis."""

    exit_code = EXIT_ERROR_ANSWER

    def __init__(self, addr: str, code: int, remark: str | None) -> None:
        self.addr = addr
        self.code = code
        self.remark = remark
        # Remarks may span lines (TOPIC_NOT_EXIST adds a FAQ link); errors stay one line.
        flat = " ".join((remark or "").split())
        super().__init__(f"{addr} answered {_response_name(code)} ({code}): {flat}")


def _response_name(code: int) -> str:
    try:
        return ResponseCode(code).name
    except ValueError:
        return "UNKNOWN"


def _request_name(code: int) -> str:
    try:
        return RequestCode(code).name
    except ValueError:
        return str(code)


# --------------------------------------------------------------------------- options


@dataclass(slots=True)
class Options:
    """Resolved global options: the name servers, the per-request timeout, the output mode."""

    addrs: list[str]
    timeout: float
    json: bool


@dataclass(slots=True)
class _GroupOptions:
    """What was given before the subcommand; kept until the subcommand's own options are known."""

    namesrv: str | None
    timeout: float | None
    json: bool


def parse_addrs(text: str) -> list[str]:
    """Split mqadmin's ``host:port;host:port`` list; duplicates dropped, order kept."""
    addrs: list[str] = []
    for raw in text.replace(",", ";").split(";"):
        addr = raw.strip()
        if not addr:
            continue
        host, sep, port = addr.rpartition(":")
        if not sep or not host.strip("[]") or not port.isdigit() or not 0 < int(port) < 65536:
            raise click.BadParameter(f"{addr!r} is not host:port", param_hint="'-n' / '--namesrv'")
        if addr not in addrs:
            addrs.append(addr)
    if not addrs:
        raise click.BadParameter("no address given", param_hint="'-n' / '--namesrv'")
    return addrs


def _resolve(namesrv: str | None, timeout: float | None, json_out: bool) -> Options:
    """Subcommand options win over the group's (mqadmin puts ``-n`` after the command)."""
    ctx = click.get_current_context()
    group = ctx.find_object(_GroupOptions) or _GroupOptions(None, None, False)
    text = namesrv or group.namesrv or os.environ.get("NAMESRV_ADDR")
    if not text:
        raise click.UsageError(
            "no name server: give -n/--namesrv 'host:port;host:port' or set NAMESRV_ADDR"
        )
    return Options(
        addrs=parse_addrs(text),
        timeout=timeout or group.timeout or DEFAULT_TIMEOUT_S,
        json=json_out or group.json,
    )


_TIMEOUT_TYPE = click.FloatRange(min=0, min_open=True)
_NAMESRV_HELP = "Name server list, 'host:port;host:port' (default: $NAMESRV_ADDR)."
_TIMEOUT_HELP = (
    f"Seconds to wait for a connection and for each answer (default {DEFAULT_TIMEOUT_S:g})."
)
_JSON_HELP = "Print one JSON document on stdout instead of tables."

EXIT_CODES_HELP: Final = f"""
\b
Exit codes:
  {EXIT_OK}  success (diff: all name servers agree)
  {EXIT_ERROR_ANSWER}  a name server answered with an error code
     (e.g. TOPIC_NOT_EXIST 17, QUERY_NOT_FOUND 22, NO_PERMISSION 16)
  {EXIT_USAGE}  usage error (bad or missing option)
  {EXIT_UNREACHABLE}  connection refused, reset or unreachable
  {EXIT_TIMEOUT}  no answer within --timeout
  {EXIT_DIFFERENT}  diff: the name servers disagree
\b
Reads ask the name servers in the order given and use the first that
answers; writes go to every name server given and exit with the code of
the first (in -n order) that failed. Errors are one line on stderr:
'error: <server> answered <CODE_NAME> (<code>): <remark>'.
"""
_SUBCOMMAND_EPILOG: Final = (
    "Exit codes: 0 ok, 1 error answer, 2 usage, 3 unreachable, 4 timeout"
    " (see 'pynamesrv admin --help')."
)


@click.group(epilog=EXIT_CODES_HELP)
@click.option("-n", "--namesrv", envvar="NAMESRV_ADDR", help=_NAMESRV_HELP)
@click.option("--timeout", type=_TIMEOUT_TYPE, default=None, help=_TIMEOUT_HELP)
@click.option("--json", "json_out", is_flag=True, help=_JSON_HELP)
@click.pass_context
def admin(ctx: click.Context, namesrv: str | None, timeout: float | None, json_out: bool) -> None:
    """Administer name servers (an mqadmin-compatible subset, plus diff).

    Global options may also be given after the subcommand, as with mqadmin.
    """
    ctx.obj = _GroupOptions(namesrv, timeout, json_out)


def _admin_command(name: str) -> Callable[[Callable[..., None]], click.Command]:
    """Register ``fn(opts, **params)`` as subcommand ``name`` with the global options too."""

    def decorate(fn: Callable[..., None]) -> click.Command:
        @functools.wraps(fn)
        def wrapper(
            namesrv: str | None, timeout: float | None, json_out: bool, **params: Any
        ) -> None:
            fn(_resolve(namesrv, timeout, json_out), **params)

        command = click.option("--json", "json_out", is_flag=True, help=_JSON_HELP)(wrapper)
        command = click.option("--timeout", type=_TIMEOUT_TYPE, help=_TIMEOUT_HELP)(command)
        command = click.option("-n", "--namesrv", help=_NAMESRV_HELP)(command)
        return admin.command(name, epilog=_SUBCOMMAND_EPILOG)(command)

    return decorate


# --------------------------------------------------------------------------- requests


class Session:
    """One connection per name server for the life of a command, opened on first use."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self._connecting: dict[str, asyncio.Task[RemotingClient]] = {}

    async def _client(self, addr: str) -> RemotingClient:
        # Concurrent requests (diff) share one connection attempt per server; a failed
        # attempt fails every request to that server, a dropped connection is reopened.
        task = self._connecting.get(addr)
        if (
            task is not None
            and task.done()
            and not task.cancelled()
            and task.exception() is None
            and not task.result().is_open
        ):
            task = None
        if task is None:
            task = self._connecting[addr] = asyncio.ensure_future(self._connect(addr))
        return await task

    async def _connect(self, addr: str) -> RemotingClient:
        try:
            return await RemotingClient.connect_addr(addr, timeout=self.opts.timeout)
        except RemotingTimeout as exc:
            raise NoAnswer(f"connecting to {addr} timed out after {self.opts.timeout:g}s") from exc
        except RemotingError as exc:
            cause = exc.__cause__
            if isinstance(cause, OSError) and cause.errno:
                # asyncio words a refusal "Connect call failed ('127.0.0.1', 1)"; say why.
                # Resolver errors (gaierror) have negative numbers and their own text.
                why = os.strerror(cause.errno) if cause.errno > 0 else cause.strerror
                raise Unreachable(f"cannot connect to {addr}: {why}") from exc
            raise Unreachable(str(exc)) from exc

    async def request(
        self,
        addr: str,
        code: RequestCode,
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
        *,
        accept: Iterable[int] = (ResponseCode.SUCCESS,),
    ) -> RemotingCommand:
        """Send one request; answers whose code is not in ``accept`` raise ErrorAnswer."""
        client = await self._client(addr)
        command = RemotingCommand(
            code=code,
            language=CLIENT_LANGUAGE,
            version=CLIENT_VERSION,
            ext_fields=ext_fields,
            body=body,
        )
        try:
            answer = await client.request(command, timeout=self.opts.timeout)
        except RemotingTimeout as exc:
            raise NoAnswer(
                f"{addr} did not answer {_request_name(code)} ({int(code)}) "
                f"within {self.opts.timeout:g}s"
            ) from exc
        except RemotingError as exc:  # connection lost mid-request, or a garbled frame
            message = str(exc)
            raise Unreachable(message if addr in message else f"{addr}: {message}") from exc
        if answer.code not in tuple(accept):
            raise ErrorAnswer(addr, answer.code, answer.remark)
        return answer

    async def close(self) -> None:
        for task in self._connecting.values():
            if not task.done():
                task.cancel()
        outcomes = await asyncio.gather(*self._connecting.values(), return_exceptions=True)
        clients = [c for c in outcomes if isinstance(c, RemotingClient)]
        await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)


def _body_json(answer: RemotingCommand, addr: str) -> Any:
    """Parse a JSON body (fastjson's bare numeric keys allowed); garbage is an error answer."""
    if not answer.body:
        return {}
    try:
        return fastjson.loads(answer.body)
    except ValueError as exc:
        raise ErrorAnswer(addr, answer.code, f"unreadable answer body: {exc}") from exc


async def read_first(session: Session, job: Callable[[str], Awaitable[Any]]) -> tuple[str, Any]:
    """Run ``job`` against the first name server that answers at all.

    An error answer is an answer (a missing topic is missing), so it is final; only
    unreachable and silent servers are skipped, each with a warning line.
    """
    failures: list[AdminFailure] = []
    for addr in session.opts.addrs:
        try:
            return addr, await job(addr)
        except (Unreachable, NoAnswer) as exc:
            failures.append(exc)
            if addr != session.opts.addrs[-1]:
                _warn(f"{exc.message}; trying the next name server")
    if len(failures) == 1:
        raise failures[0]
    timed_out = all(isinstance(f, NoAnswer) for f in failures)
    summary = "; ".join(f.message for f in failures)
    raise (NoAnswer if timed_out else Unreachable)(f"no name server answered: {summary}")


@dataclass(slots=True)
class WriteResult:
    """One name server's outcome of a write: extra answer fields, or the failure."""

    addr: str
    data: dict[str, Any] = field(default_factory=dict)
    failure: AdminFailure | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"namesrv": self.addr, "ok": self.ok, **self.data}
        if self.failure is not None:
            out["error"] = self.failure.message
            out["exitCode"] = self.failure.exit_code
        return out


async def write_all(
    session: Session, job: Callable[[str], Awaitable[dict[str, Any]]]
) -> list[WriteResult]:
    """Run ``job`` on every name server concurrently; one failure does not stop the others."""

    async def one(addr: str) -> WriteResult:
        try:
            return WriteResult(addr, await job(addr))
        except AdminFailure as exc:
            return WriteResult(addr, failure=exc)

    return list(await asyncio.gather(*(one(a) for a in session.opts.addrs)))


def _run(opts: Options, job: Callable[[Session], Awaitable[int]]) -> NoReturn:
    """Run one command's coroutine and exit with its code, or one error line and its code."""
    ctx = click.get_current_context()

    async def main() -> int:
        session = Session(opts)
        try:
            return await job(session)
        finally:
            await session.close()

    try:
        code = asyncio.run(main())
    except KeyboardInterrupt:
        ctx.exit(130)  # as a shell reports SIGINT; 1 means "the server answered an error"
    except AdminFailure as exc:
        click.echo(f"error: {exc.message}", err=True)
        ctx.exit(exc.exit_code)
    ctx.exit(code)


# --------------------------------------------------------------------------- output


def _console() -> Console:
    """Rich for people; when piped, a wide console so nothing is wrapped or cut."""
    console = Console(highlight=False, soft_wrap=False)
    if not console.is_terminal:
        console = Console(highlight=False, soft_wrap=False, width=4096, color_system=None)
    return console


def _table(title: str | None, *columns: str) -> Table:
    table = Table(title=title, box=box.SIMPLE, title_justify="left", show_edge=False)
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


def _row(table: Table, *cells: object) -> None:
    """Add a row of plain text: names and values must never be read as rich markup."""
    table.add_row(*(Text("" if c is None else str(c)) for c in cells))


def _print_json(document: Any) -> None:
    click.echo(json.dumps(document, indent=2, ensure_ascii=False))


def _print_text(text: str) -> None:
    click.echo(text)


def _warn(message: str) -> None:
    click.echo(f"warning: {message}", err=True)


def perm_string(perm: int) -> str:
    """PermName.perm2String: ``RW-`` style, X for the inherit bit."""
    return (
        ("R" if perm & Perm.READ else "-")
        + ("W" if perm & Perm.WRITE else "-")
        + ("X" if perm & Perm.INHERIT else "-")
    )


def _perm_cell(perm: Any) -> str:
    return f"{perm_string(perm)} ({perm})" if isinstance(perm, int) else str(perm)


def _report_writes(
    opts: Options,
    command: str,
    params: dict[str, Any],
    results: Sequence[WriteResult],
    columns: Sequence[tuple[str, str]] = (),
) -> int:
    """Print every server's outcome; the exit code is the first failure's, in -n order."""
    for result in results:
        if result.failure is not None:
            click.echo(f"error: {result.failure.message}", err=True)
    if opts.json:
        _print_json({"command": command, **params, "results": [r.to_json() for r in results]})
    else:
        table = _table(None, "Name server", *(title for title, _ in columns), "Result")
        for result in results:
            values = [result.data.get(key, "") for _, key in columns]
            _row(table, result.addr, *values, "OK" if result.ok else "FAILED")
        _console().print(table)
    for result in results:
        if result.failure is not None:
            return result.failure.exit_code
    return EXIT_OK


# --------------------------------------------------------------------------- shared reads


async def fetch_cluster_info(session: Session, addr: str) -> dict[str, Any]:
    answer = await session.request(addr, RequestCode.GET_BROKER_CLUSTER_INFO)
    info = _body_json(answer, addr)
    return info if isinstance(info, dict) else {}


async def fetch_topic_list(session: Session, addr: str) -> list[str]:
    answer = await session.request(addr, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
    body = _body_json(answer, addr)
    topics = body.get("topicList") if isinstance(body, dict) else None
    return sorted(str(t) for t in topics or [])


async def fetch_route(session: Session, addr: str, topic: str) -> dict[str, Any] | None:
    """The topic's route, or None when the server says TOPIC_NOT_EXIST."""
    answer = await session.request(
        addr,
        RequestCode.GET_ROUTEINFO_BY_TOPIC,
        {"topic": topic},
        accept=(ResponseCode.SUCCESS, ResponseCode.TOPIC_NOT_EXIST),
    )
    if answer.code == ResponseCode.TOPIC_NOT_EXIST:
        return None
    route = _body_json(answer, addr)
    return route if isinstance(route, dict) else {}


async def read_route(session: Session, topic: str) -> tuple[str, dict[str, Any]]:
    """The topic's route from the first name server that answers; a missing topic is an
    error answer there (exit 1), as in mqadmin."""

    async def fetch(addr: str) -> dict[str, Any]:
        answer = await session.request(addr, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
        route = _body_json(answer, addr)
        return route if isinstance(route, dict) else {}

    return await read_first(session, fetch)


async def fetch_routes(
    session: Session, addr: str, topics: Iterable[str], concurrency: int
) -> dict[str, dict[str, Any] | None]:
    """Every topic's route over one connection, at most ``concurrency`` requests in flight."""
    limit = asyncio.Semaphore(concurrency)

    async def one(topic: str) -> tuple[str, dict[str, Any] | None]:
        async with limit:
            return topic, await fetch_route(session, addr, topic)

    tasks = [asyncio.ensure_future(one(t)) for t in topics]
    try:
        return dict(await asyncio.gather(*tasks))
    finally:
        for task in tasks:
            task.cancel()


def broker_rows(info: dict[str, Any]) -> list[dict[str, Any]]:
    """ClusterInfo flattened to (cluster, broker, id, address) rows in a stable order."""
    rows: list[dict[str, Any]] = []
    for name, data in (info.get("brokerAddrTable") or {}).items():
        data = data if isinstance(data, dict) else {}
        for broker_id, addr in (data.get("brokerAddrs") or {}).items():
            rows.append(
                {
                    "cluster": data.get("cluster"),
                    "brokerName": data.get("brokerName", name),
                    "brokerId": _as_int(broker_id),
                    "addr": addr,
                }
            )
    rows.sort(key=lambda r: (str(r["cluster"]), str(r["brokerName"]), _sort_id(r["brokerId"])))
    return rows


def _as_int(value: Any) -> Any:
    try:
        return int(value)
    except (TypeError, ValueError):
        return value


def _sort_id(value: Any) -> tuple[int, str]:
    return (value, "") if isinstance(value, int) else (1 << 62, str(value))


def route_clusters(route: dict[str, Any]) -> list[str]:
    """The clusters a route's brokers belong to (BrokerData carries its cluster)."""
    return sorted({str(b.get("cluster")) for b in route.get("brokerDatas") or [] if b})


# --------------------------------------------------------------------------- read commands


@_admin_command("clusterList")
@click.option("-c", "--clusterName", "cluster", help="Only this cluster.")
def cluster_list(opts: Options, cluster: str | None) -> None:
    """List clusters, brokers and addresses.

    GET_BROKER_CLUSTER_INFO; -c shows one cluster only.
    """

    async def job(session: Session) -> int:
        addr, info = await read_first(session, lambda a: fetch_cluster_info(session, a))
        rows = [r for r in broker_rows(info) if cluster is None or r["cluster"] == cluster]
        if opts.json:
            clusters = {
                name: sorted(members)
                for name, members in sorted((info.get("clusterAddrTable") or {}).items())
                if cluster is None or name == cluster
            }
            _print_json({"namesrv": addr, "clusters": clusters, "brokers": rows})
        else:
            table = _table(None, "Cluster", "Broker", "BID", "Address")
            for r in rows:
                _row(table, r["cluster"], r["brokerName"], r["brokerId"], r["addr"])
            _console().print(table)
        return EXIT_OK

    _run(opts, job)


@_admin_command("topicList")
@click.option(
    "-c",
    "--clusterModel",
    "cluster_model",
    is_flag=True,
    help="Also show each topic's cluster (skips %RETRY% and %DLQ% topics, as mqadmin does).",
)
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=DEFAULT_DIFF_CONCURRENCY,
    show_default=True,
    help="With -c: route queries in flight at once.",
)
def topic_list(opts: Options, cluster_model: bool, concurrency: int) -> None:
    """List all topics (-c: with their clusters).

    GET_ALL_TOPIC_LIST_FROM_NAMESERVER; with -c also every topic's route, as mqadmin does.
    """

    async def job(session: Session) -> int:
        async def fetch(addr: str) -> tuple[list[str], dict[str, list[str]] | None]:
            topics = await fetch_topic_list(session, addr)
            if not cluster_model:
                return topics, None
            topics = [t for t in topics if not t.startswith((RETRY_PREFIX, DLQ_PREFIX))]
            routes = await fetch_routes(session, addr, topics, concurrency)
            return topics, {t: route_clusters(r) if r else [] for t, r in routes.items()}

        addr, (topics, clusters) = await read_first(session, fetch)
        if opts.json:
            document: dict[str, Any] = {"namesrv": addr, "topics": topics}
            if clusters is not None:
                document["clusters"] = clusters
            _print_json(document)
        elif clusters is None:
            table = _table(None, "Topic")
            for topic in topics:
                _row(table, topic)
            _console().print(table)
        else:
            table = _table(None, "Cluster", "Topic")
            rows = [(c, t) for t in topics for c in clusters[t] or [""]]
            for c, t in sorted(rows):
                _row(table, c, t)
            _console().print(table)
        return EXIT_OK

    _run(opts, job)


@_admin_command("topicRoute")
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option(
    "--digest",
    is_flag=True,
    help="Also print the route's SHA-256 digest, comparable with pipeline routes-at.",
)
def topic_route(opts: Options, topic: str, digest: bool) -> None:
    """Show a topic's brokers and queues.

    GET_ROUTEINFO_BY_TOPIC; a topic without a route exits 1 (TOPIC_NOT_EXIST). --digest adds
    the digest ``pynamesrv pipeline routes-at`` prints for a route rebuilt from the journal.
    """

    async def job(session: Session) -> int:
        addr, route = await read_route(session, topic)
        extra = {"digest": _route_digest(route)} if digest else {}
        if opts.json:
            _print_json({"namesrv": addr, "topic": topic, "route": route, **extra})
            return EXIT_OK
        console = _console()
        brokers = _table("Brokers", "Broker", "Cluster", "BID", "Address")
        rows = []
        for data in route.get("brokerDatas") or []:
            for broker_id, broker_addr in (data.get("brokerAddrs") or {}).items():
                rows.append(
                    (data.get("brokerName"), data.get("cluster"), _as_int(broker_id), broker_addr)
                )
        for name, cluster, broker_id, broker_addr in sorted(
            rows, key=lambda r: (str(r[0]), _sort_id(r[2]))
        ):
            _row(brokers, name, cluster, broker_id, broker_addr)
        console.print(brokers)
        queues = _table("Queues", "Broker", "Read", "Write", "Perm", "SysFlag")
        for q in sorted(route.get("queueDatas") or [], key=lambda q: str(q.get("brokerName"))):
            _row(
                queues,
                q.get("brokerName"),
                q.get("readQueueNums"),
                q.get("writeQueueNums"),
                _perm_cell(q.get("perm")),
                q.get("topicSysFlag", 0),
            )
        console.print(queues)
        if route.get("orderTopicConf"):
            console.print(Text(f"orderTopicConf: {route['orderTopicConf']}"))
        if digest:
            console.print(Text(f"digest: {extra['digest']}"))
        return EXIT_OK

    _run(opts, job)


def _route_digest(route: dict[str, Any]) -> str:
    """The canonical digest of a live route (``pipeline.timetravel``: pure Python, no Spark)."""
    from pynamesrv.pipeline.timetravel import route_digest

    return route_digest(route)


@_admin_command("topicClusterList")
@click.option("-t", "--topic", required=True, help="Topic name.")
def topic_cluster_list(opts: Options, topic: str) -> None:
    """List the clusters that serve a topic.

    From the topic's route (GET_ROUTEINFO_BY_TOPIC): every broker there names its cluster.
    """

    async def job(session: Session) -> int:
        addr, route = await read_route(session, topic)
        clusters = route_clusters(route)
        if opts.json:
            _print_json({"namesrv": addr, "topic": topic, "clusters": clusters})
        else:
            table = _table(None, "Cluster")
            for name in clusters:
                _row(table, name)
            _console().print(table)
        return EXIT_OK

    _run(opts, job)


@_admin_command("getKvConfig")
@click.option("-s", "--namespace", required=True, help="KV namespace.")
@click.option("-k", "--key", required=True, help="Key.")
def get_kv_config(opts: Options, namespace: str, key: str) -> None:
    """Print one KV value.

    GET_KV_CONFIG; a missing key exits 1 (QUERY_NOT_FOUND).
    """

    async def job(session: Session) -> int:
        async def fetch(addr: str) -> str:
            answer = await session.request(
                addr, RequestCode.GET_KV_CONFIG, {"namespace": namespace, "key": key}
            )
            return answer.field("value") or ""

        addr, value = await read_first(session, fetch)
        if opts.json:
            _print_json({"namesrv": addr, "namespace": namespace, "key": key, "value": value})
        else:
            _print_text(value)
        return EXIT_OK

    _run(opts, job)


@_admin_command("kvList")
@click.option("-s", "--namespace", required=True, help="KV namespace.")
def kv_list(opts: Options, namespace: str) -> None:
    """List the keys and values of a KV namespace.

    GET_KVLIST_BY_NAMESPACE; a missing namespace exits 1 (QUERY_NOT_FOUND).
    """

    async def job(session: Session) -> int:
        async def fetch(addr: str) -> dict[str, Any]:
            answer = await session.request(
                addr, RequestCode.GET_KVLIST_BY_NAMESPACE, {"namespace": namespace}
            )
            body = _body_json(answer, addr)
            table = body.get("table") if isinstance(body, dict) else None
            return dict(sorted((table or {}).items()))

        addr, kv = await read_first(session, fetch)
        if opts.json:
            _print_json({"namesrv": addr, "namespace": namespace, "table": kv})
        else:
            table = _table(None, "Key", "Value")
            for k, v in kv.items():
                _row(table, k, v)
            _console().print(table)
        return EXIT_OK

    _run(opts, job)


def parse_properties_text(text: str) -> dict[str, str]:
    """GET_NAMESRV_CONFIG's ``key=value`` lines (written without escaping, so split once)."""
    config: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith(("#", "!")):
            continue
        key, _, value = line.partition("=")
        config[key] = value
    return dict(sorted(config.items()))


@_admin_command("getNamesrvConfig")
def get_namesrv_config(opts: Options) -> None:
    """Show a name server's configuration.

    GET_NAMESRV_CONFIG: every setting, sorted by key.
    """

    async def job(session: Session) -> int:
        async def fetch(addr: str) -> dict[str, str]:
            answer = await session.request(addr, RequestCode.GET_NAMESRV_CONFIG)
            return parse_properties_text(answer.body.decode("utf-8", "replace"))

        addr, config = await read_first(session, fetch)
        if opts.json:
            _print_json({"namesrv": addr, "config": config})
        else:
            table = _table(None, "Key", "Value")
            for k, v in config.items():
                _row(table, k, v)
            _console().print(table)
        return EXIT_OK

    _run(opts, job)


# --------------------------------------------------------------------------- write commands


def _simple_write(
    opts: Options,
    command: str,
    params: dict[str, Any],
    code: RequestCode,
    ext_fields: dict[str, str] | None = None,
    body: bytes = b"",
    answer_fields: Sequence[tuple[str, str]] = (),
) -> None:
    """Send one request to every name server and report; ``answer_fields`` are int headers."""

    async def job(session: Session) -> int:
        async def one(addr: str) -> dict[str, Any]:
            answer = await session.request(addr, code, ext_fields, body)
            return {key: _as_int(answer.field(key)) for _, key in answer_fields}

        results = await write_all(session, one)
        return _report_writes(opts, command, params, results, answer_fields)

    _run(opts, job)


@_admin_command("updateKvConfig")
@click.option("-s", "--namespace", required=True, help="KV namespace.")
@click.option("-k", "--key", required=True, help="Key.")
@click.option("-v", "--value", required=True, help="Value.")
def update_kv_config(opts: Options, namespace: str, key: str, value: str) -> None:
    """Set a KV value on every name server.

    PUT_KV_CONFIG; the server answers after the KV file is written.
    """
    params = {"namespace": namespace, "key": key, "value": value}
    _simple_write(opts, "updateKvConfig", params, RequestCode.PUT_KV_CONFIG, dict(params))


@_admin_command("deleteKvConfig")
@click.option("-s", "--namespace", required=True, help="KV namespace.")
@click.option("-k", "--key", required=True, help="Key.")
def delete_kv_config(opts: Options, namespace: str, key: str) -> None:
    """Delete a KV key on every name server.

    DELETE_KV_CONFIG; succeeds when the key is absent too.
    """
    params = {"namespace": namespace, "key": key}
    _simple_write(opts, "deleteKvConfig", params, RequestCode.DELETE_KV_CONFIG, dict(params))


@_admin_command("updateNamesrvConfig")
@click.option("-k", "--key", required=True, help="Config key, e.g. orderMessageEnable.")
@click.option("-v", "--value", required=True, help="New value.")
def update_namesrv_config(opts: Options, key: str, value: str) -> None:
    """Change a setting on every name server.

    UPDATE_NAMESRV_CONFIG.
    The body is a Java properties line, escaped so that the server's properties parser reads
    back exactly the key and value given (mqadmin sends them raw, which mangles backslashes
    and non-ASCII text).
    """
    body = (javaproperties.join_key_value(key, value, separator="=") + "\n").encode("ascii")
    params = {"key": key, "value": value}
    _simple_write(opts, "updateNamesrvConfig", params, RequestCode.UPDATE_NAMESRV_CONFIG, body=body)


@_admin_command("wipeWritePerm")
@click.option("-b", "--brokerName", "broker_name", required=True, help="Broker name.")
def wipe_write_perm(opts: Options, broker_name: str) -> None:
    """Make a broker read-only in the routes.

    WIPE_WRITE_PERM_OF_BROKER, on every name server.
    Only the name servers' copy changes; the broker's next registration may restore it.
    """
    _simple_write(
        opts,
        "wipeWritePerm",
        {"brokerName": broker_name},
        RequestCode.WIPE_WRITE_PERM_OF_BROKER,
        {"brokerName": broker_name},
        answer_fields=[("Topics changed", "wipeTopicCount")],
    )


@_admin_command("addWritePerm")
@click.option("-b", "--brokerName", "broker_name", required=True, help="Broker name.")
def add_write_perm(opts: Options, broker_name: str) -> None:
    """Give a broker's topics write permission back.

    ADD_WRITE_PERM_OF_BROKER, on every name server: every topic of the broker gets perm 6.
    """
    _simple_write(
        opts,
        "addWritePerm",
        {"brokerName": broker_name},
        RequestCode.ADD_WRITE_PERM_OF_BROKER,
        {"brokerName": broker_name},
        answer_fields=[("Topics changed", "addTopicCount")],
    )


@_admin_command("deleteTopic")
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option("-c", "--clusterName", "cluster", help="Only this cluster's brokers' queues.")
def delete_topic(opts: Options, topic: str, cluster: str | None) -> None:
    """Delete a topic from every name server.

    DELETE_TOPIC_IN_NAMESRV.
    This is only the name-server half of mqadmin's deleteTopic: the brokers keep the topic
    and will register it again unless it is deleted there too.
    """
    ext = {"topic": topic}
    if cluster:
        ext["clusterName"] = cluster
    _simple_write(
        opts,
        "deleteTopic",
        {"topic": topic, "clusterName": cluster},
        RequestCode.DELETE_TOPIC_IN_NAMESRV,
        ext,
    )


@_admin_command("registerTopic")
@click.option("-t", "--topic", required=True, help="Topic name.")
@click.option("-b", "--brokerName", "broker_name", required=True, help="Broker name.")
@click.option(
    "-r",
    "--readQueueNums",
    "read_queues",
    type=click.IntRange(min=0),
    required=True,
    help="Read queues.",
)
@click.option(
    "-w",
    "--writeQueueNums",
    "write_queues",
    type=click.IntRange(min=0),
    required=True,
    help="Write queues.",
)
@click.option(
    "-p", "--perm", type=click.IntRange(0, 15), default=6, show_default=True, help="2 W, 4 R, 6 RW."
)
def register_topic(
    opts: Options, topic: str, broker_name: str, read_queues: int, write_queues: int, perm: int
) -> None:
    """Register a topic's queues for a broker.

    5.x REGISTER_TOPIC_IN_NAMESRV, on every name server.
    Servers answer SUCCESS even when they ignore it (the broker is unknown to them), and a
    4.9.x name server does not answer at all (exit 4).
    """
    queue = {
        "brokerName": broker_name,
        "perm": perm,
        "readQueueNums": read_queues,
        "topicSysFlag": 0,
        "writeQueueNums": write_queues,
    }
    body = fastjson.dumps({"brokerDatas": [], "filterServerTable": {}, "queueDatas": [queue]})
    _simple_write(
        opts,
        "registerTopic",
        {"topic": topic, "queueData": queue},
        RequestCode.REGISTER_TOPIC_IN_NAMESRV,
        {"topic": topic},
        body,
    )


# --------------------------------------------------------------------------- diff


@dataclass(slots=True)
class Snapshot:
    """What one name server knows: its brokers and every listed topic's route (None: none)."""

    addr: str
    cluster_info: dict[str, Any]
    routes: dict[str, dict[str, Any] | None]

    def brokers(self) -> dict[str, dict[str, Any]]:
        table = self.cluster_info.get("brokerAddrTable") or {}
        return {str(k): v if isinstance(v, dict) else {} for k, v in table.items()}


@dataclass(slots=True)
class Difference:
    """One fact the name servers disagree on, with every server's value (None = absent)."""

    kind: str  # broker | topic | queue
    field: str
    values: dict[str, Any]
    topic: str | None = None
    broker: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "topic": self.topic,
            "broker": self.broker,
            "field": self.field,
            "values": self.values,
        }


QUEUE_FIELDS: Final = ("perm", "readQueueNums", "writeQueueNums", "topicSysFlag")
_KIND_ORDER: Final = {"broker": 0, "topic": 1, "queue": 2}


def _broker_summary(data: dict[str, Any]) -> str:
    addrs = data.get("brokerAddrs") or {}
    listed = ", ".join(
        f"{k}={v}" for k, v in sorted(addrs.items(), key=lambda kv: _sort_id(_as_int(kv[0])))
    )
    return f"cluster {data.get('cluster')}: {listed}"


def _queue_summary(queue: dict[str, Any]) -> str:
    return (
        f"r={queue.get('readQueueNums')} w={queue.get('writeQueueNums')} "
        f"perm={queue.get('perm')} flag={queue.get('topicSysFlag', 0)}"
    )


def _route_summary(route: dict[str, Any] | None) -> str:
    if route is None:
        return "listed, no route"
    queues = sorted(route.get("queueDatas") or [], key=lambda q: str(q.get("brokerName")))
    return "; ".join(f"{q.get('brokerName')} {_queue_summary(q)}" for q in queues) or "no queues"


def _differs(values: dict[str, Any]) -> bool:
    first = next(iter(values.values()))
    return any(v != first for v in values.values())


def compare(snapshots: Sequence[Snapshot]) -> list[Difference]:
    """Every disagreement between the snapshots: brokers, addresses, topics, queue data."""
    diffs: list[Difference] = []
    brokers = {s.addr: s.brokers() for s in snapshots}
    for name in sorted({n for table in brokers.values() for n in table}):
        present = {a: table.get(name) for a, table in brokers.items()}
        if any(v is None for v in present.values()):
            values = {a: None if v is None else _broker_summary(v) for a, v in present.items()}
            diffs.append(Difference("broker", "broker", values, broker=name))
            continue
        groups = {a: v for a, v in present.items() if v is not None}
        clusters = {a: v.get("cluster") for a, v in groups.items()}
        if _differs(clusters):
            diffs.append(Difference("broker", "cluster", clusters, broker=name))
        addr_maps = {
            a: {str(_as_int(k)): addr for k, addr in (v.get("brokerAddrs") or {}).items()}
            for a, v in groups.items()
        }
        ids = sorted({i for m in addr_maps.values() for i in m}, key=lambda i: _sort_id(_as_int(i)))
        for broker_id in ids:
            values = {a: m.get(broker_id) for a, m in addr_maps.items()}
            if _differs(values):
                diffs.append(Difference("broker", f"brokerAddrs[{broker_id}]", values, broker=name))

    routes = {s.addr: s.routes for s in snapshots}
    for topic in sorted({t for table in routes.values() for t in table}):
        listed = {a: topic in table for a, table in routes.items()}
        if not all(listed.values()):
            values = {a: _route_summary(routes[a][topic]) if listed[a] else None for a in routes}
            diffs.append(Difference("topic", "topic", values, topic=topic))
            continue
        per_server = {a: table[topic] for a, table in routes.items()}
        if any(r is None for r in per_server.values()):
            if _differs({a: r is None for a, r in per_server.items()}):
                values = {a: _route_summary(r) for a, r in per_server.items()}
                diffs.append(Difference("topic", "route", values, topic=topic))
            continue
        queue_maps = {
            a: {str(q.get("brokerName")): q for q in r.get("queueDatas") or [] if q}
            for a, r in per_server.items()
            if r is not None
        }
        for broker in sorted({b for m in queue_maps.values() for b in m}):
            queues = {a: m.get(broker) for a, m in queue_maps.items()}
            if any(q is None for q in queues.values()):
                values = {a: None if q is None else _queue_summary(q) for a, q in queues.items()}
                diffs.append(Difference("queue", "queueData", values, topic=topic, broker=broker))
                continue
            for name in QUEUE_FIELDS:
                values = {a: q.get(name, 0) if q else None for a, q in queues.items()}
                if _differs(values):
                    diffs.append(Difference("queue", name, values, topic=topic, broker=broker))
        order_confs = {a: r.get("orderTopicConf") for a, r in per_server.items() if r is not None}
        if _differs(order_confs):
            diffs.append(Difference("topic", "orderTopicConf", order_confs, topic=topic))
    diffs.sort(key=lambda d: (_KIND_ORDER[d.kind], d.topic or "", d.broker or "", d.field))
    return diffs


async def take_snapshot(session: Session, addr: str, concurrency: int) -> Snapshot:
    info, topics = await asyncio.gather(
        fetch_cluster_info(session, addr), fetch_topic_list(session, addr)
    )
    return Snapshot(addr, info, await fetch_routes(session, addr, topics, concurrency))


def _diff_cell(value: Any) -> str:
    return ABSENT if value is None else str(value)


@_admin_command("diff")
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=DEFAULT_DIFF_CONCURRENCY,
    show_default=True,
    help="Route queries in flight at once, per name server.",
)
def diff(opts: Options, concurrency: int) -> None:
    """Show where the name servers disagree (exit 5).

    Name servers never talk to each other: each learns the routes only from the brokers'
    registrations, so a broker that cannot reach one of them makes them diverge silently
    (RocketMQ issue #4807). This asks every name server for its cluster info, its topic
    list and every topic's route, and lists brokers or broker addresses missing on some,
    topics missing on some, and queue data (perm, queue numbers, sys flag) that differ.
    """
    if len(opts.addrs) < 2:
        raise click.UsageError("diff needs at least two name servers in -n")

    async def job(session: Session) -> int:
        outcomes = await asyncio.gather(
            *(take_snapshot(session, a, concurrency) for a in opts.addrs),
            return_exceptions=True,
        )
        snapshots: list[Snapshot] = []
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
            snapshots.append(outcome)
        differences = compare(snapshots)
        summary = {
            s.addr: {"brokers": len(s.brokers()), "topics": len(s.routes)} for s in snapshots
        }
        if opts.json:
            _print_json(
                {
                    "namesrvs": opts.addrs,
                    "agree": not differences,
                    "summary": summary,
                    "differences": [d.to_json() for d in differences],
                }
            )
        else:
            _print_diff(opts.addrs, differences, summary)
        return EXIT_DIFFERENT if differences else EXIT_OK

    _run(opts, job)


def _print_diff(
    addrs: Sequence[str], differences: Sequence[Difference], summary: dict[str, dict[str, int]]
) -> None:
    console = _console()
    counts = ", ".join(
        f"{a}: {s['brokers']} brokers, {s['topics']} topics" for a, s in summary.items()
    )
    if not differences:
        console.print(Text(f"All {len(addrs)} name servers agree ({counts})."))
        return
    table = _table(None, "Kind", "Topic", "Broker", "Field", *addrs)
    for d in differences:
        _row(table, d.kind, d.topic, d.broker, d.field, *(_diff_cell(d.values[a]) for a in addrs))
    console.print(table)
    console.print(Text(f"{len(differences)} differences ({counts})."))


__all__ = ["EXIT_DIFFERENT", "EXIT_ERROR_ANSWER", "EXIT_TIMEOUT", "EXIT_UNREACHABLE", "admin"]
