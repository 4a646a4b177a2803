"""NamesrvConfig: settings, the Java properties mapping and the runtime config registry.

Keys and defaults follow spec/config-and-storage.md §3 (NamesrvConfig + NettyServerConfig).
Attributes are snake_case; the Java key of ``kv_config_path`` is ``kvConfigPath`` and the two
are converted mechanically, so a properties file written for mqnamesrv works unchanged.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Final

import javaproperties

from pynamesrv.namesrv.events import ConfigChanged, Event
from pynamesrv.namesrv.filestore import atomic_write

_HOME = Path.home()

# The 20 keys a 4.9.4 name server reports in GET_NAMESRV_CONFIG. Other keys are reported when
# they were in the -c file or differ from their default, so an untouched server answers like
# 4.9.4 (golden admin.jsonl) while a tuned one still shows its tuning.
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

# Keys that name files or directories: never changeable over the wire (CVE-2023-33246 /
# CVE-2023-37582 class). configBlackList entries are added at run time, as in 5.2.0+.
ALWAYS_BLACKLISTED: Final = frozenset(
    {"configBlackList", "configStorePath", "kvConfigPath", "rocketmqHome", "journalDir"}
    | {"aclFile", "aclRegistrationRequired", "aclReadRequired"}  # who may write: never remote
)


def _default_home() -> str:
    return os.environ.get("ROCKETMQ_HOME") or str(_HOME / "namesrv")


@dataclass(slots=True)
class NamesrvConfig:
    """Every setting of the name server, with Java's defaults."""

    # NamesrvConfig (4.9.4)
    rocketmq_home: str = field(default_factory=_default_home)
    kv_config_path: str = str(_HOME / "namesrv" / "kvConfig.json")
    config_store_path: str = str(_HOME / "namesrv" / "namesrv.properties")
    product_env_name: str = "center"
    cluster_test: bool = False
    order_message_enable: bool = False
    # NamesrvConfig (5.x)
    return_order_topic_config_to_broker: bool = True
    scan_not_active_broker_interval: int = 10_000  # ms; 4.9.4's fixed 10 s (5.x: 5 s)
    enable_all_topic_list: bool = True
    enable_topic_list: bool = True
    need_wait_for_service: bool = False
    wait_seconds_for_service: int = 45
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
    # com.rocketmq.remoting.frameMaxLength (a JVM property in Java)
    frame_max_length: int = 16 * 1024 * 1024
    # pynamesrv's own: observability (no Java counterpart)
    http_port: int = 9880  # /metrics, /healthz, /rocketmq/nsaddr, /api, status page; 0 = off
    ns_addr_list: str = ""  # what /rocketmq/nsaddr serves ("host:port;host:port"); "" = us
    instance_name: str = ""  # the journal's `ns`; "" = host:port of this server
    journal_enable: bool = True
    journal_dir: str = ""  # "" = <rocketmqHome>/journal
    journal_flush_interval_ms: int = 1000
    journal_snapshot_interval_ms: int = 600_000
    route_queries_window_ms: int = 60_000
    # pynamesrv's own: authenticated admin writes (namesrv/acl.py; restart to change)
    acl_file: str = ""  # plain_acl.yml-shaped accounts; "" = admin writes open (Java)
    acl_registration_required: bool = False  # broker registration needs an account too
    acl_read_required: bool = False  # every other request needs an account too

    # ---------------------------------------------------------------- key mapping

    @staticmethod
    def java_key(attr: str) -> str:
        head, *rest = attr.split("_")
        return head + "".join(part[:1].upper() + part[1:] for part in rest)

    @staticmethod
    def attr_name(java_key: str) -> str:
        return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), java_key)

    @classmethod
    def java_keys(cls) -> list[str]:
        return [cls.java_key(f.name) for f in fields(cls)]

    def get(self, java_key: str) -> Any:
        return getattr(self, self.attr_name(java_key))

    def knows(self, java_key: str) -> bool:
        attr = self.attr_name(java_key)
        return self.java_key(attr) == java_key and attr in self.__dataclass_fields__

    def set(self, java_key: str, text: str) -> bool:
        """Apply one property as Java's setter mapping does; False if the key is unknown.

        Values are trimmed (5.x). Booleans are "true" ignoring case, anything else false; a
        number that does not parse leaves the field unchanged, silently, like Java.
        """
        if not self.knows(java_key):
            return False
        attr = self.attr_name(java_key)
        current = getattr(self, attr)
        text = text.strip()
        if isinstance(current, bool):
            setattr(self, attr, text.lower() == "true")
        elif isinstance(current, int):
            with contextlib.suppress(ValueError):
                setattr(self, attr, int(text))
        else:
            setattr(self, attr, text)
        return True

    def text(self, java_key: str) -> str:
        value = self.get(java_key)
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)

    def blacklist(self) -> set[str]:
        return set(ALWAYS_BLACKLISTED) | {
            k.strip() for k in self.config_black_list.split(";") if k.strip()
        }


