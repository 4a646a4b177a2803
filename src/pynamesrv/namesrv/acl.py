"""Authenticated admin writes: the accounts file, address patterns and the access decision.

Java's NameServer checks nothing: anyone who reaches port 9876 may rewrite its config, KV
store and topic permissions (CVE-2023-33246 / CVE-2023-37582). Here, once ``aclFile`` names
an accounts file in RocketMQ's ``plain_acl.yml`` shape, every admin write must carry a valid
RocketMQ ACL signature (``pynamesrv.remoting.acl_sign``) from an ``admin: true`` account, so
mqadmin keeps working with the keys in its ``conf/tools.yml``. Broker registration and reads
can be made to need a valid account too (``aclRegistrationRequired``, ``aclReadRequired``).

Two deliberate differences from the broker's PlainAccessValidator, both stricter:
- ``whiteRemoteAddress`` *restricts* an account to the addresses it matches; in Java a match
  *skips* the signature check. An address is not a credential.
- ``globalWhiteRemoteAddresses`` (Java: anyone from there may do anything) is ignored with a
  warning.

Not one of Java's name-server parts (the NameServer has no ACL); the broker's
PlainPermissionManager is the counterpart. Pure apart from reading the one file: no
sockets; the clock is passed in.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, Final

import yaml

from pynamesrv.namesrv.addresses import AddressPattern, host_of
from pynamesrv.namesrv.config import NamesrvConfig
from pynamesrv.namesrv.signed_fields import undefined_field
from pynamesrv.remoting.acl_binding import BINDING, BindingError, describes, parse_binding
from pynamesrv.remoting.acl_sign import (
    ACCESS_KEY,
    SIGNATURE,
    Credentials,
    ordered_fields,
    signature,
    signature_matches,
    signed_content,
)
from pynamesrv.remoting.codes import RequestCode
from pynamesrv.remoting.command import RemotingCommand
from pynamesrv.remoting.logtext import shown

log = logging.getLogger(__name__)

# Every request that changes what the name server answers, other than a broker's own
# registration: these need an admin account whenever an accounts file is configured.
ADMIN_WRITE_CODES: Final = frozenset(
    {
        RequestCode.PUT_KV_CONFIG,
        RequestCode.DELETE_KV_CONFIG,
        RequestCode.UPDATE_NAMESRV_CONFIG,
        RequestCode.WIPE_WRITE_PERM_OF_BROKER,
        RequestCode.ADD_WRITE_PERM_OF_BROKER,
        RequestCode.DELETE_TOPIC_IN_NAMESRV,
        RequestCode.REGISTER_TOPIC_IN_NAMESRV,
    }
)
# What a broker sends about itself: checked only with aclRegistrationRequired.
REGISTRATION_CODES: Final = frozenset(
    {
        RequestCode.REGISTER_BROKER,
        RequestCode.UNREGISTER_BROKER,
        RequestCode.BROKER_HEARTBEAT,
        RequestCode.QUERY_DATA_VERSION,
    }
)
# 5.x clients in zone mode add these to route queries after signing (ZoneRouteRPCHook is
# not covered by the signature); a verifier may leave them out. They only filter a route.
UNSIGNED_ZONE_FIELDS: Final = ("__ZONE_NAME", "__ZONE_MODE")
DEFAULT_BINDING_WINDOW_S: Final = 300  # aclBindingWindowSeconds
MIN_KEY_LENGTH: Final = 7  # AclConstants: accessKey/secretKey "length should longer than 6"
MAX_FILE_BYTES: Final = 1024 * 1024
RELOAD_CHECK_S: Final = 1.0  # how often the file's metadata is looked at, at most


ANY_ADDRESS: Final = AddressPattern("", True)


class AclFileError(ValueError):
    """An accounts file, tools.yml or ACL setting that cannot be used (one-line message)."""


class AccessDenied(Exception):
    """A request the access check refuses; ``remark`` is the NO_PERMISSION answer's text."""

    def __init__(self, remark: str) -> None:
        super().__init__(remark)
        self.remark = remark


class Need(Enum):
    """What a request must prove: a valid signature of any account, or of an admin one."""

    ACCOUNT = "account"
    ADMIN = "admin"


# --------------------------------------------------------------------------- accounts


@dataclass(frozen=True, slots=True)
class Account:
    access_key: str
    secret_key: str
    admin: bool
    white_remote_address: AddressPattern
    # The broker names this account registers (None: not bound to any) and the broker
    # addresses it may register them at (any when blank): broker_identity.py.
    broker_names: frozenset[str] | None = None
    broker_addresses: AddressPattern = ANY_ADDRESS

    def may_act_as(self, broker_name: str) -> bool:
        """Whether this account is bound to ``broker_name``."""
        return self.broker_names is not None and broker_name in self.broker_names

    def __repr__(self) -> str:
        return f"Account({self.access_key!r}, admin={self.admin}, secret_key=***)"


