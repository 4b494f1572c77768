"""Which hosts are alive: their agents' leases (issue 19, item 3).

Each compute agent holds a lease on its host in the host-state store
(:mod:`compute_plugins.hoststate.agents`), renewed every third of
``[compute] agent_lease_duration``: the agent's only steady-state write. A
host whose lease expired is down (its agent stopped, crashed, hangs or is
cut off from the store): it is no candidate, and the scheduler says so
(``host X is down: its agent's lease expired at T``) instead of offering
it a decision nobody answers.

A long-running scheduler keeps its view of the hosts (:class:`KeptLiveness`):
every host's generation in memory, brought up to date per decision by the
store's change numbers (the hosts written since its last read) and the
leases expired now (the down hosts), a few rows where reading every host's
generation and lease (:func:`read`,
:meth:`~compute_plugins.hoststate.transport.HostPublication.host_statuses`)
was one row per host per decision (issue 19, item 2;
:mod:`compute_plugins.hoststate.changes`). A down host is left out at the
first decision after its lease expired, and back at the first after its
agent renewed it.

A host without a lease (published by a tool, not by an agent) is not
judged. Expiry is compared with this machine's clock: the machines'
clocks must agree to within a small part of the lease duration (NTP).
"""

from __future__ import annotations

import dataclasses
import datetime
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Mapping
from typing import Optional, cast

from compute_plugins.hoststate import database
from compute_plugins.hoststate.records import ChangeMark, HostStatus, StatusChanges, down_reason
from compute_plugins.hoststate.transport import HostPublication, HostStatusFeed
from compute_plugins.plugin.contract import Rejection


@dataclasses.dataclass(frozen=True)
class Liveness:
    """The hosts the store knows, split by their agents' leases.

    :param generations: live host -> its generation (the candidates).
    :param down: down host -> why (one rejection naming the lease's expiry).
    """

    generations: Mapping[str, int]
    down: Mapping[str, tuple[Rejection, ...]]
    #: The live hosts (``generations``' keys), as a set: from a
    #: :class:`KeptLiveness`, the same object from read to read while no
    #: host joined, left, went down or came back, so that what a
    #: scheduler derives from it (:class:`~.view.PlacementView`'s answer
    #: restricted to them) is kept by identity, not made again per
    #: decision for every host. None: not made (:attr:`hosts` makes it).
    live: Optional[frozenset[str]] = dataclasses.field(default=None, compare=False)

    @property
    def hosts(self) -> frozenset[str]:
        """The live hosts (:attr:`live`, else ``generations``' keys)."""
        return self.live if self.live is not None else frozenset(self.generations)


def split(statuses: Mapping[str, HostStatus],
          now: Optional[datetime.datetime] = None) -> Liveness:
    """``statuses`` split into live hosts and down ones at ``now`` (naive
    UTC; default: this machine's clock)."""
    when = database.utcnow() if now is None else now
    generations: dict[str, int] = {}
    down: dict[str, tuple[Rejection, ...]] = {}
    for host, status in statuses.items():
        if status.down(when):
            down[host] = (Rejection(status.down_reason()),)
        else:
            generations[host] = status.generation
    return Liveness(generations, down)


def read(store: HostPublication) -> Liveness:
    """Every host of ``store``, split (one read)."""
    return split(store.host_statuses())


def _reference(store: HostPublication) -> Callable[[], Optional[HostPublication]]:
    """A reference that is ``store`` only, never another store made at its
    address once it is freed (an ``id`` is reused): weak where it can be,
    so that a store replaced is not kept alive."""
    try:
        return weakref.ref(store)
    except TypeError:  # NOTE: an object without weak references
        return lambda: store


#: Seconds between a kept view's full reads of every host: the change
#: numbers miss nothing a current agent writes, but a store restored from
#: a backup under a running scheduler whose counter has passed its mark
#: again before it read, or a writer of an older release, would go unseen
#: until then (a store recreated is another store: its identity is in the
#: mark, :class:`~compute_plugins.hoststate.records.ChangeMark`).
FULL_READ_SECONDS = 600.0


