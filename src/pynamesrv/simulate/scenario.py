"""What to simulate: the options, the fleet derived from them, and when chaos strikes.

Everything here is pure and seeded, so a run can be repeated with the same ``--seed``: the
broker names, addresses, topic assignment, registration phases and the moments of the chaos
events are all fixed before the loop starts (only which broker a chaos event hits is chosen
at the moment it fires, among brokers that are up then).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Final, Literal

ChaosKind = Literal["kill", "stop", "drop", "flap", "partition"]
CHAOS_KINDS: Final[tuple[ChaosKind, ...]] = ("kill", "stop", "drop", "flap", "partition")

# Fake broker addresses: 127.0.0.1..254, then the next port block. Nothing listens there.
_HOSTS: Final = 254
_BASE_PORT: Final = 10911
_PORT_STEP: Final = 10


@dataclass(frozen=True, slots=True)
class PartitionSpec:
    """``brokerName@host:port:seconds``: that group cannot reach that name server for a while."""

    broker: str
    namesrv: str
    seconds: float

    @classmethod
    def parse(cls, text: str) -> PartitionSpec:
        """Parse the command-line form; the broker may also be given as a group index."""
        broker, sep, rest = text.partition("@")
        addr, _, seconds = rest.rpartition(":")
        if not sep or not broker or ":" not in addr:
            raise ValueError(f"bad partition {text!r}: expected brokerName@host:port:seconds")
        try:
            duration = float(seconds)
        except ValueError:
            raise ValueError(f"bad partition {text!r}: {seconds!r} is not seconds") from None
        if duration <= 0:
            raise ValueError(f"bad partition {text!r}: the duration must be positive")
        return cls(broker=broker, namesrv=addr, seconds=duration)


@dataclass(slots=True)
class SimConfig:
    """All knobs of a run; the CLI maps its options one to one onto these fields."""

    namesrv: list[str]
    brokers: int = 10
    clusters: int = 1
    slaves: int = 0
    topics: int = 10
    brokers_per_topic: int = 3
    queues: int = 8
    register_period_s: float = 30.0
    heartbeat_timeout_ms: int | None = None
    compressed: bool = False
    query_rate: float = 100.0
    query_clients: int = 4
    duration_s: float = 60.0
    seed: int = 0
    kills: int = 0
    stops: int = 0
    drops: int = 0
    flaps: int = 0
    flap_interval_s: float = 3.0
    partitions: list[PartitionSpec] = field(default_factory=list)
    probe_share: float = 0.5
    request_timeout_s: float = 3.0

    def validate(self) -> None:
        """Reject impossible runs before any connection is made (a ValueError says why)."""
        if not self.namesrv:
            raise ValueError("at least one name server is needed")
        if len(set(self.namesrv)) != len(self.namesrv):
            raise ValueError("a name server is listed twice")
        positive = {
            "brokers": self.brokers,
            "clusters": self.clusters,
            "topics": self.topics,
            "queues": self.queues,
            "brokers-per-topic": self.brokers_per_topic,
            "register-period": self.register_period_s,
            "duration": self.duration_s,
            "query-clients": self.query_clients,
            "flap-interval": self.flap_interval_s,
        }
        for name, value in positive.items():
            if value <= 0:
                raise ValueError(f"--{name} must be positive")
        non_negative = {
            "slaves": self.slaves,
            "query-rate": self.query_rate,
            "kill": self.kills,
            "stop": self.stops,
            "drop": self.drops,
            "flap": self.flaps,
        }
        for name, value in non_negative.items():
            if value < 0:
                raise ValueError(f"--{name} must not be negative")
        if not 0.0 <= self.probe_share <= 1.0:
            raise ValueError("--probe-share must be between 0 and 1")
        for spec in self.partitions:
            if spec.namesrv not in self.namesrv:
                raise ValueError(f"partition name server {spec.namesrv} is not in --namesrv")
            if resolve_group(spec.broker, self.brokers) is None:
                raise ValueError(
                    f"partition broker {spec.broker!r} is not one of "
                    f"{broker_name(0)}..{broker_name(self.brokers - 1)}"
                )
        # One chaos event per group at most, so that no two events blur each other.
        victims = self.kills + self.stops + self.drops + self.flaps
        partitioned = {resolve_group(p.broker, self.brokers) for p in self.partitions}
        groups = self.brokers - len(partitioned)
        if victims > groups:
            raise ValueError(
                f"{victims} chaos victims but only {groups} broker groups free "
                "(each group is hit at most once)"
            )


@dataclass(frozen=True, slots=True)
class BrokerSpec:
    """One broker process of the fleet (a master or a slave of a group)."""

    index: int
    group: int
    cluster: str
    name: str
    broker_id: int
    addr: str
    ha_addr: str
    topics: tuple[str, ...]
    phase_s: float  # when, within the first period, its first registration goes out


@dataclass(frozen=True, slots=True)
class PlannedEvent:
    """A chaos event's kind and moment (seconds since the start); the victim comes later."""

    at_s: float
    kind: ChaosKind
    partition: PartitionSpec | None = None


