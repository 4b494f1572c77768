"""The decision queue on the host-state database: decisions addressed to
hosts, their status swapped compare-and-swap.

This is storage only: which swaps are legal, who makes them and what each
side does next is the decision protocol's
(:mod:`compute_plugins.hoststate.protocol`), which asks
:meth:`SqlDecisionQueue.swap_status` for one of its transitions at a time.
The database keeps the one rule that needs its atomicity: a consumer has at
most one decision in force (the unique ``active_consumer`` column, set
while the status is one of :data:`~compute_plugins.hoststate.records.ACTIVE`).
Rejected and released decisions stay as history until purged.

Waiting for a change waits on the store's notifications where it pushes
(PostgreSQL, :mod:`compute_plugins.hoststate.notify`: every status change
notifies the decision's channel, and its host's agent unless the agent made
it), with a slow safety-net read; elsewhere it polls (exponential back-off,
a few indexed reads).
"""

from __future__ import annotations

import datetime
import functools
import json
import time
from collections.abc import Collection, Iterable, Sequence
from typing import Any, Optional

import sqlalchemy as sa
from oslo_log import log as logging
from sqlalchemy.engine import Connection

from compute_plugins.hoststate import database, errors, notify
from compute_plugins.hoststate.records import (
    ACTIVE,
    DecisionStatus,
    HostDecision,
    down_reason,
    statuses,
)
from compute_plugins.hoststate.schema import decisions as t_decisions
from compute_plugins.hoststate.schema import leases as t_leases
from compute_plugins.plugin.contract import Rejection

LOG = logging.getLogger(__name__)

#: Attempts of a submit whose consumer's decision in force keeps changing.
_SUBMIT_ATTEMPTS = 3


def _decision(row: Any) -> HostDecision:
    reasons = tuple(Rejection(reason=r["reason"], provider=r["provider"],
                              plugin=r["plugin"])
                    for r in json.loads(row.reasons or "[]"))
    return HostDecision(id=int(row.id), consumer=row.consumer, host=row.host,
                        spec=row.spec, status=DecisionStatus(row.status),
                        reasons=reasons, created_at=row.created_at,
                        updated_at=row.updated_at)


@functools.cache
def _reads() -> dict[str, Any]:
    """The reads of one decision or of a consumer's, built once (bound
    parameters ``id`` and ``consumer``): a scheduler sends several a
    decision, and building a statement cost it more CPU than executing
    the built one."""
    by_id: Any = sa.bindparam("id")
    consumer: Any = sa.bindparam("consumer")
    return {
        "by id": sa.select(t_decisions).where(t_decisions.c.id == by_id),
        "in force": sa.select(t_decisions).where(t_decisions.c.active_consumer == consumer),
        "latest": sa.select(t_decisions).where(t_decisions.c.consumer == consumer)
        .order_by(t_decisions.c.id.desc()).limit(1),
        # NOTE: the consumer's decision in force and its latest, in one
        # statement (up to two rows; one when they are the same).
        "in force and latest": sa.select(t_decisions).where(sa.or_(
            t_decisions.c.active_consumer == consumer,
            t_decisions.c.id == sa.select(sa.func.max(t_decisions.c.id))
            .where(t_decisions.c.consumer == consumer).scalar_subquery())),
        "history": sa.select(t_decisions).where(t_decisions.c.consumer == consumer)
        .order_by(t_decisions.c.id),
        "with lease": sa.select(t_decisions,
                                t_leases.c.expires_at.label("lease_expires_at"))
        .select_from(t_decisions.outerjoin(t_leases, t_leases.c.host == t_decisions.c.host))
        .where(t_decisions.c.id == by_id),
    }


