"""The fuzzer's mutators: each makes what it claims, and frame i of seed s never changes.

Every mutator is run on many (seed frame, rng) pairs drawn from the golden corpora, and each
output is checked for the one property the mutator promises (a bit flip changes 1-8 bits
and nothing else; a lying length word lies; a bomb inflates past a mebibyte...). The wire
helpers the runner relies on to predict the server (``StreamModel``) are pinned too.
"""

from __future__ import annotations

import functools
import json
import os
import random
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest

from pynamesrv.simulate.fuzz import bombs
from pynamesrv.simulate.fuzz.corpus import Seed, load_seeds
from pynamesrv.simulate.fuzz.mutation import (
    BAD_ESCAPES,
    BAD_UTF8,
    HUGE_NUMBERS,
    INTERESTING_BYTES,
    NUMBER_LIKE_TEXTS,
    SILENT_OPAQUE_BASE,
    Context,
    Limits,
    Out,
)
from pynamesrv.simulate.fuzz.mutators import MUTATORS, FrameForge
from pynamesrv.simulate.fuzz.wire import (
    AnswerReader,
    BinaryLies,
    Fate,
    StreamModel,
    decode_rocketmq_header,
    frame,
    header_is_readable,
    rocketmq_header,
    split,
)

MIB = 1 << 20
RUNS = 150  # outputs checked per mutator
SMALL = Limits(max_frame_length=4 * MIB, bomb_max=4 * MIB, flood_max=2 * MIB, big_body_max=2 * MIB)


def shared_dir() -> Path:
    env = os.environ.get("PYNAMESRV_SHARED")
    return Path(env) if env else Path(__file__).resolve().parents[3] / "shared"


@functools.cache
def seeds() -> list[Seed]:
    found = load_seeds([shared_dir() / "golden", shared_dir() / "golden-5x"])
    assert found, f"no golden corpus under {shared_dir()} (set PYNAMESRV_SHARED)"
    return found


def outputs(name: str, limits: Limits = SMALL, runs: int = RUNS) -> list[tuple[Seed, Out]]:
    """``runs`` outputs of one mutator over seeds of every request code."""
    context = Context(seeds(), limits)
    by_code: dict[int, list[Seed]] = {}
    for seed in seeds():
        by_code.setdefault(seed.code, []).append(seed)
    groups = list(by_code.values())
    made = []
    for n in range(runs):
        rng = random.Random(n)
        seed = rng.choice(groups[n % len(groups)])
        made.append((seed, MUTATORS[name][1](rng, seed, context)))
    return made


def json_values(header: bytes) -> dict[str, Any]:
    """A JSON header with every number kept as its text (so 1e30 stays "1e30")."""
    return json.loads(header, parse_int=str, parse_float=str, parse_constant=str)


def leaves(header: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in header.items() if k != "extFields"}
    ext = header.get("extFields")
    if isinstance(ext, dict):
        out.update({f"extFields.{k}": v for k, v in ext.items()})
    else:
        out["extFields"] = ext
    return out


def max_depth(text: bytes) -> int:
    depth = deepest = 0
    for byte in text:
        if byte in b"[{":
            depth += 1
            deepest = max(deepest, depth)
        elif byte in b"]}":
            depth -= 1
    return deepest


def bits_differing(a: bytes, b: bytes) -> int:
    return sum(bin(x ^ y).count("1") for x, y in zip(a, b, strict=True))


# --------------------------------------------------------------------------- the forge


def test_corpus_has_seeds_of_both_serialize_types_and_many_codes() -> None:
    assert {s.serialize for s in seeds()} == {0, 1}
    assert len({s.code for s in seeds()}) >= 20
    assert all(split(s.raw).header == s.header_raw for s in seeds())


def test_same_seed_and_index_give_the_same_frame() -> None:
    first = FrameForge(seeds(), 42, SMALL)
    again = FrameForge(seeds(), 42, SMALL)
    for index in [*range(400), 734_112, 10**9]:
        assert first.mutant(index) == again.mutant(index)


def test_frames_do_not_depend_on_the_order_they_are_made_in() -> None:
    forge = FrameForge(seeds(), 7, SMALL)
    forward = [forge.mutant(i) for i in range(200)]
    backward = [forge.mutant(i) for i in reversed(range(200))]
    assert forward == backward[::-1]


