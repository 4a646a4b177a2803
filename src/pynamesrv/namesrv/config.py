"""NamesrvConfig and the runtime config registry: load, report, update, persist.

What a key means, which values it takes and who may change it is in ``settings`` (the one
key table); this module holds the values and moves them between the properties files, the
command line and UPDATE_NAMESRV_CONFIG. It raises domain errors (``ConfigFileError``,
``ConfigUpdateRefused``); the processor maps them to response codes.

An update is two steps so that a change is live only once it is on disk: ``prepare_update``
validates the request on the event loop, the caller has ``ConfigUpdate.render`` merge it
into the config store *as the file is on disk then* and writes the result, both off the loop
and in one go, and ``commit`` applies the values. The merge re-reads the file because an
operator may have edited it since the start (an ``aclFile=`` line added for the next
restart): rewriting the text read at start would delete such a line silently. A failed
read or write leaves the running server and the file as they were.
"""

from __future__ import annotations

import builtins
import io
import logging
import os
from dataclasses import dataclass, field, fields, replace
from enum import StrEnum
from pathlib import Path
from typing import Any, Final

import javaproperties

from pynamesrv.namesrv.events import ConfigChanged, Event
from pynamesrv.namesrv.settings import (
    BY_KEY,
    SETTINGS,
    Applies,
    Kind,
    Setting,
    parse_all,
    setting,
    suggest,
)
from pynamesrv.namesrv.statepaths import CONFIG_STORE_NAME, KV_FILE_NAME, derive_paths
from pynamesrv.remoting.codes import Version
from pynamesrv.remoting.logtext import shown

log = logging.getLogger(__name__)

_HOME = Path.home()

# The keys a Java name server reports in GET_NAMESRV_CONFIG: 20 for 4.9.4, 39 for 5.2.0. The
# set of the version pynamesrv answers as (rocketmq.remoting.version) is always reported;
# other keys when they were in the -c file or differ from their default, so an untouched
# server answers like that Java version (golden admin.jsonl, golden-5x register-admin.jsonl)
# while a tuned one still shows its tuning.
JAVA_494_KEYS: Final = frozenset(
    {
        "rocketmqHome", "kvConfigPath", "configStorePath", "productEnvName", "clusterTest",
        "orderMessageEnable", "listenPort", "serverWorkerThreads", "serverCallbackExecutorThreads",
        "serverSelectorThreads", "serverOnewaySemaphoreValue", "serverAsyncSemaphoreValue",
        "serverChannelMaxIdleTimeSeconds", "serverSocketSndBufSize", "serverSocketRcvBufSize",
        "writeBufferHighWaterMark", "writeBufferLowWaterMark", "serverSocketBacklog",
        "serverPooledByteBufAllocatorEnable", "useEpollNativeSelector",
    }
)  # fmt: skip
JAVA_520_KEYS: Final = JAVA_494_KEYS | frozenset(
    {
        "bindAddress", "clientRequestThreadPoolNums", "clientRequestThreadPoolQueueCapacity",
        "configBlackList", "defaultThreadPoolNums", "defaultThreadPoolQueueCapacity",
        "deleteTopicWithBrokerRegistration", "enableAllTopicList", "enableControllerInNamesrv",
        "enableShutdownGracefully", "enableTopicList", "needWaitForService",
        "notifyMinBrokerIdChanged", "returnOrderTopicConfigToBroker",
        "scanNotActiveBrokerInterval", "shutdownWaitTimeSeconds", "supportActingMaster",
        "unRegisterBrokerQueueCapacity", "waitSecondsForService",
    }
)  # fmt: skip

# Keys UPDATE_NAMESRV_CONFIG refuses with Java's black-list answer whatever configBlackList
# says (5.2.0 hard-codes rocketmqHome; the file keys are CVE-2023-33246 / CVE-2023-37582).
ALWAYS_BLACKLISTED: Final = frozenset(
    {"configBlackList", "configStorePath", "kvConfigPath", "rocketmqHome", "journalDir", "stateDir"}
)
BLACKLIST_REMARK: Final = "Can not update config in black list."
SECRET_MASK: Final = "******"  # how a set password is reported


def _default_home() -> str:
    return os.environ.get("ROCKETMQ_HOME") or str(_HOME / "namesrv")


MAX_WORKERS: Final = 256  # serverWorkers


