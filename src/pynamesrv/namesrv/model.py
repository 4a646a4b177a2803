"""Route records and the wire bodies brokers send them in (spec/state.md §1-2, requests.md 103).

Records are plain slotted dataclasses named after their Java counterparts. The body codecs
live here, not in the processor, because both sides use them: the name server decodes
RegisterBrokerBody and the Python broker client (``pynamesrv.broker.client``) encodes it.
Over 500 lines because each record keeps its wire codec beside it (the register body's
stepwise, inflation-bounded decoder included): split apart, every Java class would live in
two modules.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from functools import partial
from operator import itemgetter
from typing import Any, Final

import orjson

from pynamesrv.remoting import fastjson
from pynamesrv.remoting.codes import Version

try:  # the per-topic decode loops, compiled (setup.py builds them where a C compiler exists)
    from pynamesrv.namesrv import _routed as _compiled

    COMPILED_MISSING = ""  # why not, for the start-up line (fastpath.describe_compiled_loops)
except ImportError as exc:  # pragma: no cover - a machine without a compiler
    _compiled = None  # type: ignore[assignment]
    COMPILED_MISSING = str(exc)

_INT32 = struct.Struct(">i")
# Ceiling of a compressed body's inflated size when the caller gives none: four times the
# default frame limit, far more topics than any broker has (100,000 take about 4 MiB).
DEFAULT_MAX_INFLATED: Final = 4 * 16 * 1024 * 1024


class BodyError(ValueError):
    """A request body that cannot be decoded (answered SYSTEM_ERROR like Java's exception)."""


@dataclass(slots=True, frozen=True)
class DataVersion:
    """A broker's topic-config version; 5.x adds ``state_version`` and compares it too."""

    timestamp: int = 0
    counter: int = 0
    state_version: int = 0

    @classmethod
    def from_json(cls, obj: Any) -> DataVersion:
        if not isinstance(obj, dict):
            raise BodyError("dataVersion is not an object")
        return cls(
            timestamp=_as_int(obj.get("timestamp"), bounds=_JAVA_LONG),
            counter=_as_int(obj.get("counter"), bounds=_JAVA_LONG),
            state_version=_as_int(obj.get("stateVersion"), bounds=_JAVA_LONG),
        )

    def to_json(self) -> dict[str, int]:
        """4.9.4's shape; ``stateVersion`` only when a 5.x broker sent a non-zero one."""
        out = {"counter": self.counter}
        if self.state_version:
            out["stateVersion"] = self.state_version
        out["timestamp"] = self.timestamp
        return out

    def to_wire(self, java5: bool) -> dict[str, int]:
        """As a Java name server of that generation echoes it (QUERY_DATA_VERSION): 5.x
        always writes ``stateVersion``."""
        if not java5:
            return self.to_json()
        return {"counter": self.counter, "stateVersion": self.state_version,
                "timestamp": self.timestamp}  # fmt: skip


_JAVA_INT: Final = (-(2**31), 2**31 - 1)  # queue numbers, perm, sys flag
_JAVA_LONG: Final = (-(2**63), 2**63 - 1)  # data version fields


def _as_int(value: Any, default: int = 0, bounds: tuple[int, int] = _JAVA_INT) -> int:
    """A Java int (or long) field: what does not parse or fit is a decode error, as in
    fastjson, and never a number that some later encoder cannot write."""
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise BodyError(f"expected a number, got {type(value).__name__}")
    try:
        number = int(value)
    except (ValueError, OverflowError) as exc:
        raise BodyError(f"expected a number, got {str(value)[:32]!r}") from exc
    if not bounds[0] <= number <= bounds[1]:
        raise BodyError(f"number {str(value)[:32]} out of range")
    return number


@dataclass(slots=True)
class TopicConfig:
    """What a broker reports per topic; only the queue numbers, perm and sys flag are routed."""

    topic_name: str
    read_queue_nums: int = 16
    write_queue_nums: int = 16
    perm: int = 6
    topic_sys_flag: int = 0
    order: bool = False
    topic_filter_type: str = "SINGLE_TAG"
    attributes: dict[str, str] | None = None

    def routed(self) -> RoutedTopic:
        """The fields the route tables keep, as a decoded body's ``routed`` rows hold them."""
        return (
            self.topic_name,
            self.read_queue_nums,
            self.write_queue_nums,
            self.perm,
            self.topic_sys_flag,
        )

    @classmethod
    def from_json(cls, obj: Any) -> TopicConfig:
        """One entry of a registration's topicConfigTable. A broker with 100,000 topics sends
        100,000 of these, so the usual case (plain ints, a string filter type) is checked
        inline and only anything else takes the general conversion."""
        if type(obj) is not dict:
            raise BodyError("topic config is not an object")
        name = obj.get("topicName")
        if type(name) is not str:
            raise BodyError("topic config without topicName")
        read, write = obj.get("readQueueNums", 16), obj.get("writeQueueNums", 16)
        perm, sys_flag = obj.get("perm", 6), obj.get("topicSysFlag", 0)
        if not (
            type(read) is int
            and type(write) is int
            and type(perm) is int
            and type(sys_flag) is int
            and _JAVA_INT[0] <= min(read, write, perm, sys_flag)
            and max(read, write, perm, sys_flag) <= _JAVA_INT[1]
        ):
            read, write = _as_int(read, 16), _as_int(write, 16)
            perm, sys_flag = _as_int(perm, 6), _as_int(sys_flag)
        filter_type = obj.get("topicFilterType")
        attributes = obj.get("attributes")
        return cls(
            name,
            read,
            write,
            perm,
            sys_flag,
            bool(obj.get("order", False)),
            filter_type
            if type(filter_type) is str and filter_type
            else str(filter_type or "SINGLE_TAG"),
            attributes if type(attributes) is dict else None,
        )

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.attributes is not None:
            out["attributes"] = self.attributes
        out.update(
            order=self.order,
            perm=self.perm,
            readQueueNums=self.read_queue_nums,
            topicFilterType=self.topic_filter_type,
            topicName=self.topic_name,
            topicSysFlag=self.topic_sys_flag,
            writeQueueNums=self.write_queue_nums,
        )
        return out


@dataclass(slots=True, frozen=True)
class QueueData:
    """A topic's queues on one broker group (keyed by broker name in the topic table).

    Frozen: the route tables share one object among the topics a group serves alike
    (``RouteTables.queue_data``), so a change replaces it."""

    broker_name: str
    read_queue_nums: int
    write_queue_nums: int
    perm: int
    topic_sys_flag: int

    def to_json(self) -> dict[str, Any]:
        return {
            "brokerName": self.broker_name,
            "perm": self.perm,
            "readQueueNums": self.read_queue_nums,
            "topicSysFlag": self.topic_sys_flag,
            "writeQueueNums": self.write_queue_nums,
        }


@dataclass(slots=True)
class BrokerData:
    """A broker group: the addresses of its master (id 0) and slaves, by broker id."""

    cluster: str
    broker_name: str
    broker_addrs: dict[int, str] = field(default_factory=dict)
    enable_acting_master: bool = False
    zone_name: str | None = None

    def to_json(self, java5: bool = False) -> dict[str, Any]:
        """Java's BrokerData; 5.x adds ``enableActingMaster`` (and ``zoneName`` when the
        broker sent one)."""
        out: dict[str, Any] = {
            "brokerAddrs": dict(sorted(self.broker_addrs.items())),
            "brokerName": self.broker_name,
            "cluster": self.cluster,
        }
        if java5:
            out["enableActingMaster"] = self.enable_acting_master
        if self.zone_name is not None:
            out["zoneName"] = self.zone_name
        return out


METADATA_SCOPE_GLOBAL: Final = "__global__"  # MixAll.METADATA_SCOPE_GLOBAL


@dataclass(slots=True, frozen=True)
class TopicQueueMappingInfo:
    """A static topic's logical queues on one broker group (5.x ``updateStaticTopic``).

    The name server only stores what the hosting broker registers and hands it back in
    route answers (``topicQueueMappingByBroker``); clients map logical queue ids to the
    physical ones with it. Fields as fastjson writes Java's TopicQueueMappingInfo.
    """

    topic: str | None
    bname: str | None  # the hosting group; None: unattributable, not stored by the registry
    scope: str | None = METADATA_SCOPE_GLOBAL
    total_queues: int = 0
    epoch: int = 0
    dirty: bool = False
    curr_id_map: tuple[tuple[int, int], ...] = ()  # logical id -> physical id, sorted

    @classmethod
    def from_json(cls, obj: Any) -> TopicQueueMappingInfo:
        if not isinstance(obj, dict):
            raise BodyError("topic queue mapping is not an object")
        bname, topic = obj.get("bname"), obj.get("topic")
        scope = obj.get("scope", METADATA_SCOPE_GLOBAL)
        if not all(isinstance(v, str | None) for v in (bname, topic, scope)):
            raise BodyError("topic queue mapping: bname, topic and scope must be strings")
        ids = obj.get("currIdMap") or {}
        if not isinstance(ids, dict):
            raise BodyError("topic queue mapping: currIdMap is not an object")
        dirty = obj.get("dirty", False)
        if not isinstance(dirty, bool):
            raise BodyError("topic queue mapping: dirty is not a boolean")
        return cls(
            topic=topic,
            bname=bname,
            scope=scope,
            total_queues=_as_int(obj.get("totalQueues")),
            epoch=_as_int(obj.get("epoch")),
            dirty=dirty,
            curr_id_map=tuple(sorted((_as_int(k), _as_int(v)) for k, v in ids.items())),
        )

    def to_json(self) -> dict[str, Any]:
        """fastjson's form: members alphabetically, integer ids as map keys."""
        out: dict[str, Any] = {}
        if self.bname is not None:
            out["bname"] = self.bname
        out.update({
            "currIdMap": dict(self.curr_id_map),
            "dirty": self.dirty,
            "epoch": self.epoch,
        })  # fmt: skip
        if self.scope is not None:
            out["scope"] = self.scope
        if self.topic is not None:
            out["topic"] = self.topic
        out["totalQueues"] = self.total_queues
        return out

    def to_record(self) -> dict[str, Any]:
        """``to_json`` with string map keys, as the journal (plain JSON) holds it."""
        out = self.to_json()
        out["currIdMap"] = {str(k): v for k, v in self.curr_id_map}
        return out


@dataclass(slots=True)
class BrokerLiveInfo:
    """Liveness of one registered broker address; ``channel`` is the connection it used last."""

    last_update_ms: int
    timeout_ms: int
    data_version: DataVersion
    channel: object
    ha_server_addr: str | None
    broker_name: str
    broker_id: int
    body_digest: int | None = None


# What the route tables keep of one topic config, the fields of its QueueData but the group:
# (topicName, readQueueNums, writeQueueNums, perm, topicSysFlag).
RoutedTopic = tuple[str, int, int, int, int]


class RegisterBrokerBody:
    """The decoded REGISTER_BROKER body: topic table, data version, filter servers, and the
    static-topic mappings of 5.x brokers (by topic).

    The routes keep five fields of a topic config, so a decoded body holds those as one
    tuple per topic (``routed``), checked as they are decoded, and builds the ``TopicConfig``
    objects only when ``topic_configs`` is read (a re-encode, a test): a broker's 100,000
    topics then cost 100,000 tuples, not as many objects too. A body made of ``TopicConfig``
    objects (the broker's side) derives ``routed`` from them instead.
    """

    __slots__ = (
        "_configs",
        "_configs_source",
        "_routed",
        "data_version",
        "filter_server_list",
        "mappings",
    )

    def __init__(
        self,
        data_version: DataVersion,
        topic_configs: list[TopicConfig],
        filter_server_list: list[str] | None,
        mappings: dict[str, TopicQueueMappingInfo] | None = None,
    ) -> None:
        self.data_version = data_version
        self.filter_server_list = filter_server_list
        self.mappings: dict[str, TopicQueueMappingInfo] = {} if mappings is None else mappings
        self._configs: list[TopicConfig] | None = topic_configs
        self._configs_source: Callable[[], list[TopicConfig]] | None = None
        self._routed: list[RoutedTopic] | None = None

    @classmethod
    def _decoded(
        cls,
        data_version: DataVersion,
        routed: list[RoutedTopic],
        configs: Callable[[], list[TopicConfig]],
        filter_server_list: list[str] | None,
        mappings: dict[str, TopicQueueMappingInfo],
    ) -> RegisterBrokerBody:
        """A decoded body: its ``routed`` topics checked, ``configs`` building the full
        topic configs from what the decode kept (it cannot fail: every check is done)."""
        body = cls(data_version, [], filter_server_list, mappings)
        body._configs, body._configs_source, body._routed = None, configs, routed
        return body

    @property
    def topic_configs(self) -> list[TopicConfig]:
        if self._configs is None:
            assert self._configs_source is not None
            self._configs = self._configs_source()
            self._configs_source = None
        return self._configs

    def drop_long_topics(self, max_length: int) -> list[str]:
        """Leave out the topics whose name is longer than ``max_length`` (from the routed
        rows, the full configs and the mappings); the names left out, in body order. The
        usual body (no such name) costs one pass over the names."""
        rows = self.routed
        if not rows or max(map(len, map(itemgetter(0), rows))) <= max_length:
            long_mapped = [t for t in self.mappings if len(t) > max_length]
            for topic in long_mapped:
                del self.mappings[topic]
            return long_mapped
        dropped = [row[0] for row in rows if len(row[0]) > max_length]
        self._routed = [row for row in rows if len(row[0]) <= max_length]
        if self._configs is not None:
            self._configs = [c for c in self._configs if len(c.topic_name) <= max_length]
        elif self._configs_source is not None:
            source = self._configs_source
            self._configs_source = lambda: [c for c in source() if len(c.topic_name) <= max_length]
        for topic in [t for t in self.mappings if len(t) > max_length]:
            del self.mappings[topic]
        return dropped

    @property
    def routed(self) -> list[RoutedTopic]:
        """Each topic as the routes keep it, in the body's order (duplicates included)."""
        if self._routed is not None:
            return self._routed
        return [config.routed() for config in self.topic_configs]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RegisterBrokerBody):
            return NotImplemented
        return (
            self.data_version == other.data_version
            and self.topic_configs == other.topic_configs
            and self.filter_server_list == other.filter_server_list
            and self.mappings == other.mappings
        )

    __hash__ = None  # type: ignore[assignment]  # mutable, as the dataclass it replaces

    def __repr__(self) -> str:
        return (
            f"RegisterBrokerBody(data_version={self.data_version!r}, "
            f"topic_configs={self.topic_configs!r}, "
            f"filter_server_list={self.filter_server_list!r}, mappings={self.mappings!r})"
        )

    @classmethod
    def empty(cls) -> RegisterBrokerBody:
        return cls(DataVersion(), [], None)

    @classmethod
    def decode(
        cls,
        body: bytes,
        *,
        compressed: bool,
        version: int,
        max_inflated: int = DEFAULT_MAX_INFLATED,
    ) -> RegisterBrokerBody:
        """Decode a body in whichever of the three formats the broker's version implies."""
        return run_steps(
            cls.decode_steps(
                body, compressed=compressed, version=version, max_inflated=max_inflated
            )
        )

    @classmethod
    def decode_steps(
        cls,
        body: bytes,
        *,
        compressed: bool,
        version: int,
        max_inflated: int = DEFAULT_MAX_INFLATED,
    ) -> Generator[None, None, RegisterBrokerBody]:
        """``decode`` as a generator that pauses (yields) between bounded pieces of work and
        returns the body: a large compressed body is inflated and decoded a step at a time,
        so the event loop can answer other peers in between. Errors are ``BodyError``."""
        if not body:
            return cls.empty()
        try:
            if version < Version.V3_0_11:
                data_version, routed, mappings = _decode_wrapper(fastjson.loads(body))
                configs = partial(_json_topic_configs, body, None)
                return cls._decoded(data_version, routed, configs, None, mappings)
            if compressed:
                return (yield from _decode_compressed(body, version, max_inflated))
            obj = fastjson.loads(body)
            if not isinstance(obj, dict):
                raise BodyError("body is not an object")
            data_version, routed, mappings = _decode_wrapper(obj.get(_WRAPPER))
            servers = [str(s) for s in obj.get("filterServerList") or []]
            del obj  # before the tables are filled: see _json_topic_configs
            configs = partial(_json_topic_configs, body, _WRAPPER)
            return cls._decoded(data_version, routed, configs, servers, mappings)
        except BodyError:
            raise
        except (ValueError, TypeError, zlib.error, struct.error, RecursionError) as exc:
            raise BodyError(
                f"Failed to decode RegisterBrokerBody: {type(exc).__name__}: {str(exc)[:200]}"
            ) from exc

    def encode(self, *, compressed: bool) -> bytes:
        """Encode like a Java broker: JSON, or the compact zlib form of compressedRegister."""
        if not compressed:
            wrapper: dict[str, Any] = {
                "dataVersion": self.data_version.to_json(),
                "topicConfigTable": {t.topic_name: t.to_json() for t in self.topic_configs},
            }
            if self.mappings:
                wrapper["topicQueueMappingInfoMap"] = {
                    topic: info.to_json() for topic, info in self.mappings.items()
                }
            return fastjson.dumps(
                {"filterServerList": self.filter_server_list or [],
                 "topicConfigSerializeWrapper": wrapper}
            )  # fmt: skip
        parts = [_len_prefixed(orjson.dumps(self.data_version.to_json()))]
        parts.append(_INT32.pack(len(self.topic_configs)))
        for t in self.topic_configs:
            line = (
                f"{t.topic_name} {t.read_queue_nums} {t.write_queue_nums} {t.perm} "
                f"{t.topic_filter_type}"
            )
            parts.append(_len_prefixed(line.encode()))
        parts.append(_len_prefixed(orjson.dumps(self.filter_server_list or [])))
        if self.mappings:  # 5.x brokers always write the count; 4.x brokers never do
            parts.append(_INT32.pack(len(self.mappings)))
            parts += [_len_prefixed(fastjson.dumps(m.to_json())) for m in self.mappings.values()]
        return zlib.compress(b"".join(parts), 9)


