"""The one table of configuration keys: type, range, when a change applies, who may change it.

Every way a setting enters the server goes through this table: the ``-c`` properties file and
the command-line flags at start, the config store at start, and UPDATE_NAMESRV_CONFIG at run
time. So a value that would break the server (``scanNotActiveBrokerInterval=0`` spins the
expiry loop, ``frameMaxLength=1`` refuses every frame after the next restart, a journal
``instanceName`` of ``../../x`` writes outside the state directory) is refused with the same
one-line message wherever it comes from, instead of being silently ignored as Java does.

The keys are Java's (``NamesrvConfig``, ``NettyServerConfig``, the ``tls.*`` JVM properties)
plus pynamesrv's own; ``docs/configuration.md`` is generated from this table.

Not remotely writable (``remote=False``): every key that names a file or directory, where the
server listens, TLS and authentication, the journal's location, the memory limits, and the
addresses the HTTP address service hands to clients. Those change only in the ``-c`` file.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Final


class Kind(StrEnum):
    """How a key's text becomes a value, and what is allowed."""

    BOOL = "bool"
    INT = "int"
    PORT = "port"
    TEXT = "text"
    PATH = "path"
    NAME = "name"
    HOST = "host"
    ADDRESSES = "addresses"
    NETWORKS = "networks"
    CHOICE = "choice"
    SECRET = "secret"


class Applies(StrEnum):
    """When a changed value takes effect."""

    LIVE = "live"  # at once, on the running server
    RESTART = "restart"  # at the next start
    NEVER = "no effect"  # accepted and reported for compatibility, nothing uses it


class SettingError(ValueError):
    """A key or value that is not allowed; the message is one line for an operator."""


class UnknownSetting(SettingError):
    """A key that is not in the table (a typo, usually: the message suggests the key)."""

    def __init__(self, key: str) -> None:
        self.key = key
        hint = suggest(key)
        super().__init__(
            f"unknown config key {key!r}" + (f" (did you mean {hint!r}?)" if hint else "")
        )


INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1
INT32_MAX: Final = 2**31 - 1
MIB: Final = 1024 * 1024
_INTEGER: Final = re.compile(r"[+-]?[0-9]+", re.ASCII)
# A journal instance name becomes a directory name: no separators, no ``.``/``..``.
_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}", re.ASCII)
_HOSTNAME: Final = re.compile(
    r"(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*",
    re.ASCII,
)
_MAX_TEXT: Final = 4096


