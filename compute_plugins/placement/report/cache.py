"""The provider cache: what the report client believes Placement has.

:class:`ProviderCache` holds one record per provider (parents before
children), the roots whose trees it read and when, the custom traits and
resource classes known to exist, and the roots adopted by name. It reads
Placement only here:

* bootstrap: one ``GET /resource_providers?in_tree=<root>`` plus the
  inventory, traits and aggregates of each provider found; a node that
  Placement already knows under another uuid (registered by nova) is found
  by name and adopted as the root (:meth:`ProviderCache.bootstrap_root`);
* refresh (every ``refresh_interval`` seconds, 0 = never): one ``GET
  ?in_tree=``, then only the providers whose generation moved are re-read
  (:meth:`ProviderCache.ensure_fresh`);
* one provider re-read after a generation conflict
  (:meth:`ProviderCache.refresh`).
"""

from __future__ import annotations

import time
import urllib.parse
from collections.abc import Callable
from typing import Optional

from oslo_log import log as logging

from compute_plugins import exception
from compute_plugins.placement import client as pclient
from compute_plugins.placement.report import records
from compute_plugins.plugin import names
from compute_plugins.tree.provider_tree import ProviderData

LOG = logging.getLogger(__name__)


class ProviderCache:
    """What Placement has, as last read or written by this client.

    :param placement: the Placement client.
    :param refresh_interval: seconds between re-reads of a cached tree; 0
        never re-reads (except at bootstrap and after :meth:`clear`).
    :param clock: monotonic clock.
    :param on_read: called after every read of a tree (bootstrap, refresh,
        after a clear), e.g. to try again what was held.
    """

    def __init__(
        self,
        placement: pclient.PlacementClient,
        refresh_interval: float = 300,
        clock: Callable[[], float] = time.monotonic,
        on_read: Optional[Callable[[], None]] = None,
    ) -> None:
        self.placement = placement
        self.refresh_interval = refresh_interval
        self._clock = clock
        self._on_read = on_read
        #: uuid -> what Placement has, parents before children.
        self._records: dict[str, ProviderData] = {}
        #: Root uuids whose trees are in the cache, with the last refresh.
        self._roots: dict[str, float] = {}
        #: Custom traits and resource classes known to exist in Placement.
        self.known_traits: set[str] = set()
        self.known_rcs: set[str] = set()
        #: nodename -> uuid of a root found by name (registered by nova).
        #: Kept when the cache is cleared; checked again at each bootstrap.
        self._adopted: dict[str, str] = {}

    # -- the records --------------------------------------------------------

    def clear(self) -> None:
        """Forget what Placement has (adopted roots are kept)."""
        self._records.clear()
        self._roots.clear()
        self.known_traits.clear()
        self.known_rcs.clear()

    def __contains__(self, uuid: object) -> bool:
        return uuid in self._records

    def __getitem__(self, uuid: str) -> ProviderData:
        return self._records[uuid]

    def get(self, uuid: str) -> Optional[ProviderData]:
        """The cached record, or None."""
        return self._records.get(uuid)

    def uuids(self) -> list[str]:
        """Every cached uuid, parents first."""
        return list(self._records)

    def records(self) -> list[ProviderData]:
        """Every cached record, parents first."""
        return list(self._records.values())

    def snapshot(self) -> dict[str, ProviderData]:
        """A copy of the records (the base of a three-way merge)."""
        return dict(self._records)

    def put(self, rec: ProviderData) -> None:
        """Record what Placement now has for ``rec.uuid``."""
        self._records[rec.uuid] = rec

    def delete(self, uuid: str) -> None:
        del self._records[uuid]

    def reorder(self) -> None:
        """Parents before children again, after a move or insertions."""
        self._records = {u: self._records[u]
                         for u in records.order(self._records)}

    def tree_uuids(self, root_uuid: str) -> list[str]:
        """Cached providers of one tree, parents first."""
        members = {root_uuid}
        out = []
        for uuid, rec in self._records.items():
            if uuid == root_uuid or rec.parent_uuid in members:
                members.add(uuid)
                out.append(uuid)
        return out

    def root_of(self, uuid: str) -> str:
        """The uuid of the cached root above ``uuid``."""
        rec = self._records[uuid]
        while (rec.parent_uuid is not None
               and rec.parent_uuid in self._records):
            rec = self._records[rec.parent_uuid]
        return rec.uuid

    def mark_read(self, root_uuid: str) -> None:
        """A tree created by this client counts as read now."""
        self._roots.setdefault(root_uuid, self._clock())

    # -- reading Placement --------------------------------------------------

    def fetch(self, uuid: str, name: str, parent_uuid: Optional[str]
              ) -> ProviderData:
        """Read one provider's inventory, traits and aggregates."""
        base = "/resource_providers/%s" % uuid
        inv = self.placement.get(base + "/inventories", provider=uuid)
        traits = self.placement.get(base + "/traits", provider=uuid)
        aggs = self.placement.get(base + "/aggregates", provider=uuid)
        # NOTE: each answer carries the generation it was read at; the
        # latest read is the one a write must be based on.
        generation = max(
            inv["resource_provider_generation"],
            traits["resource_provider_generation"],
            aggs["resource_provider_generation"],
        )
        return records.record(
            uuid, name, generation, parent_uuid,
            inv["inventories"], traits["traits"], aggs["aggregates"],
        )

    def refresh(self, uuid: str) -> None:
        """Re-read one cached provider (after a generation conflict)."""
        rec = self._records[uuid]
        self.put(self.fetch(uuid, rec.name, rec.parent_uuid))

    def load_tree(self, root_uuid: str) -> list[str]:
        """Read the tree of ``root_uuid``; re-read only providers that moved.

        :returns: the names of the providers re-read.
        """
        listing = self.placement.get(
            "/resource_providers?in_tree=%s" % root_uuid
        )["resource_providers"]
        seen = set()
        moved = []
        # Placement lists a tree in no particular order: parents first here.
        for rp in records.parents_first(listing):
            uuid = rp["uuid"]
            seen.add(uuid)
            old = self._records.get(uuid)
            if (
                old is not None
                and old.generation == rp["generation"]
                and old.name == rp["name"]
                and old.parent_uuid == rp["parent_provider_uuid"]
            ):
                continue
            if old is not None and old.generation == rp["generation"]:
                self.put(old._replace(
                    name=rp["name"], parent_uuid=rp["parent_provider_uuid"]))
                continue
            self.put(self.fetch(
                uuid, rp["name"], rp["parent_provider_uuid"]))
            moved.append(rp["name"])
        for uuid in self.tree_uuids(root_uuid):
            if uuid not in seen:
                del self._records[uuid]
        # Keep parents before children after insertions.
        self.reorder()
        self._roots[root_uuid] = self._clock()
        if self._on_read is not None:
            self._on_read()
        return moved

    def read_generations(self, root_uuid: str) -> None:
        """Take the generations of the cached providers of one tree from
        one listing (after a write that answers none, the reshaper)."""
        listing = self.placement.get(
            "/resource_providers?in_tree=%s" % root_uuid)["resource_providers"]
        for rp in listing:
            if rp["uuid"] in self._records:
                self.put(self._records[rp["uuid"]]._replace(
                    generation=rp["generation"]))

    def ensure_fresh(self, root_uuid: str) -> None:
        """Read the tree if it is not cached, or if ``refresh_interval``
        seconds passed since it was."""
        last = self._roots.get(root_uuid)
        if last is None:
            self.load_tree(root_uuid)
        elif (
            self.refresh_interval > 0
            and self._clock() - last >= self.refresh_interval
        ):
            moved = self.load_tree(root_uuid)
            if moved:
                LOG.info("refreshed providers changed in Placement: %s",
                         ", ".join(moved))

    def bootstrap_root(self, nodename: str) -> str:
        """The uuid of ``nodename``'s root, reading its tree if not cached.

        The root is the project's stable uuid for ``nodename``, unless
        Placement already has a provider of that name under another uuid
        (the node was registered by nova): that provider is adopted, so the
        periodics do not fail with ``placement.duplicate_name``.
        """
        derived = names.provider_uuid(nodename)
        candidate = self._adopted.get(nodename, derived)
        if candidate in self._roots:
            return candidate
        self.load_tree(candidate)
        if candidate in self._records:
            return candidate
        found = self._find_root_by_name(nodename)
        if found is None or found == candidate:
            self._adopted.pop(nodename, None)
            if candidate != derived:
                self._roots.pop(candidate, None)
                self.load_tree(derived)
            return derived
        LOG.info("compute node %s is registered in Placement as %s: using "
                 "that provider as the root", nodename, found)
        self._roots.pop(candidate, None)
        self._adopted[nodename] = found
        self.load_tree(found)
        return found

    def _find_root_by_name(self, nodename: str) -> Optional[str]:
        listing = self.placement.get(
            "/resource_providers?name=%s" % urllib.parse.quote(nodename, "")
        )["resource_providers"]
        if not listing:
            return None
        rp = listing[0]
        if rp.get("parent_provider_uuid"):
            raise exception.ComputePluginsError(
                "Placement has a provider named %s (%s) under parent %s; "
                "the compute node's root must be a root provider"
                % (nodename, rp["uuid"], rp["parent_provider_uuid"]))
        return str(rp["uuid"])