def _len_prefixed(data: bytes) -> bytes:
    return _INT32.pack(len(data)) + data


_WRAPPER: Final = "topicConfigSerializeWrapper"


def _json_topic_configs(body: bytes, wrapper_key: str | None) -> list[TopicConfig]:
    """The full topic configs of a JSON body that decoded (so this cannot fail), decoded
    again when they are read: rarely (a re-encode, a test). Kept from the first decoding,
    a 100,000-topic body's 100,000 dicts (50 MB) lived while the registration filled the
    tables, which then kept objects scattered among the freed ones: 50 MB of Python's
    memory pools that no later allocation filled, for 4 brokers x 111,000 topics."""
    obj = fastjson.loads(body)
    wrapper = obj if wrapper_key is None else obj.get(wrapper_key)
    table = (wrapper or {}).get("topicConfigTable") or {}
    return [TopicConfig.from_json(entry) for entry in table.values()]


def _decode_wrapper(
    wrapper: Any,
) -> tuple[DataVersion, list[RoutedTopic], dict[str, TopicQueueMappingInfo]]:
    """A topicConfigSerializeWrapper: its version, routed topics and static-topic mappings
    (its full topic configs: ``_json_topic_configs``)."""
    if wrapper is None:
        return DataVersion(), [], {}
    if not isinstance(wrapper, dict):
        raise BodyError("topicConfigSerializeWrapper is not an object")
    raw_version = wrapper.get("dataVersion")
    data_version = DataVersion() if raw_version is None else DataVersion.from_json(raw_version)
    table = wrapper.get("topicConfigTable") or {}
    if not isinstance(table, dict):
        raise BodyError("topicConfigTable is not an object")
    raw_mappings = wrapper.get("topicQueueMappingInfoMap") or {}
    if not isinstance(raw_mappings, dict):
        raise BodyError("topicQueueMappingInfoMap is not an object")
    mappings = {
        str(topic): TopicQueueMappingInfo.from_json(info) for topic, info in raw_mappings.items()
    }
    return data_version, _routed_from_json(list(table.values())), mappings


