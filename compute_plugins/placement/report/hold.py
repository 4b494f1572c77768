"""Hold while in use: what the plugins removed but consumers still use.

Placement refuses to delete a provider that has allocations
(``placement.resource_provider.inuse``) and to remove an inventory class
that is allocated (``placement.inventory.inuse``). Such a provider or class
is *held*: kept, with ``reserved = total`` so that nothing new lands on it
(one WARNING), hidden from the plugins, and tried again after each read of
the tree (refresh, SIGHUP, bootstrap), not at every periodic; the rest of
the sync goes on. When the plugins want it back, its ``reserved`` is what
it was before it was held.

This module also decides the inventory each provider should have
(:meth:`HoldPolicy.inventory_target`): the plugins' records with
Placement's defaults and the operator's ``reserved``
(:func:`~compute_plugins.placement.report.records.normalize_inventory`),
plus the classes held for their consumers.
"""

from __future__ import annotations

import types
from typing import Any, Optional

from oslo_log import log as logging

from compute_plugins.placement import client as pclient
from compute_plugins.placement import exception as pexc
from compute_plugins.placement.report import records
from compute_plugins.placement.report.cache import ProviderCache
from compute_plugins.placement.report.writers import Writers
from compute_plugins.tree.provider_tree import ProviderData

LOG = logging.getLogger(__name__)

Inventory = dict[str, dict[str, Any]]


