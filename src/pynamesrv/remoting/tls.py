"""TLS on the remoting port, RocketMQ's way: settings and reloadable contexts.

Java's NameServer serves TLS and plain text on one port: it peeks at the first byte a
connection sends and, when it is 0x16 (a TLS handshake record), puts a TLS handler in front
of the codec (``tls.server.mode``: disabled / permissive / enforcing; protocol.md §11). By
the time we know a connection speaks TLS its first bytes are already read from the
transport, so ``loop.start_tls`` cannot take over. Instead ``TlsSession`` (``tls_session``,
re-exported here) is the record layer alone, sans-IO over ``ssl.MemoryBIO``.

``TlsSettings`` reads the ``tls.*`` keys Java reads (from the ``-c`` properties file here,
from JVM system properties in Java) plus the file named by ``tls.config.file``.
``TlsContextHolder`` builds the ``SSLContext`` and rebuilds it when the certificate, key or
trust files change, keeping the previous one while the new files do not load.
"""

from __future__ import annotations

import io
import logging
import os
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Final, TypeVar

import javaproperties

from pynamesrv.remoting.tls_session import TlsError as TlsError
from pynamesrv.remoting.tls_session import TlsSession as TlsSession
from pynamesrv.remoting.tls_session import ssl_reason

log = logging.getLogger(__name__)

HANDSHAKE_RECORD: Final = 0x16  # the first byte of every TLS connection (a handshake record)


class TlsMode(StrEnum):
    """``tls.server.mode``: what the port does with TLS and plain-text connections."""

    DISABLED = "disabled"  # plain text only; a TLS hello is closed
    PERMISSIVE = "permissive"  # both, told apart by the first byte
    ENFORCING = "enforcing"  # TLS only; plain text is closed


class ClientAuth(StrEnum):
    """``tls.server.need.client.auth``: whether a client must show a certificate."""

    NONE = "none"
    OPTIONAL = "optional"  # verified against the trust file when shown
    REQUIRE = "require"  # no verified certificate, no connection


# --------------------------------------------------------------------------- settings

# Key names are Java's (TlsSystemConfig). Each may also be in the file tls.config.file names,
# whose values win, as in Java; Java ignores tls.server.mode there, we honour it (an operator
# who writes "enforcing" there means it).
KEY_MODE: Final = "tls.server.mode"
KEY_CONFIG_FILE: Final = "tls.config.file"
KEY_TEST_MODE: Final = "tls.test.mode.enable"
KEY_CLIENT_AUTH: Final = "tls.server.need.client.auth"
KEY_KEY_PATH: Final = "tls.server.keyPath"
KEY_KEY_PASSWORD: Final = "tls.server.keyPassword"
KEY_CERT_PATH: Final = "tls.server.certPath"
KEY_AUTH_CLIENT: Final = "tls.server.authClient"
KEY_TRUST_CERT_PATH: Final = "tls.server.trustCertPath"

SERVER_KEYS: Final = frozenset(
    {
        KEY_MODE,
        KEY_CLIENT_AUTH,
        KEY_KEY_PATH,
        KEY_KEY_PASSWORD,
        KEY_CERT_PATH,
        KEY_AUTH_CLIENT,
        KEY_TRUST_CERT_PATH,
    }
)
SECRET_KEYS: Final = frozenset({KEY_KEY_PASSWORD})


_E = TypeVar("_E", bound=StrEnum)


def _choice(key: str, text: str, enum: type[_E]) -> _E:
    try:
        return enum(text.strip().lower())
    except ValueError:
        allowed = " / ".join(member.value for member in enum)
        raise ValueError(f"{key}={text!r} is not one of {allowed}") from None


def _boolean(key: str, text: str) -> bool:
    value = text.strip().lower()
    if value not in ("true", "false"):
        raise ValueError(f"{key}={text!r} is not true or false")
    return value == "true"


def _read_config_file(path: str) -> dict[str, str]:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ValueError(f"{KEY_CONFIG_FILE}={path}: cannot read: {exc.strerror or exc}") from exc
    try:
        return dict(javaproperties.load(io.StringIO(data.decode("iso-8859-1"))))
    except Exception as exc:  # javaproperties raises several types on bad escapes
        raise ValueError(f"{KEY_CONFIG_FILE}={path}: not a properties file: {exc}") from exc


