"""Who may register or unregister a broker name once an accounts file is configured.

Java's NameServer believes every REGISTER_BROKER and UNREGISTER_BROKER: anyone who reaches
the port can re-register a live broker's name at another address (producers follow) or
remove it. With ``aclFile`` set, pynamesrv asks, before the registry is called:

- UNREGISTER_BROKER of a live address: only over the connection that registered it (what a
  real broker does at shutdown). From another connection it is refused while the broker's
  own connection is open and in time, signed or not: a signature carries no nonce, and a
  broker's unregistration has the same fields after every restart, so a captured one would
  replay for ever. An address no live entry backs, whose connection is gone or whose
  deadline passed is let through; a recovered (provisional) one needs an admin signature or
  the account bound to the broker name.
- REGISTER_BROKER over another connection than the one a live broker's entry is held by,
  at the same address (the entry's permissions, queues and connection would be rewritten,
  and the close of the new connection would remove the broker) or taking its (broker name,
  broker id) to another address: only when that broker's connection is gone, its heartbeat
  deadline passed, or the account bound to the name signs. A broker restarting at a new
  address after its old connection closed registers at once: the close removed the old
  entry. One that reconnects while its old connection is half-open gets in at its first
  registration after that connection is closed (idle timeout) or its deadline passed.
- With ``aclRegistrationRequired``, accounts bound to broker names (``brokerNames``) are the
  only ones that may register or unregister those names, they may register no other name,
  and only at their ``brokerAddresses``.

A broker recovered from the journal (provisional: no connection yet) gives its name up to
any registration, so a real broker restarting at a new address after a name-server restart
is not locked out; only an admin or bound signature, or its deadline, unregisters it.
Pure reads of the registry: nothing here changes a table.
"""

from __future__ import annotations

from dataclasses import dataclass

from pynamesrv.namesrv.acl import Account, Accounts, shown
from pynamesrv.namesrv.addresses import host_of
from pynamesrv.namesrv.model import BrokerLiveInfo
from pynamesrv.namesrv.routes import RouteInfoManager
from pynamesrv.namesrv.routes.tables import RECOVERED


@dataclass(frozen=True, slots=True)
class Claim:
    """What a REGISTER_BROKER or UNREGISTER_BROKER says about itself."""

    cluster: str
    broker_name: str
    broker_id: int
    broker_addr: str


def _connected(live: BrokerLiveInfo, channel: object, now_ms: int) -> bool:
    """Whether ``live`` is held by another connection that is still there and in time."""
    return (
        live.channel is not RECOVERED
        and live.channel is not channel
        and getattr(live.channel, "is_open", True)
        and now_ms <= live.last_update_ms + live.timeout_ms
    )


def _binding_refusal(
    claim: Claim, account: Account | None, accounts: Accounts, *, registering: bool
) -> str | None:
    """The accounts file's broker bindings (only enforced where signing is required)."""
    if account is None:
        return None
    name, key = shown(claim.broker_name), shown(account.access_key)
    exempt = not registering and account.admin  # an admin may unregister any broker
    if not exempt and not account.may_act_as(claim.broker_name):
        if account.broker_names is not None:
            return f"accessKey={key} is not bound to brokerName={name}"
        if accounts.bound_to(claim.broker_name):
            return f"brokerName={name} is bound to another account than accessKey={key}"
    if registering and not account.broker_addresses.matches(host_of(claim.broker_addr)):
        return (
            f"brokerAddr={shown(claim.broker_addr)} is not in the brokerAddresses of "
            f"accessKey={key}"
        )
    return None


def register_refusal(
    routes: RouteInfoManager,
    claim: Claim,
    channel: object,
    now_ms: int,
    account: Account | None,
    accounts: Accounts,
    *,
    signing_required: bool,
) -> str | None:
    """Why this REGISTER_BROKER may not take its name and id (None: it may)."""
    if signing_required:
        refusal = _binding_refusal(claim, account, accounts, registering=True)
        if refusal is not None:
            return refusal
    here = routes.live_entry(claim.cluster, claim.broker_addr)
    if (
        here is not None
        and _connected(here, channel, now_ms)
        and not (account is not None and account.may_act_as(here.broker_name))
    ):
        return (
            f"brokerAddr={shown(claim.broker_addr)} is held by the live broker "
            f"brokerName={shown(here.broker_name)} brokerId={here.broker_id} over another "
            "connection; it registers from a new connection when that connection closes, its "
            "heartbeat deadline passes, or the account bound to the name signs"
        )
    held = routes.holder(claim.broker_name, claim.broker_id)
    if held is None:
        return None
    addr, live = held
    if addr == claim.broker_addr or live is None or not _connected(live, channel, now_ms):
        return None
    if account is not None and account.may_act_as(claim.broker_name):
        return None
    return (
        f"brokerName={shown(claim.broker_name)} brokerId={claim.broker_id} is held by the "
        f"live broker at {shown(addr)}; it moves to another address when that broker's "
        "connection closes, its heartbeat deadline passes, or the account bound to the name "
        "signs"
    )


def unregister_refusal(
    routes: RouteInfoManager,
    claim: Claim,
    channel: object,
    now_ms: int,
    account: Account | None,
    accounts: Accounts,
    *,
    signing_required: bool,
) -> str | None:
    """Why this UNREGISTER_BROKER may not remove its broker (None: it may)."""
    if signing_required:
        refusal = _binding_refusal(claim, account, accounts, registering=False)
        if refusal is not None:
            return refusal
    live = routes.live_entry(claim.cluster, claim.broker_addr)
    if live is None or live.channel is channel:
        return None
    if live.channel is not RECOVERED:
        if not _connected(live, channel, now_ms):
            return None  # its connection is gone or its deadline passed: nothing to guard
        return (
            f"UNREGISTER_BROKER of {shown(claim.broker_addr)} must come over the connection "
            "that registered it while that connection is open (a signature does not say "
            "when it was made)"
        )
    if account is not None and (account.admin or account.may_act_as(claim.broker_name)):
        return None
    return (
        f"UNREGISTER_BROKER of {shown(claim.broker_addr)} must come over the connection "
        "that registered it, or be signed by an admin account or the account bound to "
        f"brokerName={shown(claim.broker_name)}"
    )