class HoldPolicy:
    """Providers and inventory classes kept for their consumers.

    :param placement: the Placement client (usages of a provider).
    :param cache: the provider cache.
    :param writers: writes the reserved inventory.
    """

    def __init__(self, placement: pclient.PlacementClient,
                 cache: ProviderCache, writers: Writers) -> None:
        self.placement = placement
        self.cache = cache
        self.writers = writers
        #: Providers the plugins removed that Placement refused to delete
        #: (allocations): uuid -> their inventory before it was reserved.
        self._held: dict[str, Inventory] = {}
        #: Inventory classes the plugins removed that are in use:
        #: uuid -> {class: its record before it was reserved}.
        self._held_inventory: dict[str, Inventory] = {}
        #: uuid -> {class: record}: the reserved to restore when the plugins
        #: want back what was held.
        self._reserved_before: dict[str, Inventory] = {}
        #: Whether the next sync tries again to remove what is held (set
        #: whenever a tree is read from Placement).
        self._retry_held = False
        #: (uuid, class) -> (reserved, total) last said to be clamped: said
        #: once per provider class while it lasts (bounded by the tree).
        self._clamped: dict[tuple[str, str], tuple[Any, Any]] = {}

    # -- reads and the plugins' view ----------------------------------------

    def after_read(self) -> None:
        """A tree was read: forget what Placement no longer has, and try
        again to remove what is held at the next sync."""
        for held in (self._held, self._held_inventory):
            for uuid in [u for u in held if u not in self.cache]:
                del held[uuid]
        for key in [k for k in self._clamped if k[0] not in self.cache]:
            del self._clamped[key]
        self._retry_held = bool(self._held or self._held_inventory)

    def visible(self) -> list[ProviderData]:
        """The cache as the plugins see it: what they removed and is kept
        only until its consumers leave (held) is left out."""
        out = []
        for rec in self.cache.records():
            if rec.uuid in self._held:
                continue
            held_inv = self._held_inventory.get(rec.uuid)
            if held_inv:
                rec = rec._replace(inventory=types.MappingProxyType(
                    {rc: r for rc, r in rec.inventory.items()
                     if rc not in held_inv}))
            out.append(rec)
        return out

    def skips(self, uuid: str) -> bool:
        """Whether removing ``uuid`` is not tried in this sync (held, and no
        read of the tree since)."""
        return uuid in self._held and not self._retry_held

    def want_back(self, pd: ProviderData) -> None:
        """The plugins want ``pd``: if it was held, its reserved is what it
        was before."""
        if pd.uuid in self._held:
            # NOTE: the plugins want back a provider that was kept for
            # its consumers: its reserved is what it was before.
            LOG.info("provider %s is wanted again: no longer kept "
                     "reserved", pd.name)
            self._reserved_before[pd.uuid] = self._held.pop(pd.uuid)

    def sync_done(self) -> None:
        """The sync tried what it had to: retry only after the next read."""
        self._retry_held = False

    # -- the inventory to write ---------------------------------------------

    def inventory_target(self, pd: ProviderData,
                         keep_held: Optional[bool] = None) -> Inventory:
        """What the provider's inventory should be: the plugins' records,
        plus the classes kept for their consumers (held; left out when
        trying again to remove them, unless ``keep_held``)."""
        have = self.cache[pd.uuid]
        before = self._reserved_before.get(pd.uuid, {})
        out = {}
        for rc, rec in pd.inventory.items():
            key = (pd.uuid, rc)
            clamped = False

            def on_clamp(reserved: Any, total: Any, rc: str = rc) -> None:
                nonlocal clamped
                clamped = True
                self._say_clamped(pd, rc, reserved, total)

            out[rc] = records.normalize_inventory(
                rec, before.get(rc, have.inventory.get(rc)), on_clamp)
            if not clamped:
                self._clamped.pop(key, None)
        if keep_held is None:
            keep_held = not self._retry_held
        if keep_held:
            for rc in self._held_inventory.get(pd.uuid, {}):
                if rc not in out and rc in have.inventory:
                    out[rc] = dict(have.inventory[rc])
        return out

    def _say_clamped(self, pd: ProviderData, rc: str, reserved: Any,
                     total: Any) -> None:
        key = (pd.uuid, rc)
        if self._clamped.get(key) == (reserved, total):
            return
        self._clamped[key] = (reserved, total)
        LOG.warning("%s of provider %s: kept reserved %s is above the new "
                    "total %s: reserving the whole inventory (%s) instead",
                    rc, pd.name, reserved, total, total)

    def write_inventory(self, pd: ProviderData, changed: list[str]) -> None:
        """Write the provider's inventory; a class Placement refuses to
        remove (allocated) is held instead."""
        held = self._held_inventory.get(pd.uuid, {})
        for rc in [rc for rc in held if rc in pd.inventory]:
            LOG.info("%s of provider %s is wanted again: no longer kept "
                     "reserved", rc, pd.name)
            self._reserved_before.setdefault(pd.uuid, {})[rc] = held.pop(rc)
        try:
            self.writers.write_inventory(
                pd, lambda: self.inventory_target(pd), changed)
        except pexc.InventoryInUse:
            self._hold_inventory(pd, changed)
        self._reserved_before.pop(pd.uuid, None)
        inv = self.cache[pd.uuid].inventory
        held = self._held_inventory.get(pd.uuid, {})
        for rc in [rc for rc in held if rc not in inv]:
            del held[rc]
        if not held:
            self._held_inventory.pop(pd.uuid, None)

    def _hold_inventory(self, pd: ProviderData, changed: list[str]) -> None:
        """Placement refused to remove inventory that allocations use:
        keep those classes with ``reserved = total`` and write the rest."""
        usages = self.placement.get(
            "/resource_providers/%s/usages" % pd.uuid,
            provider=pd.uuid)["usages"]
        have = self.cache[pd.uuid]
        held = self._held_inventory.setdefault(pd.uuid, {})
        for rc, rec in sorted(have.inventory.items()):
            if rc in pd.inventory or not usages.get(rc) or rc in held:
                continue
            LOG.warning(
                "%s of provider %s (%s) was removed by the plugins but %d "
                "is allocated: it is kept, reserved, until its consumers "
                "leave", rc, pd.name, pd.uuid, usages[rc])
            held[rc] = dict(rec)

        def target() -> Inventory:
            out = self.inventory_target(pd, keep_held=False)
            inv = self.cache[pd.uuid].inventory
            for rc in held:
                if rc in inv:
                    out[rc] = dict(inv[rc], reserved=inv[rc]["total"])
            return out

        self.writers.write_inventory(pd, target, changed)

    # -- removing providers -------------------------------------------------

    def delete(self, uuid: str, changed: list[str]) -> None:
        """Delete a provider the plugins removed; one that has allocations
        (or children kept for theirs) is kept, reserved, until its
        consumers leave."""
        rec = self.cache[uuid]
        if self.skips(uuid):
            return
        kept_child = next((r for r in self.cache.records()
                           if r.parent_uuid == uuid), None)
        if kept_child is not None:
            self._hold(rec, "its child %s is kept" % kept_child.name,
                       changed)
            return
        try:
            self.writers.delete(rec)
        except (pexc.ProviderInUse, pexc.ProviderHasChildren) as e:
            self._hold(rec, "it has allocations (%s)" % e.code, changed)
            return
        self._held.pop(uuid, None)
        self._held_inventory.pop(uuid, None)
        changed.append("delete %s" % rec.name)

    def _hold(self, rec: ProviderData, why: str, changed: list[str]) -> None:
        """Keep a provider the plugins removed, with ``reserved = total``
        on each class so that nothing new lands on it."""
        if rec.uuid not in self._held:
            LOG.warning(
                "provider %s (%s, classes %s) was removed by the plugins but "
                "%s: it is kept, with all of its inventory reserved, until "
                "its consumers leave", rec.name, rec.uuid,
                ", ".join(sorted(rec.inventory)) or "none", why)
            self._held[rec.uuid] = records.inventory_plain(rec.inventory)
        self.writers.write_if_changed(
            rec, "reserve",
            lambda: {rc: dict(r, reserved=r["total"]) for rc, r in
                     records.inventory_plain(
                         self.cache[rec.uuid].inventory).items()},
            lambda have: records.inventory_plain(have.inventory),
            self.writers.put_inventory, changed)