class KeptLiveness:
    """A long-running scheduler's view of the hosts' generations, kept in
    memory and brought up to date per read by what changed (module doc).

    Its first read reads every host, then only the hosts written since and
    the expired leases; every host again when the store says its counter is
    not the one read (a host removed, the store restored or recreated), when
    another store is given, and every :data:`FULL_READ_SECONDS`. Safe to
    share between threads: change reads are one at a time, the periodic
    read of every host goes on beside them, and no lock is held over a
    round trip to the store that :meth:`owners` or :meth:`take_changes`
    waits on (:meth:`_read`). A store without change
    numbers (no :class:`~compute_plugins.hoststate.transport.HostStatusFeed`)
    is read whole every time (:func:`read`).

    :param full_read_seconds: see :data:`FULL_READ_SECONDS`.
    :param clock: monotonic seconds (tests).
    """

    def __init__(self, full_read_seconds: float = FULL_READ_SECONDS,
                 clock: Optional[Callable[[], float]] = None) -> None:
        self.full_read_seconds = full_read_seconds
        self._clock = clock or time.monotonic
        #: The kept state's lock: held over no round trip (:meth:`_read`).
        self._lock = threading.Lock()
        #: Held over a change read and its applying: one at a time, each
        #: from the mark the last one left.
        self._reading = threading.Lock()
        #: A periodic read of every host is under way (:meth:`_read`).
        self._full_running = False
        #: Every host that published -> its generation, as last read.
        self._generations: dict[str, int] = {}
        self._mark: Optional[ChangeMark] = None
        #: The store read last (by reference: :func:`_reference`).
        self._store: Optional[Callable[[], Optional[HostPublication]]] = None
        self._full_at = 0.0
        #: Reads of every host made so far (the first, and those the class
        #: doc lists): what a test or a benchmark counts.
        self.full_reads = 0
        #: The down hosts and the live ones, as last read.
        self._down: frozenset[str] = frozenset()
        self._live: frozenset[str] = frozenset()
        #: The hosts written, gone down or back since :meth:`take_changes`
        #: last took them; None: any host may have changed (a read of
        #: every host since, or none taken yet).
        self._changed: Optional[set[str]] = None
        #: provider uuid -> the host that published it, and host -> its
        #: providers' uuids, as last read (:meth:`owners`).
        self._owners: dict[str, str] = {}
        self._provided: dict[str, tuple[str, ...]] = {}
        #: Whether every read since the last of every host said the
        #: hosts' providers (:attr:`~.records.StatusChanges.providers`):
        #: else the kept ones may miss some, and the store is asked.
        self._owners_kept = False
        #: The store last read (by reference: :func:`_reference`), and
        #: whether it numbers its changes.
        self._feed: Optional[tuple[Callable[[], Optional[HostPublication]], bool]] = None

    def read(self, store: HostPublication,
             now: Optional[datetime.datetime] = None) -> Liveness:
        """The hosts of ``store`` split at ``now`` (naive UTC; default: this
        machine's clock), as :func:`read` would, from what changed since
        the last read."""
        return self._read(store, now, take=False)[0]

    def read_changes(self, store: HostPublication,
                     now: Optional[datetime.datetime] = None
                     ) -> tuple[Liveness, Optional[frozenset[str]]]:
        """:meth:`read`, and :meth:`take_changes` with it, at once: the
        changes taken are those up to this very read, whatever other
        threads read meanwhile. A consumer that prunes by the changes and
        this read's generations must take them so: a read of another
        thread (a scheduler's prefetch) between its read and its take
        would hand it changes its generations predate (a host removed and
        published again, its generation lower, kept with the old state
        until it climbs back to the same number: served that old state)."""
        return self._read(store, now, take=True)

    def _read(self, store: HostPublication, now: Optional[datetime.datetime],
              take: bool) -> tuple[Liveness, Optional[frozenset[str]]]:
        """:meth:`read`, with the changes taken (``take``) or left (None).

        The kept state's lock (:attr:`_lock`) is never held over a round
        trip to the store: :meth:`owners` and :meth:`take_changes` answer
        while a read waits for the database. The change reads are one at
        a time (:attr:`_reading`: each applies what changed since the
        mark the last one left). The periodic read of every host
        (:data:`FULL_READ_SECONDS`) does not hold even that: the other
        threads' reads go on from the kept state while it reads (~40,000
        rows at 10,000 hosts), then what changed since its own snapshot is
        read (one more change read) and both replace the kept state."""
        feed = self._feed
        if feed is None or feed[0]() is not store:
            # NOTE: isinstance() on a runtime protocol looks up each of its
            # members (~10 us): once per store, not per read.
            feed = self._feed = (_reference(store), isinstance(store, HostStatusFeed))
        if not feed[1]:
            with self._lock:
                self._changed = set() if take else None
            return split(store.host_statuses(), now), None
        with self._lock:
            due = (not self._full_running and self._store is not None
                   and self._store() is store
                   and self._clock() - self._full_at >= self.full_read_seconds)
            if due:
                self._full_running = True
        if due:
            try:
                return self._read_every_host(cast(HostStatusFeed, store), store, now, take)
            finally:
                with self._lock:
                    self._full_running = False
        with self._reading:
            # NOTE: the leases judged at this read's time, taken once its
            # turn came (not before its wait): a read applied after
            # another's never judges them at an earlier time (a host that
            # one reported down is not live again in the next).
            when = database.utcnow() if now is None else now
            with self._lock:
                mark = (self._mark if self._store is not None and self._store() is store
                        else None)
                read_at = self._clock()
            changes = cast(HostStatusFeed, store).host_status_changes(mark, when)
            with self._lock:
                return self._apply(store, changes, read_at, when, take)

    def _read_every_host(self, feed: HostStatusFeed, store: HostPublication,
                         now: Optional[datetime.datetime], take: bool
                         ) -> tuple[Liveness, Optional[frozenset[str]]]:
        """The periodic read of every host, no lock held over it; then,
        the change reads held, what changed since its snapshot: both
        applied, in order, under the state's lock (:meth:`_read`). The
        leases are judged by the second read, at its time (``now``: None,
        this machine's clock then): the other threads' reads applied
        while the first one waited judged them later than it began."""
        read_at = self._clock()
        every = feed.host_status_changes(None, database.utcnow() if now is None else now)
        with self._reading:
            when = database.utcnow() if now is None else now
            since = feed.host_status_changes(every.mark, when)
            with self._lock:
                self._apply(store, every, read_at, when, take=False)
                return self._apply(store, since, read_at, when, take)

    def _apply(self, store: HostPublication, changes: StatusChanges, read_at: float,
               when: datetime.datetime, take: bool
               ) -> tuple[Liveness, Optional[frozenset[str]]]:
        """Bring the kept state up to date with ``changes`` (read at
        ``read_at`` by :attr:`_clock`; the lock held), and the hosts split
        at ``when``, with the changes taken (``take``) or left (None)."""
        joined = changes.full
        if changes.full:
            self.full_reads += 1
            self._generations = dict(changes.generations)
            self._store = _reference(store)
            self._full_at = read_at
            self._changed = None
            self._owners = {}
            self._provided = {}
            self._owners_kept = True
        else:
            generations = self._generations
            joined = any(host not in generations for host in changes.generations)
            generations.update(changes.generations)
            if self._changed is not None:
                self._changed.update(changes.generations)
        if changes.providers is None:
            self._owners_kept = False
            self._owners, self._provided = {}, {}
        elif changes.full:
            # NOTE: nothing kept to replace (every host at once, ~30,000
            # uuids at 10,000 hosts): made whole, not host by host.
            self._provided = dict(changes.providers)
            self._owners = {uuid: host for host, uuids in self._provided.items()
                            for uuid in uuids}
        else:
            self._keep_providers(changes.providers)
        self._mark = changes.mark
        generations = dict(self._generations)
        down: dict[str, tuple[Rejection, ...]] = {}
        for host, expired in changes.expired.items():
            # NOTE: the hosts that published only, as host_statuses.
            if generations.pop(host, None) is not None:
                down[host] = (Rejection(down_reason(host, expired)),)
        went = frozenset(down)
        if went != self._down:
            if self._changed is not None:
                self._changed.update(went ^ self._down)
            self._down = went
            joined = True
        if joined:
            # NOTE: made again only when a host joined, left, went down
            # or came back: the same object otherwise (Liveness.live).
            self._live = frozenset(generations)
        taken: Optional[frozenset[str]] = None
        if take:
            taken = None if self._changed is None else frozenset(self._changed)
            self._changed = set()
        return Liveness(generations, down, self._live), taken

    def _keep_providers(self, provided: Mapping[str, tuple[str, ...]]) -> None:
        """Bring the kept providers up to date with those of the hosts
        read (the lock held): each host's replace what it had; a uuid
        another host of the same read took is that host's (the old
        owners' are dropped first)."""
        owners, kept = self._owners, self._provided
        for host, uuids in provided.items():
            before = kept.get(host)
            if before is None or before == uuids:
                continue
            for uuid in before:
                if owners.get(uuid) == host:
                    del owners[uuid]
        for host, uuids in provided.items():
            if kept.get(host) == uuids:
                continue
            kept[host] = uuids
            for uuid in uuids:
                owners[uuid] = host

    def owners(self, store: HostPublication, uuids: Iterable[str]) -> dict[str, str]:
        """provider uuid -> the host that published it, for ``uuids``
        (unknown ones absent), as
        :meth:`~compute_plugins.hoststate.transport.HostPublication.hosts_for_providers`
        answers, from the providers kept with the hosts' generations at
        the last read of ``store``: no read of the store. A host's
        providers change only with its generation, so the kept ones are
        the store's as of that read, the one the caller's plan stands on
        (its live hosts); a uuid they lack was published by no host then
        (a provider Placement holds for something else: a sharing
        provider, a compute node this store does not know). A host that
        publishes other providers after it is read at the next read, and
        the plan that fits it sees its tree changed
        (:meth:`~.view.PlacementView.providers_seen`) and asks Placement
        about it again. Before any read of ``store`` (or on a store
        without change numbers, or a feed that does not say the hosts'
        providers), the store is asked.

        Issue 19: mapping Placement's answer to hosts was a read of the
        store per ask (~3,000 uuids at 1,000 hosts: 47% of the store's
        statement time in a 4-scheduler run)."""
        with self._lock:
            if (self._owners_kept and self._mark is not None
                    and self._store is not None and self._store() is store):
                owners = self._owners
                return {uuid: owners[uuid] for uuid in uuids if uuid in owners}
        return store.hosts_for_providers(uuids)

    def take_changes(self) -> Optional[frozenset[str]]:
        """The hosts written, gone down or come back since the last call
        (by any read since), and none from now on; None when any host may
        have changed (every host was read since, the store cannot tell
        what changed, or this is the first call): what the one consumer
        of the changes (a scheduler's
        :meth:`~.fitting.StateCache.prune`) looks at instead of every
        host. One that prunes by a read's generations takes them with
        that read (:meth:`read_changes`), not after it."""
        with self._lock:
            changed = self._changed
            self._changed = set()
        return None if changed is None else frozenset(changed)


__all__ = ["FULL_READ_SECONDS", "KeptLiveness", "Liveness", "read", "split"]
