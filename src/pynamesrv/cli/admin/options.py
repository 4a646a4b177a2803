"""The global options of every admin command: name servers, timeout, output, TLS, signing.

mqadmin puts ``-n`` after the command, so each global option may be given to the group or
to the subcommand; ``resolve`` merges the two (the subcommand's win) into one ``Options``.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import click

from pynamesrv.namesrv.acl import AclFileError, load_tools_yml
from pynamesrv.remoting.acl_sign import Credentials
from pynamesrv.remoting.tls import client_context

DEFAULT_TIMEOUT_S: Final = 3.0


@dataclass(slots=True)
class Options:
    """Resolved global options: the name servers, the per-request timeout, the output mode."""

    addrs: list[str]
    timeout: float
    json: bool
    tls: ssl.SSLContext | None = None
    credentials: Credentials | None = None  # sign every request (RocketMQ ACL) when set


@dataclass(slots=True, frozen=True)
class TlsOptions:
    """--tls and friends; any of them turns TLS on (mqadmin: -Dtls.enable=true)."""

    enabled: bool = False
    ca: str | None = None
    cert: str | None = None
    key: str | None = None
    insecure: bool = False

    def merged(self, group: TlsOptions) -> TlsOptions:
        return TlsOptions(
            self.enabled or group.enabled,
            self.ca or group.ca,
            self.cert or group.cert,
            self.key or group.key,
            self.insecure or group.insecure,
        )

    def context(self) -> ssl.SSLContext | None:
        if not (self.enabled or self.ca or self.cert or self.insecure):
            return None
        if self.key and not self.cert:
            raise click.BadParameter("--tls-key needs --tls-cert", param_hint="'--tls-key'")
        try:
            return client_context(
                ca_path=self.ca, cert_path=self.cert, key_path=self.key, verify=not self.insecure
            )
        except (OSError, ssl.SSLError) as exc:
            what = f"--tls-cert {self.cert}" if self.cert else f"--tls-ca {self.ca}"
            why = getattr(exc, "reason", None) or exc.strerror or exc
            raise click.BadParameter(f"{what}: cannot load: {why}") from exc


@dataclass(slots=True, frozen=True)
class SigningOptions:
    """--access-key, --secret-key, --tools-yml: the keys to sign requests with, if any."""

    access_key: str | None = None
    secret_key: str | None = None
    tools_yml: Path | None = None

    def merged(self, group: SigningOptions) -> SigningOptions:
        """The subcommand's (self) over the group's, which may come from the environment:
        a --tools-yml given alone after the subcommand is the one to use."""
        if self.tools_yml is not None and not (self.access_key or self.secret_key):
            return self
        return SigningOptions(
            self.access_key or group.access_key,
            self.secret_key or group.secret_key,
            self.tools_yml or group.tools_yml,
        )

    def credentials(self) -> Credentials | None:
        return load_credentials(self.access_key, self.secret_key, self.tools_yml)


@dataclass(slots=True)
class GroupOptions:
    """What was given before the subcommand; kept until the subcommand's own options are known."""

    namesrv: str | None
    timeout: float | None
    json: bool
    tls: TlsOptions = field(default_factory=TlsOptions)
    signing: SigningOptions = field(default_factory=SigningOptions)


def parse_addrs(text: str) -> list[str]:
    """Split mqadmin's ``host:port;host:port`` list; duplicates dropped, order kept."""
    addrs: list[str] = []
    for raw in text.replace(",", ";").split(";"):
        addr = raw.strip()
        if not addr:
            continue
        host, sep, port = addr.rpartition(":")
        if not sep or not host.strip("[]") or not port.isdigit() or not 0 < int(port) < 65536:
            raise click.BadParameter(
                f"{addr!r} is not host:port", param_hint="'-n' / '--namesrvAddr'"
            )
        if addr not in addrs:
            addrs.append(addr)
    if not addrs:
        raise click.BadParameter("no address given", param_hint="'-n' / '--namesrvAddr'")
    return addrs


def resolve(
    namesrv: str | None,
    timeout: float | None,
    json_out: bool,
    tls: TlsOptions,
    signing: SigningOptions | None = None,
) -> Options:
    """Subcommand options win over the group's (mqadmin puts ``-n`` after the command)."""
    ctx = click.get_current_context()
    group = ctx.find_object(GroupOptions) or GroupOptions(None, None, False)
    text = namesrv or group.namesrv or os.environ.get("NAMESRV_ADDR")
    if not text:
        raise click.UsageError(
            "no name server: give -n/--namesrvAddr 'host:port;host:port' or set NAMESRV_ADDR"
        )
    return Options(
        addrs=parse_addrs(text),
        timeout=timeout or group.timeout or DEFAULT_TIMEOUT_S,
        json=json_out or group.json,
        tls=tls.merged(group.tls).context(),
        credentials=(signing or SigningOptions()).merged(group.signing).credentials(),
    )


def load_credentials(
    access_key: str | None, secret_key: str | None, tools_yml: Path | None
) -> Credentials | None:
    """The keys to sign with: --access-key/--secret-key (or their environment variables),
    else mqadmin's tools.yml; None signs nothing."""
    if access_key or secret_key:
        if not (access_key and secret_key):
            raise click.UsageError("give both --access-key and --secret-key (or neither)")
        return Credentials(access_key, secret_key)
    if tools_yml is None:
        return None
    try:
        return load_tools_yml(tools_yml)
    except AclFileError as exc:
        raise click.BadParameter(str(exc), param_hint="'--tools-yml'") from exc