@dataclass(frozen=True, slots=True)
class Setting:
    """One configuration key."""

    key: str  # as written in properties files and on the wire
    attr: str  # the NamesrvConfig attribute
    kind: Kind
    applies: Applies
    remote: bool  # may UPDATE_NAMESRV_CONFIG change it
    origin: str  # "4.9.4", "5.x", "JVM property", "pynamesrv"
    help: str
    minimum: int | None = None
    maximum: int | None = None
    choices: tuple[str, ...] = ()

    def allowed(self) -> str:
        """What values the key takes, for messages and the reference."""
        kind = self.kind
        if kind is Kind.BOOL:
            return "true or false"
        if kind in (Kind.INT, Kind.PORT):
            low = INT64_MIN if self.minimum is None else self.minimum
            high = INT64_MAX if self.maximum is None else self.maximum
            return f"an integer from {low:,} to {high:,}".replace(",", "_")
        if kind is Kind.CHOICE:
            return " / ".join(self.choices)
        if kind is Kind.NAME:
            return "empty, or 1-128 letters, digits and . _ : @ - (not starting with . or -)"
        if kind is Kind.HOST:
            return "an IP address or host name"
        if kind is Kind.ADDRESSES:
            return "empty, or host:port entries separated by ';'"
        if kind is Kind.NETWORKS:
            return "empty, or IP addresses and CIDR networks separated by ';'"
        if kind is Kind.PATH:
            return "a file or directory path (empty where the key has no file by default)"
        return f"text of at most {_MAX_TEXT} characters without control characters"

    def parse(self, text: str) -> bool | int | str:
        """The value of ``text`` (trimmed, as 5.x does), or ``SettingError``."""
        value = text.strip()
        kind = self.kind
        if kind is Kind.BOOL:
            lowered = value.lower()
            if lowered in ("true", "false"):
                return lowered == "true"
        elif kind in (Kind.INT, Kind.PORT):
            if _INTEGER.fullmatch(value):
                number = int(value)
                low = INT64_MIN if self.minimum is None else self.minimum
                high = INT64_MAX if self.maximum is None else self.maximum
                if low <= number <= high:
                    return number
        elif kind is Kind.CHOICE:
            if value.lower() in self.choices:
                return value.lower()
        elif kind is Kind.NAME:
            if value == "" or (_NAME.fullmatch(value) and ".." not in value):
                return value
        elif kind is Kind.HOST:
            if _is_host(value):
                return value
        elif kind is Kind.ADDRESSES:
            if value == "" or all(_is_address(a) for a in value.split(";") if a.strip()):
                return ";".join(a.strip() for a in value.split(";") if a.strip())
        elif kind is Kind.NETWORKS:
            entries = [e.strip() for e in value.replace(",", ";").split(";") if e.strip()]
            if all(_is_network(e) for e in entries):
                return ";".join(entries)
        elif kind is Kind.PATH:
            if "\x00" not in value and len(value) <= _MAX_TEXT:
                return value
        elif len(value) <= _MAX_TEXT and value.isprintable():
            return value
        raise SettingError(f"{self.key}={_shown(text)} is not allowed: {self.allowed()}")

    def format(self, value: object) -> str:
        """The properties-file text of a value."""
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)


def _shown(text: str) -> str:
    """A value as the message quotes it: short, one line."""
    return repr(text if len(text) <= 64 else text[:61] + "...")


def _is_host(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return bool(_HOSTNAME.fullmatch(value))
    return True


def _is_network(value: str) -> bool:
    try:
        ipaddress.ip_network(value, strict=False)
    except ValueError:
        return False
    return True


def _is_address(value: str) -> bool:
    host, sep, port = value.strip().rpartition(":")
    if not sep or not _INTEGER.fullmatch(port) or not 1 <= int(port) <= 65535:
        return False
    return _is_host(host.strip("[]"))


def _key(
    key: str,
    kind: Kind,
    applies: Applies,
    remote: bool,
    origin: str,
    help: str,
    *,
    attr: str | None = None,
    minimum: int | None = None,
    maximum: int | None = None,
    choices: tuple[str, ...] = (),
) -> Setting:
    if attr is None:
        attr = re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), key.replace(".", "_"))
    if kind is Kind.PORT and minimum is None:
        minimum, maximum = 0, 65535
    return Setting(key, attr, kind, applies, remote, origin, help, minimum, maximum, choices)


B, N, P, T = Kind.BOOL, Kind.INT, Kind.PORT, Kind.TEXT  # bool, number, port, text
LIVE, RESTART, NEVER = Applies.LIVE, Applies.RESTART, Applies.NEVER
_NO_POOLS = "no effect: one event loop answers every request, there are no thread pools"
_NO_NETTY = "no effect: a Netty setting with no counterpart in asyncio"

