"""pynamesrv's request binding: an extra signed field that ties an ACL 1.0 signature to one
request code, one moment and one exact split of the fields.

RocketMQ's signature covers the concatenated *values* of the extension fields and the body,
nothing else: not the request code, not the field names, not the time. A signed WIPE (205)
is then a valid ADD (327), and ``key=ab,namespace=N`` signs the same bytes as
``key=a,namespace=bN``. pynamesrv's admin CLI therefore adds ``ARequestBinding`` before it
signs; Java servers ignore an extension field their header does not define, and a verifier
that knows it checks that the value names the request code, a recent time, and every other
signed field's name and UTF-8 length, and the body's length.

Why that is enough: the key sorts before every other field (``A`` then an upper-case letter
sorts before ``AccessKey``), so the signed content starts with the binding; the value ends
in the only ``.`` it holds, so no other prefix of the content is a binding too. A verifier
that finds the binding first therefore reads the same one the signer wrote, and the names
and lengths it lists fix every field's value and the body.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

BINDING: Final = "ARequestBinding"
_VERSION: Final = "1"
_NAME: Final = re.compile(r"[A-Za-z0-9_]{1,64}", re.ASCII)
_VALUE: Final = re.compile(
    r"1;(?P<code>[0-9]{1,9});(?P<at>[0-9]{1,15});"
    r"(?P<fields>(?:[A-Za-z0-9_]{1,64}:[0-9]{1,10})(?:,[A-Za-z0-9_]{1,64}:[0-9]{1,10}){0,63})?;"
    r"(?P<body>[0-9]{1,10})\.",
    re.ASCII,
)


class BindingError(ValueError):
    """A binding value that does not parse (the message says which part)."""


@dataclass(frozen=True, slots=True)
class Binding:
    """What a binding value says: the request code, when (Unix ms), fields and body."""

    code: int
    at_ms: int
    fields: tuple[tuple[str, int], ...]  # (name, UTF-8 length), in the signed key order
    body_length: int


def _length(value: str) -> int:
    """The byte length of a value as ``acl_sign.signed_content`` encodes it."""
    return len(value.encode("utf-8", "replace"))


def binding_value(code: int, at_ms: int, ordered: list[tuple[str, str]], body: bytes | None) -> str:
    """The binding of a request whose other signed fields are ``ordered`` (key order)."""
    for name, _ in ordered:
        if not _NAME.fullmatch(name):
            raise BindingError(f"field name {name!r} cannot be bound")
    listed = ",".join(f"{name}:{_length(value)}" for name, value in ordered)
    return f"{_VERSION};{code};{at_ms};{listed};{len(body or b'')}."


def parse_binding(value: str) -> Binding:
    """Read a binding value; BindingError when it is not one."""
    match = _VALUE.fullmatch(value)
    if match is None:
        raise BindingError("not a version 1 binding")
    listed = match["fields"]
    fields: tuple[tuple[str, int], ...] = ()
    if listed:
        fields = tuple(
            (name, int(length)) for name, length in (item.split(":") for item in listed.split(","))
        )
    return Binding(int(match["code"]), int(match["at"]), fields, int(match["body"]))


def describes(binding: Binding, ordered: Mapping[str, str], body: bytes | None) -> bool:
    """Whether ``binding`` lists exactly these fields (in this order) and this body."""
    actual = tuple((name, _length(value)) for name, value in ordered.items())
    return actual == binding.fields and len(body or b"") == binding.body_length