@functools.cache
def _work_query(wanted: tuple[str, ...], limited: bool) -> Any:
    """The read of a host's decisions in the statuses ``wanted``, oldest
    first (bound parameters ``work_host`` and, when ``limited``,
    ``work_limit``): an agent's read of its work at every decision, built
    once per shape."""
    query = (sa.select(t_decisions)
             .where(t_decisions.c.host == sa.bindparam("work_host"),
                    t_decisions.c.status.in_(wanted))
             .order_by(t_decisions.c.id))
    return query.limit(sa.bindparam("work_limit")) if limited else query


@functools.cache
def _swap_statement(allowed: tuple[str, ...], names: tuple[str, ...],
                    in_statement: bool, fenced: bool) -> Any:
    """A swap of a decision's status (:meth:`SqlDecisionQueue._swap_returning`):
    ``UPDATE ... RETURNING`` of the decision ``swap_id`` from one of the
    statuses ``allowed``, the columns ``names`` set to ``swap_<name>``;
    under the writer's fence (:data:`~compute_plugins.hoststate.database.
    FENCE_BOUND`) when ``fenced``; ``in_statement``: waking the decision's
    channel ``swap_channel`` with ``swap_payload`` (and, unless fenced, its
    host's agent's) by the statement itself. Built once per shape."""
    columns: list[Any] = list(t_decisions.c)
    if in_statement:
        said = sa.bindparam("swap_payload", type_=sa.Text())
        columns.append(notify.notification(
            sa.bindparam("swap_channel", type_=sa.Text()), said))
        if not fenced:
            # NOTE: the host's agent too (its channel made of the row's
            # host by the statement), as whoever is not the agent does.
            columns.append(notify.notification(
                notify.host_channel_of(t_decisions.c.host), said,
                label="notified_host"))
    return (sa.update(t_decisions)
            .where(t_decisions.c.id == sa.bindparam("swap_id"),
                   t_decisions.c.status.in_(allowed),
                   *([database.FENCE_BOUND] if fenced else []))
            .values({name: sa.bindparam("swap_" + name, type_=t_decisions.c[name].type)
                     for name in names})
            .returning(*columns))


def _reasons_text(reasons: Sequence[Rejection]) -> str:
    return database.canonical([{"plugin": str(r.plugin or ""),
                                "provider": str(r.provider or ""),
                                "reason": r.reason} for r in reasons])


