"""Writers: one Placement write per aspect of a provider, with conflict
retries.

Each aspect (inventory, traits, aggregates) has a small typed writer: what
Placement should hold (a function of the cache, so it is recomputed after a
re-read) and how to PUT it. :meth:`Writers.write_if_changed` compares it
with the cache, writes only a difference, and on
``placement.concurrent_update`` re-reads that one provider and retries,
bounded (:data:`MAX_CONFLICT_RETRIES`) and jittered. Providers are created
and moved here too (``PUT /resource_providers/{uuid}`` re-parents in place,
microversion 1.37), and custom traits and resource classes are created once.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any, Optional, TypeVar

import os_resource_classes
import os_traits
from oslo_log import log as logging

from compute_plugins.placement import client as pclient
from compute_plugins.placement import exception as pexc
from compute_plugins.placement.report import records
from compute_plugins.placement.report.cache import ProviderCache
from compute_plugins.tree.provider_tree import ProviderData

LOG = logging.getLogger(__name__)

#: Placement allows changing a provider's parent from this microversion.
REPARENT_MICROVERSION = (1, 37)

#: Bounded retries of a write that hit a generation conflict.
MAX_CONFLICT_RETRIES = 4
#: Base of the jittered back-off between those retries, in seconds.
RETRY_BASE_DELAY = 0.05

_STANDARD_RCS = frozenset(os_resource_classes.STANDARDS)
_STANDARD_TRAITS = frozenset(os_traits.get_traits())

T = TypeVar("T")


def backoff(attempt: int) -> float:
    """Seconds to wait before retry ``attempt + 1`` (jittered, doubling)."""
    return random.uniform(0, RETRY_BASE_DELAY * 2**attempt)


class Writers:
    """Writes one provider's aspects to Placement and keeps the cache in
    step with what Placement answered.

    :param placement: the Placement client.
    :param cache: the provider cache the writes are based on.
    :param sleep: waits between conflict retries.
    """

    def __init__(
        self,
        placement: pclient.PlacementClient,
        cache: ProviderCache,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.placement = placement
        self.cache = cache
        self._sleep = sleep

    # -- providers ----------------------------------------------------------

    def create(self, pd: ProviderData) -> None:
        """``POST /resource_providers`` (no inventory, traits or
        aggregates yet)."""
        body: dict[str, Any] = {"name": pd.name, "uuid": pd.uuid}
        if pd.parent_uuid:
            body["parent_provider_uuid"] = pd.parent_uuid
        rp = self.placement.post("/resource_providers", body, provider=pd.uuid)
        self.cache.put(records.record(pd.uuid, pd.name, rp["generation"],
                                      pd.parent_uuid))
        self.cache.mark_read(rp.get("root_provider_uuid") or pd.uuid)

    def move(self, pd: ProviderData, have: ProviderData) -> None:
        """Re-parent (or rename) a provider in place: its uuid, and so its
        allocations, stay (no reshape)."""
        if have.parent_uuid != pd.parent_uuid and (
                self.placement.microversion < REPARENT_MICROVERSION):
            raise pexc.PlacementVersionTooOld(
                "cannot move provider %s under %s: Placement at %s offers "
                "microversion %s, re-parenting needs %d.%d"
                % (pd.name, pd.parent_uuid, self.placement.where,
                   self.placement.microversion_str, *REPARENT_MICROVERSION),
                method="PUT", path="/resource_providers/%s" % pd.uuid,
                provider=pd.uuid)
        body: dict[str, Any] = {"name": pd.name}
        if pd.parent_uuid is not None:
            body["parent_provider_uuid"] = pd.parent_uuid
        rp = self.placement.put("/resource_providers/%s" % pd.uuid, body,
                                provider=pd.uuid)
        self.cache.put(have._replace(
            name=pd.name, parent_uuid=pd.parent_uuid,
            generation=rp.get("generation", have.generation)))
        self.cache.reorder()

    def delete(self, rec: ProviderData) -> None:
        """``DELETE /resource_providers/{uuid}`` and forget it.

        :raises ProviderInUse: it has allocations.
        :raises ProviderHasChildren: it has children.
        """
        self.placement.delete("/resource_providers/%s" % rec.uuid,
                              provider=rec.uuid, generation=rec.generation)
        self.cache.delete(rec.uuid)

    def ensure_classes_and_traits(self, desired: list[ProviderData]) -> None:
        """Create the custom resource classes and traits ``desired`` uses
        that are not known to exist."""
        for pd in desired:
            have = self.cache[pd.uuid]
            for rc in pd.inventory:
                if (rc in _STANDARD_RCS or rc in self.cache.known_rcs
                        or rc in have.inventory):
                    continue
                self.placement.put("/resource_classes/%s" % rc)
                self.cache.known_rcs.add(rc)
            for trait in pd.traits:
                if (trait in _STANDARD_TRAITS or trait in self.cache.known_traits
                        or trait in have.traits):
                    continue
                self.placement.put("/traits/%s" % trait)
                self.cache.known_traits.add(trait)

    # -- the PUT of each aspect ---------------------------------------------

    def put_inventory(self, have: ProviderData,
                      target: dict[str, dict[str, Any]]) -> ProviderData:
        resp = self.placement.put(
            "/resource_providers/%s/inventories" % have.uuid,
            {"resource_provider_generation": have.generation,
             "inventories": target},
            provider=have.uuid, generation=have.generation)
        return have._replace(
            generation=resp["resource_provider_generation"],
            inventory=records.record(have.uuid, have.name, None, None,
                                     resp["inventories"]).inventory)

    def put_traits(self, have: ProviderData,
                   target: frozenset[str]) -> ProviderData:
        resp = self.placement.put(
            "/resource_providers/%s/traits" % have.uuid,
            {"resource_provider_generation": have.generation,
             "traits": sorted(target)},
            provider=have.uuid, generation=have.generation)
        return have._replace(generation=resp["resource_provider_generation"],
                             traits=frozenset(resp["traits"]))

    def put_aggregates(self, have: ProviderData,
                       target: frozenset[str]) -> ProviderData:
        resp = self.placement.put(
            "/resource_providers/%s/aggregates" % have.uuid,
            {"resource_provider_generation": have.generation,
             "aggregates": sorted(target)},
            provider=have.uuid, generation=have.generation)
        return have._replace(generation=resp["resource_provider_generation"],
                             aggregates=frozenset(resp["aggregates"]))

    # -- compare, write, retry ----------------------------------------------

    def write_inventory(self, pd: ProviderData,
                        target: Callable[[], dict[str, dict[str, Any]]],
                        changed: list[str]) -> None:
        """Write ``target()`` as the inventory of ``pd`` if it differs."""
        self.write_if_changed(
            pd, "inventory", target,
            lambda have: records.inventory_plain(have.inventory),
            self.put_inventory, changed)

    def write_traits(self, pd: ProviderData, base: Optional[ProviderData],
                     changed: list[str]) -> None:
        """Merge the plugins' traits into Placement's (three ways)."""
        def target() -> frozenset[str]:
            return records.merge_set(base.traits if base else None,
                                     pd.traits, self.cache[pd.uuid].traits)

        def current(have: ProviderData) -> frozenset[str]:
            return frozenset(have.traits)

        self.write_if_changed(pd, "traits", target, current,
                              self.put_traits, changed)

    def write_aggregates(self, pd: ProviderData,
                         base: Optional[ProviderData],
                         changed: list[str]) -> None:
        """Merge the plugins' aggregates into Placement's (three ways)."""
        def target() -> frozenset[str]:
            return records.merge_set(base.aggregates if base else None,
                                     pd.aggregates,
                                     self.cache[pd.uuid].aggregates)

        def current(have: ProviderData) -> frozenset[str]:
            return frozenset(have.aggregates)

        self.write_if_changed(pd, "aggregates", target, current,
                              self.put_aggregates, changed)

    def write_if_changed(
        self, pd: ProviderData, label: str, target: Callable[[], T],
        current: Callable[[ProviderData], T],
        put: Callable[[ProviderData, T], ProviderData], changed: list[str],
    ) -> None:
        """Write one aspect of one provider if it differs from the cache,
        retrying generation conflicts after re-reading that provider.

        :param label: the aspect, as ``changed`` names it
            (``"inventory host1_NUMA0"``).
        :raises GenerationConflict: still conflicting after the retries.
        """
        for attempt in range(MAX_CONFLICT_RETRIES + 1):
            want = target()
            have = self.cache[pd.uuid]
            if want == current(have):
                return
            try:
                self.cache.put(put(have, want))
            except pexc.GenerationConflict as e:
                if attempt == MAX_CONFLICT_RETRIES:
                    raise
                LOG.info("generation conflict on %s (%s, generation %s); "
                         "re-reading it (retry %d of %d)", pd.name, label,
                         e.generation, attempt + 1, MAX_CONFLICT_RETRIES)
                self._sleep(backoff(attempt))
                self.cache.refresh(pd.uuid)
                # NOTE: custom traits/classes the refresh dropped must exist.
                self.ensure_classes_and_traits([pd])
                continue
            changed.append("%s %s" % (label, pd.name))
            return