def _routed_from_json(entries: list[Any]) -> list[RoutedTopic]:
    """The routed fields of each topicConfigTable entry, checked as ``TopicConfig.from_json``
    checks them: the usual entry (a string name, plain ints in range) by the per-topic loop
    (``_json_loop``), any other through ``from_json`` itself (its conversions, its errors)."""
    routed: list[RoutedTopic] = []
    index = _json_loop(entries, 0, routed)
    while index < len(entries):
        routed.append(TopicConfig.from_json(entries[index]).routed())
        index = _json_loop(entries, index + 1, routed)
    return routed


def _extend_routed_json(entries: list[Any], start: int, routed: list[RoutedTopic]) -> int:
    """Append the rows of the usual entries from ``start`` on; the index of the first entry
    that is not one (``len(entries)`` when all are). The one loop a 100,000-topic JSON
    registration runs per topic: the Python twin of ``_routed.c``'s, which stops at the same
    entry."""
    append = routed.append
    low, high = _JAVA_INT
    for index in range(start, len(entries)):
        obj = entries[index]
        if type(obj) is not dict:
            return index
        name = obj.get("topicName")
        read = obj.get("readQueueNums", 16)
        write = obj.get("writeQueueNums", 16)
        perm = obj.get("perm", 6)
        sys_flag = obj.get("topicSysFlag", 0)
        if not (
            type(name) is str
            and type(read) is int
            and type(write) is int
            and type(perm) is int
            and type(sys_flag) is int
            and low <= read <= high
            and low <= write <= high
            and low <= perm <= high
            and low <= sys_flag <= high
        ):
            return index
        append((name, read, write, perm, sys_flag))
    return len(entries)