class SqlDecisionQueue(database.OnDatabase):
    """Decisions addressed to hosts, on one database (the
    :class:`~compute_plugins.hoststate.transport.DecisionQueue` of the SQL
    store)."""

    def submit_decision(self, consumer: str, host: str, spec: str) -> HostDecision:
        """Address a decision to ``host`` (status pending).

        :param spec: the RequestSpec with its decision, ``to_json()``.
        :raises DecisionExists: the consumer has a decision in force.
        """
        database.check_name("consumer", consumer, database.UUID_LENGTH)
        database.check_name("host name", host, database.NAME_LENGTH)
        try:
            if not isinstance(json.loads(spec), dict):
                raise ValueError("not a JSON object")
        except (TypeError, ValueError) as err:
            raise ValueError("the spec of consumer %s is not a serialised "
                             "RequestSpec: %s" % (consumer, err)) from None
        for _ in range(_SUBMIT_ATTEMPTS):
            try:
                return self._insert(consumer, host, spec, DecisionStatus.PENDING)
            except sa.exc.IntegrityError:
                existing = self.active_decision(consumer)
                if existing is not None:
                    raise errors.DecisionExists(existing) from None
                # NOTE: it was released in between: try again.
        raise errors.HostStateError("consumer %s: could not submit its decision "
                                    "(its decisions keep changing)" % consumer)

    def restore_claim(self, consumer: str, host: str, spec: str) -> HostDecision:
        """Record a claim the host's ledger holds and the store lacks (a
        new or recreated store): a decision of ``host`` for ``consumer``,
        already claimed. Only the host's agent calls it (fenced).

        :raises DecisionExists: the consumer has a decision in force.
        :raises Fenced: the agent's lease is not the host's.
        """
        database.check_name("consumer", consumer, database.UUID_LENGTH)
        database.check_name("host name", host, database.NAME_LENGTH)
        try:
            return self._insert(consumer, host, spec, DecisionStatus.CLAIMED, fenced=True)
        except sa.exc.IntegrityError:
            existing = self.active_decision(consumer)
            if existing is None:
                raise
            raise errors.DecisionExists(existing) from None

    def record_cancel(self, consumer: str, host: str, spec: str,
                      reasons: Sequence[Rejection] = ()) -> HostDecision:
        """Record a decision of ``consumer`` for ``host``, released already
        (the protocol's ``cancel``: a requester's release while none was in
        force). It is never in force (no ``active_consumer``): a scheduler
        that sees it newer than its own decisions stops placing the
        consumer."""
        database.check_name("consumer", consumer, database.UUID_LENGTH)
        database.check_name("host name", host, database.NAME_LENGTH)
        return self._insert(consumer, host, spec, DecisionStatus.RELEASED,
                            tuple(reasons), in_force=False)

    def _insert(self, consumer: str, host: str, spec: str, status: DecisionStatus,
                reasons: tuple[Rejection, ...] = (), in_force: bool = True,
                fenced: bool = False) -> HostDecision:
        """Insert one decision (retried on a lost connection or a lock);
        ``in_force`` ones hold the consumer's one decision in force,
        ``fenced`` ones check the agent's lease in the same transaction.

        :raises sqlalchemy.exc.IntegrityError: the consumer has a decision
            in force already.
        """
        now = database.utcnow()
        values = {"consumer": consumer, "host": host, "spec": spec,
                  "status": status.value,
                  "reasons": _reasons_text(reasons) if reasons else None,
                  "active_consumer": consumer if in_force else None,
                  "created_at": now, "updated_at": now}

        wakes = status == DecisionStatus.PENDING and (self.fence is None
                                                       or self.fence[0] != host)

        def insert() -> HostDecision:
            if fenced:
                with self.db.write() as conn:
                    self.check_fence(conn)
                    new_id = write(conn)
            else:
                # NOTE: one statement (its notification in it on PostgreSQL):
                # one round trip, not a transaction's three.
                new_id = self.db.single(write, retry=False)
            return HostDecision(id=int(new_id), consumer=consumer, host=host,
                                spec=spec, status=status, reasons=reasons,
                                created_at=now, updated_at=now)

        def write(conn: Connection) -> int:
            """The insert on ``conn``; the new decision's id."""
            statement = sa.insert(t_decisions).values(**values)
            if wakes and self.db.notifies_in_statement:
                # NOTE: the host's agent notified by the INSERT itself
                # (its new id in the payload): one round trip less.
                new_id, _ = conn.execute(statement.returning(
                    t_decisions.c.id, notify.notification(
                        notify.host_channel(host),
                        sa.cast(t_decisions.c.id, sa.String())
                        + " " + status.value))).one()
            else:
                key = conn.execute(statement).inserted_primary_key
                # None only for an executemany or a statement that is no INSERT.
                assert key is not None
                new_id = key[0]
                if wakes:
                    self.notify_host(conn, host, "%d %s" % (new_id, status.value))
            return int(new_id)

        return self.db.retrying(insert)

    def get_decision(self, decision_id: int) -> HostDecision:
        """:raises DecisionNotFound: no decision with this id."""
        row = self.db.read_one(lambda conn: conn.execute(
            _reads()["by id"], {"id": decision_id}).one_or_none())
        if row is None:
            raise errors.DecisionNotFound(decision_id)
        return _decision(row)

    def active_decision(self, consumer: str) -> Optional[HostDecision]:
        """The consumer's decision in force (pending, claimed, releasing)."""
        row = self.db.read_one(lambda conn: conn.execute(
            _reads()["in force"], {"consumer": consumer}).one_or_none())
        return None if row is None else _decision(row)

    def latest_decision(self, consumer: str) -> Optional[HostDecision]:
        """The consumer's most recent decision, whatever its status."""
        row = self.db.read_one(lambda conn: conn.execute(
            _reads()["latest"], {"consumer": consumer}).one_or_none())
        return None if row is None else _decision(row)

    def in_force_and_latest(self, consumer: str
                            ) -> tuple[Optional[HostDecision], Optional[HostDecision]]:
        """The consumer's decision in force and its most recent one (the
        same one, or None), in one statement and one snapshot: what a
        scheduler reads before it places a consumer, as
        :meth:`active_decision` and :meth:`latest_decision` would in two."""
        rows = self.db.read_one(lambda conn: conn.execute(
            _reads()["in force and latest"], {"consumer": consumer}).all())
        # NOTE: every row is the consumer's as the database compares it
        # (MariaDB: case and trailing spaces ignored), not Python: the one
        # in force is the row in force (active_consumer is its consumer or
        # None), the latest the newest row.
        active = next((_decision(r) for r in rows if r.active_consumer is not None), None)
        latest = _decision(max(rows, key=lambda r: int(r.id))) if rows else None
        return active, latest

    def history(self, consumer: str) -> list[HostDecision]:
        """Every decision of the consumer, oldest first."""
        with self.db.read() as conn:
            rows = conn.execute(_reads()["history"], {"consumer": consumer}).all()
        return [_decision(r) for r in rows]

    def list_decisions(self, host: str,
                       status: DecisionStatus | str | Iterable[DecisionStatus | str]
                       = DecisionStatus.PENDING,
                       limit: Optional[int] = None) -> list[HostDecision]:
        """The decisions addressed to ``host`` in ``status`` (or any of
        several: one statement), oldest first: an agent's work list
        (pending: to claim or reject; releasing: to free)."""
        wanted = tuple(s.value for s in statuses(status))
        query = _work_query(wanted, limit is not None)
        params = {"work_host": host, "work_limit": limit}
        rows = self.db.read_one(lambda conn: conn.execute(query, params).all())
        return [_decision(r) for r in rows]

    def swap_status(self, decision_id: int, sources: Collection[DecisionStatus],
                    target: DecisionStatus, reasons: Sequence[Rejection] = (),
                    *, move: Optional[str] = None) -> HostDecision:
        """Move the decision to ``target`` if its status is one of
        ``sources``: one conditional ``UPDATE`` (the row lock makes
        concurrent swaps of one decision take turns; one wins).

        :param reasons: recorded with the status when given.
        :param move: the protocol's name of the move, for the error.
        :raises DecisionNotFound: no decision with this id.
        :raises DecisionStatusConflict: its status is not one of ``sources``.
        """
        allowed = tuple(DecisionStatus(s).value for s in sources)
        values: dict[str, Any] = {"status": DecisionStatus(target).value,
                                  "updated_at": database.utcnow()}
        if target not in ACTIVE:
            values["active_consumer"] = None
        if reasons:
            values["reasons"] = _reasons_text(reasons)
        payload = "%d %s" % (decision_id, DecisionStatus(target).value)

        def swap() -> tuple[int, Any]:
            if self.db.single_engine is not None:
                # NOTE: PostgreSQL: the swap's one statement on its own (one
                # round trip, not a transaction's three).
                return self.db.single(lambda conn: self._swap_returning(
                    conn, allowed, values, decision_id, payload), retry=False)
            with self.db.write() as conn:
                if conn.dialect.update_returning:
                    return self._swap_returning(conn, allowed, values, decision_id,
                                                payload)
                self.check_fence(conn)
                result = conn.execute(sa.update(t_decisions).where(
                    t_decisions.c.id == decision_id,
                    t_decisions.c.status.in_(allowed)).values(**values))
                row = conn.execute(sa.select(t_decisions)
                                   .where(t_decisions.c.id == decision_id)).one_or_none()
                if result.rowcount == 1 and row is not None:
                    self._notify_swap(conn, row, self._waiters(row))
            return result.rowcount, row

        count, row = self.db.retrying(swap)
        if row is None:
            raise errors.DecisionNotFound(decision_id)
        decision = _decision(row)
        if count != 1:
            raise errors.DecisionStatusConflict(decision, target.value,
                                                list(allowed), move)
        return decision

    def _swap_returning(self, conn: Connection, allowed: tuple[str, ...],
                        values: dict[str, Any], decision_id: int,
                        payload: str) -> tuple[int, Any]:
        """The swap as one ``UPDATE ... RETURNING`` (PostgreSQL, SQLite):
        the decision ``decision_id`` given ``values`` when its status is
        one of ``allowed``; the fence a condition of its own
        (:meth:`~compute_plugins.hoststate.database.OnDatabase.fence_clauses`),
        the row read back by it, and on PostgreSQL the decision's waiters
        notified by it. Its host's agent,
        when another side made the move, by a statement of its own. Nothing
        matched: the fence is checked (:class:`~compute_plugins.hoststate.
        errors.Fenced`), then the row read for the conflict. The statement
        is built once per shape (:func:`_swap_statement`): every value a
        parameter."""
        in_statement = self.db.notifies_in_statement
        fenced = self.fence is not None
        notified = set()
        statement = _swap_statement(allowed, tuple(values), in_statement, fenced)
        params = {"swap_" + name: value for name, value in values.items()}
        params.update(self.fence_params(), swap_id=decision_id, swap_payload=payload)
        if in_statement:
            channel = notify.decision_channel(decision_id)
            params["swap_channel"] = channel
            notified.add(channel)
        row = conn.execute(statement, params).one_or_none()
        if row is None:
            self.check_fence(conn, share=True)
            return 0, conn.execute(sa.select(t_decisions).where(
                t_decisions.c.id == decision_id)).one_or_none()
        if in_statement and self.fence is None:
            notified.add(notify.host_channel(row.host))
        self._notify_swap(conn, row, [c for c in self._waiters(row) if c not in notified])
        return 1, row

    def _waiters(self, row: Any) -> list[str]:
        """The channels a change of the decision ``row`` wakes: whoever
        waits on the decision, and its host's agent unless the agent made
        the move (:mod:`~compute_plugins.hoststate.notify`)."""
        channels = [notify.decision_channel(int(row.id))]
        if self.fence is None or self.fence[0] != row.host:
            channels.append(notify.host_channel(row.host))
        return channels

    def _notify_swap(self, conn: Connection, row: Any, channels: list[str]) -> None:
        """Wake ``channels`` with the decision's new status."""
        self.db.wake(conn, channels, "%d %s" % (row.id, row.status))

    def wait_for_change(self, decision: HostDecision, timeout: float, *,
                        poll_interval: float = 0.05,
                        max_poll_interval: float = 1.0,
                        until_host_down: bool = False) -> HostDecision:
        """Wait until the decision's status is not ``decision.status``,
        never past the deadline.

        Where the store pushes (PostgreSQL, :mod:`~compute_plugins.hoststate.
        notify`), the decision is read once its change is notified, and
        every ``safety_poll_interval`` seconds in case a notification was
        lost; elsewhere (and while the listening connection is down) it is
        polled with exponential back-off from ``poll_interval`` (> 0) to
        ``max_poll_interval`` seconds.

        A store that is unavailable meanwhile (a database restart, a
        fail-over) is read again until the deadline.

        :param until_host_down: stop as soon as the decision's host is
            down (its agent's lease expired): checked at once, then with
            every read, in the same statement (the decision joined with its
            host's lease); with push, also when the lease it read expires.
        :returns: the decision once changed, or as last read at the deadline.
        :raises StoreUnavailable: the last read, at the deadline, failed.
        :raises HostDown: ``until_host_down`` and the host is down while the
            decision is still unchanged.
        """
        # NOTE: "not >": NaN too (it never passed the deadline).
        if not timeout >= 0:
            raise ValueError("timeout %r: expected seconds >= 0" % (timeout,))
        if not poll_interval > 0:
            # NOTE: 0 made the back-off 0 too: a busy loop on the database.
            raise ValueError("poll_interval %r: expected seconds > 0" % (poll_interval,))
        listener = self.db.listener()
        if listener is None:
            return self._wait(decision, timeout, poll_interval, max_poll_interval,
                              until_host_down, None)
        with listener.subscribe(notify.decision_channel(decision.id)) as changes:
            return self._wait(decision, timeout, poll_interval, max_poll_interval,
                              until_host_down, changes)

    def _wait(self, decision: HostDecision, timeout: float, poll_interval: float,
              max_poll_interval: float, until_host_down: bool,
              changes: Optional[notify.Subscription]) -> HostDecision:
        """:meth:`wait_for_change`, woken by ``changes`` when given."""
        deadline = time.monotonic() + timeout
        delay = poll_interval
        start = decision.status
        unavailable: Optional[errors.StoreUnavailable] = None
        #: The host's lease expiry as last read (None: not read, or none).
        expires: Optional[datetime.datetime] = None

        def read() -> None:
            nonlocal decision, expires, unavailable
            try:
                if until_host_down:
                    decision, expires = self._unless_host_down(decision.id, start)
                else:
                    decision = self.get_decision(decision.id)
                unavailable = None
            except errors.StoreUnavailable as err:
                LOG.warning("waiting for host %s to move decision %d of consumer "
                            "%s: %s", decision.host, decision.id, decision.consumer, err)
                unavailable = err

        # NOTE: with push, read once subscribed: a change committed before
        # is in the store, not in a notification.
        if until_host_down or changes is not None:
            read()
        while decision.status == start:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            if changes is not None and changes.live and unavailable is None:
                pause = min(remaining, changes.safety_poll_interval)
                if expires is not None:
                    # NOTE: a lease that lapses writes nothing: read again
                    # when it would have expired (renewed: a later one).
                    until = (expires - database.utcnow()).total_seconds()
                    pause = min(pause, max(until + 0.01, poll_interval))
                changes.wait(pause)
            else:
                time.sleep(min(delay, remaining))
                delay = min(delay * 2, max(max_poll_interval, poll_interval))
            read()
        if unavailable is not None and decision.status == start:
            raise unavailable
        return decision

    def _unless_host_down(self, decision_id: int, start: DecisionStatus
                          ) -> tuple[HostDecision, Optional[datetime.datetime]]:
        """The decision, read with its host's lease in one statement, and
        when that lease expires (None: the host has none).

        :raises HostDown: it is still ``start`` and the lease expired.
        :raises DecisionNotFound: no such decision.
        """
        row = self.db.read_one(lambda conn: conn.execute(
            _reads()["with lease"], {"id": decision_id}).one_or_none())
        if row is None:
            raise errors.DecisionNotFound(decision_id)
        decision = _decision(row)
        expired = row.lease_expires_at
        if decision.status == start and expired is not None \
                and expired <= database.utcnow():
            raise errors.HostDown(decision, down_reason(decision.host, expired), expired)
        return decision, expired

    def purge_decisions(self, before: datetime.datetime) -> int:
        """Delete rejected and released decisions last changed before
        ``before`` (naive UTC); returns how many."""
        def delete() -> int:
            with self.db.write() as conn:
                return conn.execute(sa.delete(t_decisions).where(
                    t_decisions.c.status.not_in([s.value for s in ACTIVE]),
                    t_decisions.c.updated_at < before)).rowcount
        return self.db.retrying(delete)


__all__ = ["SqlDecisionQueue"]