@dataclass(slots=True)
class NamesrvConfig:
    """Every setting of the name server, with Java's defaults (meanings: ``settings``)."""

    # NamesrvConfig (4.9.4)
    rocketmq_home: str = field(default_factory=_default_home)
    kv_config_path: str = str(_HOME / "namesrv" / KV_FILE_NAME)  # <stateDir>/kvConfig.json
    config_store_path: str = str(_HOME / "namesrv" / CONFIG_STORE_NAME)
    state_dir: str = str(_HOME / "namesrv")  # pynamesrv's own (statepaths)
    product_env_name: str = "center"
    cluster_test: bool = False
    order_message_enable: bool = False
    # NamesrvConfig (5.x)
    return_order_topic_config_to_broker: bool = True
    client_request_thread_pool_nums: int = 8
    client_request_thread_pool_queue_capacity: int = 50_000
    default_thread_pool_nums: int = 16
    default_thread_pool_queue_capacity: int = 10_000
    scan_not_active_broker_interval: int = 5000  # ms (4.9.4: a fixed 10 s)
    un_register_broker_queue_capacity: int = 3000
    support_acting_master: bool = False
    enable_all_topic_list: bool = True
    enable_topic_list: bool = True
    notify_min_broker_id_changed: bool = False
    notify_min_broker_id_change_timeout_millis: int = 3000
    enable_controller_in_namesrv: bool = False
    need_wait_for_service: bool = False
    wait_seconds_for_service: int = 45
    delete_topic_with_broker_registration: bool = False
    config_black_list: str = "configBlackList;configStorePath;kvConfigPath"
    # NettyServerConfig
    bind_address: str = "0.0.0.0"
    listen_port: int = 9876
    server_worker_threads: int = 8
    server_callback_executor_threads: int = 0
    server_selector_threads: int = 3
    server_oneway_semaphore_value: int = 256
    server_async_semaphore_value: int = 64
    server_channel_max_idle_time_seconds: int = 120
    server_socket_snd_buf_size: int = 0
    server_socket_rcv_buf_size: int = 0
    write_buffer_high_water_mark: int = 0
    write_buffer_low_water_mark: int = 0
    server_socket_backlog: int = 1024
    server_pooled_byte_buf_allocator_enable: bool = True
    use_epoll_native_selector: bool = False
    server_netty_worker_group_enable: bool = True
    enable_shutdown_gracefully: bool = False
    shutdown_wait_time_seconds: int = 30
    # com.rocketmq.remoting.frameMaxLength (a JVM property in Java)
    frame_max_length: int = 16 * 1024 * 1024
    # rocketmq.remoting.version (a JVM property in Java): the version answers carry
    rocketmq_remoting_version: int = 453  # Version.V5_2_0
    # TLS (spec/config-and-storage.md §3, §8)
    tls_server_mode: str = "permissive"
    tls_config_file: str = ""
    tls_test_mode_enable: bool = False
    tls_server_cert_path: str = ""
    tls_server_key_path: str = ""
    tls_server_key_password: str = ""
    tls_server_need_client_auth: str = "none"
    tls_server_trust_cert_path: str = ""
    tls_server_auth_client: bool = False
    http_tls_cert_path: str = ""
    http_tls_key_path: str = ""
    http_tls_key_password: str = ""
    # pynamesrv's own: limits
    max_connections: int = 10_000
    max_connections_per_source: int = 1_000
    max_buffered_bytes: int = 256 * 1024 * 1024
    max_pending_answer_bytes: int = 256 * 1024 * 1024
    frame_read_timeout_seconds: int = 60
    proxy_protocol: str = "auto"
    proxy_protocol_trusted_addresses: str = ""
    route_query_fast_path: bool = True
    server_workers: str = "1"  # a number, or auto (namesrv.workers.worker_count)
    server_worker_max_backlog_bytes: int = 64 * 1024 * 1024
    # pynamesrv's own: observability
    http_port: int = 9880
    http_max_connections: int = 256
    http_header_timeout_seconds: int = 10
    http_keep_alive_seconds: int = 15
    http_max_connections_per_source: int = 32
    http_max_searches: int = 2
    http_max_requests_per_second: int = 200
    ns_addr_list: str = ""
    instance_name: str = ""
    journal_enable: bool = True
    warm_restart: bool = True
    journal_dir: str = ""
    journal_flush_interval_ms: int = 1000
    journal_snapshot_interval_ms: int = 600_000
    journal_retention_hours: int = 168
    journal_max_bytes: int = 10 * 1024**3
    journal_max_pending_bytes: int = 64 * 1024**2  # docs/journal.md: why 64 MiB
    route_queries_window_ms: int = 60_000
    # pynamesrv's own: logs and the process
    log_file: str = ""
    log_max_bytes: int = 100 * 1024 * 1024  # Java's logback: 100MB
    log_backups: int = 5  # Java's logback: maxIndex 5
    log_format: str = "text"
    log_level: str = "info"
    pid_file: str = ""
    # pynamesrv's own: authenticated admin writes (namesrv/acl.py)
    acl_file: str = ""
    acl_registration_required: bool = False
    acl_read_required: bool = False
    acl_admin_binding_required: bool = False
    acl_binding_window_seconds: int = 300
    notify_allowed_addresses: str = ""
    notify_max_pending_targets: int = 256
    notify_max_connections: int = 16

    def get(self, key: str) -> Any:
        return getattr(self, setting(key).attr)

    def set(self, key: str, text: str) -> None:
        """Parse and apply one property; ``SettingError`` for an unknown key or bad value."""
        entry = setting(key)
        setattr(self, entry.attr, entry.parse(text))

    def text(self, key: str) -> str:
        return setting(key).format(self.get(key))

    def problems(self) -> list[str]:
        """What is wrong with the combination of values (each value is valid alone)."""
        out = []
        if self.max_buffered_bytes < self.frame_max_length:
            out.append(
                f"maxBufferedBytes={self.max_buffered_bytes} is not allowed: at least "
                f"frameMaxLength ({self.frame_max_length}), or no frame of that size can arrive"
            )
        high_water = self.write_buffer_high_water_mark or 4 * 1024 * 1024
        if self.max_pending_answer_bytes < 2 * high_water:
            out.append(
                f"maxPendingAnswerBytes={self.max_pending_answer_bytes} is not allowed: at "
                f"least twice the write high-water mark ({high_water}), or one peer reading a "
                "large answer would be shed"
            )
        low, high = self.write_buffer_low_water_mark, self.write_buffer_high_water_mark
        if low and high and low > high:
            out.append(
                f"writeBufferLowWaterMark={low} is not allowed: at most "
                f"writeBufferHighWaterMark ({high})"
            )
        for key in ("rocketmqHome", "kvConfigPath", "configStorePath", "stateDir"):
            if not self.get(key):
                out.append(f"{key}= is not allowed: a file or directory path")
        workers = self.server_workers.strip().lower()
        if workers != "auto" and not (workers.isdigit() and 1 <= int(workers) <= MAX_WORKERS):
            out.append(
                f"serverWorkers={self.server_workers} is not allowed: a number from 1 to "
                f"{MAX_WORKERS}, or auto"
            )
        if self.enable_controller_in_namesrv:
            out.append(
                "enableControllerInNamesrv=true is not supported: pynamesrv has no embedded "
                "controller; run the standalone Java controller (bin/mqcontroller) for "
                "controller mode"
            )
        return out

    def tls_properties(self) -> dict[str, str]:
        """The tls.* keys as properties, for ``remoting.tls.TlsSettings``."""
        return {s.key: self.text(s.key) for s in SETTINGS if s.key.startswith("tls.")}

    def blacklist(self) -> builtins.set[str]:
        return set(ALWAYS_BLACKLISTED) | {
            k.strip() for k in self.config_black_list.split(";") if k.strip()
        }