def test_other_seeds_give_other_frames_and_every_mutator_is_used() -> None:
    a = [FrameForge(seeds(), 1, SMALL).mutant(i).data for i in range(300)]
    b = [FrameForge(seeds(), 2, SMALL).mutant(i).data for i in range(300)]
    assert sum(x != y for x, y in zip(a, b, strict=True)) > 250
    forge = FrameForge(seeds(), 3, SMALL)
    used = {forge.mutant(i).mutator for i in range(8_000)}
    assert used == set(MUTATORS)


def test_forge_can_be_limited_to_some_mutators_and_refuses_unknown_ones() -> None:
    forge = FrameForge(seeds(), 1, SMALL, ["oneway", "truncate"])
    assert {forge.mutant(i).mutator for i in range(200)} == {"oneway", "truncate"}
    with pytest.raises(ValueError, match="nosuch"):
        FrameForge(seeds(), 1, SMALL, ["nosuch"])


# --------------------------------------------------------------------------- framing


def test_bit_flip_changes_one_to_eight_bits_and_keeps_the_length() -> None:
    for seed, out in outputs("bit_flip"):
        assert len(out.data) == len(seed.raw)
        assert 1 <= bits_differing(out.data, seed.raw) <= 8


def test_byte_set_writes_parser_bytes_in_at_most_four_places() -> None:
    for seed, out in outputs("byte_set"):
        changed = [i for i, (x, y) in enumerate(zip(out.data, seed.raw, strict=True)) if x != y]
        assert len(changed) <= 4
        assert all(out.data[i] in INTERESTING_BYTES for i in changed)


def test_truncate_sends_a_proper_prefix_whose_length_word_promises_more() -> None:
    for seed, out in outputs("truncate"):
        assert 0 < len(out.data) < len(seed.raw)
        assert seed.raw.startswith(out.data)
        assert StreamModel(16 * MIB).feed(out.data) is Fate.WAITING


def test_truncate_inside_keeps_true_lengths_and_cuts_header_or_body() -> None:
    for seed, out in outputs("truncate_inside"):
        parts = split(out.data)  # raises if a length word lied
        cut_header = parts.header != seed.header_raw and seed.header_raw.startswith(parts.header)
        cut_body = parts.body != seed.body and seed.body.startswith(parts.body)
        assert cut_header or cut_body


def test_frame_length_lies_and_leaves_every_other_byte() -> None:
    for seed, out in outputs("frame_length"):
        assert out.data[4:] == seed.raw[4:]
        assert out.data[:4] != seed.raw[:4]


def test_header_length_lies_but_keeps_the_serialize_byte() -> None:
    for seed, out in outputs("header_length"):
        assert out.data[:5] == seed.raw[:5] and out.data[8:] == seed.raw[8:]
        assert out.data[5:8] != seed.raw[5:8]


def test_serialize_type_changes_only_the_serialize_byte() -> None:
    for seed, out in outputs("serialize_type"):
        assert out.data[:4] == seed.raw[:4] and out.data[5:] == seed.raw[5:]
        assert out.data[4] != seed.raw[4]


# --------------------------------------------------------------------------- header values


def test_type_confusion_gives_a_member_another_json_type() -> None:
    for seed, out in outputs("type_confusion"):
        parts = split(out.data)
        assert parts.serialize == 0
        before = leaves(seed.header)
        after = leaves(json.loads(parts.header))
        changed = [
            key for key in after if key not in before or type(after[key]) is not type(before[key])
        ]
        assert changed, f"{seed.label}: {after}"


def test_huge_number_puts_an_out_of_range_number_or_number_like_text_in_the_header() -> None:
    tokens = {*HUGE_NUMBERS, *NUMBER_LIKE_TEXTS, "NaN", "Infinity", "-Infinity", "0"}
    for _, out in outputs("huge_number"):
        values = leaves(json_values(split(out.data).header))
        assert any(isinstance(v, str) and v in tokens for v in values.values()), values


def test_deep_nesting_nests_at_least_64_deep_in_header_or_body() -> None:
    for _, out in outputs("deep_nesting"):
        parts = split(out.data)
        assert max(max_depth(parts.header), max_depth(parts.body)) >= 64


