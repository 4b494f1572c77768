"""The store's change numbers: a reader asks what changed since it last
read, not every host (issue 19, item 2).

Every write of a host's row (a publish; :mod:`.hosts`) takes the next
number of the store's change counter (``hoststate_changes``, one row) and
records it in the row (``hoststate_hosts.change_number``, indexed), in the
write's transaction; a deletion of a host's row (a rename; :mod:`.agents`)
counts a removal there. A reader reads the counter and the rows numbered
past the number it read last, in one snapshot (:func:`read`).

**No change is missed.** A sequence would not do: on PostgreSQL (and
MySQL) a transaction that took number 10 may commit after one that took 11,
and a reader that read 11 in between would never ask for 10 again. The
counter row is updated by each write transaction, *last* (:func:`stamp`),
and its row lock is held until the commit: a writer takes the next number
only once the previous taker committed, so the numbers are given in commit
order, and a snapshot that holds number N holds every change numbered up to
N (PostgreSQL makes a transaction visible before it releases its locks).
On PostgreSQL a publish that changes documents in place is one statement
(:meth:`~compute_plugins.hoststate.hosts.SqlHostPublication.publish`): it
locks the host's row first and takes its number there (:func:`take_after`),
holding the counter from there to its commit, as :func:`stamp` does.
SQLite has one writer at a time anyway. The lock is held for one statement
and the commit (the publish's other writes came first), so publishes of
different hosts queue only that long; but the commit includes its log
flush, so the store's publishes (every host's together) commit one at a
time, never in a group: at most one a commit latency (measured on one
disk: 540-1,035 a second with 16 publishers, against 2,300-5,400
without the counter; ``doc/source/benchmarks.md``).

**Liveness without the renewals.** The leases' renewals (the one
steady-state write: 1,000 a second at 10,000 hosts) take no change number:
a reader reads the leases that expired at its time (``expires_at <= now``,
indexed: the down hosts, none in a healthy cloud) and holds every other
host alive, the rule of
:meth:`~compute_plugins.hoststate.records.HostStatus.down` (no lease: not
judged).
"""

from __future__ import annotations

import datetime
import functools
from typing import Any, Optional

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Connection

from compute_plugins.hoststate.records import ChangeMark, StatusChanges
from compute_plugins.hoststate.schema import changes as t_changes
from compute_plugins.hoststate.schema import hosts as t_hosts
from compute_plugins.hoststate.schema import leases as t_leases
from compute_plugins.hoststate.schema import providers as t_providers
from compute_plugins.hoststate.schema import store_identity as t_store
from compute_plugins.request.types import FrozenMap


def _take(conn: Connection, removal: bool) -> int:
    """The next change number (a removal counted too when ``removal``)."""
    values = {"last_number": t_changes.c.last_number + 1}
    if removal:
        values["removals"] = t_changes.c.removals + 1
    bump = sa.update(t_changes).where(t_changes.c.id == 1).values(values)
    for _attempt in (1, 2):
        if conn.dialect.update_returning:
            number = conn.execute(bump.returning(t_changes.c.last_number)).scalar()
        else:
            # NOTE: MySQL: no RETURNING; the row is locked by the update.
            conn.execute(bump)
            number = conn.execute(sa.select(t_changes.c.last_number)
                                  .where(t_changes.c.id == 1)).scalar()
        if number is not None:
            return int(number)
        # NOTE: the row a store is made with (engine._seed) was deleted by
        # hand: numbering starts again, and the readers read every host
        # (the counter went back). Made again unless a rival writer made
        # it first (it waits for that one's commit, then numbers itself
        # after it: a plain insert failed as a duplicate key).
        conn.execute(_insert_if_missing(conn))
    raise RuntimeError("the change counter's row (hoststate_changes, id 1) "
                       "is deleted again as it is made")


def _insert_if_missing(conn: Connection) -> Any:
    """The counter's row at 0, an insert that does nothing where a
    concurrent writer inserted it (each backend's own form)."""
    row = {"id": 1, "last_number": 0, "removals": 0}
    name = conn.dialect.name
    if name == "postgresql":
        return postgresql.insert(t_changes).values(row).on_conflict_do_nothing()
    if name == "sqlite":
        return sqlite.insert(t_changes).values(row).on_conflict_do_nothing()
    return sa.insert(t_changes).values(row).prefix_with("IGNORE")


def take_after(condition: Any) -> Any:
    """The next change number as a CTE of one statement (PostgreSQL): the
    counter's ``UPDATE ... RETURNING``, which changes nothing unless
    ``condition`` holds (the statement's write is made). The statement
    reads it where it writes the host's row (its ``change_number``): the
    counter is locked from there to the commit, last, as :func:`stamp`
    locks it; a missing counter row reads as no number (the statement
    writes 0, and :func:`stamp` makes the row)."""
    return (sa.update(t_changes).where(t_changes.c.id == 1, condition)
            .values(last_number=t_changes.c.last_number + 1)
            .returning(t_changes.c.last_number).cte("taken"))


def stamp(conn: Connection, host: str) -> int:
    """In a write transaction that wrote ``host``'s row, *last* (the counter
    is locked until the commit: see the module doc): number the write.

    :returns: the change number it took.
    """
    row = sa.update(t_hosts).where(t_hosts.c.host == host)
    if conn.dialect.name == "postgresql":
        # NOTE: one statement (one round trip): the counter's update in a
        # CTE, its number written into the host's row.
        taken = (sa.update(t_changes).where(t_changes.c.id == 1)
                 .values(last_number=t_changes.c.last_number + 1)
                 .returning(t_changes.c.last_number).cte("taken"))
        found = conn.execute(row.values(
            change_number=sa.func.coalesce(
                sa.select(taken.c.last_number).scalar_subquery(), 0))
            .returning(t_hosts.c.change_number)).scalar()
        if found:
            return int(found)
        # NOTE: 0: the counter's row is missing (_take makes it).
    number = _take(conn, removal=False)
    conn.execute(row.values(change_number=number))
    return number


