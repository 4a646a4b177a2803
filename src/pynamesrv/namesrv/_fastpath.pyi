# Types of the compiled hot loop (_fastpath.c) for the type checker; fastpath.py documents it.
from typing import Any

def answer_read(
    data: bytes, shapes: dict[bytes, Any], generation: int, limit: int | None = None, /
) -> tuple[bytes, int] | None: ...
