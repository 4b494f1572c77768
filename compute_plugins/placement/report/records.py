"""Provider records: Placement's shapes and the pure rules on them.

No Placement call here: an inventory record with Placement's defaults
(:func:`normalize_inventory`, with the ``reserved`` rule), the three-way
merge of traits and aggregates (:func:`merge_set`), the immutable
:class:`~compute_plugins.tree.provider_tree.ProviderData` the cache holds
(:func:`record`) and parents-first ordering (:func:`parents_first`).
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Optional

from oslo_log import log as logging

from compute_plugins.tree.provider_tree import ProviderData

LOG = logging.getLogger(__name__)

#: Placement's defaults for the fields of an inventory record.
INVENTORY_DEFAULTS: Mapping[str, Any] = types.MappingProxyType(
    {
        "reserved": 0,
        "min_unit": 1,
        "max_unit": 2147483647,
        "step_size": 1,
        "allocation_ratio": 1.0,
    }
)
INVENTORY_FIELDS = ("total",) + tuple(INVENTORY_DEFAULTS)

#: ``on_clamp(reserved, total)``: a kept ``reserved`` above a shrunk total.
OnClamp = Callable[[Any, Any], None]


def _warn_clamp(reserved: Any, total: Any) -> None:
    LOG.warning("kept reserved %s is above the new total %s: reserving the "
                "whole inventory (%s) instead", reserved, total, total)


def normalize_inventory(
    record: Mapping[str, Any],
    theirs: Optional[Mapping[str, Any]] = None,
    on_clamp: Optional[OnClamp] = None,
) -> dict[str, Any]:
    """A full inventory record: Placement's defaults where a field is absent.

    The ``reserved`` rule: a plugin leaves ``reserved`` out of a record
    unless its configuration sets it (the numa plugin's ``MEMORY_MB`` from
    ``[compute] reserved_host_memory_mb``, the disk plugin's ``DISK_GB`` from
    ``[disk] reserved_host_disk_mb``). For a record without ``reserved`` the
    value Placement has now (``theirs``: what an operator set, e.g. to drain
    a device) is kept, and a new inventory gets 0; a record with
    ``reserved`` is configuration and wins, as in nova.

    :param on_clamp: called with ``(reserved, total)`` when a kept reserved
        above a total that shrank becomes the whole total; default: a
        WARNING each time (the report client says it once per provider and
        class instead).
    """
    out = {k: record[k] for k in INVENTORY_FIELDS if k in record}
    if "reserved" not in out and theirs is not None and "reserved" in theirs:
        out["reserved"] = theirs["reserved"]
    for key, value in INVENTORY_DEFAULTS.items():
        out.setdefault(key, value)
    if "allocation_ratio" in out:
        out["allocation_ratio"] = float(out["allocation_ratio"])
    if ("reserved" not in record and "total" in out
            and out["reserved"] > out["total"]):
        # NOTE: Placement refuses reserved > total; a kept (operator's)
        # reserved above a total that shrank becomes the whole of it.
        (on_clamp or _warn_clamp)(out["reserved"], out["total"])
        out["reserved"] = out["total"]
    return out


def merge_set(
    base: Optional[Iterable[str]], ours: Iterable[str], theirs: Iterable[str]
) -> frozenset[str]:
    """Three-way merge: Placement's set plus our additions minus removals.

    :param base: the set as the plugins were handed it (None: no base, ours
        wins).
    :param ours: the set the plugins want.
    :param theirs: the set Placement has now (an operator's changes).
    """
    ours = frozenset(ours)
    if base is None:
        return ours
    base = frozenset(base)
    return (frozenset(theirs) | (ours - base)) - (base - ours)


def record(
    uuid: str,
    name: str,
    generation: Optional[int],
    parent_uuid: Optional[str],
    inventory: Optional[Mapping[str, Mapping[str, Any]]] = None,
    traits: Iterable[str] = (),
    aggregates: Iterable[str] = (),
) -> ProviderData:
    """An immutable provider record as the cache holds it."""
    return ProviderData(
        uuid=uuid,
        name=name,
        generation=generation,
        parent_uuid=parent_uuid,
        inventory=types.MappingProxyType(
            {rc: types.MappingProxyType(dict(rec))
             for rc, rec in (inventory or {}).items()}
        ),
        traits=frozenset(traits),
        aggregates=frozenset(aggregates),
        resources=types.MappingProxyType({}),
    )


def inventory_plain(inv: Mapping[str, Mapping[str, Any]]
                    ) -> dict[str, dict[str, Any]]:
    """A record's inventory as plain dicts (what a PUT sends)."""
    return {rc: dict(rec) for rc, rec in inv.items()}


def order(cache: Mapping[str, ProviderData]) -> list[str]:
    """Uuids of ``cache``, every parent before its children."""
    return [rp["uuid"] for rp in parents_first(
        {"uuid": u, "parent_provider_uuid": r.parent_uuid}
        for u, r in cache.items())]


def parents_first(providers: Iterable[Mapping[str, Any]]
                  ) -> list[Mapping[str, Any]]:
    """Placement's provider listings (``uuid``, ``parent_provider_uuid``),
    every parent before its children; a provider whose parent is not listed
    counts as a root."""
    providers = list(providers)
    uuids = {rp["uuid"] for rp in providers}
    children: dict[Optional[str], list[Mapping[str, Any]]] = {}
    for rp in providers:
        parent = rp.get("parent_provider_uuid")
        children.setdefault(parent if parent in uuids else None, []).append(rp)
    out: list[Mapping[str, Any]] = []
    todo = list(reversed(children.get(None, [])))
    while todo:
        rp = todo.pop()
        out.append(rp)
        todo.extend(reversed(children.get(rp["uuid"], [])))
    return out