def count_removal(conn: Connection) -> None:
    """In a write transaction that deleted host rows, last: the readers
    read every host again (a deleted row leaves no number to find)."""
    _take(conn, removal=True)


@functools.cache
def _changes_query() -> Any:
    """The statement of :func:`read` (parameters ``after``, the mark's
    number, and ``now``), built once: building it (a four-part union)
    took ~0.5 ms of the caller's CPU, at every plan of a scheduler."""
    def row(kind: str, host: Any, number: Any, removals: Any, expires: Any,
            uuid: Any) -> Any:
        return (sa.literal(kind).label("kind"), host.label("host"), number.label("number"),
                removals.label("removals"), expires.label("expires_at"),
                uuid.label("uuid"))

    def none(type_: Any) -> Any:
        return sa.cast(sa.null(), type_)

    after = sa.bindparam("after", type_=t_hosts.c.change_number.type)
    now = sa.bindparam("now", type_=t_leases.c.expires_at.type)
    # NOTE: the counter's row carries the store's identity in its host
    # column (no column more in the union).
    identity = sa.cast(sa.select(t_store.c.uuid).where(t_store.c.id == 1)
                       .scalar_subquery(), t_hosts.c.host.type)
    query = sa.union_all(
        sa.select(*row("c", identity, t_changes.c.last_number,
                       t_changes.c.removals, none(t_leases.c.expires_at.type),
                       none(t_providers.c.uuid.type)))
        .where(t_changes.c.id == 1),
        sa.select(*row("h", t_hosts.c.host, t_hosts.c.generation,
                       none(t_changes.c.removals.type), none(t_leases.c.expires_at.type),
                       none(t_providers.c.uuid.type)))
        .where(t_hosts.c.change_number > after),
        sa.select(*row("p", t_providers.c.host, none(t_hosts.c.generation.type),
                       none(t_changes.c.removals.type), none(t_leases.c.expires_at.type),
                       t_providers.c.uuid))
        .select_from(t_providers.join(t_hosts, t_hosts.c.host == t_providers.c.host))
        .where(t_hosts.c.change_number > after),
        sa.select(*row("l", t_leases.c.host, none(t_hosts.c.generation.type),
                       none(t_changes.c.removals.type), t_leases.c.expires_at,
                       none(t_providers.c.uuid.type)))
        .where(t_leases.c.expires_at <= now))
    return query


def read(conn: Connection, since: Optional[ChangeMark],
         now: datetime.datetime, *, whole: bool = True) -> Optional[StatusChanges]:
    """In a read transaction (one snapshot): the hosts written since
    ``since`` (None: every host) with the uuids of their providers, and
    the leases expired at ``now`` (naive UTC). One statement (the counter,
    the hosts numbered past the mark, their providers and the expired
    leases, indexed, ``UNION ALL``): its rows are the changes and the down
    hosts only; a second one reads every host and every provider when the
    counter is not the one the mark was read from.

    A host's providers are written only with its row (its generation and
    number: :mod:`.hosts`), so those of the hosts numbered past the mark
    are every change to which host published which provider: a reader
    that keeps them answers "whose provider is this?" without a read per
    provider (issue 19).

    :param whole: read every host when the mark says so (``conn`` a read
        transaction); else None then: ``conn`` ran the one statement on its
        own (:meth:`~compute_plugins.hoststate.database.Database.read_one`),
        the caller reads again in a transaction."""
    after = -1 if since is None else since.number
    query = _changes_query()
    mark = ChangeMark(0, 0)
    generations: dict[str, int] = {}
    expired: dict[str, datetime.datetime] = {}
    provided: dict[str, list[str]] = {}
    # NOTE: each row unpacked, not read by column name: a read of every
    # host is ~40,000 rows at 10,000 hosts (3 providers each), and the
    # names' look-ups were half of its client CPU.
    for kind, host, number, removals, expires_at, uuid in conn.execute(
            query, {"after": after, "now": now}):
        if kind == "p":
            uuids = provided.get(host)
            if uuids is None:
                provided[host] = [uuid]
            else:
                uuids.append(uuid)
        elif kind == "h":
            generations[host] = int(number)
        elif kind == "c":
            mark = ChangeMark(int(number), int(removals),
                              None if host is None else str(host))
        else:
            expired[host] = expires_at
    # NOTE: a counter behind the mark, other removals, another store: the
    # store was restored, recreated, or a host's row deleted: read every host.
    full = (since is None or since.removals != mark.removals
            or since.number > mark.number or since.store != mark.store)
    if full and since is not None:
        if not whole:
            return None
        generations = {host: int(generation) for host, generation in conn.execute(
            sa.select(t_hosts.c.host, t_hosts.c.generation))}
        provided = {}
        for host, uuid in conn.execute(sa.select(t_providers.c.host, t_providers.c.uuid)):
            provided.setdefault(host, []).append(uuid)
    hosts = sorted(generations)
    return StatusChanges(mark=mark, full=full,
                         generations=FrozenMap({host: generations[host] for host in hosts}),
                         expired=FrozenMap(sorted(expired.items())),
                         providers=FrozenMap(
                             {host: tuple(sorted(provided[host])) if host in provided else ()
                              for host in hosts}))


__all__ = ["count_removal", "read", "stamp", "take_after"]
