"""``pynamesrv simulate``: load and chaos against running name servers, from fake brokers.

The options map one to one onto ``pynamesrv.simulate.SimConfig``; this module only parses
them, picks the event loop (uvloop when installed, as ``serve`` does), raises the open-file
limit a thousand broker connections need, and chooses between the live view (a terminal) and
plain progress lines (a pipe or a CI log).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.live import Live
from rich.table import Table

from pynamesrv.cli.plain import one_line, table_lines
from pynamesrv.cli.serve import install_event_loop_policy
from pynamesrv.simulate import PartitionSpec, SimConfig, run_simulation
from pynamesrv.simulate.progress import Snapshot, live_table, plain_line
from pynamesrv.simulate.report import print_summary, summary_parts


def _raise_file_limit(needed: int) -> None:
    """Each broker holds one connection per name server; 1,024 descriptors is not enough."""
    try:
        import resource
    except ImportError:  # not on Windows
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        target = needed if hard == resource.RLIM_INFINITY else min(needed, hard)
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def _parse_partitions(
    ctx: click.Context, param: click.Parameter, values: tuple[str, ...]
) -> list[PartitionSpec]:
    specs = []
    for value in values:
        for item in filter(None, (v.strip() for v in value.split(","))):
            try:
                specs.append(PartitionSpec.parse(item))
            except ValueError as exc:
                raise click.BadParameter(str(exc), ctx=ctx, param=param) from exc
    return specs


async def _main(config: SimConfig, console: Console, mode: str) -> dict[str, Any]:
    """Run with Ctrl-C ending the run early (the summary still follows)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    if mode == "none":
        return await run_simulation(config, stop=stop)
    if mode == "live":
        with Live(console=console, auto_refresh=False, transient=False) as view:

            def show(snapshot: Snapshot) -> None:
                view.update(live_table(snapshot), refresh=True)

            return await run_simulation(
                config, on_progress=show, progress_interval_s=0.25, stop=stop
            )

    def line(snapshot: Snapshot) -> None:
        console.print(plain_line(snapshot), highlight=False, soft_wrap=True)

    interval = max(1.0, min(5.0, config.duration_s / 10))
    return await run_simulation(config, on_progress=line, progress_interval_s=interval, stop=stop)


def summary_lines(summary: dict[str, Any]) -> list[str]:
    """The summary's tables as plain lines (``pynamesrv.cli.plain``), a blank line between
    them: what a pipe or a log file gets instead of rich tables."""
    lines: list[str] = []
    for part in summary_parts(summary):
        if isinstance(part, Table):
            if lines:
                lines.append("")
            lines += table_lines(part)
        else:
            lines.append(one_line(part.plain))
    return lines


def _chaos_option(flag: str, dest: str, help_text: str) -> Callable[[Any], Any]:
    """How many brokers a kind of chaos hits."""
    return click.option(flag, dest, type=click.IntRange(min=0), default=0, help=help_text)