def parse_properties(data: bytes) -> dict[str, str]:
    """Parse Java properties text; bytes are read as ISO-8859-1, as Properties.load does."""
    return dict(javaproperties.load(io.StringIO(data.decode("iso-8859-1"))))


def format_properties(props: dict[str, str]) -> bytes:
    """``key=value`` lines, no escaping and no comments, as Java's config store writes."""
    return "".join(f"{k}={v}\n" for k, v in props.items()).encode()


class ConfigError(ValueError):
    """An UPDATE_NAMESRV_CONFIG request that must be refused."""

    def __init__(self, code: int, remark: str) -> None:
        super().__init__(remark)
        self.code = code
        self.remark = remark


class ConfigRegistry:
    """The runtime view of the config (Java's Configuration): report, update, persist."""

    def __init__(self, config: NamesrvConfig, file_properties: dict[str, str] | None = None):
        self.config = config
        self.file_properties = dict(file_properties or {})
        self.data_version = 0

    @classmethod
    def from_file(cls, path: Path | None) -> ConfigRegistry:
        """Defaults, then the -c file (whose path becomes configStorePath, as in Java)."""
        config = NamesrvConfig()
        props: dict[str, str] = {}
        if path is not None:
            props = parse_properties(path.read_bytes())
            for key, value in props.items():
                config.set(key, value)
            config.config_store_path = str(path)
        return cls(config, props)

    def properties(self) -> dict[str, str]:
        """What GET_NAMESRV_CONFIG reports and the config store holds."""
        defaults = NamesrvConfig()
        out: dict[str, str] = {}
        for key in NamesrvConfig.java_keys():
            if (
                key in JAVA_494_KEYS
                or key in self.file_properties
                or self.config.get(key) != defaults.get(key)
            ):
                out[key] = self.config.text(key)
        for key, value in self.file_properties.items():
            out.setdefault(key, value)
        return dict(sorted(out.items()))

    def all_properties(self) -> dict[str, str]:
        """Every setting, for ``serve -p``."""
        return {key: self.config.text(key) for key in sorted(NamesrvConfig.java_keys())}

    def update(self, body: bytes) -> list[Event]:
        """UPDATE_NAMESRV_CONFIG: validate everything first, then apply all and persist.

        Refuses the 5.x blacklist plus every key that names a file (so no request can make
        the server write outside kvConfigPath and configStorePath), and keys it does not know
        (4.9.4 silently ignores them; an operator's typo deserves an error).
        """
        from pynamesrv.remoting.codes import ResponseCode  # local: config has no wire deps

        try:
            props = parse_properties(body)
        except Exception as exc:  # javaproperties raises several types on bad escapes
            raise ConfigError(ResponseCode.SYSTEM_ERROR, "string2Properties error") from exc
        blacklist = self.config.blacklist()
        if any(key in blacklist for key in props):
            raise ConfigError(ResponseCode.NO_PERMISSION, "Can not update config in black list.")
        unknown = sorted(key for key in props if not self.config.knows(key))
        if unknown:
            shown = ",".join(unknown[:5]) + (f" and {len(unknown) - 5} more" * (len(unknown) > 5))
            raise ConfigError(ResponseCode.NO_PERMISSION, f"Can not update unknown config: {shown}")
        events: list[Event] = []
        for key, value in props.items():
            before = self.config.text(key)
            self.config.set(key, value)
            if key in self.file_properties:
                self.file_properties[key] = self.config.text(key)
            if self.config.text(key) != before:
                events.append(ConfigChanged(key=key, value=self.config.text(key)))
        self.data_version += 1
        return events

    def persist(self) -> None:
        """Rewrite configStorePath (blocking: run it off the event loop)."""
        atomic_write(Path(self.config.config_store_path), format_properties(self.properties()))