def broker_name(group: int) -> str:
    return f"sim-broker-{group:04d}"


def topic_name(index: int) -> str:
    return f"SimTopic-{index:05d}"


def resolve_group(text: str, groups: int) -> int | None:
    """A group given by name (``sim-broker-0003``) or by index (``3``); None if unknown."""
    if text.isdigit():
        index = int(text)
    elif text.startswith("sim-broker-") and text[len("sim-broker-") :].isdigit():
        index = int(text[len("sim-broker-") :])
    else:
        return None
    return index if 0 <= index < groups else None


def topic_universe(config: SimConfig) -> list[str]:
    """All topic names: sized so each topic is served by about ``brokers_per_topic`` groups."""
    share = min(config.brokers_per_topic, config.brokers)
    count = max(config.topics, math.ceil(config.brokers * config.topics / share))
    return [topic_name(i) for i in range(count)]


def build_fleet(config: SimConfig, universe: list[str]) -> list[BrokerSpec]:
    """The broker processes: groups × (1 + slaves), topics as sliding windows of the universe.

    Group ``g`` serves topics ``g*M .. g*M+M-1`` (mod the universe), so neighbouring groups
    share no topic but every topic ends up with ``brokers_per_topic`` groups; first
    registrations are spread evenly (and shuffled) over one period so a thousand brokers do
    not all register in the same millisecond.
    """
    rng = random.Random(config.seed)
    per_group = 1 + config.slaves
    total = config.brokers * per_group
    slots = list(range(total))
    rng.shuffle(slots)
    fleet: list[BrokerSpec] = []
    for group in range(config.brokers):
        topics = tuple(
            universe[(group * config.topics + j) % len(universe)] for j in range(config.topics)
        )
        for broker_id in range(per_group):
            index = group * per_group + broker_id
            host = f"127.0.0.{1 + index % _HOSTS}"
            port = _BASE_PORT + _PORT_STEP * (index // _HOSTS)
            phase = (slots[index] + rng.random()) / total * config.register_period_s
            fleet.append(
                BrokerSpec(
                    index=index,
                    group=group,
                    cluster=f"SimCluster-{group % config.clusters}",
                    name=broker_name(group),
                    broker_id=broker_id,
                    addr=f"{host}:{port}",
                    ha_addr=f"{host}:{port + 1}",
                    topics=topics,
                    phase_s=phase,
                )
            )
    return fleet


def chaos_window(config: SimConfig) -> tuple[float, float]:
    """When chaos may strike: after the first registrations, early enough to be detected.

    A kill is only noticed one heartbeat timeout after the broker's last registration, and a
    dropped broker comes back at its next period; the window ends that long before the run
    does (when the run is too short for that, events still spread over its next quarter).
    """
    period = config.register_period_s
    start = min(period, 0.5 * config.duration_s) + 0.1
    settle = 2 * period + 1.0
    if config.kills or config.partitions:
        timeout_s = (config.heartbeat_timeout_ms or 120_000) / 1000
        settle = max(settle, timeout_s + period + 1.0)
    end = config.duration_s - settle
    if end < start:  # too short a run to see every recovery: spread the events anyway
        end = start + 0.25 * max(0.0, config.duration_s - start)
    return start, end


def plan_chaos(config: SimConfig) -> list[PlannedEvent]:
    """The moments of all chaos events, seeded, in time order."""
    rng = random.Random(config.seed ^ 0x5EED)
    start, end = chaos_window(config)
    counts: dict[ChaosKind, int] = {
        "kill": config.kills,
        "stop": config.stops,
        "drop": config.drops,
        "flap": config.flaps,
    }
    events = [
        PlannedEvent(rng.uniform(start, end), kind)
        for kind, count in counts.items()
        for _ in range(count)
    ]
    for spec in config.partitions:
        # A partition must end before the run does, or its recovery is never seen.
        last = max(start, min(end, config.duration_s - spec.seconds - 2 * config.register_period_s))
        events.append(PlannedEvent(rng.uniform(start, last), "partition", spec))
    events.sort(key=lambda e: e.at_s)
    return events
