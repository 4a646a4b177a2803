"""Seed frames read from corpus files: recorded traffic such as the golden corpora of Java
4.9.4 and 5.2.0 (``--corpus DIR``); ``builtin`` makes the seeds used without one.

Mutating real frames reaches deeper than random bytes: most mutants still look like a
broker registration or an mqadmin request in every byte but one, so they pass the framing
and reach the request processor. Only complete requests whose header reads are seeds (the
corpus' own broken frames are reproduced by the mutators anyway).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pynamesrv.simulate.fuzz.wire import (
    FLAG_RESPONSE,
    SERIALIZE_JSON,
    SERIALIZE_ROCKETMQ,
    decode_rocketmq_header,
    split,
)


@dataclass(frozen=True, slots=True)
class Seed:
    """One recorded request: its bytes, its parts and its header as a dict."""

    label: str  # "<corpus>/<scenario>#<seq>": where to find it again
    raw: bytes
    serialize: int
    header_raw: bytes
    body: bytes
    header: dict[str, Any]

    @property
    def code(self) -> int:
        return int(self.header.get("code") or 0)


def load_seeds(directories: Iterable[Path]) -> list[Seed]:
    """Every complete request with a readable header in the ``*.jsonl`` files (not the
    ``*.events.jsonl`` ones) of ``directories``, in file and line order."""
    seeds: list[Seed] = []
    for directory in directories:
        for path in sorted(directory.glob("*.jsonl")):
            if path.name.endswith(".events.jsonl"):
                continue
            with path.open(encoding="utf-8") as lines:
                for line in lines:
                    if line.strip():
                        seed = _seed(f"{directory.name}/{path.stem}", json.loads(line))
                        if seed is not None:
                            seeds.append(seed)
    return seeds


def _seed(scenario: str, record: dict[str, Any]) -> Seed | None:
    if record.get("dir") != "c2s" or record.get("incomplete") or record.get("malformed"):
        return None
    return seed_from_frame(f"{scenario}#{record['seq']}", base64.b64decode(record["frame_b64"]))


def seed_from_frame(label: str, raw: bytes) -> Seed | None:
    """A seed of one whole request frame; None when it is no request with a readable header."""
    try:
        parts = split(raw)
        if parts.serialize == SERIALIZE_JSON:
            header = json.loads(parts.header)
        elif parts.serialize == SERIALIZE_ROCKETMQ:
            header = decode_rocketmq_header(parts.header)
        else:
            return None
    except (ValueError, IndexError):
        return None
    if not isinstance(header, dict) or int(header.get("flag") or 0) & FLAG_RESPONSE:
        return None
    return Seed(
        label=label,
        raw=raw,
        serialize=parts.serialize,
        header_raw=parts.header,
        body=parts.body,
        header=header,
    )
