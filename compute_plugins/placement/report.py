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
  removed), and an inventory's ``reserved`` stays Placement's unless a
  plugin changed it;
* a ``placement.concurrent_update`` conflict re-reads that one provider and
  retries, bounded and jittered; any other failure clears the cache and
  fails the periodic (:class:`PeriodicResult`), logged as one line;
* reshape: ``update_tree`` raising ``ReshapeNeeded`` is retried with the
  tree's allocations, and the result goes through ``POST /reshaper``.
"""

from __future__ import annotations

import dataclasses
import random
import threading
import time
import types
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
    record: Mapping[str, Any], base: Optional[Mapping[str, Any]] = None,
    theirs: Optional[Mapping[str, Any]] = None,
) -> dict[str, Any]:
    """A full inventory record: Placement's defaults where a field is absent.

    ``reserved`` is the operator's: when the plugin left it out, or left it
    as it was handed (``base``), the value Placement has now (``theirs``) is
    kept.
    """
    out = {k: record[k] for k in _INVENTORY_FIELDS if k in record}
    for key, value in INVENTORY_DEFAULTS.items():
        out.setdefault(key, value)
    if theirs is not None and "reserved" in theirs:
        unchanged = "reserved" not in record or (
            base is not None and record["reserved"] == base.get("reserved")
        )
        if unchanged:
            out["reserved"] = theirs["reserved"]
    if "allocation_ratio" in out:
        out["allocation_ratio"] = float(out["allocation_ratio"])
    return out


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
        self._clear_requested = threading.Event()
        self._periodic = 0

    # -- cache --------------------------------------------------------------

    def clear_cache(self) -> None:
        """Forget everything; the next periodic re-reads the tree.

        Safe to call from a signal handler or another thread: the cache is
        cleared at the start of the next periodic.
        """
        self._clear_requested.set()

    def _clear_now(self) -> None:
        self._cache.clear()
        self._roots.clear()
        self._known_traits.clear()
        self._known_rcs.clear()
        self._clear_requested.clear()

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

    def provider_tree(self) -> ProviderTree:
        """A new ProviderTree holding the cache (what Placement has)."""
        tree = ProviderTree()
        tree.restore(tuple(self._cache.values()))
        return tree

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
            out[consumer] = self.placement.get("/allocations/%s" % consumer)
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
            uuid for ``nodename``.
        """
        self._periodic += 1
        start = time.perf_counter()
        before = self.placement.calls.snapshot()
        changed: list[str] = []
        error = None
        reshaped = False
        root_uuid = root_uuid or names.provider_uuid(nodename)
        if self._clear_requested.is_set():
            LOG.info("provider cache cleared on request")
            self._clear_now()
        try:
            reshaped = self._periodic_body(
                update_tree, nodename, root_uuid, changed)
        except Exception as e:  # noqa: BLE001 - a periodic must not die
            self._clear_now()
            error = str(e)
            if not isinstance(e, exception.ComputePluginsError):
                error = "%s: %s" % (type(e).__name__, e)
                LOG.debug("periodic failure", exc_info=True)
            LOG.error("periodic %d for %s failed, provider cache cleared: %s",
                      self._periodic, nodename, error)
        after = self.placement.calls.snapshot()
        calls = {k: v - before.get(k, 0) for k, v in after.items()
                 if v - before.get(k, 0)}
        return PeriodicResult(self._periodic, calls, changed, error,
                              time.perf_counter() - start, reshaped)

    def _periodic_body(self, update_tree: UpdateTree, nodename: str,
                       root_uuid: str, changed: list[str]) -> bool:
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

        for pd in desired:
            if pd.uuid not in self._cache:
                self._create(pd)
                changed.append("create %s" % pd.name)
        self._ensure_classes_and_traits(desired)

        if allocations is not None:
            self._reshape(desired, base, gone, allocations)
            changed.append("reshape %s" % desired[0].name)
        else:
            for pd in desired:
                self._write(pd, base.get(pd.uuid), "inventory", changed)
        for pd in desired:
            self._write(pd, base.get(pd.uuid), "traits", changed)
            self._write(pd, base.get(pd.uuid), "aggregates", changed)
        for uuid in gone:
            rec = self._cache[uuid]
            self.placement.delete("/resource_providers/%s" % uuid,
                                  provider=uuid, generation=rec.generation)
            del self._cache[uuid]
            changed.append("delete %s" % rec.name)
        return changed

    def _create(self, pd: ProviderData) -> None:
        body: dict[str, Any] = {"name": pd.name, "uuid": pd.uuid}
        if pd.parent_uuid:
            body["parent_provider_uuid"] = pd.parent_uuid
        rp = self.placement.post("/resource_providers", body, provider=pd.uuid)
        self._cache_put(_record(pd.uuid, pd.name, rp["generation"],
                                pd.parent_uuid))
        root = rp.get("root_provider_uuid") or pd.uuid
        self._roots.setdefault(root, self._clock())

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

    def _target(self, pd: ProviderData, base: Optional[ProviderData],
                what: str) -> Any:
        """What Placement should hold for ``what`` of ``pd``, merged with
        what it holds now (the cache)."""
        have = self._cache[pd.uuid]
        if what == "inventory":
            return {
                rc: normalize_inventory(
                    rec,
                    base.inventory.get(rc) if base is not None else None,
                    have.inventory.get(rc),
                )
                for rc, rec in pd.inventory.items()
            }
        if what == "traits":
            return _merge_set(base.traits if base else None, pd.traits,
                              have.traits)
        return _merge_set(base.aggregates if base else None, pd.aggregates,
                          have.aggregates)

    @staticmethod
    def _current(rec: ProviderData, what: str) -> Any:
        if what == "inventory":
            return _inv_plain(rec.inventory)
        return frozenset(getattr(rec, what))

    def _write(self, pd: ProviderData, base: Optional[ProviderData],
               what: str, changed: list[str]) -> None:
        """Write one aspect of one provider if it changed, retrying
        generation conflicts after re-reading that provider."""
        for attempt in range(MAX_CONFLICT_RETRIES + 1):
            target = self._target(pd, base, what)
            have = self._cache[pd.uuid]
            if target == self._current(have, what):
                return
            try:
                self._put(have, what, target)
            except pexc.GenerationConflict as e:
                if attempt == MAX_CONFLICT_RETRIES:
                    raise
                LOG.info("generation conflict on %s (%s, generation %s); "
                         "re-reading it (retry %d of %d)", pd.name, what,
                         e.generation, attempt + 1, MAX_CONFLICT_RETRIES)
                self._sleep(random.uniform(0, RETRY_BASE_DELAY * 2**attempt))
                self._refresh_provider(pd.uuid)
                # NOTE: custom traits/classes the refresh dropped must exist.
                self._ensure_classes_and_traits([pd])
                continue
            changed.append("%s %s" % (what, pd.name))
            return

    def _put(self, have: ProviderData, what: str, target: Any) -> None:
        path = "/resource_providers/%s/%s" % (have.uuid, what.replace(
            "inventory", "inventories"))
        body: dict[str, Any] = {"resource_provider_generation":
                                have.generation}
        if what == "inventory":
            body["inventories"] = target
        else:
            body[what] = sorted(target)
        resp = self.placement.put(path, body, provider=have.uuid,
                                  generation=have.generation)
        generation = resp["resource_provider_generation"]
        if what == "inventory":
            new = have._replace(generation=generation, inventory=_record(
                have.uuid, have.name, None, None, resp["inventories"]
            ).inventory)
        else:
            new = have._replace(generation=generation,
                                **{what: frozenset(resp[what])})
        self._cache_put(new)

    def _reshape(self, desired: list[ProviderData],
                 base: Mapping[str, ProviderData], gone: list[str],
                 allocations: dict[str, Any]) -> None:
        inventories: dict[str, Any] = {}
        targets = {}
        for pd in desired:
            have = self._cache[pd.uuid]
            targets[pd.uuid] = self._target(pd, base.get(pd.uuid), "inventory")
            inventories[pd.uuid] = {
                "resource_provider_generation": have.generation,
                "inventories": targets[pd.uuid],
            }
        # NOTE: providers about to be deleted lose their inventory in the
        # same request, so nothing can be allocated from them in between
        # (nova does the same).
        for uuid in gone:
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
