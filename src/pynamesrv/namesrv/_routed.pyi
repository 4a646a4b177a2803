# Types of the compiled per-topic decode loops (_routed.c); model.py documents them.
from typing import Any

def extend_routed_json(
    entries: list[Any], start: int, routed: list[tuple[str, int, int, int, int]], /
) -> int: ...
def extend_routed_buffer(
    buffer: bytearray,
    pos: int,
    limit: int,
    routed: list[tuple[str, int, int, int, int]],
    lines: list[str],
    /,
) -> int: ...
