"""How counts are written for people: ``1 broker group``, ``2 broker groups``, ``0 topics``.

One rule for the log lines (``namesrv.eventlog``) and the status page (``http/static``'s
``count``, which ``tests/e2e/test_status_page.py`` holds to this one).
"""

from __future__ import annotations


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``n`` and ``noun``, plural unless ``n`` is 1 (``plural``, else ``noun`` + "s")."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