def _extend_routed_buffer(
    buffer: bytearray, pos: int, limit: int, routed: list[RoutedTopic], lines: list[str]
) -> int:
    """Take up to ``limit`` compressed topic lines, each a length-prefixed chunk complete in
    ``buffer`` from ``pos`` on, the general way (``_routed_line``, raising its errors), into
    ``routed`` and ``lines``; return the position after the last one taken. The one loop a
    100,000-topic compressed registration runs per topic: the Python twin of ``_routed.c``'s,
    which takes only the usual lines and leaves the first other one where it stops."""
    end = len(buffer)
    unpack = _INT32.unpack_from
    taken = 0
    while taken < limit and pos + 4 <= end:
        (size,) = unpack(buffer, pos)
        stop = pos + 4 + size
        if size < 0 or stop > end:
            break
        line = buffer[pos + 4 : stop].decode()
        routed.append(_routed_line(line))
        lines.append(line)
        pos = stop
        taken += 1
    return pos


# The per-topic loops: compiled where setup.py could build _routed.c, else the twins above.
_json_loop: Callable[[list[Any], int, list[RoutedTopic]], int] = _extend_routed_json
_lines_loop: Callable[[bytearray, int, int, list[RoutedTopic], list[str]], int] = (
    _extend_routed_buffer
)
if _compiled is not None:
    _json_loop = _compiled.extend_routed_json
    _lines_loop = _compiled.extend_routed_buffer