@dataclass(frozen=True, slots=True)
class Accounts:
    """One loaded accounts file."""

    path: Path
    by_key: Mapping[str, Account]
    warnings: tuple[str, ...] = ()

    @property
    def admins(self) -> int:
        return sum(1 for a in self.by_key.values() if a.admin)

    def bound_to(self, broker_name: str) -> bool:
        """Whether some account is bound to ``broker_name`` (then only it may register it)."""
        return any(a.may_act_as(broker_name) for a in self.by_key.values())


def _read_yaml(path: Path, what: str) -> Any:
    try:
        with path.open("rb") as file:
            data = file.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise AclFileError(f"{what} {path}: cannot read: {exc.strerror or exc}") from exc
    if len(data) > MAX_FILE_BYTES:
        raise AclFileError(f"{what} {path}: larger than {MAX_FILE_BYTES} bytes")
    try:
        return yaml.safe_load(data)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise AclFileError(f"{what} {path}: not valid YAML{where}: {problem}") from exc
    except RecursionError as exc:
        raise AclFileError(f"{what} {path}: nested too deeply") from exc


def _key_text(value: Any, name: str, where: str) -> str:
    """A key as Java reads it: YAML may type ``12345678`` as a number, Java takes its text."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise AclFileError(f"{where}: {name} must be a string")
    text = str(value)
    if len(text) < MIN_KEY_LENGTH:
        raise AclFileError(f"{where}: {name} must be at least {MIN_KEY_LENGTH} characters")
    return text


def _admin_flag(value: Any, where: str) -> bool:
    if value is None or isinstance(value, bool):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise AclFileError(f"{where}: admin must be true or false")


def _broker_names(value: Any, where: str) -> frozenset[str] | None:
    """``brokerNames``: a YAML list or a comma-separated string; absent: not bound."""
    if value is None:
        return None
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list) or not all(isinstance(i, str) and i.strip() for i in items):
        raise AclFileError(f"{where}: brokerNames must be a list of broker names")
    return frozenset(i.strip() for i in items)


def load_accounts(path: Path) -> Accounts:
    """Read and validate an accounts file; AclFileError (one line) names the first problem."""
    document = _read_yaml(path, "acl file")
    if not isinstance(document, dict) or "accounts" not in document:
        raise AclFileError(f"acl file {path}: no 'accounts' list (plain_acl.yml shape expected)")
    entries = document["accounts"]
    if entries is None:
        entries = []
    if not isinstance(entries, list):
        raise AclFileError(f"acl file {path}: 'accounts' must be a list")
    warnings: list[str] = []
    by_key: dict[str, Account] = {}
    for index, entry in enumerate(entries):
        where = f"acl file {path}: accounts[{index}]"
        if not isinstance(entry, dict):
            raise AclFileError(f"{where}: must be a mapping with accessKey and secretKey")
        access_key = _key_text(entry.get("accessKey"), "accessKey", where)
        where = f"{where} ({shown(access_key)})"
        secret_key = _key_text(entry.get("secretKey"), "secretKey", where)
        white = entry.get("whiteRemoteAddress")
        if white is not None and not isinstance(white, str):
            raise AclFileError(f"{where}: whiteRemoteAddress must be a string")
        try:
            pattern = AddressPattern.parse(white)
        except ValueError as exc:
            raise AclFileError(f"{where}: whiteRemoteAddress: {exc}") from exc
        if access_key in by_key:
            raise AclFileError(f"{where}: accessKey is defined twice")
        addresses = entry.get("brokerAddresses")
        if addresses is not None and not isinstance(addresses, str):
            raise AclFileError(f"{where}: brokerAddresses must be a string")
        try:
            broker_addresses = AddressPattern.parse(addresses)
        except ValueError as exc:
            raise AclFileError(f"{where}: brokerAddresses: {exc}") from exc
        by_key[access_key] = Account(
            access_key,
            secret_key,
            _admin_flag(entry.get("admin"), where),
            pattern,
            _broker_names(entry.get("brokerNames"), where),
            broker_addresses,
        )
    if document.get("globalWhiteRemoteAddresses"):
        warnings.append(
            f"acl file {path}: globalWhiteRemoteAddresses is ignored (every caller must sign)"
        )
    if not by_key:
        warnings.append(f"acl file {path}: no accounts, so every admin write is refused")
    with contextlib.suppress(OSError):
        if path.stat().st_mode & stat.S_IROTH:
            warnings.append(f"acl file {path}: readable by every user; chmod o-r it")
    return Accounts(path, by_key, tuple(warnings))


def load_tools_yml(path: Path) -> Credentials:
    """mqadmin's conf/tools.yml (``accessKey``, ``secretKey``) as signing credentials."""
    document = _read_yaml(path, "tools file")
    if not isinstance(document, dict):
        raise AclFileError(f"tools file {path}: expected accessKey and secretKey")
    where = f"tools file {path}"
    access_key, secret_key = document.get("accessKey"), document.get("secretKey")
    for name, value in (("accessKey", access_key), ("secretKey", secret_key)):
        if isinstance(value, bool) or not isinstance(value, str | int) or str(value) == "":
            raise AclFileError(f"{where}: {name} is missing or not a string")
    token = document.get("securityToken")
    return Credentials(str(access_key), str(secret_key), None if token is None else str(token))


