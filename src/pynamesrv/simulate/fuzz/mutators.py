"""The mutator registry and ``FrameForge``: frame ``i`` of seed ``s`` is always the same bytes.

Each mutator takes one real request and breaks one thing about it, the way a hostile or
buggy peer would: the framing (``framing``), the header's values and flags (``headers``) or
the body (``bodies``). A frame is a pure function of ``(seed, index)``, so a failure found
at frame 734,112 is reproduced by asking for that frame again (``pynamesrv fuzz --show``).
"""

from __future__ import annotations

import random
from typing import Final

from pynamesrv.simulate.fuzz import bodies, framing, headers
from pynamesrv.simulate.fuzz.corpus import Seed
from pynamesrv.simulate.fuzz.mutation import Context, Limits, Mutant, Mutator

__all__ = ["MUTATORS", "FrameForge", "Limits", "Mutant"]

MUTATORS: Final[dict[str, tuple[float, Mutator]]] = {
    "bit_flip": (10, framing.bit_flip),
    "byte_set": (5, framing.byte_set),
    "truncate": (4, framing.truncate),
    "truncate_inside": (4, framing.truncate_inside),
    "frame_length": (4, framing.frame_length),
    "header_length": (4, framing.header_length),
    "serialize_type": (3, framing.serialize_type),
    "type_confusion": (10, headers.type_confusion),
    "huge_number": (10, headers.huge_number),
    "deep_nesting": (5, headers.deep_nesting),
    "bad_utf8": (6, headers.bad_utf8),
    "rocketmq_lies": (6, headers.rocketmq_lies),
    "rocketmq_binary": (3, headers.rocketmq_binary),
    "duplicate_members": (2, headers.duplicate_members),
    "many_fields": (0.5, headers.many_fields),
    "oneway": (6, headers.oneway),
    "response_flag": (2, headers.response_flag),
    "random_code": (6, headers.random_code),
    "splice": (4, bodies.splice),
    "body_mutation": (8, bodies.body_mutation),
    "zlib_bomb": (0.1, bodies.zlib_bomb),
    "compressed_junk": (2, bodies.compressed_junk),
    "big_body": (0.1, bodies.big_body),
}


class FrameForge:
    """Makes frame ``index`` of the run seeded ``seed``; nothing else decides its bytes.

    A seed frame is picked by request code first (uniform over the codes of the corpus) so
    that the 169 BROKER_HEARTBEATs of one scenario do not drown its one DELETE_KV_CONFIG.
    """

    def __init__(
        self,
        seeds: list[Seed],
        seed: int,
        limits: Limits | None = None,
        mutators: list[str] | None = None,
    ) -> None:
        if not seeds:
            raise ValueError("no seed frames: is the corpus directory right?")
        names = list(MUTATORS) if mutators is None else mutators
        unknown = sorted(set(names) - set(MUTATORS))
        if unknown:
            raise ValueError(f"unknown mutators: {', '.join(unknown)}")
        self.seed = seed
        self.context = Context(seeds, limits or Limits())
        self._names = names
        self._weights = [MUTATORS[name][0] for name in names]
        by_code: dict[int, list[Seed]] = {}
        for s in seeds:
            by_code.setdefault(s.code, []).append(s)
        self._by_code = [by_code[code] for code in sorted(by_code)]

    def mutant(self, index: int) -> Mutant:
        rng = random.Random(self.seed * 1_000_000_007 + index)
        seed = rng.choice(rng.choice(self._by_code))
        name = rng.choices(self._names, self._weights)[0]
        out = MUTATORS[name][1](rng, seed, self.context)
        return Mutant(index, name, seed.label, out.data, out.silent_opaque)
