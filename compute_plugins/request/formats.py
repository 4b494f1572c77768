"""Payloads of earlier RequestSpec formats, read by this release.

A host's ledger and the host-state store keep RequestSpecs across an
upgrade, so the reader of :mod:`compute_plugins.request.spec` takes the
previous format too: each entry of :data:`UPGRADES` turns a payload of an
older format into the current one before it is read (strictly, as any).

This module holds the names the older formats used, as they were written
(format 1.0 named the guest's topology nodes after the NUMA plugin); it is
the one place of the request model that may, and
``tools/count_core_identifiers.py`` leaves it out for that reason.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from compute_plugins.request.groups import KIND_GUEST_NODE

__all__ = ["CURRENT", "UPGRADES", "upgraded"]

#: The current format, which the upgrades lead to (the RequestSpec's
#: ``FORMAT_VERSION``). Bump the minor for additions an older reader may
#: refuse, the major for incompatible changes (and add the upgrade).
CURRENT = "2.0"


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
    upgraded["version"] = CURRENT
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
