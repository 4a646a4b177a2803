"""RocketMQ's ACL request signature (AclClientRPCHook), shared by the server check and clients.

A signing client adds ``AccessKey`` (and ``SecurityToken`` when it has one) to the request's
extension fields, then ``Signature`` = base64(HmacSHA1(secretKey, content)), where content is
the UTF-8 of the *values* of every extension field but ``Signature``, concatenated in the
order of their keys (Java's TreeMap: UTF-16 code-unit order), followed by the body bytes.
mqadmin, the Java clients and rocketmq-client-cpp all sign this way, so one function both
signs our own requests and checks theirs. Keys are not part of the content: only values.

Kept in ``remoting`` because it is a property of a request frame, not of the name server:
the admin CLI and the broker client sign with it without importing the server.
"""

from __future__ import annotations

import base64
import hmac
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Final

from pynamesrv.remoting.acl_binding import BINDING, binding_value
from pynamesrv.remoting.command import RemotingCommand

ACCESS_KEY: Final = "AccessKey"
SIGNATURE: Final = "Signature"
SECURITY_TOKEN: Final = "SecurityToken"


@dataclass(frozen=True, slots=True)
class Credentials:
    """An account's keys, as mqadmin's conf/tools.yml holds them."""

    access_key: str
    secret_key: str
    security_token: str | None = None

    def __repr__(self) -> str:  # never print a secret by accident
        return f"Credentials(access_key={self.access_key!r}, secret_key=***)"


def _java_order(key: str) -> bytes:
    """Sort key equal to Java's String.compareTo (UTF-16 code units, not code points)."""
    return key.encode("utf-16-be", "surrogatepass")


def signed_content(
    ext_fields: Mapping[str, str] | None, body: bytes, *, leave_out: Iterable[str] = ()
) -> bytes:
    """The bytes a signature covers: field values in key order, then the body.

    ``leave_out`` names fields a verifier ignores besides ``Signature`` (fields some clients
    add after signing). Unpaired surrogates become ``?``, as Java's getBytes writes them.
    """
    text = "".join(value for _, value in ordered_fields(ext_fields, leave_out=leave_out))
    return text.encode("utf-8", "replace") + (body or b"")


def ordered_fields(
    ext_fields: Mapping[str, str] | None, *, leave_out: Iterable[str] = ()
) -> list[tuple[str, str]]:
    """The signed fields (all but ``Signature`` and ``leave_out``) in Java's key order."""
    skip = {SIGNATURE, *leave_out}
    fields = ext_fields or {}
    # Code-point order is Java's order unless a key holds characters beyond U+FFFF.
    keys = sorted(fields) if all(k.isascii() for k in fields) else sorted(fields, key=_java_order)
    return [(key, fields[key]) for key in keys if key not in skip]


def signature(content: bytes, secret_key: str) -> str:
    """base64(HmacSHA1(secret, content)), Java's AclSigner.calSignature."""
    digest = hmac.digest(secret_key.encode("utf-8"), content, "sha1")
    return base64.b64encode(digest).decode("ascii")


def signature_matches(expected: str, given: str) -> bool:
    """Compare in constant time, so timing tells an attacker nothing about the expected value."""
    return hmac.compare_digest(expected.encode("utf-8"), given.encode("utf-8", "replace"))


def sign(
    command: RemotingCommand, credentials: Credentials, *, bound_at_ms: int | None = None
) -> RemotingCommand:
    """Add AccessKey, SecurityToken (if any) and Signature to ``command``, in place, and
    return it. Signing again replaces the previous signature. ``bound_at_ms``: also add
    pynamesrv's request binding (``acl_binding``) stamped with that time, so the signature
    holds for this code, these fields and about this time only (Java servers ignore it)."""
    fields = dict(command.ext_fields or {})
    fields.pop(SIGNATURE, None)
    fields.pop(BINDING, None)
    fields[ACCESS_KEY] = credentials.access_key
    if credentials.security_token is not None:
        fields[SECURITY_TOKEN] = credentials.security_token
    if bound_at_ms is not None:
        ordered = ordered_fields(fields)
        fields[BINDING] = binding_value(command.code, bound_at_ms, ordered, command.body)
    fields[SIGNATURE] = signature(signed_content(fields, command.body), credentials.secret_key)
    command.ext_fields = fields
    return command