SETTINGS: Final[tuple[Setting, ...]] = (
    # NamesrvConfig (4.9.4)
    _key("rocketmqHome", Kind.PATH, NEVER, False, "4.9.4",
         "Reported only: Java's install directory (ROCKETMQ_HOME), where mqnamesrv finds its "
         "logback configuration; pynamesrv keeps no state there (stateDir)."),
    _key("kvConfigPath", Kind.PATH, RESTART, False, "4.9.4",
         "The KV store file (Java's format); unset: <stateDir>/kvConfig.json."),
    _key("configStorePath", Kind.PATH, RESTART, False, "4.9.4",
         "Where UPDATE_NAMESRV_CONFIG persists changes: the -c file when one is given (as in "
         "Java; it may be read-only, and such updates then answer 'persist failed'), else "
         "<stateDir>/namesrv.properties."),
    _key("stateDir", Kind.PATH, RESTART, False, "pynamesrv",
         "The writable directory of the server's state: the KV store (<stateDir>/kvConfig.json "
         "unless kvConfigPath says otherwise), the journal (<stateDir>/journal unless "
         "journalDir), the config store when there is no -c file, and their locks. Nothing "
         "is written beside a -c file that is read-only. Java keeps kvConfig.json in "
         "~/namesrv too; ROCKETMQ_HOME plays no part."),
    _key("productEnvName", T, NEVER, True, "4.9.4",
         "Reported only: Java uses it for clusterTest, which pynamesrv does not implement."),
    _key("clusterTest", B, NEVER, True, "4.9.4",
         "Reported only: Java forwards route misses to a test cluster; pynamesrv does not."),
    _key("orderMessageEnable", B, LIVE, True, "4.9.4",
         "Attach the ORDER_TOPIC_CONFIG KV entry of a topic to its route answers."),
    # NamesrvConfig (5.x)
    _key("returnOrderTopicConfigToBroker", B, LIVE, True, "5.x",
         "Send the ORDER_TOPIC_CONFIG KV table to brokers in REGISTER_BROKER answers."),
    _key("clientRequestThreadPoolNums", N, NEVER, True, "5.x", _NO_POOLS,
         minimum=1, maximum=INT32_MAX),
    _key("clientRequestThreadPoolQueueCapacity", N, NEVER, True, "5.x", _NO_POOLS,
         minimum=1, maximum=INT32_MAX),
    _key("defaultThreadPoolNums", N, NEVER, True, "5.x", _NO_POOLS,
         minimum=1, maximum=INT32_MAX),
    _key("defaultThreadPoolQueueCapacity", N, NEVER, True, "5.x", _NO_POOLS,
         minimum=1, maximum=INT32_MAX),
    _key("scanNotActiveBrokerInterval", N, LIVE, True, "5.x",
         "Milliseconds between expiry scans (Java's only check); pynamesrv also expires each "
         "broker at its own deadline, so a dead broker leaves the routes within a second.",
         minimum=100, maximum=86_400_000),
    _key("unRegisterBrokerQueueCapacity", N, NEVER, True, "5.x",
         "no effect: unregistrations are applied at once, there is no queue",
         minimum=1, maximum=INT32_MAX),
    _key("supportActingMaster", B, LIVE, True, "5.x",
         "Route answers show the lowest-id slave of a master-less group whose brokers "
         "registered with enableActingMaster=true as id 0 (its write permission is removed "
         "whatever this says), except for rmq_sys_SYNC_BROKER_MEMBER_* topics."),
    _key("enableAllTopicList", B, LIVE, True, "5.x",
         "Answer GET_ALL_TOPIC_LIST_FROM_NAMESERVER (false: SYSTEM_ERROR 'disable')."),
    _key("enableTopicList", B, LIVE, True, "5.x",
         "Answer the per-cluster and unit topic lists (false: SYSTEM_ERROR 'disable')."),
    _key("notifyMinBrokerIdChanged", B, LIVE, False, "5.x",
         "Send NOTIFY_MIN_BROKER_ID_CHANGE (905) to the brokers of a group whose lowest "
         "broker id changed (the master of an acting-master group left, or a lower id "
         "registered), at their own addresses; retried at most 3 times, never blocking. "
         "Not remotely writable: it makes the server connect to addresses registrants name."),
    _key("notifyMinBrokerIdChangeTimeoutMillis", N, LIVE, True, "5.x",
         "How long one NOTIFY_MIN_BROKER_ID_CHANGE waits for the connection and the broker's "
         "answer before it counts as failed.",
         minimum=1, maximum=600_000),
    _key("enableControllerInNamesrv", B, RESTART, True, "5.x",
         "Must stay false: pynamesrv has no embedded controller, so true is refused (in the -c "
         "file and remotely); run the standalone Java controller (bin/mqcontroller) for "
         "controller mode."),
    _key("needWaitForService", B, LIVE, True, "5.x",
         "Answer route queries with SYSTEM_ERROR 'name server not ready' for "
         "waitSecondsForService after start, so restarted brokers can re-register first "
         "(5.3.2's behaviour: 5.2.0 never became ready again after its first route answer)."),
    _key("waitSecondsForService", N, LIVE, True, "5.x",
         "Length of the start-up wait of needWaitForService.", minimum=0, maximum=3600),
    _key("deleteTopicWithBrokerRegistration", B, LIVE, True, "5.x",
         "A master's (or acting master's) registration drops the group's topics it does not "
         "list, unless it carries static-topic mappings; every such body is then decoded. "
         "As in Java, incremental and split registrations list only some topics: enable it "
         "only with brokers that register all of theirs at once."),
    _key("configBlackList", T, RESTART, False, "5.x",
         "Keys UPDATE_NAMESRV_CONFIG refuses, ';'-separated (on top of the built-in ones)."),
    # NettyServerConfig
    _key("bindAddress", Kind.HOST, RESTART, False, "5.x",
         "Address the remoting port listens on."),
    _key("listenPort", P, RESTART, False, "4.9.4",
         "The remoting port brokers and clients connect to (0: any free port)."),
    _key("serverWorkerThreads", N, NEVER, True, "4.9.4", _NO_POOLS,
         minimum=1, maximum=INT32_MAX),
    _key("serverCallbackExecutorThreads", N, NEVER, True, "4.9.4", _NO_POOLS,
         minimum=0, maximum=INT32_MAX),
    _key("serverSelectorThreads", N, NEVER, True, "4.9.4", _NO_NETTY,
         minimum=1, maximum=INT32_MAX),
    _key("serverOnewaySemaphoreValue", N, NEVER, True, "4.9.4", _NO_NETTY,
         minimum=1, maximum=INT32_MAX),
    _key("serverAsyncSemaphoreValue", N, NEVER, True, "4.9.4", _NO_NETTY,
         minimum=1, maximum=INT32_MAX),
    _key("serverChannelMaxIdleTimeSeconds", N, LIVE, True, "4.9.4",
         "Close a connection with no read or write for this long (0: never).",
         minimum=0, maximum=86_400),
    _key("serverSocketSndBufSize", N, RESTART, True, "4.9.4",
         "SO_SNDBUF of accepted connections in bytes (0: the OS default).",
         minimum=0, maximum=INT32_MAX),
    _key("serverSocketRcvBufSize", N, RESTART, True, "4.9.4",
         "SO_RCVBUF of accepted connections in bytes (0: the OS default).",
         minimum=0, maximum=INT32_MAX),
    _key("writeBufferHighWaterMark", N, RESTART, True, "4.9.4",
         "Answer a peer only while its unread answers are under this many bytes; above, "
         "read and answer nothing more until it reads (0: 4 MiB).",
         minimum=0, maximum=INT32_MAX),
    _key("writeBufferLowWaterMark", N, RESTART, True, "4.9.4",
         "Read again when they fall below this many bytes (0: 1 MiB).",
         minimum=0, maximum=INT32_MAX),
    _key("serverSocketBacklog", N, RESTART, False, "4.9.4",
         "Listen backlog of the remoting port.", minimum=1, maximum=65535),
    _key("serverPooledByteBufAllocatorEnable", B, NEVER, True, "4.9.4", _NO_NETTY),
    _key("useEpollNativeSelector", B, NEVER, True, "4.9.4",
         "no effect: uvloop uses epoll whenever it runs on Linux"),
    _key("serverNettyWorkerGroupEnable", B, NEVER, True, "5.x", _NO_NETTY),
    _key("enableShutdownGracefully", B, LIVE, False, "5.x",
         "On SIGTERM or SIGINT, keep serving for shutdownWaitTimeSeconds before closing the "
         "port (a second signal stops at once). Brokers are neither expired nor removed by "
         "the close of a connection answered GO_AWAY while it drains. Not remotely writable: "
         "it changes what every restart does."),
    _key("shutdownWaitTimeSeconds", N, LIVE, False, "5.x",
         "How long a graceful shutdown keeps serving (answering GO_AWAY to clients newer "
         "than 5.3.1). Not remotely writable: a remote writer could hold every restart for "
         "an hour.", minimum=0, maximum=3600),
    # com.rocketmq.remoting.frameMaxLength (a JVM property in Java)
    _key("frameMaxLength", N, RESTART, False, "JVM property",
         "Largest frame accepted, in bytes (com.rocketmq.remoting.frameMaxLength).",
         minimum=MIB, maximum=1024 * MIB),
    _key("rocketmq.remoting.version", N, RESTART, False, "JVM property",
         "The RocketMQ version ordinal pynamesrv answers as: 453 (5.2.0, the newest it "
         "implements) or 401 (4.9.4). It is the version of every answer; below 413 (5.0.0) "
         "answers also take 4.9.4's shape: no enableActingMaster in broker data, no "
         "stateVersion in QUERY_DATA_VERSION bodies, 4.9.4's remarks and GET_NAMESRV_CONFIG "
         "keys. Features do not depend on it.", minimum=0, maximum=32767),
    # TLS of the remoting port (JVM properties in Java; here -c file keys, or the file named
    # by tls.config.file, whose values win as in Java)
    _key("tls.server.mode", Kind.CHOICE, RESTART, False, "JVM property",
         "TLS on the remoting port: disabled (plain only), permissive (both, by the first "
         "byte), enforcing (TLS only).", choices=("disabled", "permissive", "enforcing")),
    _key("tls.config.file", Kind.PATH, RESTART, False, "JVM property",
         "A properties file with more tls.* keys (read only when set)."),
    _key("tls.test.mode.enable", B, RESTART, False, "JVM property",
         "Serve a self-signed certificate when none is configured (no authentication)."),
    _key("tls.server.certPath", Kind.PATH, RESTART, False, "JVM property",
         "PEM certificate chain of the remoting port; reloaded when the file changes."),
    _key("tls.server.keyPath", Kind.PATH, RESTART, False, "JVM property",
         "PEM private key (empty: in the certificate file); reloaded when it changes."),
    _key("tls.server.keyPassword", Kind.SECRET, RESTART, False, "JVM property",
         "Password of an encrypted private key; never reported."),
    _key("tls.server.need.client.auth", Kind.CHOICE, RESTART, False, "JVM property",
         "Client certificates: none, optional (checked when sent) or require.",
         choices=("none", "optional", "require")),
    _key("tls.server.trustCertPath", Kind.PATH, RESTART, False, "JVM property",
         "PEM CA certificates that client certificates are checked against."),
    _key("tls.server.authClient", B, NEVER, False, "JVM property",
         "no effect: a client certificate that is sent is always checked"),
    _key("httpTlsCertPath", Kind.PATH, RESTART, False, "pynamesrv",
         "PEM certificate of the HTTP port (empty: plain HTTP); reloaded when it changes."),
    _key("httpTlsKeyPath", Kind.PATH, RESTART, False, "pynamesrv",
         "PEM private key of the HTTP port (empty: in the certificate file)."),
    _key("httpTlsKeyPassword", Kind.SECRET, RESTART, False, "pynamesrv",
         "Password of an encrypted HTTP key; never reported."),
    # pynamesrv's own: authenticated requests (docs/access-control.md)
    _key("aclFile", Kind.PATH, RESTART, False, "pynamesrv",
         "Accounts in plain_acl.yml's shape; when set, admin writes need an admin account's "
         "signature (empty: admin writes open, as in Java)."),
    _key("aclRegistrationRequired", B, RESTART, False, "pynamesrv",
         "Broker registration, unregistration and heartbeats need an account's signature."),
    _key("aclReadRequired", B, RESTART, False, "pynamesrv",
         "Every other request needs an account's signature too."),
    _key("aclAdminBindingRequired", B, RESTART, False, "pynamesrv",
         "Admin writes must also carry pynamesrv's request binding (ARequestBinding: the "
         "request code, the time and the field lengths, signed), which only pynamesrv's "
         "admin CLI sends: for deployments administered with it alone (mqadmin is refused)."),
    _key("aclBindingWindowSeconds", N, RESTART, False, "pynamesrv",
         "How far a request binding's time may be from this server's clock, either way.",
         minimum=1, maximum=86_400),
    # pynamesrv's own: outbound notifications (NOTIFY_MIN_BROKER_ID_CHANGE)
    _key("notifyAllowedAddresses", T, RESTART, False, "pynamesrv",
         "Hosts NOTIFY_MIN_BROKER_ID_CHANGE may connect to, in whiteRemoteAddress's forms "
         "(10.0.1.*, 10.0.0.1-20, a comma list); empty: any registered broker's address."),
    _key("notifyMaxPendingTargets", N, RESTART, False, "pynamesrv",
         "Broker addresses with a notification pending at once; more are dropped (counted).",
         minimum=1, maximum=65_536),
    _key("notifyMaxConnections", N, RESTART, False, "pynamesrv",
         "Outbound notification connections open at once; the others wait their turn.",
         minimum=1, maximum=1024),
    # pynamesrv's own: limits
    _key("maxConnections", N, RESTART, False, "pynamesrv",
         "Remoting connections open at once. When all are taken, a new connection sheds "
         "the idlest one no broker is registered on (refused only when every one holds a "
         "broker).",
         minimum=1, maximum=1_000_000),
    _key("maxConnectionsPerSource", N, RESTART, False, "pynamesrv",
         "Remoting connections open at once from one client address (an IPv6 one by its "
         "/64; loopback included; behind a load balancer named in "
         "proxyProtocolTrustedAddresses, the address its PROXY header names); more are "
         "closed on accept. 0: no cap.",
         minimum=0, maximum=1_000_000),
    _key("maxBufferedBytes", N, RESTART, False, "pynamesrv",
         "Request bytes all connections together may hold (incomplete frames, frames "
         "waiting their turn, requests being answered); past it the connections holding "
         "the most are closed. At least frameMaxLength.",
         minimum=MIB, maximum=64 * 1024 * MIB),
    _key("maxPendingAnswerBytes", N, RESTART, False, "pynamesrv",
         "Answer bytes all connections together may hold unwritten (peers that send and "
         "do not read); past it the connections holding the most are closed. At least "
         "twice writeBufferHighWaterMark.",
         minimum=8 * MIB, maximum=64 * 1024 * MIB),
    _key("frameReadTimeoutSeconds", N, RESTART, False, "pynamesrv",
         "A frame must arrive completely within this many seconds of its first byte.",
         minimum=1, maximum=3600),
    _key("proxyProtocol", Kind.CHOICE, RESTART, False, "pynamesrv",
         "HAProxy PROXY protocol (v1, v2) on the remoting port, as Java 5.1.4+ detects it: "
         "off (a header closes the connection), auto (a connection may start with one, "
         "from proxyProtocolTrustedAddresses), required (every connection must). The "
         "header's client address is the one logs, audit and ACL checks see; with aclFile "
         "set, headers are believed only from proxyProtocolTrustedAddresses.",
         choices=("off", "auto", "required")),
    _key("proxyProtocolTrustedAddresses", Kind.NETWORKS, RESTART, False, "pynamesrv",
         "The load balancers whose PROXY headers are believed (a header from any other "
         "address closes the connection); empty: every address, as Java does, unless aclFile "
         "is set (then none)."),
    _key("serverWorkers", T, RESTART, False, "pynamesrv",
         "Processes that accept on the remoting port: this one, which decides every change, "
         "and serverWorkers-1 workers that answer reads from replicas of its event stream "
         "and forward writes to it (SO_REUSEPORT; docs/operations.md, Workers). A number "
         "from 1 to 256, or auto: one per CPU this process may run on."),
    _key("serverWorkerMaxBacklogBytes", N, RESTART, False, "pynamesrv",
         "Bytes of the writer's stream a worker may leave unread; past it the worker gets "
         "no more batches, and is rebuilt from an image once it has read them (a stuck or "
         "slow worker never holds the writer or its memory beyond this).",
         minimum=MIB, maximum=64 * 1024 * MIB),
    _key("routeQueryFastPath", B, RESTART, False, "pynamesrv",
         "Answer plain route queries from their raw header bytes (false: decode every "
         "request; a switch for comparison and for trouble)."),
    # pynamesrv's own: observability
    _key("httpPort", P, RESTART, False, "pynamesrv",
         "Port of /metrics, /healthz, /rocketmq/nsaddr, /api and the status page (0: off)."),
    _key("httpMaxConnections", N, RESTART, False, "pynamesrv",
         "Open HTTP connections allowed; more are answered 503 and closed at once. At most "
         "a quarter of the open-file limit (RLIMIT_NOFILE), so HTTP never takes the "
         "descriptors the remoting port needs.", minimum=1, maximum=1_000_000),
    _key("httpHeaderTimeoutSeconds", N, RESTART, False, "pynamesrv",
         "An HTTP request (its headers, and a body if any) must arrive within this many "
         "seconds of its first byte, and a new connection must start its first request "
         "within it; else the connection is closed.", minimum=1, maximum=3600),
    _key("httpKeepAliveSeconds", N, RESTART, False, "pynamesrv",
         "An idle keep-alive HTTP connection is closed after this many seconds without a "
         "request.", minimum=1, maximum=3600),
    _key("httpMaxConnectionsPerSource", N, RESTART, False, "pynamesrv",
         "Open HTTP connections from one address (an IPv6 /64; loopback and proxies "
         "included); a new one "
         "past it closes that address's oldest idle keep-alive connection, or is answered 503 "
         "and closed when none is idle.", minimum=1, maximum=1_000_000),
    _key("httpMaxRequestsPerSecond", N, RESTART, False, "pynamesrv",
         "HTTP requests read a second, all connections together (bursts of 4): past it a "
         "connection waits its turn unread, so a flood of HTTP requests slows HTTP, never "
         "the route answers of the remoting port. 200 serves 24,000 clients polling "
         "/rocketmq/nsaddr every 2 minutes.", minimum=1, maximum=1_000_000),
    _key("httpMaxSearches", N, RESTART, False, "pynamesrv",
         "Scans running at once: topic searches (/api/topics) and broker listings "
         "(/api/clusters), the status page's data, and time travel (/api/routes-at); more "
         "are answered 429. A scan walks the tables in slices of 1 ms, resting 9 ms after "
         "each: route queries are answered between them; time travel reads the journal on a "
         "thread of its own, one at a time.", minimum=1, maximum=64),
    _key("nsAddrList", Kind.ADDRESSES, LIVE, False, "pynamesrv",
         "What /rocketmq/nsaddr serves, host:port;host:port: every name server of the "
         "deployment, so that clients using the address service learn them all (empty: "
         "this server alone)."),
    _key("instanceName", Kind.NAME, RESTART, False, "pynamesrv",
         "The journal's instance name and directory (empty: host:port)."),
    _key("journalEnable", B, RESTART, False, "pynamesrv", "Write the route-change journal."),
    _key("warmRestart", B, RESTART, False, "pynamesrv",
         "Serve the routes recovered from the journal at start (the last snapshot and the "
         "lines after it; brokers provisional until they register again or expire). Needs "
         "the journal and an instance name known before the port opens (instanceName, or "
         "a listenPort other than 0)."),
    _key("journalDir", Kind.PATH, RESTART, False, "pynamesrv",
         "Journal root directory (empty: <stateDir>/journal)."),
    _key("journalFlushIntervalMs", N, RESTART, False, "pynamesrv",
         "How often journal lines are written (a kill -9 loses at most this much).",
         minimum=10, maximum=60_000),
    _key("journalSnapshotIntervalMs", N, RESTART, False, "pynamesrv",
         "How often a snapshot of the routes is journaled.",
         minimum=1000, maximum=86_400_000),
    _key("journalRetentionHours", N, RESTART, False, "pynamesrv",
         "Hour files older than this are deleted (closed hours are gzip-compressed).",
         minimum=1, maximum=24 * 3660),
    _key("journalMaxBytes", N, RESTART, False, "pynamesrv",
         "Cap of the instance's journal directory: the oldest hours go first, and a flood "
         "within one hour is dropped (counted) past it.",
         minimum=MIB, maximum=2**50),
    _key("journalMaxPendingBytes", N, RESTART, False, "pynamesrv",
         "Journal lines waiting to be written (a full or failing disk) may hold this much "
         "memory, counted as the lines and the objects they keep (an unencoded registration "
         "holds its event); past it new lines are dropped and counted (snapshots and "
         "server_started/stopped up to twice it).",
         minimum=MIB, maximum=2**40),
    _key("routeQueriesWindowMs", N, RESTART, False, "pynamesrv",
         "Window of the journal's per-topic route-query counts.",
         minimum=1000, maximum=3_600_000),
    # pynamesrv's own: logs and the process (cli/logs.py, cli/pidfile.py)
    _key("logFile", Kind.PATH, RESTART, False, "pynamesrv",
         "Log file (empty: standard error; default: ~/logs/rocketmqlogs/namesrv.log, "
         "Java's place). Rotated by size, older files gzip-compressed (namesrv.log.1.gz, ...)."),
    _key("logMaxBytes", N, RESTART, False, "pynamesrv",
         "Size at which the log file is rotated (0: never, e.g. under logrotate).",
         minimum=0, maximum=2**40),
    _key("logBackups", N, RESTART, False, "pynamesrv",
         "Rotated log files kept (0: never rotate).", minimum=0, maximum=1000),
    _key("logFormat", Kind.CHOICE, RESTART, False, "pynamesrv",
         "text (one line per record) or json (one JSON object per line: ts, level, "
         "logger, message, and extra fields).", choices=("text", "json")),
    _key("logLevel", Kind.CHOICE, RESTART, False, "pynamesrv",
         "Lowest level logged.", choices=("debug", "info", "warning", "error")),
    _key("pidFile", Kind.PATH, RESTART, False, "pynamesrv",
         "File serve writes its process id to, and removes at exit; `pynamesrv stop` reads "
         "it (empty: none)."),
)  # fmt: skip

BY_KEY: Final = {setting.key: setting for setting in SETTINGS}
_BY_LOWER: Final = {setting.key.lower(): setting.key for setting in SETTINGS}


def setting(key: str) -> Setting:
    """The setting of ``key``, or ``UnknownSetting``."""
    found = BY_KEY.get(key)
    if found is None:
        raise UnknownSetting(key)
    return found


def suggest(key: str) -> str | None:
    """The known key an unknown one most likely meant (wrong case first, then spelling)."""
    exact_case = _BY_LOWER.get(key.lower())
    if exact_case is not None:
        return exact_case
    close = difflib.get_close_matches(key.lower(), list(_BY_LOWER), n=1, cutoff=0.75)
    return _BY_LOWER[close[0]] if close else None


def parse_all(props: Iterable[tuple[str, str]]) -> tuple[dict[str, bool | int | str], list[str]]:
    """Parse every pair; the values that are good and one message per bad key or value."""
    values: dict[str, bool | int | str] = {}
    errors: list[str] = []
    for key, text in props:
        try:
            values[key] = setting(key).parse(text)
        except SettingError as exc:
            errors.append(str(exc))
    return values, errors
