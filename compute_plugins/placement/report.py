"""The report client: a provider cache that sends Placement only changes.

:class:`ReportClient` is the compute agent's side of nova's
``SchedulerReportClient``, reduced to what the periodic needs and with a
stricter cache:

* bootstrap: one ``GET /resource_providers?in_tree=<root>`` plus the
  inventory, traits and aggregates of each provider found;
* steady state: **zero** calls. The tree handed to ``update_tree`` is built
  from the cache; when the result equals the cache nothing is sent (nova 34
  makes a GET per provider and per consumer every periodic);
* refresh (every ``[compute] resource_provider_association_refresh``
  seconds, 0 = never): one ``GET ?in_tree=``, then only the providers whose
  generation moved are re-read;
* writes: providers created top-down and deleted bottom-up; inventories,
  traits and aggregates written only when they differ from the cache; custom
  traits and resource classes created once;
* what operators set is kept: traits and aggregates are merged three ways
  (what Placement has now, plus what the plugins added, minus what they
  removed); an inventory record without ``reserved`` keeps Placement's
  (an operator's, e.g. draining a device; 0 for a new inventory), a record
  with ``reserved`` (set by a plugin's configuration) wins, as in nova
  (:func:`normalize_inventory`);
* a provider whose parent changed is moved with ``PUT
  /resource_providers/{uuid}`` (microversion 1.37; its allocations stay);
* a node Placement already knows under another uuid (registered by nova)
  is found by name and its provider adopted as the root;
* a ``placement.concurrent_update`` conflict re-reads that one provider and
  retries, bounded and jittered; a provider the plugins removed that has
  allocations (``placement.resource_provider.inuse``) or a class removed
  while allocated (``placement.inventory.inuse``) is kept with ``reserved =
  total`` (one WARNING) and tried again after each read of the tree, the
  rest of the sync goes on; any other Placement failure or unexpected error
  clears the cache and fails the periodic (:class:`PeriodicResult`), logged
  as one line;
* reshape: ``update_tree`` raising ``ReshapeNeeded`` is retried with the
  tree's allocations, and the result goes through ``POST /reshaper``.
"""

from __future__ import annotations

import dataclasses
import random
import time
import types
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Optional

import os_resource_classes
import os_traits
from oslo_log import log as logging

from compute_plugins import exception, names
from compute_plugins.placement import client as pclient
from compute_plugins.placement import exception as pexc
from compute_plugins.provider_tree import ProviderData, ProviderTree

LOG = logging.getLogger(__name__)

#: ``update_tree(tree, nodename, allocations)``: nova's
#: ``update_provider_tree`` semantics (``PluginManager.update_provider_tree``).
UpdateTree = Callable[[ProviderTree, str, Optional[dict[str, Any]]], None]

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
_INVENTORY_FIELDS = ("total",) + tuple(INVENTORY_DEFAULTS)

_STANDARD_RCS = frozenset(os_resource_classes.STANDARDS)
_STANDARD_TRAITS = frozenset(os_traits.get_traits())

#: Placement allows changing a provider's parent from this microversion.
REPARENT_MICROVERSION = (1, 37)

#: Bounded retries of a write that hit a generation conflict.
MAX_CONFLICT_RETRIES = 4
#: Base of the jittered back-off between those retries, in seconds.
RETRY_BASE_DELAY = 0.05


@dataclasses.dataclass
class PeriodicResult:
    """What one periodic did.

    :param periodic: its number, from 1.
    :param calls: Placement calls by ``"METHOD /path/template"``.
    :param changed: what was written (``"inventory host1_NUMA0"``, ...).
    :param error: the one-line failure, or None when it succeeded.
    :param seconds: wall time of the periodic.
    :param reshaped: whether it went through ``POST /reshaper``.
    """

    periodic: int
    calls: dict[str, int]
    changed: list[str]
    error: Optional[str] = None
    seconds: float = 0.0
    reshaped: bool = False

    @property
    def total_calls(self) -> int:
        return sum(self.calls.values())

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "periodic": self.periodic,
            "calls": dict(sorted(self.calls.items())),
            "total_calls": self.total_calls,
            "changed": self.changed,
        }
        if self.reshaped:
            out["reshaped"] = True
        if self.error is not None:
            out["error"] = self.error
        return out


