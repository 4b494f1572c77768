"""The scheduler's view: what it keeps between decisions (issue 19, item 2).

A long-running :class:`~compute_plugins.scheduler.selection.Scheduler`
does not read every host, nor ask Placement about every host, on every
decision. Per decision it reads, from the host-state store, only what
changed since its last read: the hosts written since and the expired
leases (:class:`~compute_plugins.scheduler.liveness.KeptLiveness` keeps
every host's generation;
:meth:`~compute_plugins.hoststate.transport.HostStatusFeed.host_status_changes`),
and the hosts an operator disabled (a handful of rows); then:

- **Host states** (:class:`~compute_plugins.scheduler.fitting.StateCache`):
  decoded once per host generation. A host's states change only with its
  generation, so only the hosts that published since are read again, and
  only those the decision fits (:func:`scoring_target`).
- **Placement's answer** (:class:`PlacementView`): which hosts have room
  for a request shape (:func:`compute_plugins.scheduler.providers.find`:
  a ``GET /resource_providers`` per group shape, 2-3 MB at 1,000 hosts) is
  kept per shape and served again without asking Placement while it
  stands. Placement stays the arbiter: the allocation the scheduler writes
  (``PUT /allocations``) is checked there atomically, and its 409 (the
  room went to another consumer since) sends the request to the next host
  and leaves that host out of the kept answer for that shape
  (:meth:`PlacementView.refused`) until Placement is asked again. A
  host's room changes with every claim, but its claims are in its
  published state, which the plugins' ``fit`` reads fresh (by generation):
  a kept answer that says "room" for a host that filled up costs a
  rejected fit, never a wrong allocation.

  Placement is asked again about **some hosts only**, one tree at a
  time (``GET /resource_providers?...&in_tree=<root>``: one call per host
  and shape, each listing that host's few providers), and their answers
  merged into the kept one, when: a live host is not in it (a new host,
  one back from down, one forgotten after one of its providers was
  deleted under the scheduler, one that published other providers than
  before: its tree changed, :meth:`PlacementView.providers_seen`); an
  operator disabled or enabled a host (those hosts); and before a request
  is refused: when nothing fits on the kept answer, the hosts it excluded
  (no room then, or refused since with a 409) are asked about again, so a
  request is never refused on a stale view.

  The trees' calls are sent several at once
  (:data:`~compute_plugins.scheduler.providers.PARALLEL_CALLS`: several
  Placement processes answer them side by side).

  It is asked again about **every host** (one call per group shape, each
  listing the whole cloud's matching providers) when: there is none kept
  for the shape; it is older than ``[scheduler] placement_view_seconds``
  (Placement changes no host publishes: an operator's trait or aggregate,
  shared storage; 0 asks on every decision, as without a view), a safety
  net a running scheduler's decisions do not wait for: once an answer is
  :data:`RENEW_AT` of that old, the decision that serves it starts
  asking again about every host in the background (one renewal per shape
  at a time; hosts refused or forgotten meanwhile stay so in the renewed
  answer), which replaces it before it expires, so that a decision on a
  warm view asks Placement nothing but the ``PUT /allocations`` that
  commits it (a renewal that failed leaves the answer to expire and the
  decision that finds it expired to ask, and report the error); more
  hosts are to be asked about than asking tree by tree pays for
  (:meth:`PlacementView.tree_limit`: as many trees as take, by the
  view's own timings, as long as asking every host does; at most
  :data:`MAX_TREES`); a sharing provider gave some host room (a host's
  tree does not hold it); or a host to ask about published no provider.

  What a tree's call costs depends on the Placement: stock Placement
  answers ``in_tree`` with ``resources`` by finding room in the whole
  cloud first (at 10,000 hosts 418 ms of its CPU for one host's tree,
  against 658 ms for every host's), the embedded one
  (:mod:`compute_plugins.placement.embedded`) in that tree only (10-13
  ms of its CPU at 1,000 and 10,000 hosts); so the bound is timed, not
  fixed: against the first one or two trees, against the second dozens
  at 10,000 hosts.

At most :data:`MAX_SHAPES` answers are kept (the least recently asked
is dropped first), and one too old to be served is dropped when another
is kept: a scheduler that sees many request shapes over weeks (flavors,
images' traits, projects' aggregates) does not grow.

The view is per scheduler process (thread-safe), never shared: each
process keeps its own, and Placement and the hosts' agents arbitrate
between them.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Optional

from oslo_log import log as logging

from compute_plugins.hoststate.transport import HostPublication
from compute_plugins.plugin.contract import Rejection
from compute_plugins.request.groups import RequestGroup
from compute_plugins.scheduler import providers

LOG = logging.getLogger(__name__)

#: kube-scheduler's ``minFeasibleNodesToFind``: below this many hosts,
#: every candidate is fitted.
MIN_HOSTS_TO_SCORE = 100
#: kube-scheduler's ``minFeasibleNodesPercentageToFind``: the adaptive
#: percentage never goes below it.
MIN_ADAPTIVE_PERCENTAGE = 5
#: Placement's answers kept at most (request shapes): the least recently
#: asked is dropped first. Each holds the room of every candidate host.
MAX_SHAPES = 256
#: Hosts asked about tree by tree at most, however cheap a tree's call
#: is (``in_tree``: one call per host and shape, each a few providers);
#: more, and every host is asked again (one call per shape, each listing
#: the whole cloud's providers). Below it the bound is measured
#: (:meth:`PlacementView.tree_limit`).
MAX_TREES = 1000
#: Hosts asked about tree by tree at most before a tree's call was timed.
FIRST_TREES = 32
#: The weight of the latest timing in the running averages of
#: :meth:`PlacementView.tree_limit`.
TIMING_WEIGHT = 0.3
#: Why :meth:`PlacementView.find` asks Placement about every host: no
#: answer kept for the shape, the kept one expired
#: (``placement_view_seconds``), a sharing provider gave some host room,
#: a host to ask about published no provider, more hosts to ask about
#: than asking tree by tree pays for (:meth:`PlacementView.tree_limit`).
#: ``renewed``: an answer served past :data:`RENEW_AT` of its age, asked
#: again off the decision's path (:meth:`PlacementView.find`).
ASK_REASONS = ("none kept", "expired", "renewed", "shared", "no tree", "too many trees")
#: The share of ``placement_view_seconds`` after which a kept answer,
#: still served, is asked again in the background (every host, one call
#: per shape): renewed before it expires, so that no decision waits for
#: that ask; one past ``placement_view_seconds`` is never served.
RENEW_AT = 0.9
#: Hosts' states read and fitted together, at least, while a decision
#: looks for hosts that fit (one store read per batch).
MIN_BATCH = 16


def scoring_target(candidates: int, percentage: int,
                   minimum: int = MIN_HOSTS_TO_SCORE) -> int:
    """How many hosts that fit a decision looks for before it stops
    fitting (kube-scheduler's ``numFeasibleNodesToFind``).

    :param candidates: the hosts Placement said have room.
    :param percentage: ``[scheduler] hosts_to_score_percentage``: 0 is
        adaptive (50 % minus 1 % per 125 hosts, at least 5 %: 42 % of
        1,000 hosts, 5 % of 10,000), 100 every host.
    :param minimum: below this many hosts found, every candidate is fitted.
    """
    if candidates <= minimum or percentage >= 100:
        return candidates
    if percentage <= 0:
        percentage = max(50 - candidates // 125, MIN_ADAPTIVE_PERCENTAGE)
    return max(candidates * percentage // 100, minimum)


@dataclasses.dataclass
class _Entry:
    """Placement's answer for one request shape, as last asked."""

    found: providers.ProviderCandidates
    asked: frozenset[str]
    disabled: frozenset[str]
    taken: float
    #: Its renewal (:meth:`PlacementView._renew`) failed: it is not
    #: renewed again, it expires (the decision that finds it expired asks).
    renewal_failed: bool = False
    #: What :meth:`PlacementView.find` last derived from it, with what
    #: from (by identity: ``found``, ``asked`` and the live hosts are
    #: replaced, never changed in place): the live hosts it does not
    #: know, and the answer restricted to the live hosts (complete or
    #: not). A decision on the same live hosts and the same answer reuses
    #: them: as much work as what changed, not as the hosts (a
    #: :class:`~.liveness.KeptLiveness` gives the same live set while no
    #: host joined, left, went down or came back).
    unknown: Optional[tuple[frozenset[str], frozenset[str], frozenset[str]]] = None
    served: dict[bool, tuple[providers.ProviderCandidates, frozenset[str],
                             providers.ProviderCandidates]] = dataclasses.field(
                                 default_factory=dict)


Shape = tuple[providers.Shape, tuple[providers.Need, ...]]


@dataclasses.dataclass
class _Changes:
    """What happened to hosts while a shape's answer was renewed: hosts
    forgotten (a provider deleted, the tree changed) and refused (a 409),
    with why."""

    forgotten: set[str] = dataclasses.field(default_factory=set)
    refused: dict[str, Rejection] = dataclasses.field(default_factory=dict)


def _without(found: providers.ProviderCandidates,
             refused: Mapping[str, Rejection]) -> providers.ProviderCandidates:
    """``found`` with the ``refused`` hosts (Placement's 409) left out,
    each with why."""
    gone = [h for h in refused if h in found.room]
    if not gone:
        return found
    return dataclasses.replace(
        found, hosts=tuple(h for h in found.hosts if h not in refused),
        room={h: r for h, r in found.room.items() if h not in refused},
        excluded={**found.excluded, **{h: (refused[h],) for h in gone}})


class PlacementView:
    """Placement's answers by request shape, kept while they stand (module
    doc).

    :param seconds: how long an answer is served at most (0: never kept).
    :param clock: seconds, monotonic (tests pass their own).
    :param max_shapes: answers kept at most (the least recently asked is
        dropped first); one older than ``seconds`` is dropped when another
        is kept.
    """

    def __init__(self, seconds: float,
                 clock: Callable[[], float] = time.monotonic,
                 max_shapes: int = MAX_SHAPES,
                 max_trees: int = MAX_TREES,
                 runner: Optional[Callable[[Callable[[], None]], None]] = None) -> None:
        self.seconds = seconds
        self._clock = clock
        #: Runs a renewal (:meth:`_renew`) off the decision's path: a
        #: daemon thread (:meth:`_in_thread`; tests pass their own).
        self._runner = runner if runner is not None else self._in_thread
        #: The renewals' threads running now (:meth:`close` waits for them).
        self._threads: set[threading.Thread] = set()
        #: Closed (:meth:`close`): no renewal is started any more.
        self.closed = False
        #: The shapes being renewed -> the hosts forgotten and refused
        #: meanwhile (applied to the renewed answer, asked before them).
        self._renewing: dict[Shape, _Changes] = {}
        self.max_shapes = max(1, max_shapes)
        self.max_trees = max_trees
        #: Requests sent to Placement tree by tree (merged answers).
        self.incremental_calls = 0
        #: Asks about every host, by why (:data:`ASK_REASONS`): what a
        #: benchmark reads to see why a warm view still asks Placement.
        self.full_asks: dict[str, int] = dict.fromkeys(ASK_REASONS, 0)
        #: Hosts asked about tree by tree, by why: not in the kept answer
        #: (new, back, forgotten, tree changed), disabled or enabled since,
        #: excluded by it when nothing fitted (``fresh``).
        self.tree_asks: dict[str, int] = dict.fromkeys(("unknown", "disabled", "fresh"), 0)
        #: Running averages: seconds an ask about every host took, and
        #: seconds per tree of an ask tree by tree (None: not timed yet).
        self.every_host_seconds: Optional[float] = None
        self.tree_seconds: Optional[float] = None
        self._entries: dict[Shape, _Entry] = {}
        #: host -> the providers it published, as last seen (the mapping,
        #: and its uuids).
        self._trees: dict[str, tuple[Mapping[str, str], frozenset[str]]] = {}
        self._lock = threading.Lock()

    def now(self) -> float:
        """The view's clock (what ``since`` of :meth:`find` compares with)."""
        return self._clock()

    def find(self, client: Any, store: HostPublication,
             groups: Sequence[RequestGroup], live: Collection[str],
             fresh: bool = False, since: Optional[float] = None,
             owners: Optional[providers.Owners] = None
             ) -> tuple[providers.ProviderCandidates, bool]:
        """Which of the ``live`` hosts have room for ``groups``.

        :param fresh: nothing fitted on the answer served: ask Placement
            again about every host the kept answer excluded (by tree when
            they are few, else everything), so that a request is refused
            only on what Placement says now.
        :param since: (:meth:`now`) a kept answer taken since then, that
            knows every ``live`` host, is as good as asking now (the
            caller's request asked it, before its plan): a refusal may
            stand on it.
        :param owners: which host published each provider, for the asks
            this makes (None: the store's ``hosts_for_providers``, a read
            per ask; a scheduler passes its kept mapping,
            :meth:`~.liveness.KeptLiveness.owners`).
        :returns: the answer restricted to ``live`` (its ``calls`` are the
            requests sent this time: 0 when kept; its ``complete`` whether
            a refusal may stand on it), and whether Placement was asked
            now.
        """
        key = providers.needs(groups)
        hosts = live if isinstance(live, frozenset) else frozenset(live)
        disabled = frozenset(store.disabled_hosts()) if self.seconds > 0 else frozenset()
        now = self._clock()
        with self._lock:
            entry = self._entries.pop(key, None)
            if entry is not None:
                # NOTE: most recently asked last (dropped last).
                self._entries[key] = entry
        if entry is None or now - entry.taken >= self.seconds:
            return self._ask_all(client, store, groups, key, hosts, disabled, now,
                                 "none kept" if entry is None else "expired",
                                 owners), True
        # NOTE: the hosts the kept answer does not know (new, back from
        # down, forgotten, their tree changed), those an operator disabled
        # or enabled since, and, when nothing fitted on it, those it
        # excluded: asked tree by tree and merged in.
        unknown = self._unknown(entry, hosts)
        switched = ((disabled ^ entry.disabled) & hosts) - unknown
        stale = unknown | switched
        # NOTE: an operator's disabled hosts stay out whatever Placement
        # says: not asked about.
        again = ((set(entry.found.excluded) - disabled) & hosts) - stale if fresh else set()
        stale |= again
        trees = self._trees_of(store, stale) if stale else {}
        if stale and (entry.found.shared or trees is None):
            return self._ask_all(client, store, groups, key, hosts, disabled, now,
                                 "shared" if entry.found.shared else "no tree",
                                 owners), True
        if len(stale) > self.tree_limit():
            found = self._ask_all(client, store, groups, key, hosts, disabled, now,
                                  "too many trees", owners)
            self._trees_untried()
            return found, True
        # NOTE: only a decision that serves the kept answer renews it (one
        # that asked about every host just kept a new one).
        if now - entry.taken >= self.seconds * RENEW_AT and not entry.renewal_failed:
            self._renew(client, store, groups, key, entry, hosts, disabled, now, owners)
        if not stale and since is not None and entry.taken >= since:
            return self._served(entry, hosts, complete=True), False
        if not stale:
            if fresh:
                # NOTE: nothing excluded, nothing unknown: the kept answer
                # is what Placement would say of every host it names.
                return self._served(entry, hosts, complete=True), False
            return self._served(entry, hosts, complete=False), False
        assert trees is not None
        with self._lock:
            for why, count in (("unknown", unknown), ("disabled", switched),
                               ("fresh", again)):
                self.tree_asks[why] += len(count)
        started = time.monotonic()
        part = providers.find(client, store, groups, trees=trees, owners=owners)
        self._timed("tree_seconds", (time.monotonic() - started) / len(trees))
        with self._lock:
            found = entry.found
            entry.found = dataclasses.replace(
                found,
                hosts=tuple(sorted((set(found.hosts) - stale) | set(part.hosts))),
                room={**{h: r for h, r in found.room.items() if h not in stale},
                      **part.room},
                excluded={**{h: r for h, r in found.excluded.items()
                             if h not in stale}, **part.excluded})
            entry.asked = entry.asked | stale
            entry.disabled = disabled
        self.incremental_calls += part.calls
        served = self._served(entry, hosts, complete=fresh)
        return dataclasses.replace(served, calls=part.calls,
                                   queries=served.queries + part.queries), True

    def _ask_all(self, client: Any, store: HostPublication,
                 groups: Sequence[RequestGroup], key: Shape, hosts: frozenset[str],
                 disabled: frozenset[str], now: float, why: str,
                 owners: Optional[providers.Owners] = None
                 ) -> providers.ProviderCandidates:
        """Placement asked about every host (one call per shape), kept
        unless an answer asked since ``now`` was kept meanwhile (a renewal,
        another decision's ask: the newest by when it was asked stays);
        counted under ``why`` (:attr:`full_asks`)."""
        with self._lock:
            self.full_asks[why] += 1
        found = self._timed_find(client, store, groups, hosts, owners)
        if self.seconds > 0:
            with self._lock:
                current = self._entries.get(key)
                if current is None or current.taken <= now:
                    self._keep(key, _Entry(found, hosts, disabled, now))
        return found

    def _renew(self, client: Any, store: HostPublication,
               groups: Sequence[RequestGroup], key: Shape, entry: _Entry,
               hosts: frozenset[str], disabled: frozenset[str], now: float,
               owners: Optional[providers.Owners] = None) -> None:
        """Ask Placement about every host for ``key`` again off the
        decision's path (:attr:`_runner`), once at a time per shape, while
        the kept answer is served; the new answer replaces it unless a
        newer one was kept meanwhile. Hosts forgotten or refused while it
        was asked stay so in it (its answer may predate the change). A
        failed renewal changes nothing: the kept answer (``entry``) is not
        renewed again (not one failing ask and warning per decision), it
        expires as before and the decision that finds it expired asks (and
        reports the error)."""
        with self._lock:
            if key in self._renewing or self.closed:
                return
            changes = self._renewing[key] = _Changes()

        def renew() -> None:
            found = None
            try:
                found = self._timed_find(client, store, groups, hosts, owners)
            except Exception as err:  # noqa: BLE001 - the expiry asks again
                LOG.warning("renewing Placement's answer for a request shape "
                            "failed (it is asked again when it expires): %s", err)
            finally:
                if found is None:
                    with self._lock:
                        self._renewing.pop(key, None)
                        entry.renewal_failed = True
            if found is None:
                return
            # NOTE: the changes recorded and the answer kept under one
            # lock: a 409 or a forgotten host lands in one or the other.
            with self._lock:
                self._renewing.pop(key, None)
                self.full_asks["renewed"] += 1
                found = _without(found, changes.refused)
                current = self._entries.get(key)
                if current is None or current.taken <= now:
                    self._keep(key, _Entry(found, hosts - changes.forgotten,
                                           disabled, now))

        try:
            self._runner(renew)
        except Exception as err:  # noqa: BLE001 - no thread: the expiry asks
            with self._lock:
                self._renewing.pop(key, None)
                entry.renewal_failed = True
            LOG.warning("cannot renew Placement's answer for a request shape "
                        "in the background (it is asked again when it "
                        "expires): %s", err)

    def _in_thread(self, work: Callable[[], None]) -> None:
        """Run ``work`` (a renewal) in a daemon thread, known to
        :meth:`close` until it ends; not at all once the view is closed."""
        def run() -> None:
            try:
                work()
            finally:
                with self._lock:
                    self._threads.discard(thread)

        thread = threading.Thread(target=run, name="placement-view-renewal", daemon=True)
        with self._lock:
            # NOTE: closed since the renewal checked (:meth:`close` ran in
            # between, waiting for the threads known then only): not run.
            if self.closed:
                return
            self._threads.add(thread)
        try:
            thread.start()
        except BaseException:
            with self._lock:
                self._threads.discard(thread)
            raise

    def close(self, timeout: float = 30.0) -> None:
        """Start no renewal any more, and wait up to ``timeout`` seconds in
        all for those running (each one ask of Placement) to end, so that
        none still uses the Placement client or the store once their owner
        closes them. The kept answers are still served, and asked again
        on the decision's path once expired. Closing again does nothing
        more."""
        deadline = time.monotonic() + timeout
        with self._lock:
            self.closed = True
            running = list(self._threads)
        for thread in running:
            thread.join(max(0.0, deadline - time.monotonic()))

    def _timed_find(self, client: Any, store: HostPublication,
                    groups: Sequence[RequestGroup],
                    hosts: frozenset[str], owners: Optional[providers.Owners] = None
                    ) -> providers.ProviderCandidates:
        """Placement asked about every host (one call per shape), timed
        (:attr:`every_host_seconds`)."""
        started = time.monotonic()
        found = providers.find(client, store, groups, hosts=sorted(hosts), owners=owners)
        self._timed("every_host_seconds", time.monotonic() - started)
        return found

    def tree_limit(self) -> int:
        """How many hosts, at most, are asked about tree by tree rather
        than every host at once: as many as take, by this view's running
        averages, as long as one ask about every host (at least 1, at most
        :attr:`max_trees`); :data:`FIRST_TREES` before a tree's ask was
        timed. Each ask about every host it forces raises it a little
        (:meth:`_trees_untried`), so that a tree's ask is timed again."""
        every, tree = self.every_host_seconds, self.tree_seconds
        if every is None or tree is None:
            return min(FIRST_TREES, self.max_trees)
        if tree <= 0:
            return self.max_trees
        return max(1, min(self.max_trees, int(every / tree)))

    def _trees_untried(self) -> None:
        """Every host was asked about because too many were to be asked
        about tree by tree: make a tree's ask look a little cheaper
        (:data:`TIMING_WEIGHT`), as its timing is not renewed meanwhile.

        Without it one slow tree ask (a pause, a cold cache) lowered the
        bound for good once as many hosts as it came back each time: every
        host was asked about on every such decision and a tree's ask was
        never timed again. Now the bound grows back after a few such
        decisions until a tree ask is timed again, which puts it back
        where the timings say."""
        with self._lock:
            if self.tree_seconds is not None:
                self.tree_seconds *= 1 - TIMING_WEIGHT

    def _timed(self, name: str, seconds: float) -> None:
        """Fold ``seconds`` into the running average ``name``."""
        with self._lock:
            before = getattr(self, name)
            setattr(self, name, seconds if before is None
                    else before + TIMING_WEIGHT * (seconds - before))

    def _unknown(self, entry: _Entry, hosts: frozenset[str]) -> frozenset[str]:
        """The ``hosts`` the kept answer does not know (asked not about),
        made again only when either changed (:attr:`_Entry.unknown`)."""
        with self._lock:
            asked, memo = entry.asked, entry.unknown
            if memo is not None and memo[0] is hosts and memo[1] is asked:
                return memo[2]
        unknown = hosts - asked
        with self._lock:
            entry.unknown = (hosts, asked, unknown)
        return unknown

    def _served(self, entry: _Entry, hosts: frozenset[str],
                complete: bool) -> providers.ProviderCandidates:
        """The kept answer restricted to ``hosts``, no call made; the
        same object again while neither changed (:attr:`_Entry.served`)."""
        with self._lock:
            found = entry.found
            memo = entry.served.get(complete)
            if memo is not None and memo[0] is found and memo[1] is hosts:
                return memo[2]
        if hosts.issuperset(found.room) and hosts.issuperset(found.excluded):
            # NOTE: every host it names is live (the usual case): nothing
            # left out, the kept mappings served as they are.
            served = dataclasses.replace(found, calls=0, complete=complete)
        else:
            served = dataclasses.replace(
                found, hosts=tuple(h for h in found.hosts if h in hosts),
                room={h: r for h, r in found.room.items() if h in hosts},
                excluded={h: r for h, r in found.excluded.items() if h in hosts},
                calls=0, complete=complete)
        with self._lock:
            entry.served[complete] = (found, hosts, served)
        return served

    @staticmethod
    def _trees_of(store: HostPublication,
                  hosts: Collection[str]) -> Optional[dict[str, str]]:
        """host -> its root provider's uuid (what ``in_tree`` takes), as it
        published them; None when a host published none."""
        trees = {}
        for host, snapshot in store.get_hosts(sorted(hosts)).items():
            roots = sorted(u for u, name in snapshot.providers.items()
                           if name == snapshot.nodename) or sorted(snapshot.providers)
            if roots:
                trees[host] = roots[0]
        return trees if len(trees) == len(hosts) else None

    def _keep(self, key: Shape, entry: _Entry) -> None:
        """Keep ``entry`` (the lock held); drop the answers too old to be
        served, then the least recently asked beyond :attr:`max_shapes`."""
        self._entries.pop(key, None)
        for old in [k for k, e in self._entries.items()
                    if entry.taken - e.taken >= self.seconds]:
            del self._entries[old]
        while len(self._entries) >= self.max_shapes:
            del self._entries[next(iter(self._entries))]
        self._entries[key] = entry

    def stands(self, groups: Sequence[RequestGroup]) -> bool:
        """Whether :meth:`find` serves a kept answer for ``groups``' shape
        rather than asking Placement about every host (it is young
        enough); nothing read from the store."""
        key = providers.needs(groups)
        with self._lock:
            entry = self._entries.get(key)
        return entry is not None and self._clock() - entry.taken < self.seconds

    def __len__(self) -> int:
        """How many answers are kept."""
        with self._lock:
            return len(self._entries)

    def forget(self, host: str) -> None:
        """One of ``host``'s providers is gone from Placement: the kept
        answers are wrong about its tree; the next plan asks Placement
        again."""
        with self._lock:
            for entry in self._entries.values():
                entry.asked = entry.asked - {host}
            for changes in self._renewing.values():
                changes.forgotten.add(host)

    def refused(self, groups: Sequence[RequestGroup], host: str, why: Rejection) -> None:
        """Placement refused the allocation of ``groups`` on ``host`` (409:
        no room left there): the kept answer for their shape leaves the
        host out, with ``why``, until Placement is asked again (a request
        that fits nowhere else asks it at once)."""
        key = providers.needs(groups)
        with self._lock:
            changes = self._renewing.get(key)
            if changes is not None:
                changes.refused[host] = why
            entry = self._entries.get(key)
            if entry is None or host not in entry.found.room:
                return
            entry.found = _without(entry.found, {host: why})

    def providers_seen(self, host: str, uuids: Mapping[str, str]) -> bool:
        """Record the providers ``host`` published; True when they differ
        from those seen before (its tree changed: the kept answers are
        wrong about it, and Placement is asked about that host again)."""
        seen = self._trees.get(host)
        if seen is not None and seen[0] is uuids:
            # NOTE: the host's kept state fitted again (most candidates of
            # every plan): answered without the lock (a mapping is only
            # ever replaced whole, and this one is the host's last).
            return False
        with self._lock:
            before = self._trees.get(host)
            if before is not None and before[0] is uuids:
                # NOTE: the very mapping seen last (the host's kept
                # state, fitted again): the same providers.
                return False
            tree = frozenset(uuids)
            self._trees[host] = (uuids, tree)
            if before is None or before[1] == tree:
                return False
            for entry in self._entries.values():
                entry.asked = entry.asked - {host}
            for changes in self._renewing.values():
                changes.forgotten.add(host)
        return True

    def forget_gone(self, known: Collection[str]) -> None:
        """Forget the provider trees of hosts no longer in the store
        (``known``: every host it holds, live or down): deleted or renamed
        hosts do not accumulate in a long-running scheduler."""
        with self._lock:
            for host in [h for h in self._trees if h not in known]:
                del self._trees[host]

    def known_trees(self) -> int:
        """How many hosts' provider trees are remembered."""
        return len(self._trees)

    def clear(self) -> None:
        """Forget every kept answer."""
        with self._lock:
            self._entries.clear()


class Rotation:
    """Where the next decision starts fitting candidates
    (kube-scheduler's ``nextStartNodeIndex``): after the hosts the last one
    fitted, so that over decisions every candidate gets fitted, not only
    the first in name order.

    :param start: where the first decision starts (taken modulo the
        number of candidates). A scheduler starts at a random place, so
        that several schedulers fit different hosts and do not all find
        the same best one.
    """

    def __init__(self, start: int = 0) -> None:
        self._next = start
        self._lock = threading.Lock()

    def order(self, hosts: Sequence[str]) -> list[str]:
        """``hosts`` rotated to start where the last decision stopped."""
        if not hosts:
            return []
        with self._lock:
            start = self._next % len(hosts)
        return list(hosts[start:]) + list(hosts[:start])

    def advance(self, fitted: int, total: int) -> None:
        """The last decision fitted ``fitted`` of ``total`` candidates."""
        if total and fitted < total:
            with self._lock:
                self._next = (self._next + fitted) % total


#: Hosts whose weight is within this fraction of one plugin's weight range
#: (its utilization from 0 to 1 times the largest multiplier's magnitude)
#: of the best are equally good: the first choice is drawn among them.
#: kube-scheduler's ``selectHost`` draws among the nodes of the best score,
#: each plugin's score a whole number from 0 to 100: a 1 % step, as here.
TIE_FRACTION = 0.01


def tie_tolerance(factors: Mapping[str, float]) -> float:
    """The weight difference under which two hosts are equally good
    (:data:`TIE_FRACTION` of the largest multiplier's magnitude: 1 % of
    one plugin's utilization at the default multiplier)."""
    return TIE_FRACTION * max((abs(f) for f in factors.values()), default=0.0)


def draw(weights: Sequence[float], subset: int, rng: Optional[Any],
         tolerance: float = 0.0) -> int:
    """The index, among hosts best first (``weights``, in that order), of
    the first choice.

    Drawn at random among the hosts as good as the best (within
    ``tolerance``: :func:`tie_tolerance`), as kube-scheduler's
    ``selectHost`` does, so that several schedulers on the same states do
    not all race for the same host, and a lone one spreads equal hosts'
    first guests without a rule by name; and with ``[scheduler]
    host_subset_size`` > 1 among at least that many of the best (nova's
    option). A best host better than every other by more than
    ``tolerance`` is always first (``host_subset_size`` 1).
    """
    count = len(weights)
    if rng is None or count <= 1:
        return 0
    best = weights[0]
    ties = 1
    while ties < count and best - weights[ties] <= tolerance:
        ties += 1
    pool = min(max(subset, ties), count)
    if pool <= 1:
        return 0
    return int(rng.randrange(pool))


__all__ = ["ASK_REASONS", "FIRST_TREES", "MAX_TREES", "MIN_HOSTS_TO_SCORE", "RENEW_AT",
           "TIE_FRACTION", "PlacementView", "Rotation", "draw", "scoring_target",
           "tie_tolerance"]
