"""The synthetic journal generator: real-writer lines, determinism, scenarios, sane truth.

No Spark here: these tests check that the generator writes what a real name server writes and
that its ground truth is self-consistent, so that a disagreement with the Spark job points at
the job (or at the semantics doc), not at the generator.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import defaultdict
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

import orjson
import pytest

from pynamesrv.namesrv.events import BrokerHeartbeat
from pynamesrv.namesrv.journal import instance_dir_name, journal_files, read_records
from pynamesrv.testing import GroundTruth, generate

SMALL = {"brokers": 12, "instances": 2, "hours": 2, "seed": 1}
H_MS = 30_000
TIMEOUT_S = 120.0
SCAN_S = 10.0

# docs/journal.md: the fields of each type and their JSON types
INT, STR, BOOL, LIST, DICT = int, str, bool, list, dict
SCHEMA: dict[str, dict[str, tuple[type, ...]]] = {
    "server_started": {"version": (STR,), "config": (DICT,), "recovered": (DICT, type(None))},
    "server_stopped": {"version": (STR,), "config": (DICT,)},
    "broker_registered": {
        "cluster": (STR,),
        "broker_name": (STR,),
        "broker_id": (INT,),
        "broker_addr": (STR,),
        "ha_addr": (STR, type(None)),
        "first": (BOOL,),
        "data_version": (DICT,),
        "topics_added": (LIST,),
        "topics_removed": (LIST,),
        "topics_changed": (LIST,),
        "topic_count": (INT,),
        "topic_configs": (DICT,),
        "recovered": (BOOL,),
    },
    # a warm restart: one line per provisional broker right after server_started
    "broker_recovered": {
        "cluster": (STR,),
        "broker_name": (STR,),
        "broker_id": (INT,),
        "broker_addr": (STR,),
        "last_heartbeat_ts": (INT,),
        "timeout_ms": (INT,),
    },
    "broker_heartbeat": {
        "cluster": (STR,),
        "broker_name": (STR,),
        "broker_id": (INT,),
        "broker_addr": (STR,),
        "data_version": (DICT,),
    },
    "broker_removed": {
        "cluster": (STR,),
        "broker_name": (STR,),
        "broker_id": (INT,),
        "broker_addr": (STR,),
        "reason": (STR,),
        "last_heartbeat_ts": (INT, type(None)),
        "group_gone": (bool,),
        "topics_gone": (INT,),
    },
    "topic_removed": {"topic": (STR,), "reason": (STR,)},
    "perm_changed": {"broker_name": (STR,), "op": (STR,), "topic_count": (INT,)},
    "kv_changed": {"namespace": (STR,), "key": (STR,), "op": (STR,)},
    "config_changed": {"key": (STR,), "value": (STR,)},
    "route_queries": {"window_ms": (INT,), "counts": (DICT,), "misses": (DICT,)},
    "snapshot": {"brokers": (LIST,), "topics": (DICT,)},
    # 5.x (docs/journal.md): written when a lower broker id registers into a group
    "min_broker_id_changed": {
        "cluster": (STR,),
        "broker_name": (STR,),
        "min_broker_id": (INT,),
        "min_broker_addr": (STR,),
        "notify": (LIST,),
    },
}
# docs/journal.md: a heartbeat that repeats its file's last full one of the same broker
COMPACT_HEARTBEAT: dict[str, tuple[type, ...]] = {"cluster": (STR,), "broker_addr": (STR,)}
REASONS = {"unregister", "expired", "channel_closed", "channel_error", "channel_idle"}


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, GroundTruth]:
    out = tmp_path_factory.mktemp("small")
    return out, generate(out, **SMALL)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def lines(small: tuple[Path, GroundTruth]) -> list[tuple[Path, bytes, dict[str, Any]]]:
    """(file, raw line, record) in file order, files in name order per instance."""
    out: list[tuple[Path, bytes, dict[str, Any]]] = []
    for file in journal_files(small[0]):
        for raw in file.read_bytes().splitlines(keepends=True):
            out.append((file, raw, orjson.loads(raw)))
    return out


def by_instance(lines: list[tuple[Path, bytes, dict[str, Any]]]) -> dict[str, list[dict]]:
    grouped: dict[str, list[dict]] = defaultdict(list)
    for _, _, record in lines:
        grouped[record["ns"]].append(record)
    return grouped


# ---------------------------------------------------------------------- the lines


def test_every_line_parses_with_the_schema_fields_and_types(small, lines) -> None:
    out, _ = small
    assert len(list(read_records(journal_files(out)))) == len(lines) > 1000
    seen_types = set()
    for _, raw, record in lines:
        assert raw.endswith(b"\n")
        # byte-compatible with Journal.record: compact orjson, ts/ns/seq/type first
        assert orjson.dumps(record) + b"\n" == raw
        assert list(record)[:4] == ["ts", "ns", "seq", "type"]
        assert type(record["ts"]) is int and type(record["seq"]) is int
        assert isinstance(record["ns"], str)
        kind = record["type"]
        seen_types.add(kind)
        compact = kind == "broker_heartbeat" and "broker_name" not in record
        for name, types in (COMPACT_HEARTBEAT if compact else SCHEMA[kind]).items():
            assert name in record, (kind, name, record)
            assert type(record[name]) in types, (kind, name, record[name])
        if kind == "broker_removed":
            assert record["reason"] in REASONS
        if kind == "broker_registered":
            assert set(record["topic_configs"]) == {
                *record["topics_added"],
                *record["topics_changed"],
            }
            for config in record["topic_configs"].values():
                assert set(config) == {"read", "write", "perm", "sys_flag"}
        if kind == "route_queries":
            assert record["window_ms"] <= 60_000
            assert all(type(n) is int and n > 0 for n in record["counts"].values())
        if kind == "snapshot":
            for broker in record["brokers"]:
                assert set(broker) >= {
                    "cluster",
                    "broker_name",
                    "broker_id",
                    "broker_addr",
                    "last_heartbeat_ts",
                }
    # no admin deletes are simulated: a group's removal takes its topics in its own line
    assert seen_types >= set(SCHEMA) - {"config_changed", "min_broker_id_changed", "topic_removed"}


def test_heartbeat_lines_are_full_once_per_file_and_process_then_compact(lines) -> None:
    """As ``Journal`` writes them: the real event's fields, or only the key when the same file
    (and process) already said the rest for that broker in a full line."""
    real = frozenset({"ts", "ns", "seq"} | set(BrokerHeartbeat("c", "b", 0, "a:1", {}).to_record()))
    short = frozenset({"ts", "ns", "seq", "type", *COMPACT_HEARTBEAT})
    said: dict[tuple[str, str], dict[str, Any]] = {}
    current = None
    forms = {"full": 0, "compact": 0}
    for file, _, record in lines:
        if file != current or record["type"] == "server_started":
            current, said = file, {}
        if record["type"] != "broker_heartbeat":
            continue
        key = (record["cluster"], record["broker_addr"])
        rest = {k: v for k, v in record.items() if k not in ("ts", "ns", "seq")}
        if frozenset(record) == short:
            assert key in said, record  # never before its full line in the file
            forms["compact"] += 1
        else:
            assert frozenset(record) == real
            assert said.get(key) != rest, record  # a repetition would have been compact
            said[key] = rest
            forms["full"] += 1
    assert forms["compact"] > 1000 and forms["compact"] > 20 * forms["full"]


def test_seq_and_ts_order_per_instance(lines) -> None:
    """seq counts per process like the real writer: 1 at each server_started, +1 per line."""
    for ns, records in by_instance(lines).items():
        assert records[0]["type"] == "server_started", ns
        previous = None
        for record in records:
            if record["type"] == "server_started":
                assert record["seq"] == 1
            else:
                assert previous is not None and record["seq"] == previous["seq"] + 1
            if previous is not None:
                assert record["ts"] >= previous["ts"]
                if record["type"] == "server_started":
                    assert record["ts"] > previous["ts"]  # a new process starts later
            previous = record
        assert records[-1]["type"] == "server_stopped"


def test_hour_files_and_directories(small, lines) -> None:
    out, _ = small
    for file, _, record in lines:
        hour = datetime.fromtimestamp(record["ts"] / 1000, UTC).strftime("%Y%m%d-%H")
        assert file.name == f"events-{hour}.jsonl"
        assert file.parent == out / instance_dir_name(record["ns"])
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == ["10.0.0.1_9876", "10.0.0.2_9876"]


# ---------------------------------------------------------------------- determinism


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_same_seed_same_bytes_other_seed_other_bytes(small, tmp_path) -> None:
    out, truth = small
    again = generate(tmp_path / "again", **SMALL)  # type: ignore[arg-type]
    assert tree_bytes(tmp_path / "again") == tree_bytes(out)
    assert again == truth
    other = generate(tmp_path / "other", **{**SMALL, "seed": SMALL["seed"] + 1})  # type: ignore[arg-type]
    assert tree_bytes(tmp_path / "other") != tree_bytes(out)
    assert other.broker_sessions != truth.broker_sessions


def test_same_bytes_under_another_hash_seed(small, tmp_path) -> None:
    """No set or str-hash order leaks into the output (PYTHONHASHSEED differs per process)."""
    out, _ = small
    code = (
        "import sys; from pathlib import Path; from pynamesrv.testing import generate;"
        f"generate(Path(sys.argv[1]), **{SMALL!r})"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    subprocess.run([sys.executable, "-c", code, str(tmp_path)], check=True, env=env)
    assert tree_bytes(tmp_path) == tree_bytes(out)


def test_ground_truth_file_loads_back(small) -> None:
    out, truth = small
    assert GroundTruth.load(out / "ground_truth.json") == truth


# ---------------------------------------------------------------------- scenarios


def test_all_injected_kinds_happen(small, lines) -> None:
    _, truth = small
    reasons = {r["reason"] for r in truth.detection_latency}
    assert {"expired", "unregister", "channel_closed"} <= reasons
    kinds = {e["kind"] for e in truth.injected}
    assert {"expired", "unregister", "channel_closed", "flapping", "divergence"} <= kinds
    assert {"restart", "crash", "provisional_expired"} <= kinds
    lifecycle = [e for e in truth.injected if e["kind"] in ("restart", "crash")]
    assert {(e["kind"], e["warm"]) for e in lifecycle} == {
        ("restart", True),
        ("crash", True),
        ("restart", False),
    }
    assert {"topic_churn", "perm_wipe"} <= kinds
    end_reasons = {r["end_reason"] for r in truth.broker_sessions}
    assert {"server_stopped", "server_lost", "expired", "unregister", "channel_closed"} <= (
        end_reasons
    )
    records = [r for _, _, r in lines]
    types = {r["type"] for r in records}
    assert {"perm_changed", "kv_changed"} <= types
    assert "topic_removed" not in types  # a group's last removal is one line (docs/journal.md)
    assert any(r["type"] == "broker_removed" and r["topics_gone"] > 0 for r in records)
    assert any(r["type"] == "broker_registered" and not r["first"] for r in records)
    assert any(r["type"] == "route_queries" and r["misses"] for r in records)
    # 2 + warm restart + crash + cold restart; the crash has no server_stopped
    assert len([r for r in records if r["type"] == "server_started"]) == 5
    assert len([r for r in records if r["type"] == "server_stopped"]) == 4
    # warm restarts: recovered brokers that register again, and one that expires provisional
    assert any(r["type"] == "broker_registered" and r["recovered"] for r in records)
    assert {"server_stopped", "server_lost", "expired", None} & {
        r["end_reason"] for r in truth.broker_sessions if r["start_reason"] == "recovered"
    } >= {"expired"}
    expiring = next(e for e in truth.injected if e["kind"] == "provisional_expired")
    assert any(
        r["ns"] == expiring["ns"]
        and r["broker_addr"] == expiring["broker"]
        and r["start_reason"] == "recovered"
        and r["end_reason"] == "expired"
        and r["end_ts"] < expiring["end"]
        for r in truth.broker_sessions
    )
    assert truth.stale_route_exposure
    assert any(r["skew"] > 1 for r in truth.topic_distribution)
    assert {r["single_broker"] for r in truth.topic_distribution} == {True, False}


def test_the_missed_broker_diverges_on_that_instance(small) -> None:
    _, truth = small
    for miss in (e for e in truth.injected if e["kind"] == "divergence"):
        rows = [
            r
            for r in truth.namesrv_divergence
            if miss["start"] < r["start_ts"] < miss["end"] + H_MS
            and miss["broker"] in r["only_in_a"] + r["only_in_b"]
        ]
        assert rows, miss
        side = "only_in_b" if rows[0]["ns_a"] == miss["ns"] else "only_in_a"
        assert miss["broker"] in rows[0][side]  # live on the other instance, not on this one
        assert rows[0]["duration_s"] > 60


def test_crash_sessions_end_at_the_last_line_before_the_restart(small, lines) -> None:
    _, truth = small
    crash = next(e for e in truth.injected if e["kind"] == "crash")
    records = by_instance(lines)[crash["ns"]]
    before = [r for r in records if r["ts"] < crash["start"]]
    lost = [r for r in truth.broker_sessions if r["end_reason"] == "server_lost"]
    assert lost and {r["end_ts"] for r in lost} == {before[-1]["ts"]}


# ---------------------------------------------------------------------- self-consistency


def test_removals_match_session_ends(small) -> None:
    _, truth = small
    ends = {
        (r["ns"], r["cluster"], r["broker_addr"], r["end_ts"]): r["end_reason"]
        for r in truth.broker_sessions
        if r["end_reason"] not in (None, "server_stopped", "server_lost")
    }
    removals = {
        (r["ns"], r["cluster"], r["broker_addr"], r["removed_ts"]): r["reason"]
        for r in truth.detection_latency
    }
    assert ends == removals
    assert len(removals) == len(truth.detection_latency)


def test_detection_latencies_fit_the_reason(small) -> None:
    _, truth = small
    for row in truth.detection_latency:
        assert row["latency_s"] == (row["removed_ts"] - row["last_heartbeat_ts"]) / 1000
        if row["reason"] == "expired":
            assert TIMEOUT_S < row["latency_s"] <= TIMEOUT_S + SCAN_S + 0.01, row
        else:  # removed between two heartbeats
            assert 0 <= row["latency_s"] < H_MS / 1000, row


def test_sessions_of_one_identity_do_not_overlap(small) -> None:
    _, truth = small
    by_identity: dict[tuple, list[dict]] = defaultdict(list)
    for row in truth.broker_sessions:
        assert row["end_ts"] is not None and row["end_ts"] >= row["start_ts"]
        assert row["duration_s"] == (row["end_ts"] - row["start_ts"]) / 1000
        by_identity[(row["ns"], row["cluster"], row["broker_addr"])].append(row)
    for rows in by_identity.values():
        rows.sort(key=lambda r: r["start_ts"])
        for a, b in pairwise(rows):
            assert a["end_ts"] <= b["start_ts"]


def test_availability_is_bounded_and_counts_outages(small) -> None:
    _, truth = small
    outages: dict[tuple, int] = defaultdict(int)
    for row in truth.broker_sessions:
        if row["end_reason"] not in ("server_stopped", "server_lost"):
            outages[(row["ns"], row["broker_addr"])] += 1
    counted: dict[tuple, int] = defaultdict(int)
    for row in truth.broker_availability:
        assert 0 < row["routed_fraction"] <= 1
        assert 0 < row["routed_s"] <= 86_400
        assert row["outages"] >= 0
        if row["mttr_s"] is not None:
            assert row["outages"] > 0 and row["mttr_s"] > 0
        counted[(row["ns"], row["broker_addr"])] += row["outages"]
    assert {k: v for k, v in counted.items() if v} == dict(outages)


def test_stale_exposure_comes_from_expired_brokers(small, lines) -> None:
    """Exact beats leave no gap: every stale minute overlaps [last beat + H, expiry) of an
    expired broker on that instance, or the first heartbeat interval after a warm restart
    (a recovered broker last heard before the restart, until it registers again); queries
    are the counts of the line at minute + 60 s."""
    _, truth = small
    silent = defaultdict(list)
    for row in truth.detection_latency:
        if row["reason"] == "expired":
            silent[row["ns"]].append((row["last_heartbeat_ts"] + H_MS, row["removed_ts"]))
    for event in truth.injected:
        if event["kind"] in ("restart", "crash") and event["warm"]:
            silent[event["ns"]].append((event["end"], event["end"] + H_MS))
    counts = {(r["ns"], r["ts"]): r["counts"] for _, _, r in lines if r["type"] == "route_queries"}
    assert any(row["queries"] > 0 for row in truth.stale_route_exposure)
    for row in truth.stale_route_exposure:
        m = row["minute"]
        assert m % 60_000 == 0
        assert 0 < row["stale_seconds"] <= 60 and row["stale_brokers"] >= 1
        assert any(lo < m + 60_000 and m < hi for lo, hi in silent[row["ns"]]), row
        assert row["queries"] == counts.get((row["ns"], m + 60_000), {}).get(row["topic"], 0)
        assert row["exposed_queries"] == pytest.approx(row["queries"] * row["stale_seconds"] / 60)


def test_divergence_rows_are_well_formed(small) -> None:
    _, truth = small
    down = [
        (e["ns"], e["start"], e["end"]) for e in truth.injected if e["kind"] in ("restart", "crash")
    ]
    last_end: dict[tuple, int] = {}
    for row in truth.namesrv_divergence:
        assert row["ns_a"] < row["ns_b"]
        assert row["start_ts"] < row["end_ts"]
        assert row["duration_s"] == (row["end_ts"] - row["start_ts"]) / 1000
        assert row["only_in_a"] or row["only_in_b"]
        assert row["only_in_a"] == sorted(row["only_in_a"])
        key = (row["cluster"], row["ns_a"], row["ns_b"])
        assert row["start_ts"] >= last_end.get(key, 0)
        last_end[key] = row["end_ts"]
        for ns, stop, start in down:  # never while one of the two is down
            if ns in (row["ns_a"], row["ns_b"]):
                assert row["end_ts"] <= stop or row["start_ts"] >= start


def test_topic_distribution_arithmetic(small, lines) -> None:
    _, truth = small
    end = max(record["ts"] for _, _, record in lines)  # the end of the data: one instant
    assert {row["at_ts"] for row in truth.topic_distribution} == {end}
    for row in truth.topic_distribution:
        assert row["brokers"] >= 1
        assert row["mean_queues_per_broker"] * row["brokers"] == pytest.approx(row["write_queues"])
        assert row["skew"] >= 1
        assert row["single_broker"] == (row["brokers"] == 1)


def test_still_running_at_the_end_leaves_sessions_open(tmp_path) -> None:
    truth = generate(tmp_path, **{**SMALL, "stop_at_end": False})  # type: ignore[arg-type]
    open_rows = [r for r in truth.broker_sessions if r["end_ts"] is None]
    assert open_rows and all(r["end_reason"] is None and r["duration_s"] is None for r in open_rows)
    last: dict[str, dict] = {}
    for record in read_records(journal_files(tmp_path)):
        assert record["ts"] < truth.params["start_ms"] + SMALL["hours"] * 3_600_000
        if record["ts"] >= last.get(record["ns"], {"ts": 0})["ts"]:
            last[record["ns"]] = record
    assert all(r["type"] != "server_stopped" for r in last.values())
    end = min(r["ts"] for r in last.values())
    for row in truth.namesrv_divergence:
        assert row["end_ts"] <= end
