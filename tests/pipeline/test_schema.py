"""The Spark schema reads the journal that ``namesrv.events`` and the registry define.

``namesrv.events`` is the one definition of the journal's event lines; the pipeline's Spark
schema spells out how to read them (nested shapes JSON cannot name). These tests make a field
added to an event, or a renamed one, fail here until the schema reads it or names it unread.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, Union

import pytest
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    LongType,
    MapType,
    StringType,
    StructType,
)

from pynamesrv.namesrv.events import Event, event_classes
from pynamesrv.namesrv.model import DataVersion, RegisterBrokerBody, TopicConfig
from pynamesrv.namesrv.routes import RouteInfoManager
from pynamesrv.pipeline.schema import (
    AS_TEXT,
    EVENT_TYPES,
    JOURNAL_SCHEMA,
    QUEUE_CONFIG,
    SNAPSHOT_BROKER,
    SNAPSHOT_QUEUE,
    UNREAD_FIELDS,
)

COLUMNS = {f.name: f.dataType for f in JOURNAL_SCHEMA.fields}
SCALARS: dict[type, type[DataType]] = {str: StringType, int: LongType, bool: BooleanType}


def reads(spark_type: DataType, hint: Any) -> bool:
    """Whether a column of ``spark_type`` parses a JSON value of the Python type ``hint``."""
    if hint is Any:
        return True
    args = typing.get_args(hint)
    if typing.get_origin(hint) in (Union, types.UnionType):
        return all(reads(spark_type, a) for a in args if a is not type(None))
    if hint in SCALARS:
        return isinstance(spark_type, SCALARS[hint])
    origin = typing.get_origin(hint)
    if origin is list:
        return isinstance(spark_type, ArrayType) and reads(spark_type.elementType, args[0])
    if origin in (dict, Mapping):  # a Mapping field is written as a JSON object too
        if isinstance(spark_type, StructType):  # a record: each read field has the value type
            return all(reads(f.dataType, args[1]) for f in spark_type.fields)
        return (
            isinstance(spark_type, MapType)
            and isinstance(spark_type.keyType, StringType)
            and reads(spark_type.valueType, args[1])
        )
    return False


@pytest.mark.parametrize("event_class", event_classes(), ids=lambda c: c.TYPE)
def test_every_event_field_is_read_with_its_type_or_named_unread(
    event_class: type[Event],
) -> None:
    hints = typing.get_type_hints(event_class)
    for name in (f.name for f in dataclasses.fields(event_class)):  # not its class variables
        if name in UNREAD_FIELDS:
            assert name not in COLUMNS, f"{name} is both read and named unread"
            continue
        assert name in COLUMNS, f"{event_class.TYPE}.{name}: not in JOURNAL_SCHEMA"
        if name in AS_TEXT:  # any JSON value reads as its text
            assert isinstance(COLUMNS[name], StringType), name
            continue
        assert reads(COLUMNS[name], hints[name]), f"{event_class.TYPE}.{name}: {COLUMNS[name]}"


def test_every_line_type_is_listed() -> None:
    assert {c.TYPE for c in event_classes()} <= set(EVENT_TYPES)
    assert len(EVENT_TYPES) == len(set(EVENT_TYPES))
    assert {"ts", "ns", "seq", "type"} <= set(COLUMNS)


def test_snapshot_and_queue_shapes_are_what_the_registry_writes() -> None:
    """The nested structs read fields the registry's snapshot and registration events hold
    (a rename there breaks this), and the snapshot's own keys are read or named unread."""
    routes = RouteInfoManager()
    body = RegisterBrokerBody(DataVersion(1, 1), [TopicConfig("T", 4, 4, 6)], [])
    result = routes.register_broker(
        cluster="C", broker_addr="10.0.0.1:10911", broker_name="b", broker_id=0,
        ha_server_addr=None, body_digest=1, load_body=lambda: body, channel="c", now_ms=5,
    )  # fmt: skip
    [registered] = [e.to_record() for e in result.events if e.TYPE == "broker_registered"]
    snapshot = routes.snapshot()
    assert set(snapshot) <= set(COLUMNS) | UNREAD_FIELDS
    for struct, entry in (
        (SNAPSHOT_BROKER, snapshot["brokers"][0]),
        (SNAPSHOT_QUEUE, snapshot["topics"]["T"][0]),
        (QUEUE_CONFIG, registered["topic_configs"]["T"]),
    ):
        for f in struct.fields:
            assert f.name in entry, f"{f.name} not in {sorted(entry)}"
            assert reads(f.dataType, type(entry[f.name])), f.name
