"""Every change of route state, and every other journal line, as an event defined once
(docs/journal.md).

A request is handled in two steps: the registry *decides* (reads its tables, applies
RocketMQ's rules) and returns these events, then *applies* each one, and that apply is the
only code that writes the tables (``routes.changes``). The journal is the list of the same
events, so a warm restart, ``routes-at`` and the synthetic-journal simulator apply the lines
read back with ``from_record`` and get what the live server had. Readers derive their lists of
line types and fields from ``event_classes()``. Field names are the journal's contract: add,
never rename.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import MISSING, dataclass, field, fields
from functools import cache
from operator import itemgetter
from typing import Any, ClassVar, Final, Self, TypeVar

from pynamesrv.namesrv.model import DataVersion, QueueData, RoutedTopic, TopicQueueMappingInfo

# What a journal's integers may hold: Java longs (timestamps, ids, data versions) and ints
# (queue numbers, perm, sys flag).
_LONG: Final = (-(2**63), 2**63 - 1)
_INT: Final = (-(2**31), 2**31 - 1)


class RecordError(ValueError):
    """A journal line without the shape docs/journal.md gives it (read, never trusted)."""


@dataclass
class Event:
    # The time the tables applied the event at (``RouteChanges.apply``): its journal line's
    # ``ts``, so a line read back is applied as of the same millisecond. A slot, not a field:
    # it is the line's ``ts``, not part of its payload. Unset for events that change no route.
    __slots__ = ("applied_ms",)
    TYPE: ClassVar[str] = "event"
    # The fields a line must hold to be read back: what its apply cannot do without. Any
    # other field it lacks (older journals, a reader that selected only some columns) takes
    # its default, or the zero of its type.
    REQUIRED: ClassVar[tuple[str, ...]] = ()

    def to_record(self) -> dict[str, Any]:
        """The journal line's payload, without ``ts``/``ns``. Shallow: lists are shared, the
        caller serializes at once (``dataclasses.asdict`` deep-copies and is 10x slower)."""
        record: dict[str, Any] = {"type": self.TYPE}
        for name in _field_names(type(self)):  # type: ignore[arg-type]  # classes hash by id
            record[name] = getattr(self, name)
        return record

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Self:
        """The event a journal line holds, every field checked against its declared type
        (and integers against Java's long): RecordError otherwise. A ``REQUIRED`` field must
        be there; any other absent or null field takes its default (or null, or the zero of
        its type)."""
        values: dict[str, Any] = {}
        for spec in _specs(cls):  # type: ignore[arg-type]  # classes hash by id
            value = record.get(spec.name)
            if value is None:
                if spec.name in cls.REQUIRED:
                    raise RecordError(f"{cls.TYPE}: {spec.name} is missing")
                if spec.nullable:
                    values[spec.name] = None
                elif not spec.has_default:
                    values[spec.name] = spec.kind()
                continue
            if spec.kind is not object and (
                type(value) is not spec.kind and not _is_kind(value, spec.kind)
            ):
                raise RecordError(f"{cls.TYPE}: {spec.name} is not {spec.kind.__name__}")
            if spec.kind is int and not _LONG[0] <= value <= _LONG[1]:
                raise RecordError(f"{cls.TYPE}: {spec.name} is out of range")
            values[spec.name] = value
        event = cls(**values)
        event.check()
        return event

    def check(self) -> None:
        """What ``from_record`` checks beyond each field's type (RecordError)."""

    def mark_applied(self, ts_ms: int) -> None:
        """Called by ``RouteChanges.apply`` once the tables hold the event as of ``ts_ms``."""
        object.__setattr__(self, "applied_ms", ts_ms)

    def ts_or(self, now_ms: int) -> int:
        """The journal line's ``ts``: when the tables applied the event, else ``now_ms``."""
        return getattr(self, "applied_ms", now_ms)


def _is_kind(value: Any, kind: type) -> bool:
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


@dataclass(frozen=True, slots=True)
class _FieldSpec:
    name: str
    kind: type  # str, int, bool, dict, list or object (anything)
    nullable: bool
    has_default: bool


_KINDS: Final = {"str": str, "int": int, "bool": bool, "dict": dict, "Mapping": dict, "list": list}


@cache
def _specs(event_type: type) -> tuple[_FieldSpec, ...]:
    """The fields of an event class as ``from_record`` checks them, from their annotations
    (strings under ``from __future__ import annotations``: ``str | None``, ``dict[str, int]``)."""
    specs = []
    for f in fields(event_type):
        annotation = str(f.type)
        nullable = annotation.endswith("| None")
        base = annotation.removesuffix("| None").strip().split("[", 1)[0]
        has_default = f.default is not MISSING or f.default_factory is not MISSING
        specs.append(_FieldSpec(f.name, _KINDS.get(base, object), nullable, has_default))
    return tuple(specs)


@cache
def _field_names(event_type: type) -> tuple[str, ...]:
    """Instance fields only: ``__dataclass_fields__`` also lists the ``TYPE`` class variable."""
    return tuple(f.name for f in fields(event_type))


_QUEUE_CONFIG_KEYS: Final = ("read", "write", "perm", "sys_flag")  # a topic_configs entry
QueueValues = tuple[int, int, int, int]  # read, write, perm, sys_flag
Columns = tuple[list[str], list[QueueValues], list[int] | None]  # ``QueueConfigs.columns``


_T = TypeVar("_T")


def per_topic(distinct: list[_T], index: list[int] | None, count: int) -> list[_T]:
    """Each of ``count`` topics' item, given one item per distinct value (``distinct``, in
    the order of ``QueueConfigs.columns``' values) and that index (None: one value)."""
    return [distinct[0]] * count if index is None else list(map(distinct.__getitem__, index))


_TOPIC: Final = itemgetter(0)
_VALUES: Final = itemgetter(1, 2, 3, 4)


class QueueConfigs(Mapping[str, dict[str, int]]):
    """The queue data a registration set, by topic, as the journal writes it:
    ``{topic: {"read", "write", "perm", "sys_flag"}}``.

    Kept as the registration's routed rows (immutable tuples) and turned into dicts only when
    read: a first registration of 100,000 topics would otherwise build 100,000 dicts on the
    event loop that only the journal's writer thread needs. ``perm_mask`` is what the
    registry applied to each row's perm (a prime slave's topics lose the write bit). A topic
    listed twice takes the place of its first row and the values of its last, as a dict
    filled row by row would.

    The same rows can be held as columns instead (``from_columns``, ``columns``): the
    topics, the distinct values and each topic's index into them. That is how a
    registration travels to the workers: 100,000 topics with a handful of distinct values
    are a list of names and a list of small numbers, not 100,000 five-member rows to encode,
    decode and take apart again.

    ``whole_body``: the rows are every routed row of the registration's body, in its order
    (the registry took them all). A worker that decoded the body it forwarded holds them
    already, so the stream names that body instead of carrying them (``replication``)."""

    __slots__ = ("_as_dict", "_columns", "_perm_mask", "_rows", "whole_body")

    def __init__(
        self, rows: list[RoutedTopic], perm_mask: int = -1, *, whole_body: bool = False
    ) -> None:
        self._rows: list[RoutedTopic] | None = rows
        self._columns: Columns | None = None
        self._perm_mask = perm_mask
        self._as_dict: dict[str, dict[str, int]] | None = None
        self.whole_body = whole_body

    @classmethod
    def from_columns(
        cls, topics: list[str], values: list[QueueValues], index: list[int] | None, perm_mask: int
    ) -> QueueConfigs:
        """The rows ``columns`` returned (``index`` None: every topic takes ``values[0]``)."""
        configs = cls([], perm_mask)
        configs._rows = None
        configs._columns = (topics, values, index)
        return configs

    def columns(self) -> Columns:
        """The rows as columns: topics, distinct values (read, write, perm before the mask,
        sys_flag) in the order they first appear, and each topic's index into them (None
        when there is one value, or no row)."""
        if self._columns is None:
            rows = self.rows
            topics = list(map(_TOPIC, rows))
            per_row = list(map(_VALUES, rows))
            distinct = dict.fromkeys(per_row)
            values = list(distinct)
            index = None
            if len(values) > 1:
                numbers = {v: i for i, v in enumerate(values)}
                index = list(map(numbers.__getitem__, per_row))
            self._columns = (topics, values, index)
        return self._columns

    def as_dict(self) -> dict[str, dict[str, int]]:
        """The plain dict (built once; a race between two threads builds two equal ones)."""
        built = self._as_dict
        if built is None:
            mask = self._perm_mask
            built = self._as_dict = {
                topic: {"read": read, "write": write, "perm": perm & mask, "sys_flag": sys_flag}
                for topic, read, write, perm, sys_flag in self.rows
            }
        return built

    def record(self) -> dict[str, dict[str, int]]:
        """The plain dict for one journal line, built afresh and not kept: a topic's entry is
        shared with every topic of equal values (a line's 100,000 topics have a handful), so
        the line costs one dict of references, not 100,000 dicts (30 MB) held as long as the
        event. Read it, never change it."""
        mask = self._perm_mask
        entries: dict[tuple[int, int, int, int], dict[str, int]] = {}
        record: dict[str, dict[str, int]] = {}
        for topic, read, write, perm, sys_flag in self.rows:
            values = (read, write, perm & mask, sys_flag)
            entry = entries.get(values)
            if entry is None:
                entry = entries[values] = dict(zip(_QUEUE_CONFIG_KEYS, values, strict=True))
            record[topic] = entry
        return record

    def __getitem__(self, topic: str) -> dict[str, int]:
        return self.as_dict()[topic]

    def __iter__(self) -> Iterator[str]:
        return iter(self.as_dict())

    def __len__(self) -> int:
        return len(self.as_dict())

    def __repr__(self) -> str:
        return f"QueueConfigs({self.as_dict()!r})"

    @property
    def rows(self) -> list[RoutedTopic]:
        rows = self._rows
        if rows is None:
            topics, values, index = self._columns  # type: ignore[misc]  # one or the other
            if index is None:
                rows = [(topic, *values[0]) for topic in topics]
            else:
                rows = [(t, *values[i]) for t, i in zip(topics, index, strict=True)]
            self._rows = rows
        return rows

    @property
    def perm_mask(self) -> int:
        return self._perm_mask


def queue_configs(configs: Mapping[str, Any]) -> QueueConfigs:
    """A registration's ``topic_configs`` as routed rows: as the registry made them, or read
    from a journal line (``{topic: {"read", "write", "perm", "sys_flag"}}``, each checked)."""
    if isinstance(configs, QueueConfigs):
        return configs
    return QueueConfigs([queue_row(topic, entry) for topic, entry in configs.items()])


def queue_row(topic: str, entry: Any) -> RoutedTopic:
    """One queue entry of a journal line (``topic_configs``, ``queues``, snapshot topics):
    read, write, perm and sys_flag (0 in journals older than it) must be Java ints."""
    if type(entry) is not dict:
        raise RecordError(f"queue data of {topic[:64]!r} is not an object")
    read, write, perm = entry.get("read"), entry.get("write"), entry.get("perm")
    flag = entry.get("sys_flag") or 0
    for value in (read, write, perm, flag):
        if type(value) is not int or not _INT[0] <= value <= _INT[1]:
            raise RecordError(
                f"queue data of {topic[:64]!r}: read, write, perm, sys_flag must be Java ints"
            )
    return (topic, read, write, perm, flag)  # type: ignore[return-value]  # checked above


def queue_table(
    topic: str, entries: Any, make: Callable[[str, int, int, int, int], QueueData] = QueueData
) -> dict[str, QueueData]:
    """A topic's queue entries as the journal lists them (``queues``, snapshot topics), by
    broker name in their order, each checked; ``make`` builds (or shares) each QueueData."""
    if type(entries) is not list:
        raise RecordError(f"queue data of {topic[:64]!r}: expected an array")
    queues: dict[str, QueueData] = {}
    for entry in entries:
        name = entry.get("broker_name") if type(entry) is dict else None
        if type(name) is not str:
            raise RecordError(f"queue data of {topic[:64]!r}: an entry has no broker_name")
        _, read, write, perm, flag = queue_row(topic, entry)
        queues[name] = make(name, read, write, perm, flag)
    return queues


def queue_mapping(record: Any, where: str) -> TopicQueueMappingInfo:
    """A 5.x static-topic mapping as the journal holds it (``TopicQueueMappingInfo`` JSON)."""
    try:
        return TopicQueueMappingInfo.from_json(record)
    except (ValueError, TypeError, AttributeError) as exc:
        raise RecordError(f"{where}: a static-topic mapping: {exc}") from None


def timestamp(value: Any, what: str) -> int:
    """An epoch-millisecond field read back: an int from 0 up to Java's long."""
    if type(value) is not int or not 0 <= value <= _LONG[1]:
        raise RecordError(f"{what} is not a time")
    return value


def data_version_of(record: Mapping[str, Any] | None) -> DataVersion:
    """A journal's ``data_version`` object (absent: the zero version), checked."""
    if record is None:
        return DataVersion()
    try:
        return DataVersion.from_json(record)
    except ValueError as exc:
        raise RecordError(f"data_version: {exc}") from None


@dataclass(slots=True)
class BrokerRegistered(Event):
    TYPE: ClassVar[str] = "broker_registered"
    REQUIRED: ClassVar[tuple[str, ...]] = ("cluster", "broker_name", "broker_id", "broker_addr")
    cluster: str
    broker_name: str
    broker_id: int
    broker_addr: str
    ha_addr: str | None
    first: bool
    data_version: dict[str, int]
    topics_added: list[str] = field(default_factory=list)
    topics_removed: list[str] = field(default_factory=list)
    topics_changed: list[str] = field(default_factory=list)
    topic_count: int = 0
    # Queue data of the added and changed topics, so a reader can rebuild routes (routes-at):
    # a dict, or from the registry the rows it applied (QueueConfigs, read as that dict).
    topic_configs: Mapping[str, dict[str, int]] = field(default_factory=dict)
    # Static-topic mappings this registration set: {topic: TopicQueueMappingInfo as JSON}
    # (5.x updateStaticTopic); each names its group in ``bname``.
    topic_mappings: dict[str, dict[str, Any]] = field(default_factory=dict)
    # What a warm restart needs to expire the broker and answer as before: its
    # heartbeatTimeoutMillis, and the group's zone and enableActingMaster (5.x headers).
    timeout_ms: int | None = None
    zone_name: str | None = None
    enable_acting_master: bool = False
    # True when this registration replaced a provisional entry (a broker recovered from the
    # journal at a warm restart registering again): ``first`` is false then, its session
    # began at its ``broker_recovered`` line.
    recovered: bool = False

    def check(self) -> None:
        data_version_of(self.data_version)
        self.topic_configs = queue_configs(self.topic_configs)
        for name in ("topics_added", "topics_removed", "topics_changed"):
            if not all(type(topic) is str for topic in getattr(self, name)):
                raise RecordError(f"{self.TYPE}: {name} holds a non-string")
        for mapping in self.topic_mappings.values():
            queue_mapping(mapping, self.TYPE)

    def to_record(self) -> dict[str, Any]:
        """``Event.to_record`` with the topic configs as the plain dict the journal holds."""
        record = Event.to_record(self)
        configs = self.topic_configs
        if isinstance(configs, QueueConfigs):
            record["topic_configs"] = configs.record()
        return record


@dataclass(slots=True)
class BrokerHeartbeat(Event):
    TYPE: ClassVar[str] = "broker_heartbeat"
    REQUIRED: ClassVar[tuple[str, ...]] = ("cluster", "broker_addr")  # all a compact line has
    cluster: str
    broker_name: str
    broker_id: int
    broker_addr: str
    data_version: dict[str, int]


@dataclass(slots=True)
class BrokerRecovered(Event):
    """A broker address a warm restart recovered from the journal: routed again from the
    server's start, *provisional* (no connection) until it registers again (then a
    ``broker_registered`` with ``recovered`` true) or its deadline passes (then a
    ``broker_removed`` with reason ``expired``). One line per broker right after
    ``server_started``, with the start's ``ts``."""

    TYPE: ClassVar[str] = "broker_recovered"
    REQUIRED: ClassVar[tuple[str, ...]] = ("cluster", "broker_addr", "last_heartbeat_ts")
    cluster: str
    broker_name: str
    broker_id: int
    broker_addr: str
    last_heartbeat_ts: int
    timeout_ms: int


@dataclass(slots=True)
class BrokerRemoved(Event):
    """An address leaves its group. When it was the group's last (``group_gone``), the apply
    drops the group with every topic it held: one line, however many topics, where older
    journals (before issue 32) followed it with a ``topic_removed`` (reason ``no_broker``)
    per topic that lost its last route. ``topics_gone`` counts those (for the log line and
    the metric); the apply sets it, as it finds them."""

    TYPE: ClassVar[str] = "broker_removed"
    REQUIRED: ClassVar[tuple[str, ...]] = ("cluster", "broker_name", "broker_addr")
    cluster: str
    broker_name: str
    broker_id: int
    broker_addr: str
    reason: str
    last_heartbeat_ts: int | None
    group_gone: bool = False  # absent in older journals: their topic_removed lines follow
    topics_gone: int = 0


@dataclass(slots=True)
class TopicRemoved(Event):
    TYPE: ClassVar[str] = "topic_removed"
    REQUIRED: ClassVar[tuple[str, ...]] = ("topic",)
    topic: str
    reason: str
    caller: str | None = None  # admin writes: the peer's ip:port (audit trail)
    access_key: str | None = None  # admin writes: the verified AccessKey, if any


@dataclass(slots=True)
class TopicQueuesChanged(Event):
    """An admin command set a topic's queue data without a broker registration
    (REGISTER_TOPIC_IN_NAMESRV, or DELETE_TOPIC_IN_NAMESRV for one cluster that leaves the
    topic on others). ``queues`` is the topic's whole queue data afterwards, in the shape of
    a snapshot's topic entry, so a reader replaces rather than merges."""

    TYPE: ClassVar[str] = "topic_queues_changed"
    REQUIRED: ClassVar[tuple[str, ...]] = ("topic", "queues")
    topic: str
    reason: str  # "registered" or "deleted_in_cluster"
    queues: list[dict[str, Any]]
    caller: str | None = None  # admin writes: the peer's ip:port (audit trail)
    access_key: str | None = None  # admin writes: the verified AccessKey, if any

    def check(self) -> None:
        queue_table(self.topic, self.queues)


@dataclass(slots=True)
class PermChanged(Event):
    TYPE: ClassVar[str] = "perm_changed"
    REQUIRED: ClassVar[tuple[str, ...]] = ("broker_name", "op")
    WIPE: ClassVar[str] = "wipe"  # the write bit cleared on every topic of the group
    ADD: ClassVar[str] = "add"  # perm set to read and write (6)
    broker_name: str
    op: str
    topic_count: int
    caller: str | None = None  # admin writes: the peer's ip:port (audit trail)
    access_key: str | None = None  # admin writes: the verified AccessKey, if any
    # None: an admin command; "master_gone": the master of an acting-master group left
    reason: str | None = None

    def check(self) -> None:
        if self.op not in (self.WIPE, self.ADD):
            raise RecordError(f"perm_changed: unknown op {self.op[:32]!r}")


@dataclass(slots=True)
class MinBrokerIdChanged(Event):
    """The lowest broker id of a group changed the way Java notifies the group's brokers
    about (NOTIFY_MIN_BROKER_ID_CHANGE): a lower id registered, or the lowest one of an
    acting-master group left. ``notify`` are the addresses Java would send it to."""

    TYPE: ClassVar[str] = "min_broker_id_changed"
    cluster: str
    broker_name: str
    min_broker_id: int
    min_broker_addr: str
    offline_broker_addr: str | None
    ha_broker_addr: str | None
    notify: list[str] = field(default_factory=list)


@dataclass(slots=True)
class KvChanged(Event):
    TYPE: ClassVar[str] = "kv_changed"
    namespace: str
    key: str
    op: str
    caller: str | None = None  # admin writes: the peer's ip:port (audit trail)
    access_key: str | None = None  # admin writes: the verified AccessKey, if any


@dataclass(slots=True)
class ConfigChanged(Event):
    TYPE: ClassVar[str] = "config_changed"
    key: str
    value: str
    caller: str | None = None  # admin writes: the peer's ip:port (audit trail)
    access_key: str | None = None  # admin writes: the verified AccessKey, if any


# ---------------------------------------------------------------- the controller's own lines


@dataclass(slots=True)
class ServerStarted(Event):
    """The first line of each run; ``recovered`` is what a warm restart loaded (None: the
    run started empty), and ``damaged`` what recovery had to skip (None: nothing)."""

    TYPE: ClassVar[str] = "server_started"
    version: str = ""
    config: dict[str, str] = field(default_factory=dict)
    recovered: dict[str, Any] | None = None
    damaged: dict[str, int] | None = None


@dataclass(slots=True)
class ServerStopped(Event):
    """The last line of a clean stop."""

    TYPE: ClassVar[str] = "server_stopped"
    version: str
    config: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True, kw_only=True)