@click.command()
@click.option(
    "-n",
    "--namesrv",
    default="127.0.0.1:9876",
    show_default=True,
    envvar="NAMESRV_ADDR",
    help="Name servers, 'host:port;host:port'.",
)
@click.option(
    "--brokers",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="Broker groups (names sim-broker-0000, ...).",
)
@click.option(
    "--clusters",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Clusters the groups are spread over.",
)
@click.option(
    "--slaves",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Slaves per group (broker ids 1..S).",
)
@click.option(
    "--topics",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="Topics per group; names are shared so a topic has several groups.",
)
@click.option(
    "--brokers-per-topic",
    type=click.IntRange(min=1),
    default=3,
    show_default=True,
    help="Groups serving each topic (sizes the shared topic set).",
)
@click.option(
    "--queues",
    type=click.IntRange(min=1),
    default=8,
    show_default=True,
    help="Read and write queues per topic.",
)
@click.option(
    "--register-period",
    type=click.FloatRange(min=0, min_open=True),
    default=30.0,
    show_default=True,
    help="Seconds between registrations of each broker.",
)
@click.option(
    "--heartbeat-timeout",
    type=click.IntRange(min=1),
    default=None,
    help="heartbeatTimeoutMillis sent with each registration (server default 120 s).",
)
@click.option("--compressed", is_flag=True, help="Send compressed registration bodies.")
@click.option(
    "--query-rate",
    type=click.FloatRange(min=0),
    default=100.0,
    show_default=True,
    help="Route queries per second, in total.",
)
@click.option(
    "--query-clients",
    type=click.IntRange(min=1),
    default=4,
    show_default=True,
    help="Query connections (spread over the name servers, at least one each).",
)
@click.option(
    "--probe-share",
    type=click.FloatRange(0, 1),
    default=0.5,
    show_default=True,
    help="Share of queries aimed at topics of brokers hit by chaos (measures "
    "detection precisely); the rest pick topics Zipf-ishly.",
)
@click.option(
    "--duration",
    type=click.FloatRange(min=0, min_open=True),
    default=60.0,
    show_default=True,
    help="Seconds to run.",
)
@click.option("--seed", type=int, default=None, help="Random seed (printed; default random).")
@_chaos_option("--kill", "kills", "Brokers that stop heartbeating silently (connection held open).")
@_chaos_option("--stop", "stops", "Brokers that shut down gracefully (unregister).")
@_chaos_option(
    "--drop", "drops", "Brokers whose connections drop (they reconnect at the next period)."
)
@_chaos_option("--flap", "flaps", "Brokers that go down and up every --flap-interval seconds.")
@click.option(
    "--flap-interval",
    type=click.FloatRange(min=0, min_open=True),
    default=3.0,
    show_default=True,
    help="Seconds down, then seconds up, of a flapping broker.",
)
@click.option(
    "--partition",
    "partitions",
    multiple=True,
    callback=_parse_partitions,
    metavar="BROKER@HOST:PORT:SECONDS",
    help="That group cannot reach that name server for a while (repeatable; "
    "BROKER is a name like sim-broker-0003 or a group index).",
)
@click.option(
    "--timeout",
    "timeout_s",
    type=click.FloatRange(min=0, min_open=True),
    default=3.0,
    show_default=True,
    help="Request timeout in seconds.",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write the summary as JSON to this file ('-' for stdout).",
)
@click.option("--no-progress", is_flag=True, help="No live view or progress lines.")
def simulate(
    namesrv: str,
    brokers: int,
    clusters: int,
    slaves: int,
    topics: int,
    brokers_per_topic: int,
    queues: int,
    register_period: float,
    heartbeat_timeout: int | None,
    compressed: bool,
    query_rate: float,
    query_clients: int,
    probe_share: float,
    duration: float,
    seed: int | None,
    kills: int,
    stops: int,
    drops: int,
    flaps: int,
    flap_interval: float,
    partitions: list[PartitionSpec],
    timeout_s: float,
    json_path: Path | None,
    no_progress: bool,
) -> None:
    """Simulate brokers and route-query clients against name servers, with chaos.

    Fake brokers (127.0.0.X addresses, no process behind them) register every
    --register-period; clients query routes; kills, stops, drops, flaps and partitions hit
    random brokers at seeded random moments. The summary reports registrations, route
    answers, errors, and for each chaos event how long the clients took to stop (and start
    again) seeing the broker in its topics' routes, per name server.
    """
    seed = random.SystemRandom().randrange(2**31) if seed is None else seed
    config = SimConfig(
        namesrv=[a.strip() for a in namesrv.split(";") if a.strip()],
        brokers=brokers,
        clusters=clusters,
        slaves=slaves,
        topics=topics,
        brokers_per_topic=brokers_per_topic,
        queues=queues,
        register_period_s=register_period,
        heartbeat_timeout_ms=heartbeat_timeout,
        compressed=compressed,
        query_rate=query_rate,
        query_clients=query_clients,
        duration_s=duration,
        seed=seed,
        kills=kills,
        stops=stops,
        drops=drops,
        flaps=flaps,
        flap_interval_s=flap_interval,
        partitions=partitions,
        probe_share=probe_share,
        request_timeout_s=timeout_s,
    )
    try:
        config.validate()
    except ValueError as exc:
        raise click.UsageError(str(exc)) from exc
    # Failed registrations are counted in the summary; a log line each would drown it.
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    _raise_file_limit(brokers * (1 + slaves) * len(config.namesrv) + query_clients + 256)
    install_event_loop_policy()

    to_stdout = json_path is not None and str(json_path) == "-"
    console = Console(stderr=to_stdout, highlight=False)
    mode = "none" if no_progress else "live" if console.is_terminal else "plain"
    console.print(
        f"simulate: {brokers} groups x {1 + slaves} brokers, {topics} topics each, against "
        f"{'; '.join(config.namesrv)} for {duration:g}s (seed {seed})",
        highlight=False,
        soft_wrap=True,  # one line, however many name servers
    )
    if heartbeat_timeout is not None and heartbeat_timeout < register_period * 1000 + 300:
        # The name server would expire healthy brokers between two registrations, and the
        # report would blame the name server for the operator's choice.
        click.echo(
            f"warning: --heartbeat-timeout {heartbeat_timeout} ms leaves less than 300 ms "
            f"over --register-period {register_period:g} s: live brokers will expire",
            err=True,
        )
    summary = asyncio.run(_main(config, console, mode))
    if console.is_terminal:
        print_summary(console, summary)
    else:  # a pipe or a file: plain lines, one record each, nothing wrapped
        for line in summary_lines(summary):
            click.echo(line, err=to_stdout)
    if json_path is not None:
        text = json.dumps(summary, indent=2)
        if to_stdout:
            click.echo(text)
        else:
            json_path.write_text(text + "\n")
    regs = summary["registrations"]
    if regs["ok"] == 0 and regs["failed"] > 0:
        raise click.ClickException("no registration succeeded: is a name server listening?")