@dataclass(frozen=True, slots=True)
class TlsSettings:
    """The server side's TLS settings; the defaults serve plain text and refuse TLS hellos.

    Java's defaults differ on purpose: Java answers a TLS hello with a freshly generated
    self-signed certificate (``tls.test.mode.enable=true``), which encrypts but proves
    nothing. Here TLS is served once a certificate is configured (or test mode is asked for
    explicitly), and client certificates, when asked for, are always verified against
    ``trust_cert_path`` (Java skips that unless ``tls.server.authClient=true``).
    """

    mode: TlsMode = TlsMode.PERMISSIVE
    cert_path: str = ""
    key_path: str = ""  # "" = the key is in the certificate file
    key_password: str = field(default="", repr=False)
    need_client_auth: ClientAuth = ClientAuth.NONE
    trust_cert_path: str = ""
    test_mode: bool = False
    config_file: str = ""
    # The key names errors use: (certificate, key, trust file).
    labels: tuple[str, str, str] = field(
        default=(KEY_CERT_PATH, KEY_KEY_PATH, KEY_TRUST_CERT_PATH), repr=False, compare=False
    )

    @classmethod
    def for_https(cls, cert_path: str, key_path: str = "", key_password: str = "") -> TlsSettings:
        """TLS only, for the HTTP port (its keys are httpTlsCertPath and friends)."""
        settings = cls(
            mode=TlsMode.ENFORCING,
            cert_path=cert_path,
            key_path=key_path,
            key_password=key_password,
            labels=("httpTlsCertPath", "httpTlsKeyPath", "-"),
        )
        settings.validate()
        return settings

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> TlsSettings:
        """The ``tls.*`` keys of a properties mapping, then those of ``tls.config.file``.

        Raises ``ValueError`` with one line naming the key, the value and what is allowed.
        Keys outside ``tls.*`` are not looked at; an unknown ``tls.server.*`` key is an error
        (a misspelt certificate key would otherwise leave TLS silently unconfigured).
        """
        merged = {k: v for k, v in props.items() if k.startswith("tls.")}
        config_file = merged.get(KEY_CONFIG_FILE, "").strip()
        if config_file:
            for key, value in _read_config_file(config_file).items():
                if key.startswith("tls.") and key != KEY_CONFIG_FILE:
                    merged[key] = value
        for key in sorted(merged):
            if key.startswith("tls.server.") and key not in SERVER_KEYS:
                allowed = ", ".join(sorted(SERVER_KEYS))
                raise ValueError(f"{key} is not a TLS setting (known: {allowed})")
        settings = cls(
            mode=_choice(KEY_MODE, merged.get(KEY_MODE, TlsMode.PERMISSIVE), TlsMode),
            cert_path=merged.get(KEY_CERT_PATH, "").strip(),
            key_path=merged.get(KEY_KEY_PATH, "").strip(),
            key_password=merged.get(KEY_KEY_PASSWORD, ""),
            need_client_auth=_choice(
                KEY_CLIENT_AUTH, merged.get(KEY_CLIENT_AUTH, ClientAuth.NONE), ClientAuth
            ),
            trust_cert_path=merged.get(KEY_TRUST_CERT_PATH, "").strip(),
            test_mode=_boolean(KEY_TEST_MODE, merged.get(KEY_TEST_MODE, "false")),
            config_file=config_file,
        )
        _boolean(KEY_AUTH_CLIENT, merged.get(KEY_AUTH_CLIENT, "false"))  # accepted, see above
        settings.validate()
        return settings

    def validate(self) -> None:
        """Refuse combinations that cannot work, before any file is read."""
        cert_key, key_key, _ = self.labels
        if self.key_path and not self.cert_path:
            raise ValueError(f"{key_key}={self.key_path} needs {cert_key} too")
        if self.mode is TlsMode.ENFORCING and not self.serves_tls:
            raise ValueError(
                f"{KEY_MODE}=enforcing needs {cert_key} (and {key_key}): "
                "without a certificate no client could connect"
            )
        if self.need_client_auth is not ClientAuth.NONE and not self.trust_cert_path:
            raise ValueError(
                f"{KEY_CLIENT_AUTH}={self.need_client_auth.value} needs "
                f"{KEY_TRUST_CERT_PATH} (the CA certificates client certificates are checked "
                "against)"
            )

    @property
    def serves_tls(self) -> bool:
        """Whether a TLS hello gets a handshake (else it is closed)."""
        return self.mode is not TlsMode.DISABLED and bool(self.cert_path or self.test_mode)

    @property
    def watched_files(self) -> tuple[str, ...]:
        """The files whose change means a new context."""
        return tuple(p for p in (self.cert_path, self.key_path, self.trust_cert_path) if p)

    def describe(self) -> str:
        """One line for the start-up log."""
        if self.mode is TlsMode.DISABLED:
            return "TLS disabled: plain text only"
        if not self.serves_tls:
            return (
                f"TLS {self.mode.value} without a certificate: plain text only, TLS clients are "
                f"refused (set {KEY_CERT_PATH} and {KEY_KEY_PATH})"
            )
        cert = "a self-signed test certificate" if not self.cert_path else self.cert_path
        return (
            f"TLS {self.mode.value}: certificate {cert}, client certificates "
            f"{self.need_client_auth.value}"
        )

    # ----------------------------------------------------------------- contexts

    def server_context(self) -> ssl.SSLContext:
        """A new server context from the files (read now); ``ValueError`` if they do not load."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        cert_key, key_key, trust_key = self.labels
        if self.cert_path:
            try:
                context.load_cert_chain(
                    self.cert_path, self.key_path or None, self.key_password or None
                )
            except (OSError, ssl.SSLError) as exc:
                where = f"{cert_key}={self.cert_path}"
                if self.key_path:
                    where += f", {key_key}={self.key_path}"
                raise ValueError(f"{where}: cannot load: {ssl_reason(exc)}") from exc
        elif self.test_mode:
            _load_self_signed(context)
        else:
            raise ValueError(f"no certificate: set {cert_key}")
        if self.need_client_auth is not ClientAuth.NONE:
            try:
                context.load_verify_locations(cafile=self.trust_cert_path)
            except (OSError, ssl.SSLError) as exc:
                raise ValueError(
                    f"{trust_key}={self.trust_cert_path}: cannot load: {ssl_reason(exc)}"
                ) from exc
            context.verify_mode = (
                ssl.CERT_REQUIRED
                if self.need_client_auth is ClientAuth.REQUIRE
                else ssl.CERT_OPTIONAL
            )
        return context


def _load_self_signed(context: ssl.SSLContext) -> None:
    """Java's test mode: a throw-away self-signed certificate (needs ``cryptography``)."""
    try:
        from pynamesrv.remoting import selfsigned
    except ImportError as exc:
        raise ValueError(
            f"{KEY_TEST_MODE}=true needs the 'cryptography' package "
            "(pip install 'cryptography>=42,<47', the 'tls' extra), or set tls.server.certPath"
        ) from exc
    cert_pem, key_pem = selfsigned.generate("pynamesrv")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "selfsigned.pem"
        path.write_bytes(cert_pem + key_pem)
        context.load_cert_chain(path)