def test_bad_utf8_leaves_bytes_that_are_not_utf8_or_escaped_lone_surrogates() -> None:
    for _, out in outputs("bad_utf8"):
        parts = split(out.data)
        raw = parts.header + parts.body
        invalid = any(bad in raw for bad in BAD_UTF8)
        escaped = any(esc.encode() in parts.header for esc in BAD_ESCAPES)
        assert invalid or escaped


def test_rocketmq_lies_writes_a_binary_header_with_a_false_length() -> None:
    for _, out in outputs("rocketmq_lies"):
        parts = split(out.data)
        assert parts.serialize == 1
        try:
            decoded = decode_rocketmq_header(parts.header)
        except (ValueError, IndexError, struct.error, UnicodeDecodeError):
            continue  # the lie made it unreadable
        assert rocketmq_header(decoded) != parts.header


def test_rocketmq_header_writes_exactly_the_lies_it_is_given() -> None:
    header = {"code": 105, "opaque": 9, "remark": "r", "extFields": {"topic": "T"}}
    true = rocketmq_header(header)
    assert decode_rocketmq_header(true) == {
        "code": 105, "language": "JAVA", "version": 0, "opaque": 9, "flag": 0, "remark": "r",
        "extFields": {"topic": "T"},
    }  # fmt: skip
    assert header_is_readable(1, true)
    lying = rocketmq_header(header, lies=BinaryLies(remark_len=-1))
    assert struct.unpack_from(">i", lying, 13)[0] == -1 and not header_is_readable(1, lying)
    for lies in (BinaryLies(ext_len=1000), BinaryLies(key_len=-2), BinaryLies(value_len=99)):
        assert not header_is_readable(1, rocketmq_header(header, lies=lies))


def test_duplicate_members_repeats_a_member() -> None:
    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        keys = [k for k, _ in pairs]
        assert len(keys) == len(set(keys))
        return dict(pairs)

    for _, out in outputs("duplicate_members"):
        with pytest.raises(AssertionError):
            json.loads(split(out.data).header, object_pairs_hook=no_duplicates)


def test_many_fields_makes_a_header_of_at_least_64_kib_or_100_fields() -> None:
    for _, out in outputs("many_fields", runs=40):
        header = split(out.data).header
        assert len(header) >= 64 * 1024 or len(json.loads(header)["extFields"]) >= 100


# --------------------------------------------------------------------------- codes and flags


def decoded_header(data: bytes) -> dict[str, Any]:
    parts = split(data)
    if parts.serialize == 1:
        return decode_rocketmq_header(parts.header)
    return json.loads(parts.header)


def test_oneway_sets_the_oneway_bit_and_a_reserved_opaque_to_watch() -> None:
    for _, out in outputs("oneway"):
        header = decoded_header(out.data)
        assert header["flag"] & 2 and not header["flag"] & 1
        assert header["opaque"] == out.silent_opaque
        assert SILENT_OPAQUE_BASE <= out.silent_opaque < SILENT_OPAQUE_BASE + (1 << 24)


def test_response_flag_marks_the_request_a_response_with_a_watched_opaque() -> None:
    for _, out in outputs("response_flag"):
        header = decoded_header(out.data)
        assert header["flag"] & 1 and header["opaque"] == out.silent_opaque


def test_only_oneway_and_response_frames_are_watched_for_answers() -> None:
    forge = FrameForge(seeds(), 5, SMALL)
    for index in range(2000):
        mutant = forge.mutant(index)
        watched = mutant.mutator in ("oneway", "response_flag")
        assert (mutant.silent_opaque is not None) == watched


def test_random_code_changes_the_code_and_keeps_the_fields() -> None:
    changed = 0
    for seed, out in outputs("random_code"):
        header = decoded_header(out.data)
        changed += header["code"] != seed.code
        assert header.get("extFields") == seed.header.get("extFields")
    assert changed > RUNS * 0.9


# --------------------------------------------------------------------------- bodies


def test_splice_carries_another_requests_body() -> None:
    bodies = {s.body for s in seeds()}
    for _, out in outputs("splice"):
        assert split(out.data).body in bodies


def test_body_mutation_changes_the_body_and_mostly_keeps_the_crc_true() -> None:
    true_crc = with_crc_field = 0
    for seed, out in outputs("body_mutation"):
        parts = split(out.data)
        assert parts.body != seed.body
        crc = decoded_header(out.data).get("extFields", {}).get("bodyCrc32")
        if crc is not None:
            with_crc_field += 1
            true_crc += int(crc) == zlib.crc32(parts.body) & 0x7FFFFFFF
    assert true_crc >= with_crc_field * 0.7 > 0