def normalize_inventory(
    record: Mapping[str, Any], theirs: Optional[Mapping[str, Any]] = None,
) -> dict[str, Any]:
    """A full inventory record: Placement's defaults where a field is absent.

    The ``reserved`` rule: a plugin leaves ``reserved`` out of a record
    unless its configuration sets it (the numa plugin's ``MEMORY_MB`` from
    ``[compute] reserved_host_memory_mb``, the disk plugin's ``DISK_GB`` from
    ``[disk] reserved_host_disk_mb``). For a record without ``reserved`` the
    value Placement has now (``theirs``: what an operator set, e.g. to drain
    a device) is kept, and a new inventory gets 0; a record with
    ``reserved`` is configuration and wins, as in nova.
    """
    out = {k: record[k] for k in _INVENTORY_FIELDS if k in record}
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
        if (out["reserved"], out["total"]) not in _CLAMPED:
            _CLAMPED.add((out["reserved"], out["total"]))
            LOG.warning("kept reserved %s is above the new total %s: "
                        "reserving the whole inventory (%s) instead",
                        out["reserved"], out["total"], out["total"])
        out["reserved"] = out["total"]
    return out


#: (reserved, total) pairs already logged by normalize_inventory.
_CLAMPED: set[tuple[Any, Any]] = set()


def _merge_set(
    base: Optional[Iterable[str]], ours: Iterable[str], theirs: Iterable[str]
) -> frozenset[str]:
    """Three-way merge: Placement's set plus our additions minus removals."""
    ours = frozenset(ours)
    if base is None:
        return ours
    base = frozenset(base)
    return (frozenset(theirs) | (ours - base)) - (base - ours)


def _record(
    uuid: str,
    name: str,
    generation: Optional[int],
    parent_uuid: Optional[str],
    inventory: Optional[Mapping[str, Mapping[str, Any]]] = None,
    traits: Iterable[str] = (),
    aggregates: Iterable[str] = (),
) -> ProviderData:
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


def _inv_plain(inv: Mapping[str, Mapping[str, Any]]) -> dict[str, dict]:
    return {rc: dict(rec) for rc, rec in inv.items()}