def _check_table_matches_fields() -> None:
    """Every NamesrvConfig field has exactly one key in the table, and the other way round."""
    attrs = {f.name for f in fields(NamesrvConfig)}
    keyed = {s.attr for s in SETTINGS}
    if attrs != keyed:
        raise RuntimeError(f"settings table and NamesrvConfig differ: {attrs ^ keyed}")


_check_table_matches_fields()


def parse_properties(data: bytes) -> dict[str, str]:
    """Parse Java properties text; bytes are read as ISO-8859-1, as Properties.load does."""
    return dict(javaproperties.load(io.StringIO(data.decode("iso-8859-1"))))


def format_properties(props: dict[str, str]) -> bytes:
    """``key=value`` lines, no escaping and no comments, as Java's config store writes."""
    return "".join(f"{k}={v}\n" for k, v in props.items()).encode()


class ConfigFileError(ValueError):
    """The configuration given at start is invalid; ``problems`` has one line each."""

    def __init__(self, source: str, problems: list[str]) -> None:
        super().__init__(f"{source}: " + "; ".join(problems))
        self.source = source
        self.problems = problems


class Refusal(StrEnum):
    """Why UPDATE_NAMESRV_CONFIG was refused (the processor picks the response code)."""

    UNPARSABLE = "unparsable"
    BLACKLISTED = "blacklisted"
    UNKNOWN = "unknown"
    NOT_REMOTE = "not remotely writable"
    INVALID = "invalid value"


