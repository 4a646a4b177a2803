"""What a ``route_queries`` line keeps of the names clients ask for is bounded."""

from __future__ import annotations

from collections import Counter

import orjson

from pynamesrv.namesrv.stats import (
    MAX_COUNTED_BYTES,
    MAX_MISSED_BYTES,
    MAX_MISSED_TOPICS,
    MAX_TOPIC_LENGTH,
    NamesrvStats,
    bounded_counts,
)


def counting() -> NamesrvStats:
    stats = NamesrvStats()
    stats.count_topics = True
    return stats


def test_over_long_miss_names_are_counted_under_one_bucket_and_never_kept() -> None:
    stats = counting()
    for i in range(2_000):  # the report: 2,000 misses of 200 KB names held ~400 MB
        stats.count_miss(f"{i}-" + "x" * 200_000)
    stats.count_miss("x" * MAX_TOPIC_LENGTH)  # RocketMQ's longest name is still a name
    assert stats.route_misses_too_long == 2_000
    assert list(stats.route_misses_by_topic) == ["x" * MAX_TOPIC_LENGTH]
    taken = stats.take_topic_counts()
    assert taken.misses_too_long == 2_000 and taken.misses == {"x" * MAX_TOPIC_LENGTH: 1}
    assert stats.route_query_misses == 2_001
    assert stats.take_topic_counts().misses_too_long == 0  # reset with the window


def test_the_misses_of_a_window_are_capped_in_bytes() -> None:
    stats = counting()
    name = "y" * MAX_TOPIC_LENGTH
    for i in range(MAX_MISSED_TOPICS):  # distinct names of the longest allowed length
        stats.count_miss(f"{i:05d}{name}"[:MAX_TOPIC_LENGTH])
        stats.count_miss(f"{i:05d}{name}"[:MAX_TOPIC_LENGTH])
    taken = stats.take_topic_counts()
    assert len(orjson.dumps(taken.misses)) <= MAX_MISSED_BYTES
    assert sum(taken.misses.values()) + taken.misses_other == 2 * MAX_MISSED_TOPICS
    assert taken.misses_other > 0  # the old counter kept all 10,000 (1.3 MB)


def test_control_characters_count_at_their_escaped_size() -> None:
    stats = counting()
    for i in range(MAX_MISSED_TOPICS):
        stats.count_miss(f"{i:05d}" + "\x01" * (MAX_TOPIC_LENGTH - 5))  # 6 bytes each in JSON
    taken = stats.take_topic_counts()
    assert len(orjson.dumps(taken.misses)) <= MAX_MISSED_BYTES
    assert len(taken.misses) + taken.misses_other == MAX_MISSED_TOPICS


def test_hit_counts_keep_the_most_queried_topics_within_the_cap() -> None:
    counts = Counter({f"t{i:06d}" + "z" * 100: i + 1 for i in range(1_000)})
    counts["w" * 500] = 10_000  # over-long: only a hand-made registration routes one
    kept, other = bounded_counts(counts, max_bytes=50_000)
    assert len(orjson.dumps(kept)) <= 50_000
    assert sum(kept.values()) + other == sum(counts.values())
    assert min(kept.values()) > max(n for t, n in counts.items() if t not in kept and len(t) < 127)
    assert "w" * 500 not in kept
    small = Counter({"a": 1, "b": 2})
    assert bounded_counts(small) == ({"a": 1, "b": 2}, 0)
    assert MAX_COUNTED_BYTES > 100_000 * 60  # 100,000 topics of 40-character names fit


def test_the_fast_paths_hits_are_bounded_with_the_others() -> None:
    stats = counting()
    stats.route_hits_by_topic["T"] += 2
    taken = stats.take_topic_counts(Counter({"T": 3, "v" * 300: 4}))
    assert taken.counts == {"T": 5} and taken.counts_other == 4
