"""Payloads of earlier RequestSpec formats, read and written by this release.

A host's ledger and the host-state store keep RequestSpecs across an
upgrade, so the reader of :mod:`compute_plugins.request.spec` takes the
previous format too: each entry of :data:`UPGRADES` turns a payload of an
older format into the current one before it is read (strictly, as any).

The other way, a scheduler upgraded before its computes writes payloads
that older readers take: a minor version only adds fields
(:data:`PORT_ADDITIONS`), and :func:`lowest` writes a payload at the lowest
version whose fields it uses. A payload that uses none of a version's
fields leaves them out and reads in a reader that lacks them; one that uses
them is refused there as newer (the reader refuses a higher minor), rather
than read without them.

This module holds the names the older formats used, as they were written
(format 1.0 named the guest's topology nodes after the NUMA plugin); it is
the one place of the request model that may, and
``tools/count_core_identifiers.py`` leaves it out for that reason.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from compute_plugins.request.groups import KIND_GUEST_NODE
from compute_plugins.request.inputs import Port

__all__ = ["BASE", "CURRENT", "PORT_ADDITIONS", "UPGRADES", "lowest", "upgraded"]

#: The first version of the current major: what a payload that uses no
#: field of :data:`PORT_ADDITIONS` is written as.
BASE = "2.0"

#: The fields each minor version of the current major added to a port,
#: oldest first. A field added has a default that reads as before it was
#: (an older reader has none of it); add a version here, and bump
#: :data:`CURRENT`, for each addition. 2.1: the port's network is a tunnel
#: (``tunneled``) and its own affinity policy (``affinity_policy``).
PORT_ADDITIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("2.1", ("tunneled", "affinity_policy")),
)

#: The current format, which the upgrades lead to and the reader reads
#: (the RequestSpec's ``FORMAT_VERSION``). Bump the minor for additions an
#: older reader may refuse (and list them in :data:`PORT_ADDITIONS`), the
#: major for incompatible changes (and add the upgrade).
CURRENT = "2.1"

_PORT_DEFAULTS = {f.name: f.default for f in dataclasses.fields(Port)}


def lowest(ports: Sequence[Mapping[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """The lowest format version that carries ``ports`` (encoded) and the
    ports as that version writes them: without the fields of the later
    versions, which all hold their defaults.

    An older reader then reads the payload of a spec that needs nothing it
    lacks, and refuses one that does as newer than it, instead of dropping
    the field (or refusing every payload for a field it does not know).
    """
    version, keep = BASE, 0
    for index, (added, fields) in enumerate(PORT_ADDITIONS):
        if any(port[name] != _PORT_DEFAULTS[name] for port in ports for name in fields):
            version, keep = added, index + 1
    later = {name for _, fields in PORT_ADDITIONS[keep:] for name in fields}
    if not later:
        return version, [dict(port) for port in ports]
    return version, [{k: v for k, v in port.items() if k not in later}
                     for port in ports]


def _group_1_0(group: Any) -> Any:
    """A request group of format 1.0 as 2.0 writes it: the guest's
    topology nodes were ``numa_cell`` groups with a ``numa_node``."""
    if not isinstance(group, Mapping):
        return group  # NOTE: the reader refuses it, naming the field.
    upgraded = dict(group)
    if upgraded.get("kind") == "numa_cell":
        upgraded["kind"] = KIND_GUEST_NODE
    if "numa_node" in upgraded:
        upgraded["node"] = upgraded.pop("numa_node")
    return upgraded


def _groups_1_0(groups: Any) -> Any:
    return [_group_1_0(g) for g in groups] if isinstance(groups, list) else groups


def _upgrade_1_0(doc: Mapping[str, Any]) -> dict[str, Any]:
    """A 1.0 payload (written before the topology contract: specs in the
    ledgers and stores of an earlier release) as 2.0: only the request
    groups' guest-node kind and field were renamed."""
    upgraded = dict(doc)
    upgraded["version"] = BASE
    upgraded["groups"] = _groups_1_0(doc.get("groups"))
    generic_doc = doc.get("generic")
    if isinstance(generic_doc, Mapping) and "groups" in generic_doc:
        upgraded["generic"] = {**generic_doc,
                               "groups": _groups_1_0(generic_doc["groups"])}
    return upgraded


#: Older formats this reader still reads, each with its upgrade to the
#: current one: a host's ledger and the store keep specs across an upgrade.
UPGRADES: dict[tuple[int, int], Callable[[Mapping[str, Any]], dict[str, Any]]] = {
    (1, 0): _upgrade_1_0,
}


def upgraded(doc: Mapping[str, Any], version: tuple[int, int]) -> Mapping[str, Any]:
    """``doc`` (of format ``version``) in the current format."""
    upgrade = UPGRADES.get(version)
    return doc if upgrade is None else upgrade(doc)
