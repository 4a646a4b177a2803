"""Every place where we deliberately answer differently from the Java recordings (4.9.4 in
``golden/``, 5.2.0 in ``golden-5x/``).

One list, so a reviewer sees all of them at once. A deviation is only acceptable when it is
Apache RocketMQ 5.x behaviour or a security fix; anything else is a server bug and must be
fixed, not listed here. Each entry names the request frame (scenario, seq) it applies to,
why, and what we expect instead; the replay test reads the machine-readable fields.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ReplayPaths:
    """Where the replayed server keeps its files (post checks look at them)."""

    workdir: Path
    kv_config_path: Path
    config_store_path: Path


PostCheck = Callable[[ReplayPaths], list[str]]


@dataclass(frozen=True)
class Deviation:
    """One deliberate difference from the recording, tied to a request frame.

    ``unsupported_code``: 4.9.4 sent nothing; we answer REQUEST_CODE_NOT_SUPPORTED (5.x).
    ``header_overrides``: members of the recorded answer header replaced (None removes one).
    ``config_exact``: GET_NAMESRV_CONFIG keys that must have these values (``{kv_config_path}``
    and ``{config_store_path}`` are replaced by the replay's own paths).
    ``post_check``: run once after the scenario, returns problem texts.
    ``answer_like``: the answer is the one recorded at that (s2c) seq, with this opaque.
    ``quote_keys``: the recorded body with its bare numeric map keys quoted (the standard
    JSON dialect the client asked for, where Java answered in the legacy one).
    ``body_overrides``: top-level members of the recorded body replaced.
    A deviation with ``seq`` None documents a difference no single frame shows.
    """

    scenario: str | None
    seq: int | None
    reason: str
    instead: str
    unsupported_code: bool = False
    header_overrides: Mapping[str, Any] | None = None
    config_exact: Mapping[str, str] | None = None
    post_check: PostCheck | None = None
    answer_like: int | None = None
    quote_keys: bool = False
    body_overrides: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Probe:
    """A 5.x-only request the corpus cannot contain (4.9.4 never answers it).

    Sent as a JSON request; ``expect`` lists header members the answer must have and
    ``body`` (if not None) the exact expected body as data.
    """

    code: int
    ext_fields: Mapping[str, str]
    reason: str
    expect: Mapping[str, Any]
    body: Any = None
    request_body: bytes = b""


UNSUPPORTED_REMARK = " request type {code} not supported"
REQUEST_CODE_NOT_SUPPORTED = 3
NO_PERMISSION = 16
BLACKLIST_REMARK = "Can not update config in black list."

_WHY_UNKNOWN = (
    "4.9.4 drops unknown request codes silently, so the client waits for its timeout; "
    "5.x answers REQUEST_CODE_NOT_SUPPORTED at once"
)
_WHY_CVE = (
    "CVE-2023-37582: 4.9.4 lets UPDATE_NAMESRV_CONFIG move configStorePath/kvConfigPath "
    "and then writes files wherever the client says; 4.9.8/5.2.0+ refuse keys in the "
    "config black list"
)


def _kv_stays_in_original_file(paths: ReplayPaths) -> list[str]:
    """errors.jsonl case 7b: the PUT_KV_CONFIG after the refused path change."""
    problems: list[str] = []
    moved = paths.workdir / "golden-moved"
    if moved.exists():
        problems.append(
            f"errors seq 51/55: {moved} exists: the server wrote to the path the "
            f"client asked for (CVE-2023-37582): {sorted(p.name for p in moved.iterdir())}"
        )
    try:
        table = json.loads(paths.kv_config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        return [*problems, f"errors seq 55: kv file {paths.kv_config_path} unreadable: {exc}"]
    value = (table.get("configTable") or {}).get("GoldenNamespace", {}).get("k")
    if value != "v":
        problems.append(
            f"errors seq 55: kv file {paths.kv_config_path} configTable.GoldenNamespace.k: "
            f"expected 'v', got {value!r}"
        )
    return problems


DEVIATIONS: tuple[Deviation, ...] = (
    Deviation(
        scenario="errors",
        seq=1,
        reason=_WHY_UNKNOWN + " (case 1: code 9999).",
        instead="code 3, remark ' request type 9999 not supported', opaque 0, no extFields",
        unsupported_code=True,
    ),
    Deviation(
        scenario="errors",
        seq=18,
        reason=_WHY_UNKNOWN + " (case 3c: header '{}' is a request with code 0, "
        "which is no request code; 5.x's default processor answers it like any unknown code).",
        instead="code 3, remark ' request type 0 not supported', opaque 0",
        unsupported_code=True,
    ),
    Deviation(
        scenario="errors",
        seq=51,
        reason=_WHY_CVE + " (case 7: body sets configStorePath and kvConfigPath).",
        instead=f"code {NO_PERMISSION} NO_PERMISSION, remark '{BLACKLIST_REMARK}', nothing applied",
        header_overrides={"code": NO_PERMISSION, "remark": BLACKLIST_REMARK},
    ),
    Deviation(
        scenario="errors",
        seq=53,
        reason=_WHY_CVE + " (case 7: GET_NAMESRV_CONFIG after the refused update).",
        instead="kvConfigPath and configStorePath still the replay's own paths "
        "(the recording shows golden-moved/...)",
        config_exact={
            "kvConfigPath": "{kv_config_path}",
            "configStorePath": "{config_store_path}",
        },
    ),
    Deviation(
        scenario="errors",
        seq=55,
        reason=_WHY_CVE + " (case 7b: PUT_KV_CONFIG after the refused update).",
        instead="code 0 as recorded, but the KV table is persisted to the original "
        "kvConfigPath and no golden-moved/ directory appears",
        post_check=_kv_stays_in_original_file,
    ),
    Deviation(
        scenario="errors",
        seq=57,
        reason="Issue #3 (safe remote configuration): UPDATE_NAMESRV_CONFIG refuses keys it "
        "does not know instead of accepting and ignoring them as 4.9.4 and 5.x do, so an "
        "operator's typo (or a probe for keys of newer versions) gets an error, not a "
        "silent no-op; nothing is applied.",
        instead=f"code {NO_PERMISSION} NO_PERMISSION, remark "
        "'Can not update unknown config: goldenNoSuchKey'",
        header_overrides={
            "code": NO_PERMISSION,
            "remark": "Can not update unknown config: goldenNoSuchKey",
        },
    ),
    Deviation(
        scenario=None,
        seq=None,
        reason="Answer version and shape: Java stamps its own version on every answer (401 "
        "for 4.9.4, 453 for 5.2.0) and 5.x changed a few details (enableActingMaster in "
        "BrokerData, stateVersion in QUERY_DATA_VERSION bodies, the FAQ URL of "
        "TOPIC_NOT_EXIST, 39 instead of 20 GET_NAMESRV_CONFIG keys). pynamesrv implements 5.x "
        "and answers as 5.2.0 by default; rocketmq.remoting.version (a key of the table, "
        "Java's JVM property of that name) picks the Java version it answers as, so a "
        "deployment can keep 4.9.4's bytes. The 4.9.4 replays run with 401 and show no "
        "difference; the 5.2.0 replay runs the default. Keyed to the server's setting, not "
        "to each requester's version, because 5.x servers answer 4.x clients with 5.x "
        "shapes too (golden-5x: the Python client's version-401 requests).",
        instead="at the default: version 453 and the 5.2.0 shapes, for every client",
    ),
    # Not in the corpus (4.9.4 never answers them, so nothing was recorded): checked by
    # the synthetic probes below.
    Deviation(
        scenario=None,
        seq=None,
        reason="REGISTER_TOPIC_IN_NAMESRV (217) exists only in 5.x; 4.9.4 is silent.",
        instead="answered SUCCESS (see PROBES)",
    ),
    Deviation(
        scenario=None,
        seq=None,
        reason="GET_BROKER_MEMBER_GROUP (901) exists only in 5.x; 4.9.4 is silent.",
        instead="answered SUCCESS with a brokerMemberGroup body (see PROBES)",
    ),
    Deviation(
        scenario=None,
        seq=None,
        reason="BROKER_HEARTBEAT (904) exists only in 5.x; 4.9.4 is silent.",
        instead="answered SUCCESS when sent as a normal request (see PROBES)",
    ),
)

_WHY_ZONE_DIALECT = (
    "Zone mode (__ZONE_MODE=true, __ZONE_NAME set): Java 5.2.0's ZoneRouteRPCHook re-encodes "
    "the filtered route with plain fastjson, so clients that asked for standard JSON "
    "(version >= 401 or acceptStandardJsonOnly=true) get bare numeric keys {0:...} that "
    "strict parsers (Go, Rust, C++) reject. pynamesrv filters the same way but answers in "
    "the dialect the client asked for, and caches the filtered answer per zone."
)
_WHY_START_GATE = (
    "needWaitForService: 5.2.0's readiness check turns false for ever once the first route "
    "answer clears needCheckNamesrvReady (apache/rocketmq#9182, fixed in 5.3.2 by #9183), so "
    "after seq 60 Java refuses every route query with 'name server not ready'. pynamesrv "
    "behaves like 5.3.2+: ready once waitSecondsForService have passed, and stays ready."
)

# golden-5x (Java 5.2.0), replayed by test_golden5_replay.py.
DEVIATIONS_5X: tuple[Deviation, ...] = (
    *(
        Deviation(
            scenario="zone-route",
            seq=seq,
            reason=_WHY_ZONE_DIALECT,
            instead="the recorded filtered route, with quoted numeric keys",
            quote_keys=True,
        )
        for seq in (47, 53, 73, 75, 77, 85, 91, 123, 125, 129)
    ),
    *(
        Deviation(
            scenario="namesrv-restart",
            seq=seq,
            reason=_WHY_START_GATE,
            instead="code 0 with the route, as recorded at seq 60",
            answer_like=60,
        )
        for seq in (61, 63, 65, 67, 71, 73, 75, 77, 79, 83, 85, 89, 91, 93, 95)
    ),
    Deviation(
        scenario="register-admin",
        seq=271,
        reason="GET_SYSTEM_TOPIC_LIST_FROM_NS names 'a' broker address: Java's first master in "
        "HashMap iteration order (broker-b here), pynamesrv the lowest id of the first group "
        "registered. Any registered broker serves the request this answers (mqadmin uses it "
        "to reach a broker), and the golden README lists the value as varying.",
        instead="brokerAddr 127.0.0.1:34911 (broker-a's master)",
        body_overrides={"brokerAddr": "127.0.0.1:34911"},
    ),
    # Differences no single recorded frame shows.
    Deviation(
        scenario=None,
        seq=None,
        reason="UPDATE_NAMESRV_CONFIG: Java 5.2.0 takes any key outside configBlackList, "
        "unknown ones included (register-admin seq 169: supportActingMaster, which pynamesrv "
        "knows and takes too). pynamesrv refuses keys it does not know (a typo gets an "
        "error) and keys that name files or the listening socket (bindAddress, listenPort, "
        "serverSocketBacklog, the paths: only in the -c file), as for 4.9.4 (errors seq 57).",
        instead="NO_PERMISSION 'Can not update unknown config: ...' / 'Can not update config "
        "remotely: ...'",
    ),
    Deviation(
        scenario="acting-master",
        seq=None,
        reason="Expiry timing: Java removes a silent broker at its next 5 s scan (here 3 s "
        "after the master's deadline), pynamesrv at the deadline (within a second). The "
        "timed replay therefore runs pynamesrv's expiry check 5 s behind the recorded clock "
        "(so no broker Java still listed is gone), and at the clock where the recording "
        "shows Java expiring one (the server closing its connection: acting-master after "
        "seq 540, compat-old-namesrv after seq 271). Exact expiry: tests/e2e/test_liveness.py.",
        instead="the master of broker-a removed at the moment Java removed it",
    ),
    Deviation(
        scenario="acting-master",
        seq=None,
        reason="NOTIFY_MIN_BROKER_ID_CHANGE (905, not on these connections): Java sends it "
        "oneway with a 300 ms budget and no retry; pynamesrv sends it as a request the "
        "broker answers (its AdminBrokerProcessor does), retries it twice, and also fills the "
        "header's brokerName (Java leaves it null; brokers ignore it). The replay checks the "
        "905 the recorded expiry causes (test_golden5_replay.py).",
        instead="one 905 to 127.0.0.1:34921: minBrokerId 1, minBrokerAddr 127.0.0.1:34921, "
        "offlineBrokerAddr 127.0.0.1:34911",
    ),
    Deviation(
        scenario=None,
        seq=None,
        reason="Static topics: Java never forgets a topic's queue mapping (until restart), so "
        "after a mapped broker group leaves, routes still map logical queues to it; pynamesrv "
        "drops a group's mappings when the group or the topic leaves the routes.",
        instead="topicQueueMappingByBroker lists only groups the name server still knows",
    ),
)

PROBES: tuple[Probe, ...] = (
    Probe(
        code=217,
        ext_fields={"topic": "GoldenProbeTopic"},
        request_body=(
            b'{"brokerDatas":[],"filterServerTable":{},"queueDatas":[{"brokerName":'
            b'"no-such-broker","perm":6,"readQueueNums":1,"topicSysFlag":0,"writeQueueNums":1}]}'
        ),
        reason="REGISTER_TOPIC_IN_NAMESRV: always SUCCESS, even for an unknown broker",
        expect={"code": 0, "flag": 1},
    ),
    Probe(
        code=901,
        ext_fields={"clusterName": "GoldenCluster", "brokerName": "no-such-broker"},
        reason="GET_BROKER_MEMBER_GROUP for an unknown broker: empty brokerAddrs",
        expect={"code": 0, "flag": 1},
        body={
            "brokerMemberGroup": {
                "brokerAddrs": {},
                "brokerName": "no-such-broker",
                "cluster": "GoldenCluster",
            }
        },
    ),
    Probe(
        code=904,
        ext_fields={
            "clusterName": "GoldenCluster",
            "brokerAddr": "127.0.0.1:1",
            "brokerName": "no-such-broker",
        },
        reason="BROKER_HEARTBEAT: SUCCESS (5.x brokers send it oneway; here it asks)",
        expect={"code": 0, "flag": 1},
    ),
)


def deviations_for(scenario: str) -> dict[int, Deviation]:
    """The deviations of one scenario keyed by request seq (at most one per frame). The two
    corpora's scenario names differ, so one look-up serves both."""
    out: dict[int, Deviation] = {}
    for dev in (*DEVIATIONS, *DEVIATIONS_5X):
        if dev.scenario == scenario and dev.seq is not None:
            if dev.seq in out:
                raise ValueError(f"two deviations for {scenario} seq {dev.seq}")
            out[dev.seq] = dev
    return out