class Snapshot(Event):
    """The whole route state (``JournalReplay.snapshot``): a base any reader can start from.

    Written in pieces (``namesrv.snapshot_pieces``) so that no line passes the one line limit
    every reader takes (``journal.MAX_LINE_BYTES``): piece ``part`` of ``parts``, each a
    share of the brokers, topics and mappings, the pieces consecutive lines of one ``ts``.
    A line without ``part`` (older journals) is a whole snapshot."""

    TYPE: ClassVar[str] = "snapshot"
    REQUIRED: ClassVar[tuple[str, ...]] = ("brokers", "topics")
    # First, so that a reader finds them in the line's head (``journal.encode_line``).
    part: int | None = None
    parts: int | None = None
    brokers: list[dict[str, Any]]
    topics: dict[str, list[dict[str, Any]]]
    mappings: dict[str, dict[str, Any]] = field(default_factory=dict)

    def check(self) -> None:
        if (self.part is None) != (self.parts is None):
            raise RecordError("snapshot: part and parts go together")
        if self.part is not None and self.parts is not None and not 1 <= self.part <= self.parts:
            raise RecordError("snapshot: part is not within 1..parts")


@dataclass(slots=True)
class RouteQueries(Event):
    """Route queries answered in [ts - window_ms, ts); ``misses_other``, ``misses_too_long``
    and ``counts_other`` only when some were not listed (the line's bounds: namesrv.stats)."""

    TYPE: ClassVar[str] = "route_queries"
    window_ms: int
    counts: dict[str, int]
    misses: dict[str, int]
    misses_other: int | None = None
    misses_too_long: int | None = None
    counts_other: int | None = None

    def to_record(self) -> dict[str, Any]:
        record = Event.to_record(self)
        for name in ("misses_other", "misses_too_long", "counts_other"):
            if record[name] is None:
                del record[name]
        return record


def event_classes() -> list[type[Event]]:
    """Every journaled event class, in definition order: the one list of line types. The
    journal's writer and readers, ``journal tail`` and the pipeline's Spark schema derive
    theirs from it (and tests prove they cover its fields)."""
    return [
        cls
        for cls in globals().values()
        if isinstance(cls, type) and issubclass(cls, Event) and cls is not Event
    ]


class RemovalReason:
    """Why a broker left the routes (the journal's ``reason`` values)."""

    UNREGISTER = "unregister"
    EXPIRED = "expired"
    CHANNEL_CLOSED = "channel_closed"
    CHANNEL_ERROR = "channel_error"
    CHANNEL_IDLE = "channel_idle"