# --------------------------------------------------------------------------- the decision


class AccessControl:
    """The live access rules: the accounts file (reloaded when it changes) and which
    requests need what. One instance per name server, used by the request processor."""

    def __init__(
        self,
        path: Path,
        *,
        registration_required: bool = False,
        read_required: bool = False,
        binding_required: bool = False,
        binding_window_s: int = DEFAULT_BINDING_WINDOW_S,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        """``binding_required``: admin writes must carry pynamesrv's request binding;
        ``binding_window_s``: how far a binding's time may be from ``wall_clock``."""
        self.path = path
        self.registration_required = registration_required
        self.read_required = read_required
        self.binding_required = binding_required
        self.binding_window_s = binding_window_s
        self.clock = clock
        self.wall_clock = wall_clock
        self._accounts = load_accounts(path)
        for warning in self._accounts.warnings:
            log.warning("%s", warning)
        self._stamp = self._file_stamp()
        self._failed_stamp: tuple[int, int, int] | None = None
        self._checked_at = clock()

    @classmethod
    def from_config(
        cls, config: NamesrvConfig, clock: Callable[[], float] = time.monotonic
    ) -> AccessControl | None:
        """None when no accounts file is configured (admin writes open, Java's default)."""
        path = config.acl_file.strip()
        if not path:
            if (
                config.acl_registration_required
                or config.acl_read_required
                or config.acl_admin_binding_required
            ):
                raise AclFileError(
                    "aclRegistrationRequired, aclReadRequired and aclAdminBindingRequired "
                    "need aclFile (the accounts that may sign)"
                )
            return None
        return cls(
            Path(path),
            registration_required=config.acl_registration_required,
            read_required=config.acl_read_required,
            binding_required=config.acl_admin_binding_required,
            binding_window_s=config.acl_binding_window_seconds,
            clock=clock,
        )

    # ------------------------------------------------------------------ accounts file

    def _file_stamp(self) -> tuple[int, int, int] | None:
        try:
            info = os.stat(self.path)
        except OSError:
            return None
        return info.st_mtime_ns, info.st_size, info.st_ino

    @property
    def accounts(self) -> Accounts:
        """The accounts, reloaded first if the file changed (looked at once a second)."""
        now = self.clock()
        if now - self._checked_at >= RELOAD_CHECK_S:
            self._checked_at = now
            self.reload_if_changed()
        return self._accounts

    def reload_if_changed(self) -> bool:
        """Load the file again if its metadata changed; a bad file keeps the last good
        accounts (one error line per bad version). True when new accounts took effect."""
        stamp = self._file_stamp()
        if stamp == self._stamp or (stamp is not None and stamp == self._failed_stamp):
            return False
        if stamp is None:  # reported once: the next look finds None == None
            self._stamp = None
            log.error("acl file %s is gone; keeping the accounts loaded before", self.path)
            return False
        try:
            accounts = load_accounts(self.path)
        except AclFileError as exc:
            self._failed_stamp = stamp
            log.error("%s; keeping the accounts loaded before", exc)
            return False
        self._accounts, self._stamp, self._failed_stamp = accounts, stamp, None
        for warning in accounts.warnings:
            log.warning("%s", warning)
        log.info(
            "acl file %s reloaded: %d accounts, %d admin",
            self.path,
            len(accounts.by_key),
            accounts.admins,
        )
        return True

    # ------------------------------------------------------------------ checks

    def need_for(self, code: int) -> Need | None:
        """What a request with ``code`` must prove, or None when it is open."""
        if code in ADMIN_WRITE_CODES:
            return Need.ADMIN
        if code in REGISTRATION_CODES:
            return Need.ACCOUNT if self.registration_required else None
        return Need.ACCOUNT if self.read_required else None

    def check(self, request: RemotingCommand, caller: str) -> str | None:
        """The verified access key, or None when ``request`` needs no account; AccessDenied
        when it needs one and does not prove it. ``caller`` is the peer's ``ip:port``."""
        need = self.need_for(request.code)
        return None if need is None else self.verify(request, caller, need)

    def verify(self, request: RemotingCommand, caller: str, need: Need) -> str:
        """Check the signature, the account and its address, the fields and the binding;
        return the access key."""
        return self.verified_account(request, caller, need).access_key

    def verified_account(self, request: RemotingCommand, caller: str, need: Need) -> Account:
        """``verify``, returning the whole account (broker_identity reads its bindings)."""
        fields = request.ext_fields or {}
        access_key = fields.get(ACCESS_KEY)
        if not access_key:
            who = "an admin account" if need is Need.ADMIN else "an account"
            raise AccessDenied(
                f"No accessKey is configured: request code={request.code} must be signed by "
                f"{who} (AccessKey and Signature)"
            )
        account = self.accounts.by_key.get(access_key)
        if account is None:
            raise AccessDenied(f"No acl config for {shown(access_key)}")
        host = host_of(caller)
        if not account.white_remote_address.matches(host):
            raise AccessDenied(
                f"Remote address {shown(host)} is not in the whiteRemoteAddress of "
                f"accessKey={shown(access_key)}"
            )
        given = fields.get(SIGNATURE)
        left_out = None if given is None else _verified(request, fields, account.secret_key, given)
        if left_out is None:
            raise AccessDenied(f"Check signature failed for accessKey={shown(access_key)}")
        if need is Need.ADMIN and not account.admin:
            raise AccessDenied(
                f"Need admin permission for request code={request.code}, but "
                f"accessKey={shown(access_key)} is not"
            )
        strict = request.code in ADMIN_WRITE_CODES
        extra = undefined_field(request.code, fields, request.body, strict=strict)
        if extra is not None:
            raise AccessDenied(
                f"Signed request code={request.code} carries {shown(extra)}, which that code "
                "does not define (a signature is not moved to another request)"
            )
        self._check_binding(request, ordered_fields(fields, leave_out=left_out), need)
        return account

    def _check_binding(
        self, request: RemotingCommand, ordered: list[tuple[str, str]], need: Need
    ) -> None:
        """pynamesrv's request binding (remoting.acl_binding): verified whenever present,
        required on admin writes with aclAdminBindingRequired."""
        if not ordered or ordered[0][0] != BINDING:
            if any(name == BINDING for name, _ in ordered):
                raise AccessDenied(f"{BINDING} is not the first signed field")
            if self.binding_required and need is Need.ADMIN:
                raise AccessDenied(
                    f"Request code={request.code} must carry {BINDING} (aclAdminBindingRequired:"
                    " sign with pynamesrv admin)"
                )
            return
        try:
            binding = parse_binding(ordered[0][1])
        except BindingError as exc:
            raise AccessDenied(f"{BINDING} is malformed: {exc}") from exc
        if binding.code != request.code:
            raise AccessDenied(
                f"{BINDING} was signed for request code={binding.code}, sent as code={request.code}"
            )
        skew_s = abs(self.wall_clock() - binding.at_ms / 1000)
        if skew_s > self.binding_window_s:
            raise AccessDenied(
                f"{BINDING} was signed {skew_s:.0f} s away from this server's clock "
                f"(aclBindingWindowSeconds={self.binding_window_s})"
            )
        if not describes(binding, dict(ordered[1:]), request.body):
            raise AccessDenied(f"{BINDING} does not describe the fields and body sent")

    def status(self) -> dict[str, Any]:
        """What the status page and /api/status show (no secrets, no account names)."""
        accounts = self._accounts
        return {
            "adminWrites": "authenticated",
            "aclFile": str(self.path),
            "accounts": len(accounts.by_key),
            "admins": accounts.admins,
            "registrationAuth": self.registration_required,
            "readAuth": self.read_required,
            "adminBinding": self.binding_required,
        }


def _verified(
    request: RemotingCommand, fields: Mapping[str, str], secret_key: str, given: str
) -> tuple[str, ...] | None:
    """The fields the valid signature left out (none, or the zone fields), None if invalid."""
    expected = signature(signed_content(fields, request.body), secret_key)
    if signature_matches(expected, given):
        return ()
    if not any(name in fields for name in UNSIGNED_ZONE_FIELDS):
        return None
    content = signed_content(fields, request.body, leave_out=UNSIGNED_ZONE_FIELDS)
    return (
        UNSIGNED_ZONE_FIELDS if signature_matches(signature(content, secret_key), given) else None
    )


def open_status() -> dict[str, Any]:
    """The status of a server without an accounts file: admin writes open to anyone."""
    return {
        "adminWrites": "open",
        "aclFile": None,
        "accounts": 0,
        "admins": 0,
        "registrationAuth": False,
        "readAuth": False,
        "adminBinding": False,
    }
