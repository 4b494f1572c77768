"""Disabling a host for new instances (``compute-plugins host disable|enable
NAME``), as nova's ``openstack compute service set --disable``.

A disabled host takes no new decision; its instances stay, its agent keeps
running, reporting and releasing. Two records say it, written in this
order:

1. the host-state store's (``hoststate_disabled``: the reason, who, when):
   the scheduler skips a host it lists, with the reason ``host X is
   disabled: REASON`` (:func:`compute_plugins.scheduler.providers.
   operator_disabled`);
2. Placement's ``COMPUTE_STATUS_DISABLED`` trait on the host's root
   provider, which nova's scheduler forbids too (``root_required=
   !COMPUTE_STATUS_DISABLED``), so a nova scheduler sharing the Placement
   skips the host as well.

The host's agent makes the trait follow the store's record at every
periodic (:func:`compute_plugins.compute.agent.status_trait_update`), as
nova's compute sets it from its service's disabled flag: a command
interrupted between the two writes, or run while Placement was
unreachable, is put right by the agent (or by running it again). Enabling
removes the record first, then the trait.

Both are idempotent: disabling a disabled host keeps its first record
(reason, who, when) and changes nothing but a missing trait.
"""

from __future__ import annotations

import dataclasses
import getpass
import socket
import urllib.parse
from typing import Any, Optional

import os_traits

from compute_plugins import exception
from compute_plugins.hoststate.hosts import SqlHostPublication
from compute_plugins.hoststate.records import HostDisabled
from compute_plugins.placement import exception as pexc

#: The root's trait of a disabled host (nova's).
DISABLED_TRAIT: str = os_traits.COMPUTE_STATUS_DISABLED
#: Attempts at writing the root's traits when its generation moves meanwhile
#: (the host's agent writing its tree).
TRAIT_ATTEMPTS = 5


class UnknownHost(exception.InputError):
    """The host-state store knows no such host (exit 2; nothing changed)."""

    def __init__(self, host: str) -> None:
        super().__init__(
            "host %s: unknown to the host-state store (no compute agent ever "
            "published it)" % host)
        self.host = host


@dataclasses.dataclass(frozen=True)
class HostStatusResult:
    """What ``host disable`` or ``host enable`` did.

    :param host: the host.
    :param disabled: whether the host is disabled now.
    :param changed: False when it was so already (nothing changed in the
        store).
    :param record: the disabled record: the one in force (disable), the one
        removed (enable); None when enabling a host that was not disabled.
    :param root: the host's root provider in Placement (None: Placement has
        none by the host's node name, or could not be asked).
    :param trait_changed: whether the root's ``COMPUTE_STATUS_DISABLED``
        trait was written.
    :param placement_error: why Placement could not be updated (the
        store's record is written: the host's agent sets the trait at its
        next periodic); None when it was.
    """

    host: str
    disabled: bool
    changed: bool
    record: Optional[HostDisabled]
    root: Optional[str] = None
    trait_changed: bool = False
    placement_error: Optional[str] = None

    def to_dict(self) -> dict[str, Any]:
        return {"host": self.host, "disabled": self.disabled, "changed": self.changed,
                "record": None if self.record is None else self.record.to_dict(),
                "root_provider": self.root, "trait_changed": self.trait_changed,
                "placement_error": self.placement_error}


def operator() -> str:
    """Who runs the command: ``user@machine`` (``?`` for an unknown part)."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):
        user = "?"
    return "%s@%s" % (user, socket.gethostname() or "?")


def _nodename(store: SqlHostPublication, host: str) -> Optional[str]:
    """The host's node name (its root provider's name), None when the store
    never saw it published."""
    snapshot = store.get_host(host)
    if snapshot is None:
        return None
    return snapshot.nodename or host


def disable_host(store: SqlHostPublication, placement: Any, host: str,
                 reason: str = "", by: Optional[str] = None,
                 kind: str = "operator") -> HostStatusResult:
    """Disable ``host`` for new instances (module doc).

    :param placement: a :class:`~compute_plugins.placement.client.PlacementClient`.
    :param reason: the operator's text (at most 255 characters).
    :param by: who disables it (default :func:`operator`).
    :param kind: ``operator`` (``host disable``: only ``host enable`` ends
        it) or ``evacuated`` (``evacuate``'s fence: the host's agent lifts
        it once back and reconciled).
    :raises UnknownHost: the store never saw the host published.
    :raises ValueError: the reason is too long.
    """
    nodename = _nodename(store, host)
    if nodename is None:
        raise UnknownHost(host)
    record, changed = store.disable_host(host, reason, operator() if by is None else by,
                                         kind)
    return _with_trait(placement, nodename, HostStatusResult(
        host=host, disabled=True, changed=changed, record=record))


def enable_host(store: SqlHostPublication, placement: Any, host: str) -> HostStatusResult:
    """Enable ``host`` again (module doc).

    :raises UnknownHost: the store neither saw the host published nor has
        it disabled.
    """
    nodename = _nodename(store, host)
    if nodename is None and not store.disabled_hosts([host]):
        raise UnknownHost(host)
    record = store.enable_host(host)
    return _with_trait(placement, nodename or host, HostStatusResult(
        host=host, disabled=False, changed=record is not None, record=record))


def _with_trait(placement: Any, nodename: str,
                result: HostStatusResult) -> HostStatusResult:
    """``result`` once the root's trait says ``result.disabled``."""
    try:
        root, changed = set_root_trait(placement, nodename, result.disabled)
    except pexc.PlacementError as err:
        return dataclasses.replace(result, placement_error=str(err))
    return dataclasses.replace(result, root=root, trait_changed=changed)


def set_root_trait(placement: Any, nodename: str,
                   present: bool) -> tuple[Optional[str], bool]:
    """Make ``COMPUTE_STATUS_DISABLED`` present or absent on the root
    provider named ``nodename``, keeping its other traits; the write names
    the provider's generation and is retried when it moved meanwhile.

    :returns: the root's uuid (None: Placement has no such provider: the
        agent sets the trait when it creates it) and whether the traits
        were written.
    :raises PlacementError: Placement failed, or the generation kept moving.
    """
    found = placement.get("/resource_providers?name=%s"
                          % urllib.parse.quote(nodename, safe=""))["resource_providers"]
    roots = [rp for rp in found if rp["uuid"] == rp.get("root_provider_uuid", rp["uuid"])]
    if not roots:
        return None, False
    uuid = str(roots[0]["uuid"])
    path = "/resource_providers/%s/traits" % uuid
    for attempt in range(TRAIT_ATTEMPTS):
        answer = placement.get(path)
        traits = set(answer["traits"])
        wanted = traits | {DISABLED_TRAIT} if present else traits - {DISABLED_TRAIT}
        if wanted == traits:
            return uuid, False
        try:
            placement.put(path, {
                "resource_provider_generation": answer["resource_provider_generation"],
                "traits": sorted(wanted)})
        except pexc.GenerationConflict:
            if attempt + 1 == TRAIT_ATTEMPTS:
                raise
            continue
        return uuid, True
    raise AssertionError("unreachable")


__all__ = ["DISABLED_TRAIT", "HostStatusResult", "UnknownHost", "disable_host",
           "enable_host", "operator", "set_root_trait"]