class ReportClient:
    """Keeps Placement in step with a compute node's provider tree.

    :param placement: the Placement client (embedded or remote).
    :param refresh_interval: ``[compute]
        resource_provider_association_refresh`` in seconds; 0 never refreshes
        (except at bootstrap, after a failure and after :meth:`clear_cache`).
    :param clock: monotonic clock, for tests.
    :param sleep: sleep function used between conflict retries.
    """

    def __init__(
        self,
        placement: pclient.PlacementClient,
        refresh_interval: int = 300,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.placement = placement
        self.refresh_interval = refresh_interval
        self._clock = clock
        self._sleep = sleep
        #: uuid -> what Placement has, parents before children.
        self._cache: dict[str, ProviderData] = {}
        #: Root uuids whose trees are in the cache, with the last refresh.
        self._roots: dict[str, float] = {}
        self._known_traits: set[str] = set()
        self._known_rcs: set[str] = set()
        #: nodename -> uuid of a root found by name (registered by nova).
        #: Kept when the cache is cleared; checked again at each bootstrap.
        self._adopted: dict[str, str] = {}
        #: Set by clear_cache (a signal handler): a plain flag, never a lock.
        self._clear_requested = False
        #: Providers the plugins removed that Placement refused to delete
        #: (allocations): uuid -> their inventory before it was reserved.
        self._held: dict[str, dict[str, dict]] = {}
        #: Inventory classes the plugins removed that are in use:
        #: uuid -> {class: its record before it was reserved}.
        self._held_inventory: dict[str, dict[str, dict]] = {}
        #: uuid -> {class: record}: the reserved to restore when the plugins
        #: want back what was held.
        self._reserved_before: dict[str, dict[str, dict]] = {}
        #: Whether the next sync tries again to remove what is held (set
        #: whenever a tree is read from Placement).
        self._retry_held = False
        self._periodic = 0

    # -- cache --------------------------------------------------------------

    def clear_cache(self) -> None:
        """Forget everything; the next periodic re-reads the tree.

        Safe to call from a signal handler or another thread (it only sets
        a flag): the cache is cleared at the start of the next periodic.
        """
        self._clear_requested = True

    def _clear_now(self) -> None:
        self._clear_requested = False
        self._cache.clear()
        self._roots.clear()
        self._known_traits.clear()
        self._known_rcs.clear()

    @property
    def cached_uuids(self) -> list[str]:
        return list(self._cache)

    def cached(self, uuid: str) -> Optional[ProviderData]:
        """The cached provider (what we believe Placement has), or None."""
        return self._cache.get(uuid)

    def _cache_put(self, record: ProviderData) -> None:
        self._cache[record.uuid] = record

    def _tree_uuids(self, root_uuid: str) -> list[str]:
        """Cached providers of one tree, parents first."""
        members = {root_uuid}
        out = []
        for uuid, rec in self._cache.items():
            if uuid == root_uuid or rec.parent_uuid in members:
                members.add(uuid)
                out.append(uuid)
        return out

    # -- reading Placement --------------------------------------------------

    def _fetch_provider(
        self, uuid: str, name: str, parent_uuid: Optional[str]
    ) -> ProviderData:
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
        return _record(
            uuid, name, generation, parent_uuid,
            inv["inventories"], traits["traits"], aggs["aggregates"],
        )

    def _refresh_provider(self, uuid: str) -> None:
        rec = self._cache[uuid]
        self._cache_put(self._fetch_provider(uuid, rec.name, rec.parent_uuid))

    def _load_tree(self, root_uuid: str) -> list[str]:
        """Read the tree of ``root_uuid``; re-read only providers that moved.

        :returns: the names of the providers re-read.
        """
        listing = self.placement.get(
            "/resource_providers?in_tree=%s" % root_uuid
        )["resource_providers"]
        seen = set()
        moved = []
        # Placement lists a tree in no particular order: parents first here.
        for rp in _parents_first(listing):
            uuid = rp["uuid"]
            seen.add(uuid)
            old = self._cache.get(uuid)
            if (
                old is not None
                and old.generation == rp["generation"]
                and old.name == rp["name"]
                and old.parent_uuid == rp["parent_provider_uuid"]
            ):
                continue
            if old is not None and old.generation == rp["generation"]:
                self._cache_put(old._replace(
                    name=rp["name"], parent_uuid=rp["parent_provider_uuid"]))
                continue
            self._cache_put(self._fetch_provider(
                uuid, rp["name"], rp["parent_provider_uuid"]))
            moved.append(rp["name"])
        for uuid in self._tree_uuids(root_uuid):
            if uuid not in seen:
                del self._cache[uuid]
        # Keep parents before children after insertions.
        self._cache = {u: self._cache[u] for u in _order(self._cache)}
        self._roots[root_uuid] = self._clock()
        # NOTE: what is held is tried again after each read of the tree
        # (refresh, SIGHUP, bootstrap), not at every periodic.
        for held in (self._held, self._held_inventory):
            for uuid in [u for u in held if u not in self._cache]:
                del held[uuid]
        self._retry_held = bool(self._held or self._held_inventory)
        return moved

    def _ensure_fresh(self, root_uuid: str) -> None:
        last = self._roots.get(root_uuid)
        if last is None:
            self._load_tree(root_uuid)
        elif (
            self.refresh_interval > 0
            and self._clock() - last >= self.refresh_interval
        ):
            moved = self._load_tree(root_uuid)
            if moved:
                LOG.info("refreshed providers changed in Placement: %s",
                         ", ".join(moved))

    def _bootstrap_root(self, nodename: str) -> str:
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
        self._load_tree(candidate)
        if candidate in self._cache:
            return candidate
        found = self._find_root_by_name(nodename)
        if found is None or found == candidate:
            self._adopted.pop(nodename, None)
            if candidate != derived:
                self._roots.pop(candidate, None)
                self._load_tree(derived)
            return derived
        LOG.info("compute node %s is registered in Placement as %s: using "
                 "that provider as the root", nodename, found)
        self._roots.pop(candidate, None)
        self._adopted[nodename] = found
        self._load_tree(found)
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

    def provider_tree(self) -> ProviderTree:
        """A new ProviderTree holding the cache (what Placement has)."""
        tree = ProviderTree()
        tree.restore(tuple(self._for_plugins()))
        return tree

    def _for_plugins(self) -> list[ProviderData]:
        """The cache as the plugins see it: what they removed and is kept
        only until its consumers leave (held) is left out."""
        out = []
        for uuid, rec in self._cache.items():
            if uuid in self._held:
                continue
            held_inv = self._held_inventory.get(uuid)
            if held_inv:
                rec = rec._replace(inventory=types.MappingProxyType(
                    {rc: r for rc, r in rec.inventory.items()
                     if rc not in held_inv}))
            out.append(rec)
        return out

    def get_allocations_for_tree(self, root_uuid: str) -> dict[str, Any]:
        """Allocations of every consumer of the tree, as
        ``GET /allocations/{consumer}`` gives them (nova's reshape input)."""
        consumers: set[str] = set()
        for uuid in self._tree_uuids(root_uuid):
            body = self.placement.get(
                "/resource_providers/%s/allocations" % uuid, provider=uuid)
            consumers.update(body["allocations"])
            # NOTE: allocations move a provider's generation too; a provider
            # that moved is re-read so the reshape is based on what it is.
            if body["resource_provider_generation"] != (
                    self._cache[uuid].generation):
                self._refresh_provider(uuid)
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

    # -- the periodic -------------------------------------------------------

    def periodic(self, update_tree: UpdateTree, nodename: str,
                 root_uuid: Optional[str] = None) -> PeriodicResult:
        """Run one compute periodic: update the tree, send what changed.

        Never raises for Placement failures: the cache is cleared, one line
        is logged and the result carries the error.

        :param update_tree: ``update_tree(tree, nodename, allocations)``.
        :param nodename: the compute node (name of the root provider).
        :param root_uuid: the root's uuid; default: the project's stable
            uuid for ``nodename``, or the uuid of the provider Placement
            already has under that name (see :meth:`_bootstrap_root`).
        """
        self._periodic += 1
        start = time.perf_counter()
        before = self.placement.calls.snapshot()
        changed: list[str] = []
        error = None
        reshaped = False
        if self._clear_requested:
            LOG.info("provider cache cleared on request")
            self._clear_now()
        try:
            reshaped = self._periodic_body(
                update_tree, nodename, root_uuid, changed)
        except Exception as e:  # noqa: BLE001 - a periodic must not die
            error = str(e)
            # NOTE: the cache is cleared for a Placement failure (transport,
            # an answer not handled, conflicts past the retries: the cache
            # may no longer be what Placement has) and for unexpected errors;
            # a refusal of ours or of the plugins leaves it right.
            clear = isinstance(e, pexc.PlacementError) or not isinstance(
                e, exception.ComputePluginsError)
            if not isinstance(e, exception.ComputePluginsError):
                error = "%s: %s" % (type(e).__name__, e)
                LOG.debug("periodic failure", exc_info=True)
            if clear:
                self._clear_now()
            LOG.error("periodic %d for %s failed%s: %s", self._periodic,
                      nodename, ", provider cache cleared" if clear else "",
                      error)
        after = self.placement.calls.snapshot()
        calls = {k: v - before.get(k, 0) for k, v in after.items()
                 if v - before.get(k, 0)}
        return PeriodicResult(self._periodic, calls, changed, error,
                              time.perf_counter() - start, reshaped)

    def _periodic_body(self, update_tree: UpdateTree, nodename: str,
                       root_uuid: Optional[str], changed: list[str]) -> bool:
        if root_uuid is None:
            root_uuid = self._bootstrap_root(nodename)
        self._ensure_fresh(root_uuid)
        base = dict(self._cache)
        tree = self.provider_tree()
        try:
            update_tree(tree, nodename, None)
        except exception.ReshapeNeeded:
            self._reshape_periodic(update_tree, nodename, root_uuid, changed)
            return True
        self.sync(self._checked(tree, nodename, root_uuid), base, None,
                  changed)
        return False

    @staticmethod
    def _checked(tree: ProviderTree, nodename: str, root_uuid: str
                 ) -> tuple[ProviderData, ...]:
        """The tree's providers, refusing a tree that lost its root (which
        would delete every provider of the node)."""
        if not tree.exists(root_uuid):
            raise exception.ComputePluginsError(
                "update_provider_tree left no compute root %s (%s); "
                "nothing was sent to Placement" % (nodename, root_uuid))
        return tree.snapshot()

    def _reshape_periodic(self, update_tree: UpdateTree, nodename: str,
                          root_uuid: str, changed: list[str]) -> None:
        """Read the allocations, let the plugins move them, reshape.

        A generation conflict (a provider or consumer moved meanwhile)
        re-reads what moved and starts again, bounded like other writes.
        """
        for attempt in range(MAX_CONFLICT_RETRIES + 1):
            LOG.info("reshape needed on %s: reading allocations", nodename)
            allocations = self.get_allocations_for_tree(root_uuid)
            base = dict(self._cache)
            tree = self.provider_tree()
            update_tree(tree, nodename, allocations)
            desired = self._checked(tree, nodename, root_uuid)
            try:
                self.sync(desired, base, allocations, changed)
                return
            except pexc.GenerationConflict as e:
                if attempt == MAX_CONFLICT_RETRIES:
                    raise
                LOG.info("reshape of %s conflicted (%s); re-reading the tree "
                         "(retry %d of %d)", nodename, e.detail, attempt + 1,
                         MAX_CONFLICT_RETRIES)
                self._sleep(random.uniform(0, RETRY_BASE_DELAY * 2**attempt))
                self._load_tree(root_uuid)

    # -- writing ------------------------------------------------------------

    def sync(
        self,
        desired: Iterable[ProviderData],
        base: Optional[Mapping[str, ProviderData]] = None,
        allocations: Optional[dict[str, Any]] = None,
        changed: Optional[list[str]] = None,
    ) -> list[str]:
        """Make Placement hold ``desired`` (parents first).

        :param base: the cache as it was handed to the plugins (defaults to
            the cache now); used for the three-way merges.
        :param allocations: when not None, inventories and these allocations
            go through one ``POST /reshaper``.
        :returns: what was written, as ``"<what> <provider name>"``.
        """
        changed = [] if changed is None else changed
        base = dict(self._cache) if base is None else base
        desired = list(desired)
        wanted = {pd.uuid: pd for pd in desired}
        # NOTE: only providers of the trees being synced can go; other
        # cached trees (another node, a sharing provider) are not ours here.
        roots = {pd.uuid for pd in desired if pd.parent_uuid is None}
        gone = [u for u in reversed(list(self._cache))
                if u not in wanted and self._root_of(u) in roots]

        # Parents first: a new parent exists before a child moves under it.
        for pd in desired:
            if pd.uuid in self._held:
                # NOTE: the plugins want back a provider that was kept for
                # its consumers: its reserved is what it was before.
                LOG.info("provider %s is wanted again: no longer kept "
                         "reserved", pd.name)
                self._reserved_before[pd.uuid] = self._held.pop(pd.uuid)
            have = self._cache.get(pd.uuid)
            if have is None:
                self._create(pd)
                changed.append("create %s" % pd.name)
            elif (have.parent_uuid, have.name) != (pd.parent_uuid, pd.name):
                self._move(pd, have)
                changed.append("move %s" % pd.name)
        self._ensure_classes_and_traits(desired)

        if allocations is not None:
            self._reshape(desired, gone, allocations)
            changed.append("reshape %s" % desired[0].name)
        else:
            for pd in desired:
                self._write_inventory(pd, changed)
        for pd in desired:
            self._write_traits(pd, base.get(pd.uuid), changed)
            self._write_aggregates(pd, base.get(pd.uuid), changed)
        for uuid in gone:
            self._delete(uuid, changed)
        self._retry_held = False
        return changed

    def _delete(self, uuid: str, changed: list[str]) -> None:
        """Delete a provider the plugins removed; one that has allocations
        (or children kept for theirs) is kept, reserved, until its
        consumers leave."""
        rec = self._cache[uuid]
        if uuid in self._held and not self._retry_held:
            return
        kept_child = next((r for r in self._cache.values()
                           if r.parent_uuid == uuid), None)
        if kept_child is not None:
            self._hold(rec, "its child %s is kept" % kept_child.name,
                       changed)
            return
        try:
            self.placement.delete("/resource_providers/%s" % uuid,
                                  provider=uuid, generation=rec.generation)
        except (pexc.ProviderInUse, pexc.ProviderHasChildren) as e:
            self._hold(rec, "it has allocations (%s)" % e.code, changed)
            return
        del self._cache[uuid]
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
            self._held[rec.uuid] = _inv_plain(rec.inventory)
        self._write_if_changed(
            rec, "reserve",
            lambda: {rc: dict(r, reserved=r["total"]) for rc, r in
                     _inv_plain(self._cache[rec.uuid].inventory).items()},
            lambda have: _inv_plain(have.inventory), self._put_inventory,
            changed)

    def _create(self, pd: ProviderData) -> None:
        body: dict[str, Any] = {"name": pd.name, "uuid": pd.uuid}
        if pd.parent_uuid:
            body["parent_provider_uuid"] = pd.parent_uuid
        rp = self.placement.post("/resource_providers", body, provider=pd.uuid)
        self._cache_put(_record(pd.uuid, pd.name, rp["generation"],
                                pd.parent_uuid))
        root = rp.get("root_provider_uuid") or pd.uuid
        self._roots.setdefault(root, self._clock())

    def _move(self, pd: ProviderData, have: ProviderData) -> None:
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
        self._cache_put(have._replace(
            name=pd.name, parent_uuid=pd.parent_uuid,
            generation=rp.get("generation", have.generation)))
        self._cache = {u: self._cache[u] for u in _order(self._cache)}

    def _ensure_classes_and_traits(self, desired: list[ProviderData]) -> None:
        for pd in desired:
            have = self._cache[pd.uuid]
            for rc in pd.inventory:
                if (rc in _STANDARD_RCS or rc in self._known_rcs
                        or rc in have.inventory):
                    continue
                self.placement.put("/resource_classes/%s" % rc)
                self._known_rcs.add(rc)
            for trait in pd.traits:
                if (trait in _STANDARD_TRAITS or trait in self._known_traits
                        or trait in have.traits):
                    continue
                self.placement.put("/traits/%s" % trait)
                self._known_traits.add(trait)

    # Each aspect of a provider has a small typed writer: what Placement
    # should hold (merged with what it holds now, the cache) and how to PUT
    # it; _write_if_changed does the comparing and the conflict retries.

    def _inventory_target(self, pd: ProviderData,
                          keep_held: Optional[bool] = None
                          ) -> dict[str, dict]:
        """What the provider's inventory should be: the plugins' records,
        plus the classes kept for their consumers (held; left out when
        trying again to remove them, unless ``keep_held``)."""
        have = self._cache[pd.uuid]
        before = self._reserved_before.get(pd.uuid, {})
        out = {rc: normalize_inventory(
                   rec, before.get(rc, have.inventory.get(rc)))
               for rc, rec in pd.inventory.items()}
        if keep_held is None:
            keep_held = not self._retry_held
        if keep_held:
            for rc in self._held_inventory.get(pd.uuid, {}):
                if rc not in out and rc in have.inventory:
                    out[rc] = dict(have.inventory[rc])
        return out

    def _put_inventory(self, have: ProviderData,
                       target: dict[str, dict]) -> ProviderData:
        resp = self.placement.put(
            "/resource_providers/%s/inventories" % have.uuid,
            {"resource_provider_generation": have.generation,
             "inventories": target},
            provider=have.uuid, generation=have.generation)
        return have._replace(
            generation=resp["resource_provider_generation"],
            inventory=_record(have.uuid, have.name, None, None,
                              resp["inventories"]).inventory)

    def _put_traits(self, have: ProviderData,
                    target: frozenset[str]) -> ProviderData:
        resp = self.placement.put(
            "/resource_providers/%s/traits" % have.uuid,
            {"resource_provider_generation": have.generation,
             "traits": sorted(target)},
            provider=have.uuid, generation=have.generation)
        return have._replace(generation=resp["resource_provider_generation"],
                             traits=frozenset(resp["traits"]))

    def _put_aggregates(self, have: ProviderData,
                        target: frozenset[str]) -> ProviderData:
        resp = self.placement.put(
            "/resource_providers/%s/aggregates" % have.uuid,
            {"resource_provider_generation": have.generation,
             "aggregates": sorted(target)},
            provider=have.uuid, generation=have.generation)
        return have._replace(generation=resp["resource_provider_generation"],
                             aggregates=frozenset(resp["aggregates"]))

    def _write_inventory(self, pd: ProviderData, changed: list[str]) -> None:
        held = self._held_inventory.get(pd.uuid, {})
        for rc in [rc for rc in held if rc in pd.inventory]:
            LOG.info("%s of provider %s is wanted again: no longer kept "
                     "reserved", rc, pd.name)
            self._reserved_before.setdefault(pd.uuid, {})[rc] = held.pop(rc)
        try:
            self._write_if_changed(
                pd, "inventory", lambda: self._inventory_target(pd),
                lambda have: _inv_plain(have.inventory), self._put_inventory,
                changed)
        except pexc.InventoryInUse:
            self._hold_inventory(pd, changed)
        self._reserved_before.pop(pd.uuid, None)
        inv = self._cache[pd.uuid].inventory
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
        have = self._cache[pd.uuid]
        held = self._held_inventory.setdefault(pd.uuid, {})
        for rc, rec in sorted(have.inventory.items()):
            if rc in pd.inventory or not usages.get(rc) or rc in held:
                continue
            LOG.warning(
                "%s of provider %s (%s) was removed by the plugins but %d "
                "is allocated: it is kept, reserved, until its consumers "
                "leave", rc, pd.name, pd.uuid, usages[rc])
            held[rc] = dict(rec)

        def target() -> dict[str, dict]:
            out = self._inventory_target(pd, keep_held=False)
            inv = self._cache[pd.uuid].inventory
            for rc in held:
                if rc in inv:
                    out[rc] = dict(inv[rc], reserved=inv[rc]["total"])
            return out

        self._write_if_changed(
            pd, "inventory", target, lambda have: _inv_plain(have.inventory),
            self._put_inventory, changed)

    def _write_traits(self, pd: ProviderData, base: Optional[ProviderData],
                      changed: list[str]) -> None:
        self._write_if_changed(
            pd, "traits",
            lambda: _merge_set(base.traits if base else None, pd.traits,
                               self._cache[pd.uuid].traits),
            lambda have: have.traits, self._put_traits, changed)

    def _write_aggregates(self, pd: ProviderData,
                          base: Optional[ProviderData],
                          changed: list[str]) -> None:
        self._write_if_changed(
            pd, "aggregates",
            lambda: _merge_set(base.aggregates if base else None,
                               pd.aggregates,
                               self._cache[pd.uuid].aggregates),
            lambda have: have.aggregates, self._put_aggregates, changed)

    def _write_if_changed(
        self, pd: ProviderData, label: str, target: Callable[[], Any],
        current: Callable[[ProviderData], Any],
        put: Callable[[ProviderData, Any], ProviderData], changed: list[str],
    ) -> None:
        """Write one aspect of one provider if it differs from the cache,
        retrying generation conflicts after re-reading that provider."""
        for attempt in range(MAX_CONFLICT_RETRIES + 1):
            want = target()
            have = self._cache[pd.uuid]
            if want == current(have):
                return
            try:
                self._cache_put(put(have, want))
            except pexc.GenerationConflict as e:
                if attempt == MAX_CONFLICT_RETRIES:
                    raise
                LOG.info("generation conflict on %s (%s, generation %s); "
                         "re-reading it (retry %d of %d)", pd.name, label,
                         e.generation, attempt + 1, MAX_CONFLICT_RETRIES)
                self._sleep(random.uniform(0, RETRY_BASE_DELAY * 2**attempt))
                self._refresh_provider(pd.uuid)
                # NOTE: custom traits/classes the refresh dropped must exist.
                self._ensure_classes_and_traits([pd])
                continue
            changed.append("%s %s" % (label, pd.name))
            return

    def _reshape(self, desired: list[ProviderData], gone: list[str],
                 allocations: dict[str, Any]) -> None:
        inventories: dict[str, Any] = {}
        targets = {}
        for pd in desired:
            have = self._cache[pd.uuid]
            targets[pd.uuid] = self._inventory_target(pd)
            inventories[pd.uuid] = {
                "resource_provider_generation": have.generation,
                "inventories": targets[pd.uuid],
            }
        # NOTE: providers about to be deleted lose their inventory in the
        # same request, so nothing can be allocated from them in between
        # (nova does the same).
        for uuid in gone:
            if uuid in self._held and not self._retry_held:
                continue
            inventories[uuid] = {
                "resource_provider_generation": self._cache[uuid].generation,
                "inventories": {},
            }
            targets[uuid] = {}
        payload = {
            "inventories": inventories,
            "allocations": self._allocations_payload(allocations),
        }
        self.placement.post("/reshaper", payload)
        for uuid, inv in targets.items():
            self._cache_put(self._cache[uuid]._replace(
                inventory=_record(uuid, "", None, None, inv).inventory))
        # The reshaper answers 204: read the new generations in one call.
        roots = {self._root_of(u) for u in targets}
        for root in roots:
            listing = self.placement.get(
                "/resource_providers?in_tree=%s" % root)["resource_providers"]
            for rp in listing:
                if rp["uuid"] in self._cache:
                    self._cache_put(self._cache[rp["uuid"]]._replace(
                        generation=rp["generation"]))

    def _root_of(self, uuid: str) -> str:
        rec = self._cache[uuid]
        while rec.parent_uuid is not None and rec.parent_uuid in self._cache:
            rec = self._cache[rec.parent_uuid]
        return rec.uuid

    def _allocations_payload(self, allocations: dict[str, Any]
                             ) -> dict[str, Any]:
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


def _order(cache: Mapping[str, ProviderData]) -> list[str]:
    """Uuids of ``cache``, every parent before its children."""
    return [rp["uuid"] for rp in _parents_first(
        {"uuid": u, "parent_provider_uuid": r.parent_uuid}
        for u, r in cache.items())]


def _parents_first(providers: Iterable[Mapping[str, Any]]
                   ) -> list[Mapping[str, Any]]:
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
