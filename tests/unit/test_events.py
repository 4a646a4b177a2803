"""Journal payloads carry exactly the event's fields: the journal schema is a contract."""

from dataclasses import fields

import pytest

from pynamesrv.namesrv import events
from pynamesrv.namesrv.events import BrokerHeartbeat


def test_record_has_type_and_fields_only():
    record = BrokerHeartbeat(
        "c", "b", 0, "127.0.0.1:10911", {"counter": 3, "timestamp": 9}
    ).to_record()
    assert record == {
        "type": "broker_heartbeat",
        "cluster": "c",
        "broker_name": "b",
        "broker_id": 0,
        "broker_addr": "127.0.0.1:10911",
        "data_version": {"counter": 3, "timestamp": 9},
    }


EVENT_TYPES = events.event_classes()


@pytest.mark.parametrize("event_type", EVENT_TYPES, ids=lambda t: t.__name__)
def test_no_class_variable_leaks_into_any_record(event_type):
    names = [f.name for f in fields(event_type)]
    event = event_type(**dict.fromkeys(names, 1))  # every field set: none is left out
    assert set(event.to_record()) == {"type", *names}
    assert event.to_record()["type"] == event_type.TYPE


def test_route_queries_leaves_out_misses_other_when_none_missed_beyond_the_list():
    record = events.RouteQueries(60_000, {"T": 1}, {}).to_record()
    assert "misses_other" not in record
    assert events.RouteQueries(60_000, {}, {}, misses_other=3).to_record()["misses_other"] == 3
