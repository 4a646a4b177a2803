"""NamesrvController: wires the parts together and owns the lifecycle and timers.

Start order follows Java (config-and-storage.md §1): load the KV file, then open the port,
then schedule the expiry scan (first run after 5 s, then every ``scanNotActiveBrokerInterval``)
and the periodic KV print. Before the port opens, the routes are recovered from the journal
(``recovery``, warmRestart), so the first answer is already the one before the restart. Disk
writes go to a single worker thread so they leave the event loop but keep their order.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from time import perf_counter
from typing import Final

from pynamesrv import __version__
from pynamesrv.namesrv.acl import AccessControl
from pynamesrv.namesrv.addresses import is_loopback_host
from pynamesrv.namesrv.config import ConfigRegistry, NamesrvConfig
from pynamesrv.namesrv.eventlog import EventLog, iso_ms
from pynamesrv.namesrv.events import ConfigChanged, Event, RouteQueries
from pynamesrv.namesrv.fastpath import RouteQueryFastPath
from pynamesrv.namesrv.filestore import (
    FileInUse,
    FileLock,
    atomic_write,
    discard,
    lock_beside,
    path_problem,
    remove_leftovers,
    unlock,
)
from pynamesrv.namesrv.heap import HeapKeeper
from pynamesrv.namesrv.journal import Journal, JournalDamage, instance_dir_name
from pynamesrv.namesrv.kvconfig import KvConfigManager
from pynamesrv.namesrv.notifier import MinBrokerIdNotifier, Send, send_request
from pynamesrv.namesrv.processor import DefaultRequestProcessor, FileData
from pynamesrv.namesrv.recovery import Recovered, recover
from pynamesrv.namesrv.routes import RouteInfoManager
from pynamesrv.namesrv.statepaths import has_hour_files, journal_root, legacy_journal
from pynamesrv.namesrv.stats import NamesrvStats
from pynamesrv.namesrv.view import NamesrvView
from pynamesrv.namesrv.workers import RemoteChannel, WorkerPool
from pynamesrv.remoting.codes import RequestCode, ResponseCode, Version
from pynamesrv.remoting.command import RemotingCommand
from pynamesrv.remoting.fdbudget import open_file_limit, remoting_cap
from pynamesrv.remoting.logtext import name
from pynamesrv.remoting.proxy_protocol import ProxyMode, ProxyPolicy, parse_networks
from pynamesrv.remoting.server import Answer, Connection, RemotingServer, ServerLimits
from pynamesrv.remoting.tls import TlsContextHolder, TlsSettings

log = logging.getLogger("pynamesrv")

FIRST_SCAN_DELAY_S: Final = 5.0
MAX_EXPIRY_DELAY_S: Final = 1.0  # an expired broker leaves the routes within this
# ``lock_beside`` adds ``.lock``: the journal's instance directory holds ``writer.lock``
# (readers take only ``events-*`` files).
JOURNAL_LOCK_NAME: Final = "writer"
# What a state file's lock meets where the server may not write: a read-only -c file.
_READ_ONLY_ERRORS: Final = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})
# What a broker sends to stay routed: answered GO_AWAY during a drain, they still count as
# a sign of life (the broker is up; it registers elsewhere).
_LIVENESS_CODES: Final = frozenset(
    {RequestCode.REGISTER_BROKER, RequestCode.BROKER_HEARTBEAT, RequestCode.QUERY_DATA_VERSION}
)
KV_PRINT_FIRST_S: Final = 60.0
KV_PRINT_PERIOD_S: Final = 600.0


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def server_limits(config: NamesrvConfig) -> ServerLimits:
    """The remoting server's limits from the config (0 water marks: the server's own);
    ``maxConnections`` at most what the open-file limit leaves it (``fdbudget``)."""
    nofile = open_file_limit()
    max_connections = remoting_cap(config.max_connections, nofile)
    if max_connections < config.max_connections:
        log.info(
            "maxConnections=%d is more than the open-file limit (%s) leaves the remoting "
            "port: at most %d connections (raise the limit, e.g. ulimit -n, for more)",
            config.max_connections,
            nofile,
            max_connections,
        )
    limits = ServerLimits(
        max_frame_length=config.frame_max_length,
        idle_seconds=config.server_channel_max_idle_time_seconds,
        max_connections=max_connections,
        max_connections_per_source=config.max_connections_per_source,
        max_buffered_bytes=config.max_buffered_bytes,
        max_pending_answer_bytes=config.max_pending_answer_bytes,
        frame_read_timeout_s=config.frame_read_timeout_seconds,
        send_buffer=config.server_socket_snd_buf_size,
        receive_buffer=config.server_socket_rcv_buf_size,
    )
    if config.write_buffer_high_water_mark:
        limits.write_high_water = config.write_buffer_high_water_mark
    if config.write_buffer_low_water_mark:
        limits.write_low_water = config.write_buffer_low_water_mark
    return limits


def os_reason(cause: OSError) -> str:
    """The system's words for an error ("address already in use"), not the message asyncio
    wraps them in (which shows the address as a Python tuple)."""
    if cause.errno:
        return os.strerror(cause.errno).lower()
    return (cause.strerror or str(cause)).lower()


class ListenError(OSError):
    """A port could not be bound; names the port and the config key that sets it."""

    def __init__(self, key: str, host: str, port: int, cause: OSError) -> None:
        reason = os_reason(cause)
        super().__init__(cause.errno, f"cannot listen on {host}:{port}: {reason} ({key})")
        self.key, self.host, self.port, self.reason = key, host, port, reason


class StateFileInUse(OSError):
    """A state file (kvConfigPath, configStorePath) or the journal's instance directory is
    locked by another running server, or its lock cannot be taken; the message is the one
    line ``serve`` prints."""

    def __init__(self, key: str, path: Path, cause: OSError, *, advice: str = "") -> None:
        if isinstance(cause, FileInUse):
            text = f"{key} {path} is in use by another name server{cause.holder}: " + (
                advice or f"give each instance on this host its own {key}"
            )
        else:
            text = f"cannot lock {key} {path}: {path_problem(path, cause)}"
        super().__init__(cause.errno, text)
        self.key, self.path = key, path

    def __str__(self) -> str:
        return str(self.args[-1])


class PathError(OSError):
    """A directory the server writes to cannot be created; names the key that sets it."""

    def __init__(self, key: str, path: Path, cause: OSError) -> None:
        super().__init__(cause.errno, f"cannot create {key} {path}: {path_problem(path, cause)}")
        self.key, self.path = key, path

    def __str__(self) -> str:
        return str(self.args[-1])


class NamesrvController:
    def __init__(
        self,
        config: NamesrvConfig | None = None,
        *,
        host: str | None = None,
        registry: ConfigRegistry | None = None,
        tls: TlsSettings | None = None,
        clock_ms: Callable[[], int] = now_ms,
        auto_expiry: bool = True,
        notify_send: Send = send_request,
    ) -> None:
        """``tls`` defaults to the ``tls.*`` keys of the config (``ValueError`` when they are
        wrong or their files do not load). ``clock_ms`` is the clock of route state (broker
        liveness, the start-up wait); with ``auto_expiry`` False nothing expires brokers but
        calls of ``scan_expired``, so a replay with a scripted clock decides when. ``notify_send``
        delivers NOTIFY_MIN_BROKER_ID_CHANGE (a test stands in for the broker with it)."""
        self.registry = registry or ConfigRegistry(config or NamesrvConfig())
        self.config = self.registry.config
        self.tls_settings = tls or TlsSettings.from_properties(self.config.tls_properties())
        self.tls = TlsContextHolder(self.tls_settings)
        self.http_tls: TlsContextHolder | None = None  # HTTPS when a certificate is set
        if self.config.http_tls_cert_path:
            self.http_tls = TlsContextHolder(
                TlsSettings.for_https(
                    self.config.http_tls_cert_path,
                    self.config.http_tls_key_path,
                    self.config.http_tls_key_password,
                )
            )
        self.host = host if host is not None else self.config.bind_address
        self.clock_ms = clock_ms
        self.auto_expiry = auto_expiry
        self.routes = RouteInfoManager(
            java5=self.config.rocketmq_remoting_version >= Version.V5_0_0,
            support_acting_master=self.config.support_acting_master,
        )
        self.kv = KvConfigManager()
        self.stats = NamesrvStats()
        # Raises AclFileError (one line) on a bad accounts file: better not to start than to
        # serve with admin writes open that the operator meant to close.
        self.access = AccessControl.from_config(self.config)
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="namesrv-persist")
        self.heap = HeapKeeper()
        self.processor = DefaultRequestProcessor(
            self.routes,
            self.kv,
            self.registry,
            on_events=self.on_events,
            write_file=self._write_file,
            stats=self.stats,
            clock_ms=clock_ms,
            access=self.access,
            heap=self.heap,
        )
        limits = server_limits(self.config)
        self.route_fast_path = RouteQueryFastPath(
            self.routes,
            self.stats,
            self.processor.cached_answers_valid,
            self.processor.route_template,
            max_answer_bytes=limits.write_high_water,
        )
        reads_checked = self.access is not None and self.access.read_required
        use_fast_path = self.config.route_query_fast_path and not reads_checked
        self.server = RemotingServer(
            self.handle,
            on_close=self._on_connection_closed,
            # A connection a broker registered on is never shed to make room for another.
            protected=self.routes.serves_brokers,
            # The fast path answers route queries unread: not when each must be signed.
            raw_answerer=self.route_fast_path if use_fast_path else None,
            limits=limits,
            backlog=self.config.server_socket_backlog,
            tls=self.tls,
            proxy=ProxyPolicy(
                ProxyMode(self.config.proxy_protocol),
                parse_networks(self.config.proxy_protocol_trusted_addresses),
                # Addresses guard ACL checks once aclFile is set: no one's headers then,
                # until the balancers are named.
                trust_any=self.access is None,
            ),
        )
        self.port = 0
        self.bound_host = ""
        self._locks: list[FileLock] = []  # of the state files, held while running
        # The config store could not be locked for lack of write access (a read-only -c
        # file): UPDATE_NAMESRV_CONFIG then answers "persist failed", nothing is written.
        self.config_store_read_only = False
        self._journal_locked = False  # the journal's instance directory is among them
        self._bound = False
        self._served = False
        self.journal: Journal | None = None
        self.recovered: Recovered | None = None  # what start() recovered from the journal
        # What recovery had to skip of a damaged journal (told in the log, /healthz and the
        # server_started line).
        self.journal_damage = JournalDamage()
        self._recovering = False  # provisional brokers left (logged once when none is)
        self._window_start_ms = 0
        self._stopped = False
        self.going_away = False  # a graceful shutdown answers new clients GO_AWAY
        # Connections answered GO_AWAY: their close is the drain's doing, not the brokers'.
        self._sent_away: set[Connection] = set()
        self._timers: list[asyncio.Task[None]] = []
        self.notifier = MinBrokerIdNotifier(
            self.config, self.config.rocketmq_remoting_version, send=notify_send
        )
        self._listeners: list[Callable[[list[Event]], None]] = [
            self.stats.on_events,
            self._apply_live_settings,
            EventLog(),
            self.notifier.on_events,
        ]
        self._listeners.append(self.heap.on_events)
        self.view = NamesrvView(self)
        # serve --workers: the worker pool (namesrv.workers), set by the composition root;
        # the remoting port is then bound with SO_REUSEPORT, shared with the workers.
        self.workers: WorkerPool | None = None
        self.shared_port = False

    def add_listener(self, listener: Callable[[list[Event]], None]) -> None:
        """Be told of every state change (the journal and the tests listen here)."""
        self._listeners.append(listener)

    # ------------------------------------------------------------------ lifecycle

    @property
    def instance(self) -> str:
        """This server's name in the journal: instanceName, else host:port."""
        return self._instance_on(self.port)

    def _instance_on(self, port: int) -> str:
        if self.config.instance_name:
            return self.config.instance_name
        host = self.host if self.host not in ("", "0.0.0.0", "::") else socket.gethostname()
        return f"{host}:{port}"

    @property
    def journal_root(self) -> Path:
        return journal_root(self.config)

    async def start(self) -> None:
        """``bind``, then ``serve``."""
        await self.bind()
        await self.serve()

    async def bind(self) -> None:
        """Everything that may refuse the start, before anything is written: own the state
        files (a lock each; only then are an interrupted write's leftovers ours to remove),
        load the KV file, recover the routes, bind the remoting port (not accepting yet).
        Raises ``StateFileInUse``, ``PathError``, ``KvConfigError`` or ``ListenError``;
        whatever it took is released then, and the lock files and directories it created are
        removed: a refused start leaves nothing behind. The caller binds its other ports,
        then calls ``serve``."""
        try:
            self._lock_state_file("kvConfigPath", Path(self.config.kv_config_path))
            self._lock_config_store()
            if self.config.journal_enable and (
                self.config.instance_name or self.config.listen_port != 0
            ):  # before recovery reads it; a directory not there yet is locked at its creation
                self._lock_journal(self._instance_on(self.config.listen_port), create=False)
            owned = [self.config.kv_config_path]
            if not self.config_store_read_only:
                owned.append(self.config.config_store_path)
            for path in owned:
                for leftover in remove_leftovers(Path(path)):
                    log.info("removed %s, left by an interrupted write", leftover)
            self.kv.load(Path(self.config.kv_config_path))
            if self.config.journal_enable and self.config.warm_restart:
                await self._recover()
            try:
                self.bound_host, self.port = await self.server.start(
                    self.host, self.config.listen_port, serving=False, reuse_port=self.shared_port
                )
            except ValueError as exc:  # SO_REUSEPORT missing: serverWorkers cannot work here
                cause = OSError(f"no SO_REUSEPORT here, which serverWorkers > 1 needs ({exc})")
                raise ListenError("listenPort", self.host, self.config.listen_port, cause) from exc
            except OSError as exc:
                raise ListenError("listenPort", self.host, self.config.listen_port, exc) from exc
        except BaseException:
            self._unlock_state_files(discard_created=True)
            raise
        self._bound = True

    def _lock_config_store(self) -> None:
        """Own the config store, as the KV store, so that two servers never write one file;
        unless it cannot be written at all (a read-only -c file: a ConfigMap, /etc under
        ProtectSystem): then nothing is written beside it, and UPDATE_NAMESRV_CONFIG answers
        "persist failed" (``config_store_read_only``)."""
        path = Path(self.config.config_store_path).absolute()
        if path == Path(self.config.kv_config_path).absolute():
            return  # one file, one lock: the KV store's
        try:
            self._lock_state_file("configStorePath", path)
        except StateFileInUse as exc:
            if isinstance(exc.__cause__, FileInUse) or exc.errno not in _READ_ONLY_ERRORS:
                raise
            self.config_store_read_only = True

    def _lock_state_file(self, key: str, path: Path) -> None:
        """One lock per state file: a second server with the same kvConfigPath or
        configStorePath is refused instead of sharing (and overwriting) it."""
        path = path.absolute()
        try:
            self._locks.append(lock_beside(path))
        except OSError as exc:
            registry = self.registry
            derived = key not in registry.explicit and not (
                key == "configStorePath" and registry.loaded_from is not None
            )  # placed by stateDir, not by a key of the operator's (nor the -c file itself)
            advice = f"give each instance on this host its own stateDir (or {key})"
            raise StateFileInUse(key, path, exc, advice=advice if derived else "") from exc

    def _lock_journal(self, instance: str, *, create: bool) -> None:
        """Own the journal's instance directory (``<journalDir>/<instance>/writer.lock``,
        held while the server runs): two servers with the same instanceName and journal root
        would append to the same hour files, and each recover routes only the other saw.
        Taken before recovery reads the directory; one that does not exist yet (nothing to
        recover) is created and locked when the journal starts (``create``), so a refused
        start still writes nothing. ``StateFileInUse`` names the directory."""
        if self._journal_locked:
            return
        directory = self.journal_root / instance_dir_name(instance)
        if not create and not directory.is_dir():
            return
        try:
            self._locks.append(lock_beside(directory / JOURNAL_LOCK_NAME))
        except FileInUse as exc:
            raise StateFileInUse(
                "journal",
                directory,
                exc,
                advice="give each name server its own instanceName (or journalDir)",
            ) from exc
        except OSError as exc:
            raise PathError("journalDir", self.journal_root, exc) from exc
        self._journal_locked = True

    def _unlock_state_files(self, *, discard_created: bool = False) -> None:
        """Let the state files go; ``discard_created`` after a start that did not complete:
        remove the lock files and directories it created, so it leaves nothing behind."""
        for lock in reversed(self._locks):
            if discard_created:
                discard(lock)
            else:
                unlock(lock)
        self._locks = []
        self._journal_locked = False

    async def serve(self) -> None:
        """Start the journal, accept on the bound port, log boot success, start the timers."""
        if not self._bound:
            raise RuntimeError("serve() before bind()")
        host = self.bound_host
        self.config.listen_port = self.port  # an ephemeral port (0) reports what it bound
        # The journal (named after the port) is listening before the first request: a
        # recovered broker registering at once is journaled after its broker_recovered line.
        journal_dir: Path | None = None
        journal_new = False
        if self.config.journal_enable:
            journal_dir = self.journal_root / instance_dir_name(self.instance)
            journal_new = not has_hour_files(journal_dir)
            self._lock_journal(self.instance, create=True)
            try:
                await self._start_journal()
            except OSError as exc:
                raise PathError("journalDir", self.journal_root, exc) from exc
        await self.server.serve()
        self._served = True
        self._log_state(journal_dir, journal_new)
        log.info("The Name Server boot success. serializeType=JSON, address %s:%d", host, self.port)
        log.info("%s", self.tls_settings.describe())
        self._log_proxy_protocol()
        self._log_access(host)
        self._timers += [
            asyncio.create_task(self._every(KV_PRINT_FIRST_S, KV_PRINT_PERIOD_S, self.print_kv)),
        ]
        if self.auto_expiry:
            self._timers.append(asyncio.create_task(self._expiry_loop()))
        self.heap.freeze()

    def _log_state(self, journal_dir: Path | None, journal_new: bool) -> None:
        """One line naming where the state is and whether the routes were recovered; a
        WARNING when the journal is new (or empty) while the KV store is not, the sign of a
        state directory that moved (or of a journal left where an earlier version put it)."""
        config = self.config
        entries = sum(len(keys) for keys in self.kv.table.values())
        store = f"config store {Path(config.config_store_path).absolute()}"
        if self.config_store_read_only:
            store += " (read-only: updateNamesrvConfig answers 'persist failed')"
        parts = [
            f"state directory {Path(config.state_dir).absolute()}",
            f"KV store {Path(config.kv_config_path).absolute()} ({entries} entries)",
            store,
        ]
        warnings = []
        if journal_dir is None:
            parts.append("journal off: routes not recovered")
        else:
            parts.append(f"journal {journal_dir.absolute()} ({self._recovery(journal_new)})")
            if journal_new and entries:
                warnings.append(
                    "the journal is new while the KV store is not: if the state moved, point "
                    "stateDir (or journalDir) at the old journal, or routes come back only as "
                    "brokers register again"
                )
            legacy = legacy_journal(
                config, instance_dir_name(self.instance), self.registry.explicit
            )
            if journal_new and legacy is not None:
                warnings.append(
                    f"this instance's journal is at {legacy.absolute()}, where versions before "
                    f"stateDir put it (<rocketmqHome>/journal): set journalDir="
                    f"{legacy.parent.absolute()} to recover from it"
                )
        level = logging.WARNING if warnings else logging.INFO
        log.log(level, "%s", "; ".join(parts + warnings))

    def _recovery(self, journal_new: bool) -> str:
        """What the warm restart made of the journal, in a few words."""
        found = self.recovered
        if found is not None and found.brokers:
            return f"recovered {found.brokers} brokers and {found.topics} topics"
        if journal_new:
            return "new: no routes to recover"
        if not self.config.warm_restart:
            return "routes not recovered: warmRestart=false"
        if found is None:
            return "routes not recovered: no snapshot in it"
        if found.expired_on_load:
            return "routes not recovered: every broker expired while the server was down"
        return "routes not recovered: it ends with no broker"

    def _log_proxy_protocol(self) -> None:
        """Say whose PROXY headers are believed."""
        policy = self.server.proxy
        if policy.mode is ProxyMode.OFF:
            return
        if policy.trusted:
            whose = ", ".join(str(n) for n in policy.trusted)
        elif policy.trust_any:
            whose = (
                "any address, as Java (no ACL address check depends on it; set "
                "proxyProtocolTrustedAddresses to the load balancers)"
            )
        else:
            whose = (
                "no address: aclFile is set, so name the load balancers in "
                "proxyProtocolTrustedAddresses"
            )
        log.info("PROXY protocol %s: headers from %s", policy.mode.value, whose)

    def _log_access(self, host: str) -> None:
        """Say how admin writes are guarded; warn when anyone on the network may make them."""
        if self.access is not None:
            status = self.access.status()
            log.info(
                "admin writes need a signature of an admin account (aclFile %s: %d accounts, "
                "%d admin); registration %s, reads %s; a live broker's entry changes from "
                "another connection only with its bound account's signature, and is "
                "unregistered only over its own connection while that is open",
                status["aclFile"],
                status["accounts"],
                status["admins"],
                "signed" if status["registrationAuth"] else "open",
                "signed" if status["readAuth"] else "open",
            )
        elif not is_loopback_host(host):
            log.warning(
                "admin writes are open: anyone who reaches %s:%d may change the config, KV "
                "store and topic permissions, and move or unregister any live broker; set "
                "aclFile to require signed requests",
                host,
                self.port,
            )

    async def _recover(self) -> None:
        """Load the routes this instance's journal ends with (before the port opens, so the
        first answer is already warm). The instance, hence the directory, must be known
        before binding: with listenPort=0 only instanceName names it."""
        if not self.config.instance_name and self.config.listen_port == 0:
            log.info("routes not recovered: listenPort=0 without instanceName names no journal")
            return
        instance = self._instance_on(self.config.listen_port)
        directory = self.journal_root / instance_dir_name(instance)
        # Nothing else touches the registry before the port opens: a worker thread may fill it.
        self.recovered = await asyncio.get_running_loop().run_in_executor(
            None, recover, directory, self.routes, self.clock_ms(), instance, self.journal_damage
        )
        found = self.recovered
        if found is None:
            log.info("routes not recovered: no snapshot in the journal %s", directory)
        elif found.brokers:
            log.info(
                "routes recovered from the journal: %d brokers (provisional until they register "
                "again or expire), %d topics, as of %s (snapshot %s + %d lines); %d brokers "
                "expired while the server was down; %d ms",
                found.brokers,
                found.topics,
                iso_ms(found.from_ts),
                iso_ms(found.snapshot_ts),
                found.events,
                found.expired_on_load,
                found.load_ms,
            )
            self._recovering = True
            self.add_listener(self._watch_recovery)
        elif found.expired_on_load:
            log.info(
                "routes not recovered: the heartbeat timeout of all %d brokers of the journal "
                "(as of %s) passed while the server was down",
                found.expired_on_load,
                iso_ms(found.from_ts),
            )
        else:
            log.info("routes not recovered: the journal (as of %s) ends with no broker",
                     iso_ms(found.from_ts))  # fmt: skip

    def _watch_recovery(self, events: list[Event]) -> None:
        """Say once when the last provisional broker registered again or expired."""
        if self._recovering and self.routes.provisional_count == 0:
            self._recovering = False
            log.info("recovery complete: every recovered broker registered again or expired")

    async def _start_journal(self) -> None:
        journal = Journal(
            self.journal_root,
            self.instance,
            flush_interval_s=self.config.journal_flush_interval_ms / 1000,
            clock_ms=now_ms,
            retention_hours=self.config.journal_retention_hours,
            max_bytes=self.config.journal_max_bytes,
            max_pending_bytes=self.config.journal_max_pending_bytes,
        )
        await journal.start()  # only a started journal is ours to stop
        self.journal = journal
        self.stats.count_topics = True
        self.add_listener(self.journal.on_events)
        self.journal.on_snapshot_wanted = self.record_snapshot
        recovered = self.recovered.to_record() if self.recovered is not None else None
        started_ms = journal.clock_ms()
        self.journal.record(
            "server_started",
            ts=started_ms,
            version=__version__,
            config=self.registry.all_properties(),
            recovered=recovered,
            damaged=self.journal_damage.to_record() or None,
        )
        # Each recovered broker's session goes on from the start (docs/journal.md, Recovery):
        # its line takes the start's ts, not a later reading of the clock.
        recovered_events = self.routes.recovered_events()
        for event in recovered_events:
            event.mark_applied(started_ms)
        self.journal.on_events(recovered_events)
        self.record_snapshot()
        snapshot_s = self.config.journal_snapshot_interval_ms / 1000
        self._window_start_ms = now_ms()
        self._timers += [
            asyncio.create_task(self._every(snapshot_s, snapshot_s, self.record_snapshot)),
            asyncio.create_task(self._route_query_windows()),
        ]

    def record_snapshot(self) -> None:
        if self.journal is not None:
            self.journal.record_snapshot(self.routes.snapshot())

    async def _route_query_windows(self) -> None:
        """One ``route_queries`` line at the end of each window, aligned to the clock."""
        window = self.config.route_queries_window_ms
        while True:
            # A sleep may end a little before the wall clock reaches ``end`` (the loop's
            # clock is monotonic): the next window then starts at that end, not again.
            now = max(now_ms(), self._window_start_ms)
            end = (now // window + 1) * window
            await asyncio.sleep((end - now) / 1000)
            self.record_route_queries(end)

    def record_route_queries(self, end_ms: int) -> None:
        """Write the counts of [window start, end_ms) and start a new window (bounded:
        ``NamesrvStats.take_topic_counts``)."""
        if self.journal is None:
            return
        taken = self.stats.take_topic_counts(self.route_fast_path.take_hits())
        if end_ms <= self._window_start_ms:
            # A stop right after a window closed: no zero-length (or backwards) window with
            # the last one's ts; what was counted meanwhile gets a 1 ms window after it.
            if not (
                taken.counts
                or taken.misses
                or taken.counts_other
                or taken.misses_other
                or taken.misses_too_long
            ):
                return
            end_ms = self._window_start_ms + 1
        line = RouteQueries(
            window_ms=end_ms - self._window_start_ms,
            counts=taken.counts,
            misses=taken.misses,
            misses_other=taken.misses_other or None,
            misses_too_long=taken.misses_too_long or None,
            counts_other=taken.counts_other or None,
        ).to_record()
        self.journal.record(line.pop("type"), ts=end_ms, **line)
        self._window_start_ms = end_ms

    async def stop(self) -> None:
        """Stop serving; calling it again does nothing."""
        if self._stopped:
            return
        self._stopped = True
        for timer in self._timers:
            timer.cancel()
        await asyncio.gather(*self._timers, return_exceptions=True)
        self._timers = []
        await self.notifier.stop()
        if self.journal is not None:
            # Closing the connections below is our doing, not the brokers' failure: the
            # journal ends with the state as it was, and sessions end at server_stopped.
            self.record_route_queries(now_ms())
            self.record_snapshot()
            self.journal.record("server_stopped", version=__version__, config={})
            self._listeners.remove(self.journal.on_events)
            await self.journal.stop()
            self.journal = None
        await self.server.stop()
        await asyncio.get_running_loop().run_in_executor(self._writer, lambda: None)
        self._writer.shutdown(wait=True)
        # After the last write; a start that never served leaves nothing it created.
        self._unlock_state_files(discard_created=not self._served)
        self.heap.release()
        if self._served:  # a start refused after bind() never said it booted either
            log.info("The Name Server stopped")

    @staticmethod
    async def _every(first_s: float, period_s: float, job: Callable[[], object]) -> None:
        await asyncio.sleep(first_s)
        while True:
            try:
                job()
            except Exception:
                log.exception("periodic task %s failed", getattr(job, "__name__", "?"))
            await asyncio.sleep(period_s)

    # ------------------------------------------------------------------ requests

    def handle(self, request: RemotingCommand, conn: Connection) -> Answer:
        """Answer one decoded request (the remoting server's handler).

        Every answer passes here (the route fast path answers only hits, which are
        successes), so this is where error answers are counted, by request and response code.
        """
        start = perf_counter()
        answer = self.processor.process(request, conn)
        self.stats.observe_request(request.code, perf_counter() - start)
        if isinstance(answer, RemotingCommand):
            if answer.code:
                self.stats.count_error_answer(request.code, answer.code)
        elif answer is not None and not isinstance(answer, bytes):  # an admin write's answer
            return self._counted(request, answer)
        return answer

    async def _counted(
        self, request: RemotingCommand, pending: Awaitable[RemotingCommand]
    ) -> RemotingCommand:
        """The awaited answer, its error code counted once it is known (oneway: none sent)."""
        answer = await pending
        if answer is not None and answer.code and not request.is_oneway:
            self.stats.count_error_answer(request.code, answer.code)
        return answer

    def on_connection_closed(self, conn: object, reason: str) -> None:
        """A connection closed, here or on a worker (``workers.RemoteChannel``)."""
        self._on_connection_closed(conn, reason)  # type: ignore[arg-type]

    def _on_connection_closed(self, conn: Connection, reason: str) -> None:
        if conn in self._sent_away:
            # We told it to go: its brokers stay until the stop's snapshot (the warm restart
            # keeps them as a plain stop does); their new connection goes elsewhere.
            self._sent_away.discard(conn)
            return
        self.on_events(self.routes.on_channel_closed(conn, reason))

    async def _expiry_loop(self) -> None:
        """Expire brokers on time: Java scans every 10 s (first after 5 s), so a dead broker
        lingers up to 10 s past its deadline. We keep the scan period as an upper bound but
        also wake at the next deadline (at most a second later), which the registry's deadline
        heap makes free."""
        interval_s = self.config.scan_not_active_broker_interval / 1000
        await asyncio.sleep(min(FIRST_SCAN_DELAY_S, interval_s, MAX_EXPIRY_DELAY_S))
        while True:
            self.scan_expired()
            interval_s = self.config.scan_not_active_broker_interval / 1000  # live setting
            delay = min(interval_s, MAX_EXPIRY_DELAY_S)
            deadline = self.routes.next_expiry_ms()
            if deadline is not None and not self.going_away:  # a drain expires nothing
                delay = min(delay, max(deadline - self.clock_ms() + 1, 0) / 1000)
            await asyncio.sleep(delay)

    def scan_expired(self, at_ms: int | None = None) -> None:
        """Expire the brokers past their deadline at ``at_ms`` (default: now) and close the
        connections left without a broker, as Java's scanNotActiveBroker does.

        Not while draining: the GO_AWAY answers keep the brokers' heartbeats from landing,
        and the server must not expire (and journal the removal of) what it sent away itself.
        """
        if self.going_away:
            return
        events, channels = self.routes.expire(self.clock_ms() if at_ms is None else at_ms)
        self.on_events(events)
        for channel in channels:
            if isinstance(channel, (Connection, RemoteChannel)):
                channel.close()

    def print_kv(self) -> None:
        log.info("--------------------------------------------------------")
        log.info("configTable SIZE: %d", len(self.kv.table))
        for namespace, entries in self.kv.table.items():
            for key, value in entries.items():
                log.info(
                    "configTable NS: %s Key: %s Value: %s", name(namespace), name(key), name(value)
                )

    # ------------------------------------------------------------------ persistence

    async def _write_file(self, path: Path, data: FileData) -> None:
        """Write a persisted file on the writer thread; ``data`` made there when it is a
        function (read, merge and write in one go, in order with the other writes)."""

        store = Path(self.config.config_store_path).absolute()
        if self.config_store_read_only and path.absolute() == store:
            # Not ours to write (no lock): answered "persist failed: <this>".
            raise OSError(
                errno.EROFS,
                f"the config store {store} is read-only (change the file there and restart)",
            )

        def write() -> None:
            atomic_write(path, data() if callable(data) else data)

        await asyncio.get_running_loop().run_in_executor(self._writer, write)

    # ------------------------------------------------------------------ events

    def _apply_live_settings(self, events: list[Event]) -> None:
        """Hand live config changes to the parts that copied the value at start."""
        for event in events:
            if not isinstance(event, ConfigChanged):
                continue
            if event.key == "serverChannelMaxIdleTimeSeconds":
                self.server.limits.idle_seconds = self.config.server_channel_max_idle_time_seconds
            elif event.key == "supportActingMaster":
                self.routes.set_support_acting_master(self.config.support_acting_master)

    async def drain(self, interrupted: asyncio.Event) -> None:
        """enableShutdownGracefully: keep serving for shutdownWaitTimeSeconds before the
        caller stops the server (Java waits that long in NettyRemotingServer.shutdown), or
        until ``interrupted`` is set (a second signal). Returns at once when it is off."""
        wait_s = self.config.shutdown_wait_time_seconds
        if not self.config.enable_shutdown_gracefully or wait_s <= 0:
            return
        log.info(
            "graceful shutdown: still serving for %d s, answering GO_AWAY to clients newer "
            "than 5.3.1 (signal again to stop now)",
            wait_s,
        )
        self.go_away()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(interrupted.wait(), wait_s)

    def go_away(self) -> None:
        """From now on answer every request of a client newer than 5.3.1 with GO_AWAY, as
        Java's NettyRemotingAbstract does while it shuts down: such a client reconnects (to
        another name server behind the same address) at once instead of failing later.
        Older clients, which do not know the code, are served as before. The route fast
        path answers unread requests, so it stops: every request is decoded and checked."""
        self.going_away = True
        if self.workers is not None:
            self.workers.go_away()
        self.server.raw_answerer = None
        self.server.handler = self._handle_going_away

    def _handle_going_away(self, request: RemotingCommand, conn: Connection) -> Answer:
        if request.version <= Version.V5_3_1:
            return self.handle(request, conn)
        self._sent_away.add(conn)
        if request.code in _LIVENESS_CODES:
            # Not handled (Java does not), but the broker proved it is alive: its last
            # heartbeat is now, so the stop's snapshot and the warm restart keep it.
            self.on_events(
                self.routes.broker_heartbeat(
                    request.field("clusterName") or "",
                    request.field("brokerAddr") or "",
                    self.clock_ms(),
                )
            )
        if request.is_oneway:  # Java neither answers nor handles it
            return None
        self.stats.count_error_answer(request.code, ResponseCode.GO_AWAY)
        return RemotingCommand.response_to(request, ResponseCode.GO_AWAY, "please go away")

    def on_events(self, events: list[Event]) -> None:
        """Tell the listeners (stats, the log, the journal, tests) what changed."""
        if not events:
            return
        for listener in self._listeners:
            listener(events)