def test_zlib_bomb_is_a_register_request_whose_body_inflates_a_thousand_fold() -> None:
    for _, out in outputs("zlib_bomb", runs=60):
        header = json.loads(split(out.data).header)
        body = split(out.data).body
        assert header["code"] == 103 and header["extFields"]["compressed"] == "true"
        assert int(header["extFields"]["bodyCrc32"]) == zlib.crc32(body) & 0x7FFFFFFF
        inflated = zlib.decompress(body)
        limit = SMALL.flood_max if bombs.FLOOD_LINE in inflated[:4096] else SMALL.bomb_max
        assert 1 * MIB * 0.99 <= len(inflated) <= limit
        assert len(inflated) >= 100 * len(body)


def test_bombs_inflate_to_the_size_asked_and_the_flood_is_a_valid_topic_table() -> None:
    assert zlib.decompress(bombs.zero_bomb(8 * MIB)) == b"\0" * (8 * MIB)
    flood = zlib.decompress(bombs.topic_flood(2 * MIB))
    assert 2 * MIB * 0.99 <= len(flood) <= 2 * MIB
    (version_len,) = struct.unpack_from(">i", flood, 0)
    count = struct.unpack_from(">i", flood, 4 + version_len)[0]
    line = struct.pack(">i", len(bombs.FLOOD_LINE)) + bombs.FLOOD_LINE
    assert flood.count(line) == count
    assert flood.endswith(struct.pack(">i", 2) + b"[]")


def test_compressed_junk_claims_compressed_on_a_register_request() -> None:
    for _, out in outputs("compressed_junk"):
        header = json.loads(split(out.data).header)
        assert header["code"] == 103 and "compressed" in header["extFields"]


def test_big_body_is_large_and_stays_inside_the_frame_limit() -> None:
    for _, out in outputs("big_body"):
        assert len(split(out.data).body) >= 64 * 1024
        assert len(out.data) <= SMALL.frame_room


# --------------------------------------------------------------------------- wire


@pytest.mark.parametrize(
    ("data", "fate"),
    [
        (frame(0, b'{"code":105}'), Fate.OPEN),
        (frame(0, b'{"code":105}') * 3, Fate.OPEN),
        (frame(0, b'{"code":105}')[:-2], Fate.WAITING),
        (frame(0, b'{"code":'), Fate.CLOSING),
        (frame(0, b"[1]"), Fate.CLOSING),
        (frame(2, b"{}"), Fate.CLOSING),
        (struct.pack(">i", 3) + b"abc", Fate.CLOSING),
        (struct.pack(">i", 16 * MIB - 3), Fate.CLOSING),
        (struct.pack(">i", 16 * MIB - 4), Fate.WAITING),
        (frame(1, rocketmq_header({"code": 105}))[:-1] + b"\0", Fate.OPEN),
    ],
)
def test_stream_model_predicts_what_a_java_like_server_does(data: bytes, fate: Fate) -> None:
    assert StreamModel(16 * MIB).feed(data) is fate


def test_stream_model_follows_a_frame_split_over_writes() -> None:
    whole = frame(0, b'{"code":105}', b"body")
    model = StreamModel(16 * MIB)
    assert model.feed(whole[:3]) is Fate.WAITING
    assert model.feed(whole[3:10]) is Fate.WAITING
    assert model.feed(whole[10:]) is Fate.OPEN


def test_answer_reader_reads_opaques_and_codes_of_both_header_types() -> None:
    json_answer = frame(0, b'{"code":17,"flag":1,"opaque":5}')
    binary_answer = frame(1, rocketmq_header({"code": 0, "flag": 1, "opaque": 6}))
    reader = AnswerReader()
    both = json_answer + binary_answer
    got = reader.feed(both[:7]) + reader.feed(both[7:])
    assert [(o, c) for o, c, _ in got] == [(5, 17), (6, 0)]
    assert reader.frames == 2 and reader.unreadable == 0


def test_seed_labels_are_unique_and_name_a_corpus_file() -> None:
    labels = [s.label for s in seeds()]
    assert len(labels) == len(set(labels))
    for label in labels:
        scenario, _, seq = label.partition("#")
        assert (shared_dir() / f"{scenario}.jsonl").is_file() and seq.isdigit()
