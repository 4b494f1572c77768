"""Reshape: move inventory and the allocations on it in one request.

When ``update_tree`` raises
:class:`~compute_plugins.exception.ReshapeNeeded`, the report client reads
the allocations of every consumer of the tree
(:meth:`Reshaper.allocations_for_tree`), lets the plugins move them
(``update_tree`` again, with the allocations), and sends the new
inventories with the moved allocations through one ``POST /reshaper``
(:meth:`Reshaper.post`). A generation conflict meanwhile (a provider or a
consumer moved) re-reads the tree and starts again, bounded like other
writes (:meth:`Reshaper.run`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, Optional

from oslo_log import log as logging

from compute_plugins.placement import client as pclient
from compute_plugins.placement import exception as pexc
from compute_plugins.placement.report import records
from compute_plugins.placement.report.cache import ProviderCache
from compute_plugins.placement.report.hold import HoldPolicy
from compute_plugins.placement.report.writers import (
    MAX_CONFLICT_RETRIES,
    backoff,
)
from compute_plugins.tree.provider_tree import ProviderData, ProviderTree

LOG = logging.getLogger(__name__)

#: ``update_tree(tree, nodename, allocations)``: nova's
#: ``update_provider_tree`` semantics (``PluginManager.update_provider_tree``).
UpdateTree = Callable[[ProviderTree, str, Optional[dict[str, Any]]], None]

#: ``sync(desired, base, allocations, changed)``: one write pass.
Sync = Callable[[list[ProviderData], Mapping[str, ProviderData],
                 Optional[dict[str, Any]], list[str]], Any]


class Reshaper:
    """``POST /reshaper`` for the report client.

    :param placement: the Placement client.
    :param cache: the provider cache.
    :param hold: the inventory targets and what is held.
    :param sleep: waits between conflict retries.
    """

    def __init__(self, placement: pclient.PlacementClient,
                 cache: ProviderCache, hold: HoldPolicy,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.placement = placement
        self.cache = cache
        self.hold = hold
        self._sleep = sleep

    def run(self, update_tree: UpdateTree, nodename: str, root_uuid: str,
            provider_tree: Callable[[], ProviderTree],
            checked: Callable[[ProviderTree], list[ProviderData]],
            sync: Sync, changed: list[str]) -> None:
        """Read the allocations, let the plugins move them, reshape.

        A generation conflict (a provider or consumer moved meanwhile)
        re-reads what moved and starts again, bounded like other writes.

        :param provider_tree: a new tree holding the cache, as the plugins
            see it.
        :param checked: the tree's providers, refusing a tree without root.
        :param sync: the write pass that sends the reshape.
        """
        for attempt in range(MAX_CONFLICT_RETRIES + 1):
            LOG.info("reshape needed on %s: reading allocations", nodename)
            allocations = self.allocations_for_tree(root_uuid)
            base = self.cache.snapshot()
            tree = provider_tree()
            update_tree(tree, nodename, allocations)
            desired = checked(tree)
            try:
                sync(desired, base, allocations, changed)
                return
            except pexc.GenerationConflict as e:
                if attempt == MAX_CONFLICT_RETRIES:
                    raise
                LOG.info("reshape of %s conflicted (%s); re-reading the tree "
                         "(retry %d of %d)", nodename, e.detail, attempt + 1,
                         MAX_CONFLICT_RETRIES)
                self._sleep(backoff(attempt))
                self.cache.load_tree(root_uuid)

    def allocations_for_tree(self, root_uuid: str) -> dict[str, Any]:
        """Allocations of every consumer of the tree, as
        ``GET /allocations/{consumer}`` gives them (nova's reshape input)."""
        consumers: set[str] = set()
        for uuid in self.cache.tree_uuids(root_uuid):
            body = self.placement.get(
                "/resource_providers/%s/allocations" % uuid, provider=uuid)
            consumers.update(body["allocations"])
            # NOTE: allocations move a provider's generation too; a provider
            # that moved is re-read so the reshape is based on what it is.
            if body["resource_provider_generation"] != (
                    self.cache[uuid].generation):
                self.cache.refresh(uuid)
        out = {}
        for consumer in sorted(consumers):
            alloc = self.placement.get("/allocations/%s" % consumer)
            # NOTE: a consumer deleted since the provider's listing has no
            # allocations (and no project/user) left: nothing to move.
            if not alloc.get("allocations"):
                LOG.debug("consumer %s left during the reshape", consumer)
                continue
            out[consumer] = alloc
        return out

    def post(self, desired: list[ProviderData], gone: list[str],
             allocations: dict[str, Any]) -> None:
        """The new inventories of ``desired`` (and none for ``gone``) with
        ``allocations``, in one ``POST /reshaper``; then the generations it
        moved are read back."""
        inventories: dict[str, Any] = {}
        targets = {}
        for pd in desired:
            have = self.cache[pd.uuid]
            targets[pd.uuid] = self.hold.inventory_target(pd)
            inventories[pd.uuid] = {
                "resource_provider_generation": have.generation,
                "inventories": targets[pd.uuid],
            }
        # NOTE: providers about to be deleted lose their inventory in the
        # same request, so nothing can be allocated from them in between
        # (nova does the same).
        for uuid in gone:
            if self.hold.skips(uuid):
                continue
            inventories[uuid] = {
                "resource_provider_generation": self.cache[uuid].generation,
                "inventories": {},
            }
            targets[uuid] = {}
        payload = {
            "inventories": inventories,
            "allocations": self.payload(allocations),
        }
        self.placement.post("/reshaper", payload)
        for uuid, inv in targets.items():
            self.cache.put(self.cache[uuid]._replace(
                inventory=records.record(uuid, "", None, None, inv).inventory))
        # The reshaper answers 204: read the new generations in one call.
        for root in {self.cache.root_of(u) for u in targets}:
            self.cache.read_generations(root)

    def payload(self, allocations: dict[str, Any]) -> dict[str, Any]:
        """``allocations`` (``GET /allocations/{consumer}`` shapes) as the
        reshaper takes them (``consumer_type`` from microversion 1.38)."""
        with_type = self.placement.microversion >= (1, 38)
        out = {}
        for consumer, alloc in allocations.items():
            entry = {
                "allocations": {
                    rp: {"resources": dict(a["resources"])}
                    for rp, a in alloc.get("allocations", {}).items()
                },
                "project_id": alloc["project_id"],
                "user_id": alloc["user_id"],
                "consumer_generation": alloc.get("consumer_generation"),
            }
            if with_type:
                entry["consumer_type"] = alloc.get("consumer_type",
                                                   "INSTANCE")
            out[consumer] = entry
        return out