def client_context(
    *,
    ca_path: str | None = None,
    cert_path: str | None = None,
    key_path: str | None = None,
    key_password: str | None = None,
    verify: bool = True,
) -> ssl.SSLContext:
    """A client context: verify the server against ``ca_path`` (default: the system's CAs),
    or not at all when ``verify`` is false (mqadmin's default ``tls.client.authServer=false``);
    present ``cert_path`` / ``key_path`` when the server asks for a client certificate."""
    context = (
        ssl.create_default_context(cafile=ca_path)
        if verify
        else ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    )
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if cert_path:
        context.load_cert_chain(cert_path, key_path or None, key_password or None)
    return context


# --------------------------------------------------------------------------- reloading


def _signature(paths: tuple[str, ...]) -> tuple[tuple[int, int, int] | None, ...]:
    """Identity and age of each file: a rename (atomic replace) changes the inode, an edit
    in place the mtime or size."""
    out: list[tuple[int, int, int] | None] = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            out.append(None)
        else:
            out.append((st.st_ino, st.st_mtime_ns, st.st_size))
    return tuple(out)


class TlsContextHolder:
    """The current server ``SSLContext``, rebuilt when its files change.

    ``context()`` is asked once per new TLS connection and stats the (at most three) files
    each time: a few microseconds next to the handshake it precedes, and a replaced
    certificate is used by the very next connection (Java polls every 500 ms). Connections
    already open keep the context they started with. New files that do not load (a key that
    does not match the certificate because only one of them was copied yet) are logged once
    and the previous context stays in use until the files change again.
    """

    def __init__(self, settings: TlsSettings) -> None:
        self.settings = settings
        self._context: ssl.SSLContext | None = None
        self._loaded: tuple[tuple[int, int, int] | None, ...] = ()
        self._failed: tuple[tuple[int, int, int] | None, ...] | None = None
        self.reloads = 0
        if settings.serves_tls:
            self._loaded = _signature(settings.watched_files)
            self._context = settings.server_context()  # at start, bad files are fatal

    @property
    def mode(self) -> TlsMode:
        return self.settings.mode

    def context(self) -> ssl.SSLContext | None:
        """The context for a new connection; None when TLS is not served."""
        if self._context is None:
            return None
        paths = self.settings.watched_files
        if paths:
            current = _signature(paths)
            if current != self._loaded and current != self._failed:
                self._reload(current)
        return self._context

    def _reload(self, current: tuple[tuple[int, int, int] | None, ...]) -> None:
        try:
            context = self.settings.server_context()
        except ValueError as exc:
            self._failed = current
            log.warning("TLS files changed but do not load, keeping the previous ones: %s", exc)
            return
        self._context, self._loaded, self._failed = context, current, None
        self.reloads += 1
        log.info("TLS certificate reloaded from %s", ", ".join(self.settings.watched_files))

    def following_context(self) -> ssl.SSLContext | None:
        """A context for servers that take one context for good (aiohttp's site): each
        handshake switches to the current context, so reloads reach them too."""
        base = self.context()
        if base is None:
            return None
        follower = self.settings.server_context()

        def switch(sslobj: ssl.SSLObject, _name: str | None, _ctx: ssl.SSLContext) -> None:
            current = self.context()
            if current is not None:
                sslobj.context = current

        follower.sni_callback = switch  # called on every ClientHello, SNI or not
        return follower