class ConfigUpdateRefused(ValueError):
    """An UPDATE_NAMESRV_CONFIG that changes nothing; ``message`` is the answer's remark."""

    def __init__(self, reason: Refusal, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(slots=True)
class ConfigUpdate:
    """A validated update: the values to apply, and how to write them into the config store
    first (``render``, off the event loop, just before the write)."""

    values: dict[str, bool | int | str]
    path: Path
    # The text to merge into when the file is not on disk (the one read at start or written
    # last, None when there was none), and the whole store to write when neither exists.
    known_text: str | None
    generated: bytes
    file_bytes: bytes = b""  # what ``render`` produced, written by the caller
    changes: list[str] = field(default_factory=list)  # what ``render`` changed, for the log
    merged_edits: bool = False  # the file on disk differed from the text known

    def restart_keys(self) -> list[str]:
        """Keys of this update that take effect only at the next start."""
        return sorted(k for k in self.values if BY_KEY[k].applies is Applies.RESTART)

    def render(self) -> bytes:
        """The config store with this update's keys set, merged into the file as it is on
        disk now (comments, order, keys this server does not know, lines the operator added
        since the start: all kept); the text known before when it is gone, the generated
        store when there never was one. ``OSError`` when the file cannot be read or parsed:
        then nothing is written."""
        try:
            current: str | None = self.path.read_bytes().decode("iso-8859-1")
        except FileNotFoundError:
            current = None
        self.merged_edits = current is not None and current != self.known_text
        text = current if current is not None else self.known_text
        if text is None:
            self.file_bytes = self.generated
            self.changes = [f"{k}={shown(BY_KEY[k].format(v))}" for k, v in self.values.items()]
            return self.file_bytes
        try:
            document = javaproperties.PropertiesFile.loads(text)
        except Exception as exc:  # javaproperties raises several types on bad escapes
            raise OSError(f"cannot merge into {self.path}: not a properties file ({exc})") from exc
        self.changes = []
        for key, value in self.values.items():
            new = BY_KEY[key].format(value)
            old = document.get(key)
            if old != new:
                was = "unset" if old is None else shown(old)
                self.changes.append(f"{key}={shown(new)} (was {was})")
            document[key] = new
        self.file_bytes = document.dumps().encode("iso-8859-1", "backslashreplace")
        return self.file_bytes


def _listed(keys: list[str], limit: int = 5) -> str:
    return ",".join(keys[:limit]) + (f" and {len(keys) - limit} more" * (len(keys) > limit))


class ConfigRegistry:
    """The runtime view of the config (Java's Configuration): report, update, persist."""

    def __init__(
        self,
        config: NamesrvConfig,
        file_properties: dict[str, str] | None = None,
        store_text: str | None = None,
    ) -> None:
        self.config = config
        self.file_properties = dict(file_properties or {})
        # The config store as last read or written, so an update rewrites only its own keys
        # and keeps the operator's comments and order.
        self._store_text = store_text
        self.data_version = 0
        self.loaded_from: str | None = None  # the properties file read at start, if any
        # Keys the -c file or the command line set (the others have their defaults, the paths
        # derived from stateDir among them).
        self.explicit: frozenset[str] = frozenset(self.file_properties)
        self.notes: list[str] = []  # what the start should tell the operator about the file

    @classmethod
    def from_file(
        cls, path: Path | None, overrides: dict[str, str] | None = None
    ) -> ConfigRegistry:
        """Defaults, then the -c file (whose path becomes configStorePath, as in Java, so
        what UPDATE_NAMESRV_CONFIG persists is read at the next start), then ``overrides``
        (command-line flags), then the paths left unset placed under stateDir
        (``statepaths.derive_paths``). Nothing is half-applied: any problem raises
        ``ConfigFileError`` listing all of them."""
        config = NamesrvConfig()
        props: dict[str, str] = {}
        store_text: str | None = None
        source = "defaults"
        if path is not None:
            path = path.absolute()
            store_text, props = _read_store(path)
            source = str(path)
        problems = _apply(config, props)
        if path is not None:
            config.config_store_path = str(path)
        flag_problems = _apply(config, (overrides or {}))
        if problems:
            raise ConfigFileError(source, problems)
        if flag_problems:
            raise ConfigFileError("command line", flag_problems)
        explicit = frozenset(props) | frozenset(overrides or {})
        derive_paths(config, explicit, path)
        combined = config.problems()
        if combined:
            raise ConfigFileError(source, combined)
        registry = cls(config, props, store_text)
        registry.loaded_from = None if path is None else source
        registry.explicit = explicit
        ignored = props.get("configStorePath")
        if path is not None and ignored is not None and Path(ignored).absolute() != path:
            registry.notes.append(
                f"configStorePath={ignored} in {path} is not used: the -c file is the config "
                "store (as in Java); stateDir says where the server writes"
            )
        return registry

    # ------------------------------------------------------------------ reports

    def java_keys(self) -> frozenset[str]:
        """The keys the Java version this server answers as reports in GET_NAMESRV_CONFIG."""
        java5 = self.config.rocketmq_remoting_version >= Version.V5_0_0
        return JAVA_520_KEYS if java5 else JAVA_494_KEYS

    def properties(self) -> dict[str, str]:
        """What GET_NAMESRV_CONFIG reports: never a secret."""
        defaults = NamesrvConfig()
        java_keys = self.java_keys()
        out: dict[str, str] = {}
        for entry in SETTINGS:
            key = entry.key
            if (
                key in java_keys
                or key in self.file_properties
                or self.config.get(key) != defaults.get(key)
            ):
                out[key] = self._shown(entry)
        return dict(sorted(out.items()))

    def all_properties(self) -> dict[str, str]:
        """Every setting, secrets masked, for ``serve -p`` and the journal's server_started."""
        return {s.key: self._shown(s) for s in sorted(SETTINGS, key=lambda s: s.key)}

    def _shown(self, entry: Setting) -> str:
        text = self.config.text(entry.key)
        return SECRET_MASK if entry.kind is Kind.SECRET and text else text

    # ------------------------------------------------------------------ updates

    def prepare_update(self, body: bytes) -> ConfigUpdate:
        """Validate an UPDATE_NAMESRV_CONFIG body; nothing changes until ``commit``.

        Refused, in this order: text that is no properties; keys of the black list (Java's
        answer); unknown keys (4.9.4 ignores them silently; an operator's typo deserves an
        error); keys that may only change in the -c file; values the key does not allow.
        """
        try:
            props = parse_properties(body)
        except Exception as exc:  # javaproperties raises several types on bad escapes
            raise ConfigUpdateRefused(Refusal.UNPARSABLE, "string2Properties error") from exc
        blacklist = self.config.blacklist()
        if any(key in blacklist for key in props):
            raise ConfigUpdateRefused(Refusal.BLACKLISTED, BLACKLIST_REMARK)
        unknown = sorted(key for key in props if key not in BY_KEY)
        if unknown:
            hint = suggest(unknown[0]) if len(unknown) == 1 else None
            raise ConfigUpdateRefused(
                Refusal.UNKNOWN,
                f"Can not update unknown config: {_listed(unknown)}"
                + (f" (did you mean {hint}?)" if hint else ""),
            )
        local = sorted(key for key in props if not BY_KEY[key].remote)
        if local:
            raise ConfigUpdateRefused(
                Refusal.NOT_REMOTE,
                f"Can not update config remotely: {_listed(local)} (set it in the -c file "
                "and restart)",
            )
        values, errors = parse_all(props.items())
        if errors:
            raise ConfigUpdateRefused(Refusal.INVALID, errors[0])
        trial = replace(self.config, **{BY_KEY[k].attr: v for k, v in values.items()})  # type: ignore[arg-type]  # each value was parsed for its key's type
        combined = trial.problems()
        if combined:
            raise ConfigUpdateRefused(Refusal.INVALID, combined[0])
        path = Path(self.config.config_store_path)
        return ConfigUpdate(values, path, self._store_text, self._generated_store(values))

    def commit(self, update: ConfigUpdate) -> list[Event]:
        """Apply a prepared update whose file write succeeded (``render`` made its bytes),
        and say in the log what the file write changed."""
        log.info(
            "config store %s updated: %s%s",
            update.path,
            "; ".join(update.changes) or "no line changed",
            " (merged into the file as it is on disk: it changed since this server read it)"
            if update.merged_edits
            else "",
        )
        events: list[Event] = []
        for key, value in update.values.items():
            entry = BY_KEY[key]
            before = getattr(self.config, entry.attr)
            setattr(self.config, entry.attr, value)
            self.file_properties[key] = entry.format(value)
            if value != before:
                events.append(ConfigChanged(key=key, value=entry.format(value)))
        self._store_text = update.file_bytes.decode("iso-8859-1")
        self.data_version += 1
        return events

    def _generated_store(self, values: dict[str, bool | int | str]) -> bytes:
        """The config store with ``values`` set when there is no file to merge into: what
        GET_NAMESRV_CONFIG reports, as Java writes it, but for pynamesrv's own keys that only
        a start sets (httpPort, pidFile, logFile, journalDir, ...): the file is read again
        only when it is passed as ``-c``, and then those would override the command line's
        choice silently."""
        java_keys = self.java_keys()
        stored = {
            key: self.config.text(key)  # unmasked
            for key in self.properties()
            if key in java_keys or key in self.file_properties or BY_KEY[key].remote
        }
        stored.update({k: BY_KEY[k].format(v) for k, v in values.items()})
        return format_properties(stored)


def _read_store(path: Path) -> tuple[str, dict[str, str]]:
    try:
        text = path.read_bytes().decode("iso-8859-1")
        return text, dict(javaproperties.loads(text))
    except (OSError, ValueError) as exc:
        raise ConfigFileError(str(path), [f"cannot read: {exc}"]) from exc


def _apply(config: NamesrvConfig, props: dict[str, str] | Any) -> list[str]:
    """Set every valid pair; one message per bad one."""
    values, problems = parse_all(dict(props).items())
    for key, value in values.items():
        setattr(config, BY_KEY[key].attr, value)
    return problems


def reference_markdown() -> str:
    """``docs/configuration.md``: every key of the table with its rule and default."""
    defaults = NamesrvConfig()
    home = str(_HOME)
    lines = [
        "# Configuration reference",
        "",
        "Generated from the key table (`src/pynamesrv/namesrv/settings.py`) by",
        "`make docs`; a test fails when this file is out of date. Keys are read from the",
        "`-c` properties file (and the flags of `pynamesrv serve`); UPDATE_NAMESRV_CONFIG",
        "(`mqadmin updateNamesrvConfig`) may change only the keys marked remote. An invalid",
        "value is refused with a one-line message naming the key, the value and what is",
        "allowed; at start an invalid file stops the server (exit code 2).",
        "",
        "*Applies*: `live` takes effect at once, `restart` at the next start, `no effect`",
        "means the key is accepted and reported for compatibility with Java but pynamesrv",
        "has nothing it controls. Passwords are reported as `******`.",
        "",
        "| key | allowed | default | applies | remote | from | what it does in pynamesrv |",
        "|---|---|---|---|---|---|---|",
    ]
    for entry in SETTINGS:
        if entry.key == "rocketmqHome":
            default = "`$ROCKETMQ_HOME`, else `~/namesrv`"
        elif entry.key == "kvConfigPath":
            default = "`<stateDir>/kvConfig.json`"
        elif entry.key == "configStorePath":
            default = "the `-c` file, else `<stateDir>/namesrv.properties`"
        else:
            text = entry.format(defaults.get(entry.key)).replace(home, "~")
            default = f"`{text}`" if text else "(empty)"
        cells = [
            f"`{entry.key}`",
            entry.allowed(),
            default,
            entry.applies.value,
            "yes" if entry.remote else "no",
            entry.origin,
            entry.help,
        ]
        lines.append("| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |")
    return "\n".join(lines) + "\n"