# Inflated bytes decoded per step of a compressed body (see ``RegisterBrokerBody.decode_steps``).
INFLATE_STEP: Final = 256 * 1024
# The inflate ceiling is this many times the frame limit (DEFAULT_MAX_INFLATED, and the
# processor's max_inflated); a topic in a JSON registration takes at least this many bytes.
_INFLATED_PER_FRAME_BYTE: Final = 4
_MIN_JSON_TOPIC_BYTES: Final = 128


def run_steps(steps: Generator[None, None, RegisterBrokerBody]) -> RegisterBrokerBody:
    """Run a stepwise decode (``decode_steps``) to its end at once."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


class _InflatingReader:
    """Big-endian reader over a zlib stream, inflated as it is read and never past ``ceiling``.

    A compressed registration is a few hundred KiB of zlib that a hostile peer can make
    inflate to gigabytes; here the output is produced a bounded piece at a time, so the bytes
    held are at most what was asked for plus one piece, and the total at most ``ceiling``.
    """

    __slots__ = ("_buffer", "_inflater", "_pending", "ceiling", "inflated", "pos")

    def __init__(self, body: bytes, ceiling: int) -> None:
        self._inflater = zlib.decompressobj()
        self._pending = body  # compressed input not yet handed to the inflater
        self._buffer = bytearray()
        self.pos = 0  # read position in _buffer
        self.inflated = 0
        self.ceiling = ceiling

    def _fill(self, size: int) -> bool:
        """Make ``size`` unread bytes available; False when the stream ends first."""
        buffer = self._buffer
        while len(buffer) - self.pos < size:
            if self.pos > INFLATE_STEP:  # drop what was read, so the buffer stays small
                del buffer[: self.pos]
                self.pos = 0
            source = self._inflater.unconsumed_tail or self._pending
            self._pending = b""
            if source:
                piece = self._inflater.decompress(source, INFLATE_STEP)
            else:  # all input consumed: what zlib still holds is at most its window
                piece = self._inflater.flush()
                if not piece:
                    return False
            self.inflated += len(piece)
            if self.inflated > self.ceiling:
                raise BodyError(
                    f"compressed body inflates beyond {self.ceiling} bytes (raise "
                    "frameMaxLength for registrations this large)"
                )
            buffer += piece
        return True

    def int32(self) -> int:
        if not self._fill(4):
            raise BodyError("compressed body truncated")
        (value,) = _INT32.unpack_from(self._buffer, self.pos)
        self.pos += 4
        return value

    def chunk(self) -> bytes:
        size = self.int32()
        if size < 0 or size > self.ceiling or not self._fill(size):
            raise BodyError("compressed body truncated")
        out = bytes(self._buffer[self.pos : self.pos + size])
        self.pos += size
        return out

    def take_complete(
        self,
        loop: Callable[[bytearray, int, int, list[RoutedTopic], list[str]], int],
        limit: int,
        routed: list[RoutedTopic],
        lines: list[str],
    ) -> None:
        """Let ``loop`` take up to ``limit`` chunks from what is already inflated (it returns
        where it stopped, and reading goes on from there): no inflating, so no error but its
        own."""
        self.pos = loop(self._buffer, self.pos, limit, routed, lines)

    @property
    def at_end(self) -> bool:
        return not self._fill(1)

    def check_complete(self) -> None:
        """The zlib stream must end properly (trailer and checksum), as ``zlib.decompress``
        requires; what follows the fields read is inflated (within the ceiling) and ignored."""
        while self._fill(INFLATE_STEP + 1):
            self.pos = len(self._buffer)
        if not self._inflater.eof:
            raise BodyError("compressed body truncated")


def _decode_compressed(
    body: bytes, version: int, ceiling: int
) -> Generator[None, None, RegisterBrokerBody]:
    """Decode a compressed body, yielding after each ``INFLATE_STEP`` of inflated bytes."""
    reader = _InflatingReader(body, ceiling)
    data_version = DataVersion.from_json(fastjson.loads(reader.chunk()))
    count = reader.int32()
    # As many topics as a JSON body within the frame limit could carry (one takes ~150 bytes
    # there): a tiny zlib stream must not make us build millions of topic objects.
    max_topics = ceiling // _INFLATED_PER_FRAME_BYTE // _MIN_JSON_TOPIC_BYTES
    if count < 0 or count > max_topics:
        raise BodyError(f"topic count {count} outside [0, {max_topics}]")
    lines: list[str] = []
    routed: list[RoutedTopic] = []
    next_yield = INFLATE_STEP
    while len(lines) < count:
        reader.take_complete(_lines_loop, count - len(lines), routed, lines)
        if len(lines) < count:  # the next line is cut by the piece's end, or unusual
            line = reader.chunk().decode()  # inflating on, with chunk's errors
            routed.append(_routed_line(line))
            lines.append(line)
        if reader.inflated >= next_yield:
            next_yield = reader.inflated + INFLATE_STEP
            yield
    servers = orjson.loads(reader.chunk())
    if not isinstance(servers, list):
        raise BodyError("filter server list is not an array")
    # 5.x brokers (>= V5_0_0) append the static-topic mappings, keyed by their own topic.
    mappings: dict[str, TopicQueueMappingInfo] = {}
    if version >= Version.V5_0_0 and not reader.at_end:
        count = reader.int32()
        if count < 0 or count > max_topics:
            raise BodyError(f"mapping count {count} outside [0, {max_topics}]")
        for _ in range(count):
            info = TopicQueueMappingInfo.from_json(fastjson.loads(reader.chunk()))
            mappings[info.topic or ""] = info
    reader.check_complete()
    return RegisterBrokerBody._decoded(
        data_version,
        routed,
        lambda: [_decode_topic_line(line) for line in lines],
        [str(s) for s in servers],
        mappings,
    )


def _routed_line(line: str) -> RoutedTopic:
    """The routed fields of a compressed topic line, checked as ``_decode_topic_line`` checks
    them (numbers in range first inline, anything else through ``_as_int`` and its errors).
    The line carries no sys flag: TopicConfig's default, 0."""
    tokens = line.split(" ")
    if len(tokens) != 5 or not tokens[4]:  # not the usual line: drop trailing spaces first
        while tokens and tokens[-1] == "":
            tokens.pop()
        if len(tokens) < 5:
            raise BodyError(f"bad topic config line {line!r}")
    name, read, write, perm = tokens[0], tokens[1], tokens[2], tokens[3]
    try:
        numbers = (int(read), int(write), int(perm))
    except ValueError:
        numbers = None
    if numbers is None or not (_JAVA_INT[0] <= min(numbers) and max(numbers) <= _JAVA_INT[1]):
        numbers = (_as_int(read), _as_int(write), _as_int(perm))
    return (name, numbers[0], numbers[1], numbers[2], 0)


def _decode_topic_line(line: str) -> TopicConfig:
    """``name read write perm filterType [attributesJson]`` (TopicConfig.decode)."""
    tokens = line.split(" ")
    while tokens and tokens[-1] == "":
        tokens.pop()
    if len(tokens) < 5:
        raise BodyError(f"bad topic config line {line!r}")
    attributes = None
    if len(tokens) > 5:
        try:
            parsed = orjson.loads(" ".join(tokens[5:]))
            attributes = parsed if isinstance(parsed, dict) else None
        except orjson.JSONDecodeError:
            attributes = None
    return TopicConfig(
        topic_name=tokens[0],
        read_queue_nums=_as_int(tokens[1]),
        write_queue_nums=_as_int(tokens[2]),
        perm=_as_int(tokens[3]),
        topic_filter_type=tokens[4],
        attributes=attributes,
    )
