"""The report client: one periodic, one write pass (see the package doc).

:class:`ReportClient` puts the parts together: the provider cache
(:mod:`.cache`), the writers (:mod:`.writers`), what is held while in use
(:mod:`.hold`), the reshape (:mod:`.reshape`) and the periodic's error
policy (:mod:`.periodic`). Its own job is the order of a periodic
(bootstrap, refresh, update the tree, sync) and of a write pass (create and
move parents first, custom classes and traits, inventories or the reshape,
traits, aggregates, then deletes children first).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Optional

from oslo_log import log as logging

from compute_plugins import exception
from compute_plugins.placement import client as pclient
from compute_plugins.placement.report.cache import ProviderCache
from compute_plugins.placement.report.hold import HoldPolicy
from compute_plugins.placement.report.periodic import (
    PeriodicResult,
    calls_between,
    failure,
)
from compute_plugins.placement.report.reshape import Reshaper, UpdateTree
from compute_plugins.placement.report.writers import Writers
from compute_plugins.tree.provider_tree import ProviderData, ProviderTree

LOG = logging.getLogger(__name__)


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
        refresh_interval: float = 300,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.placement = placement
        self._cache = ProviderCache(placement, refresh_interval, clock,
                                    on_read=self._after_read)
        self._writers = Writers(placement, self._cache, sleep)
        self._hold = HoldPolicy(placement, self._cache, self._writers)
        self._reshaper = Reshaper(placement, self._cache, self._hold, sleep)
        #: Set by clear_cache (a signal handler): a plain flag, never a lock.
        self._clear_requested = False
        self._periodic = 0

    def _after_read(self) -> None:
        self._hold.after_read()

    @property
    def refresh_interval(self) -> float:
        """Seconds between re-reads of the tree (SIGHUP may change it)."""
        return self._cache.refresh_interval

    @refresh_interval.setter
    def refresh_interval(self, value: float) -> None:
        self._cache.refresh_interval = value

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

    @property
    def cached_uuids(self) -> list[str]:
        return self._cache.uuids()

    def cached(self, uuid: str) -> Optional[ProviderData]:
        """The cached provider (what we believe Placement has), or None."""
        return self._cache.get(uuid)

    def provider_tree(self) -> ProviderTree:
        """A new ProviderTree holding the cache (what Placement has), less
        what is only kept for its consumers."""
        tree = ProviderTree()
        tree.restore(tuple(self._hold.visible()))
        return tree

    # -- the periodic -------------------------------------------------------

    def periodic(self, update_tree: UpdateTree, nodename: str,
                 root_uuid: Optional[str] = None) -> PeriodicResult:
        """Run one compute periodic: update the tree, send what changed.

        Never raises for Placement failures: the cache is cleared, one line
        is logged and the result carries the error (:mod:`.periodic`).

        :param update_tree: ``update_tree(tree, nodename, allocations)``.
        :param nodename: the compute node (name of the root provider).
        :param root_uuid: the root's uuid; default: the project's stable
            uuid for ``nodename``, or the uuid of the provider Placement
            already has under that name
            (:meth:`~.cache.ProviderCache.bootstrap_root`).
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
            failed = failure(e)
            error = failed.error
            if failed.unexpected:
                LOG.debug("periodic failure", exc_info=True)
            if failed.clear_cache:
                self._clear_now()
            LOG.error("periodic %d for %s failed%s: %s", self._periodic,
                      nodename,
                      ", provider cache cleared" if failed.clear_cache else "",
                      error)
        calls = calls_between(before, self.placement.calls.snapshot())
        return PeriodicResult(self._periodic, calls, changed, error,
                              time.perf_counter() - start, reshaped)

    def _periodic_body(self, update_tree: UpdateTree, nodename: str,
                       root_uuid: Optional[str], changed: list[str]) -> bool:
        if root_uuid is None:
            root_uuid = self._cache.bootstrap_root(nodename)
        self._cache.ensure_fresh(root_uuid)
        base = self._cache.snapshot()
        tree = self.provider_tree()
        try:
            update_tree(tree, nodename, None)
        except exception.ReshapeNeeded:
            known_root = root_uuid
            self._reshaper.run(
                update_tree, nodename, root_uuid, self.provider_tree,
                lambda t: self._checked(t, nodename, known_root),
                self.sync, changed)
            return True
        self.sync(self._checked(tree, nodename, root_uuid), base, None,
                  changed)
        return False

    @staticmethod
    def _checked(tree: ProviderTree, nodename: str, root_uuid: str
                 ) -> list[ProviderData]:
        """The tree's providers, refusing a tree that lost its root (which
        would delete every provider of the node)."""
        if not tree.exists(root_uuid):
            raise exception.ComputePluginsError(
                "update_provider_tree left no compute root %s (%s); "
                "nothing was sent to Placement" % (nodename, root_uuid))
        return list(tree.snapshot())

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
        base = self._cache.snapshot() if base is None else base
        desired = list(desired)
        wanted = {pd.uuid: pd for pd in desired}
        # NOTE: only providers of the trees being synced can go; other
        # cached trees (another node, a sharing provider) are not ours here.
        roots = {pd.uuid for pd in desired if pd.parent_uuid is None}
        gone = [u for u in reversed(self._cache.uuids())
                if u not in wanted and self._cache.root_of(u) in roots]

        # Parents first: a new parent exists before a child moves under it.
        for pd in desired:
            self._hold.want_back(pd)
            have = self._cache.get(pd.uuid)
            if have is None:
                self._writers.create(pd)
                changed.append("create %s" % pd.name)
            elif (have.parent_uuid, have.name) != (pd.parent_uuid, pd.name):
                self._writers.move(pd, have)
                changed.append("move %s" % pd.name)
        self._writers.ensure_classes_and_traits(desired)

        if allocations is not None:
            self._reshaper.post(desired, gone, allocations)
            changed.append("reshape %s" % desired[0].name)
        else:
            for pd in desired:
                self._hold.write_inventory(pd, changed)
        for pd in desired:
            self._writers.write_traits(pd, base.get(pd.uuid), changed)
            self._writers.write_aggregates(pd, base.get(pd.uuid), changed)
        for uuid in gone:
            self._hold.delete(uuid, changed)
        self._hold.sync_done()
        return changed
