"""The built-in fuzz seeds: every request code the server answers, in frames its codec reads.

They stand in for the golden corpora wherever those are not (a fresh clone, an install), so
they must reach every handler and be requests the server takes as they are: a seed the server
refused unmutated would spend the run on the framing.
"""

from __future__ import annotations

from pynamesrv.remoting.codec import decode_frame_payload
from pynamesrv.remoting.codes import RequestCode
from pynamesrv.remoting.command import SerializeType
from pynamesrv.simulate.fuzz import MUTATORS, FrameForge
from pynamesrv.simulate.fuzz.builtin import builtin_seeds
from pynamesrv.simulate.fuzz.mutation import Limits

# Codes no client sends to a name server: the server sends 905 to brokers; 47 is a broker's.
NOT_REQUESTS = {RequestCode.GET_CLIENT_CONFIG, RequestCode.NOTIFY_MIN_BROKER_ID_CHANGE}
MIB = 1 << 20


def test_every_request_code_is_seeded_in_both_header_encodings_where_java_uses_them() -> None:
    seeds = builtin_seeds()
    assert {s.code for s in seeds} == {int(c) for c in RequestCode} - NOT_REQUESTS
    binary = {s.code for s in seeds if s.serialize == SerializeType.ROCKETMQ}
    assert {RequestCode.REGISTER_BROKER, RequestCode.GET_ROUTEINFO_BY_TOPIC} <= binary
    registrations = [s for s in seeds if s.code == RequestCode.REGISTER_BROKER]
    assert {s.header["extFields"]["compressed"] for s in registrations} == {"true", "false"}
    assert len({s.label for s in seeds}) == len(seeds)
    assert all(s.label.startswith("builtin/") for s in seeds)


def test_the_server_codec_reads_each_seed_as_the_request_it_is() -> None:
    for seed in builtin_seeds():
        command = decode_frame_payload(seed.raw[4:])
        assert (command.code, command.serialize_type) == (seed.code, seed.serialize), seed.label
        assert command.body == seed.body, seed.label
        assert not command.is_response and not command.is_oneway, seed.label
        fields = seed.header.get("extFields") or {}
        if seed.serialize == SerializeType.ROCKETMQ:  # its reader drops empty values
            fields = {k: v for k, v in fields.items() if v}
        assert (command.ext_fields or {}) == fields, seed.label


def test_the_seeds_are_the_same_bytes_every_time() -> None:
    assert [s.raw for s in builtin_seeds()] == [s.raw for s in builtin_seeds()]


def test_every_mutator_works_on_the_builtin_seeds() -> None:
    small = Limits(max_frame_length=4 * MIB, bomb_max=4 * MIB, flood_max=2 * MIB,
                   big_body_max=2 * MIB)  # fmt: skip
    forge = FrameForge(builtin_seeds(), 11, small)
    used = {forge.mutant(index).mutator for index in range(3000)}
    rare = {"zlib_bomb", "big_body", "many_fields"}  # weights 0.1 / 0.1 / 0.5 of 100
    assert set(MUTATORS) - rare <= used
    for name in sorted(rare):
        only = FrameForge(builtin_seeds(), 11, small, [name])
        assert all(only.mutant(index).data for index in range(20)), name
