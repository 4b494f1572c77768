"""The moves of instances between hosts on the host-state database.

Storage only, as :mod:`compute_plugins.hoststate.decisions`: which status
changes are legal and who makes them is the move protocol's
(:data:`compute_plugins.hoststate.protocol.MOVE_TRANSITIONS`), which asks
:meth:`SqlMoves.swap_move_status` for one step at a time. The database keeps
the rule that needs its atomicity: one move in force per instance (the
unique ``active_consumer`` column, set while the status is one of
:data:`~compute_plugins.hoststate.records.MOVE_ACTIVE`).

:meth:`SqlMoves.rekey_decision` gives a decision in force to another
consumer (same id, host, status): at a move's hand-over the instance's
source claim becomes the migration consumer's, as its allocation in
Placement does; a revert gives it back.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from typing import Any, Optional

import sqlalchemy as sa

from compute_plugins.hoststate import database, errors
from compute_plugins.hoststate.decisions import _decision, _reasons_text
from compute_plugins.hoststate.records import (
    ACTIVE,
    MOVE_ACTIVE,
    DecisionStatus,
    HostDecision,
    MoveRecord,
    MoveStatus,
)
from compute_plugins.hoststate.schema import decisions as t_decisions
from compute_plugins.hoststate.schema import moves as t_moves
from compute_plugins.plugin.contract import Rejection

#: The kinds of move.
KINDS = ("resize", "migrate", "live-migrate", "evacuate")


def _move(row: Any) -> MoveRecord:
    reasons = tuple(Rejection(reason=r["reason"], provider=r["provider"],
                              plugin=r["plugin"])
                    for r in json.loads(row.reasons or "[]"))
    return MoveRecord(
        id=int(row.id), migration=row.migration, consumer=row.consumer, kind=row.kind,
        source=row.source, dest=row.dest, status=MoveStatus(row.status),
        source_decision=int(row.source_decision),
        dest_decision=None if row.dest_decision is None else int(row.dest_decision),
        spec=row.spec, reasons=reasons, created_at=row.created_at,
        updated_at=row.updated_at)


class SqlMoves(database.OnDatabase):
    """Moves of instances, on one database (mixed into the SQL store)."""

    def start_move(self, migration: str, consumer: str, kind: str, source: str,
                   source_decision: int, spec: str) -> MoveRecord:
        """Record a new move (status preparing).

        :raises MoveExists: the instance has a move in force.
        """
        if kind not in KINDS:
            raise ValueError("move kind %r: expected one of %s" % (kind, ", ".join(KINDS)))
        database.check_name("consumer", consumer, database.UUID_LENGTH)
        database.check_name("migration", migration, database.UUID_LENGTH)
        now = database.utcnow()
        values = {"migration": migration, "consumer": consumer,
                  "active_consumer": consumer, "kind": kind, "source": source,
                  "dest": None, "status": MoveStatus.PREPARING.value,
                  "source_decision": source_decision, "dest_decision": None,
                  "spec": spec, "reasons": None, "created_at": now, "updated_at": now}

        def insert() -> None:
            with self.db.write() as conn:
                conn.execute(sa.insert(t_moves).values(**values))

        try:
            self.db.retrying(insert)
        except sa.exc.IntegrityError:
            existing = self.active_move(consumer)
            if existing is None:
                raise
            raise errors.MoveExists(existing) from None
        found = self.get_move(migration)
        assert found is not None
        return found

    def _one(self, where: Any) -> Optional[MoveRecord]:
        with self.db.read() as conn:
            row = conn.execute(sa.select(t_moves).where(where)
                               .order_by(t_moves.c.id.desc()).limit(1)).one_or_none()
        return None if row is None else _move(row)

    def get_move(self, migration: str) -> Optional[MoveRecord]:
        """The move whose migration consumer is ``migration``."""
        return self._one(t_moves.c.migration == migration)

    def active_move(self, consumer: str) -> Optional[MoveRecord]:
        """The instance's move in force, if any."""
        return self._one(t_moves.c.active_consumer == consumer)

    def latest_move(self, consumer: str) -> Optional[MoveRecord]:
        """The instance's most recent move, whatever its status."""
        return self._one(t_moves.c.consumer == consumer)

    def moves_in_force(self, host: Optional[str] = None) -> list[MoveRecord]:
        """Every move in force, oldest first (``host``: those whose source
        or destination it is, or whose instance has a decision in force on
        it: a destination not recorded yet, its mover stopped)."""
        query = sa.select(t_moves).where(t_moves.c.active_consumer.is_not(None))
        if host is not None:
            on_host = sa.select(t_decisions.c.active_consumer).where(
                t_decisions.c.host == host, t_decisions.c.active_consumer.is_not(None))
            query = query.where(sa.or_(t_moves.c.source == host, t_moves.c.dest == host,
                                       t_moves.c.consumer.in_(on_host)))
        with self.db.read() as conn:
            rows = conn.execute(query.order_by(t_moves.c.id)).all()
        return [_move(r) for r in rows]

    def swap_move_status(self, migration: str, sources: Collection[MoveStatus],
                         target: MoveStatus, *, step: str,
                         dest: Optional[str] = None, dest_decision: Optional[int] = None,
                         reasons: Sequence[Rejection] = ()) -> MoveRecord:
        """Move the move to ``target`` if its status is one of ``sources``
        (one conditional ``UPDATE``); ``dest``, ``dest_decision`` and
        ``reasons`` are recorded with it when given.

        :raises MoveStatusConflict: its status is not one of ``sources``.
        :raises HostStateError: no such move.
        """
        values: dict[str, Any] = {"status": target.value, "updated_at": database.utcnow()}
        if target not in MOVE_ACTIVE:
            values["active_consumer"] = None
        if dest is not None:
            values["dest"] = dest
        if dest_decision is not None:
            values["dest_decision"] = dest_decision
        if reasons:
            values["reasons"] = _reasons_text(reasons)

        def swap() -> int:
            with self.db.write() as conn:
                self.check_fence(conn)
                return int(conn.execute(
                    sa.update(t_moves).where(
                        t_moves.c.migration == migration,
                        t_moves.c.status.in_([s.value for s in sources]))
                    .values(**values)).rowcount)

        count = self.db.retrying(swap)
        found = self.get_move(migration)
        if found is None:
            raise errors.HostStateError("no move with migration consumer %s" % migration)
        if count != 1:
            raise errors.MoveStatusConflict(found, step, [s.value for s in sources])
        return found

    def rekey_decision(self, decision_id: int, old: str, new: str,
                       statuses: Collection[DecisionStatus] = ACTIVE) -> HostDecision:
        """Give the decision in force ``decision_id`` of consumer ``old`` to
        consumer ``new`` (its id, host, spec and status kept) when its
        status is one of ``statuses`` (a hand-over: claimed only, never one
        being released). Done already (the decision is ``new``'s): returned
        as it is.

        :raises DecisionExists: ``new`` has another decision in force.
        :raises DecisionNotFound: no such decision.
        :raises HostStateError: it is another consumer's, or not in force.
        """
        database.check_name("consumer", new, database.UUID_LENGTH)

        def update() -> int:
            with self.db.write() as conn:
                self.check_fence(conn)
                count = int(conn.execute(
                    sa.update(t_decisions).where(
                        t_decisions.c.id == decision_id,
                        t_decisions.c.consumer == old,
                        t_decisions.c.status.in_([s.value for s in statuses]))
                    .values(consumer=new, active_consumer=new,
                            updated_at=database.utcnow())).rowcount)
                if count:
                    # Where the store pushes, the host's agent follows the
                    # re-key at once instead of at its safety-net poll.
                    host = conn.execute(sa.select(t_decisions.c.host).where(
                        t_decisions.c.id == decision_id)).scalar_one()
                    self.notify_host(conn, host, "%d rekeyed" % decision_id)
                return count

        try:
            count = self.db.retrying(update)
        except sa.exc.IntegrityError:
            with self.db.read() as conn:
                held = conn.execute(sa.select(t_decisions).where(
                    t_decisions.c.active_consumer == new)).one_or_none()
            if held is None:
                raise
            raise errors.DecisionExists(_decision(held)) from None
        with self.db.read() as conn:
            row = conn.execute(sa.select(t_decisions).where(
                t_decisions.c.id == decision_id)).one_or_none()
        if row is None:
            raise errors.DecisionNotFound(decision_id)
        decision = _decision(row)
        if count != 1 and (decision.consumer != new or decision.status not in ACTIVE):
            raise errors.HostStateError(
                "decision %d cannot be given to consumer %s: it is consumer %s's, %s"
                % (decision_id, new, decision.consumer, decision.status.value))
        return decision


__all__ = ["KINDS", "SqlMoves"]
