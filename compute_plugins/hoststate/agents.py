"""What the host-state store keeps about the agents themselves: the
store's identity, each host's agent lease (one agent per host), and the
move of a host's records when an operator renames it.

One agent per host (issue 20): an agent takes its host's lease before it
writes anything, renews it while it runs, and carries the lease's epoch
(the fencing token) on every write (:meth:`SqlAgentLeases.fenced`): a
write whose token is not the host's lease any more is refused
(:class:`~compute_plugins.hoststate.errors.Fenced`). Another node (another
state directory) cannot take a lease in force
(:class:`~compute_plugins.hoststate.errors.AgentLeaseHeld`); it takes over
a lease that expired (its holder crashed or hangs), under a new epoch. The
same node takes its own lease back at once: its state directory's lock
says the previous process is gone.

Expiry is set and compared by the database server's clock
(:func:`~compute_plugins.hoststate.database.server_now`): the agents'
machines' clocks do not matter. SQLite, a local file, has no server: its
users' clocks must agree (one machine, or NTP).
"""

from __future__ import annotations

import copy
import datetime
import functools
import json
import uuid
from typing import Any, Optional, TypeVar

import sqlalchemy as sa
from sqlalchemy.engine import Connection

from compute_plugins.hoststate import changes, database, errors
from compute_plugins.hoststate import engine as engines
from compute_plugins.hoststate.records import AgentLease
from compute_plugins.hoststate.schema import decisions as t_decisions
from compute_plugins.hoststate.schema import disabled as t_disabled
from compute_plugins.hoststate.schema import hosts as t_hosts
from compute_plugins.hoststate.schema import leases as t_leases
from compute_plugins.hoststate.schema import providers as t_providers
from compute_plugins.hoststate.schema import states as t_states
from compute_plugins.hoststate.schema import store_identity as t_store

S = TypeVar("S", bound="SqlAgentLeases")

#: Longest holder description kept (its column's size).
_HOLDER_LENGTH = 255


def _duration(seconds: float) -> datetime.timedelta:
    if not seconds > 0 or seconds != seconds or seconds == float("inf"):
        raise ValueError("lease duration %r: expected seconds > 0" % (seconds,))
    return datetime.timedelta(seconds=seconds)


@functools.cache
def _renew_statement() -> Any:
    """The heartbeat on PostgreSQL: the lease of ``lease_host`` at
    ``lease_epoch`` extended to the server's clock plus ``lease_length``,
    its expiry returned (:meth:`SqlAgentLeases.renew_lease`)."""
    now = sa.func.timezone("UTC", sa.func.clock_timestamp(), type_=sa.DateTime())
    return (sa.update(t_leases)
            .where(t_leases.c.host == sa.bindparam("lease_host"),
                   t_leases.c.epoch == sa.bindparam("lease_epoch"))
            .values(expires_at=now + sa.bindparam("lease_length", type_=sa.Interval()))
            .returning(t_leases.c.expires_at))


class SqlAgentLeases(database.OnDatabase):
    """The store's identity and the hosts' agent leases, on one database."""

    # -- the store's identity ----------------------------------------------

    def store_id(self) -> str:
        """The store's uuid, made the first time it is asked for: another
        uuid than the one a ledger recorded means another store (recreated,
        or emptied)."""
        with self.db.read() as conn:
            found = conn.execute(sa.select(t_store.c.uuid)
                                 .where(t_store.c.id == 1)).scalar()
        if found is not None:
            return str(found)
        try:
            with self.db.write() as conn:
                conn.execute(sa.insert(t_store).values(
                    id=1, uuid=str(uuid.uuid4()), created_at=database.utcnow()))
        except sa.exc.IntegrityError:
            pass  # NOTE: another opener made it first: read theirs.
        with self.db.read() as conn:
            return str(conn.execute(sa.select(t_store.c.uuid)
                                    .where(t_store.c.id == 1)).scalar_one())

    # -- leases -------------------------------------------------------------

    def get_lease(self, host: str) -> AgentLease | None:
        """The lease of ``host`` (None: no agent ever took it here)."""
        with self.db.read() as conn:
            row = conn.execute(sa.select(t_leases).where(
                t_leases.c.host == host)).one_or_none()
        return None if row is None else database.lease_of(row)

    def acquire_lease(self, host: str, node: str, holder: str,
                      duration: float) -> AgentLease:
        """Take the lease of ``host`` for ``duration`` seconds, under a new
        epoch: when nobody holds it, when it expired, or when ``node``
        holds it (its restart).

        :param node: the taker's node uuid.
        :param holder: the taker in words (pid and machine).
        :raises AgentLeaseHeld: another node's lease is in force.
        """
        database.check_name("host name", host, database.NAME_LENGTH)
        database.check_name("node", node, database.UUID_LENGTH)
        holder = holder[:_HOLDER_LENGTH] or "?"
        length = _duration(duration)

        def take() -> AgentLease:
            with self.db.write() as conn:
                row = conn.execute(sa.select(t_leases).where(
                    t_leases.c.host == host).with_for_update()).one_or_none()
                now = database.server_now(conn)
                expires = now + length
                values: dict[str, Any] = {"node": node, "holder": holder,
                                          "expires_at": expires}
                if row is None:
                    conn.execute(sa.insert(t_leases).values(host=host, epoch=1, **values))
                    return AgentLease(host, 1, node, holder, expires)
                current = database.lease_of(row)
                if current.node != node and current.expires_at > now:
                    raise errors.AgentLeaseHeld(current)
                epoch = current.epoch + 1
                conn.execute(sa.update(t_leases).where(
                    t_leases.c.host == host, t_leases.c.epoch == current.epoch)
                    .values(epoch=epoch, **values))
                return AgentLease(host, epoch, node, holder, expires)

        try:
            return self.db.retrying(take)
        except sa.exc.IntegrityError:
            # NOTE: two first takers inserted together: the loser sees the
            # winner's lease now.
            return self.db.retrying(take)

    def renew_lease(self, lease: AgentLease, duration: float) -> AgentLease:
        """Extend ``lease`` by ``duration`` seconds from now: one ``UPDATE``
        checking the epoch (PostgreSQL: the server's clock in the statement,
        the expiry read back by ``RETURNING``; SQLite: the local clock;
        MySQL: the server's clock read first). The heartbeat is the one
        steady-state write of every idle agent (10,000 hosts renewing every
        10 s: 1,000 a second), so it is one statement, not a locking read,
        a clock read and an update (issue 19, item 4).

        :raises Fenced: it is not the host's lease any more.
        """
        length = _duration(duration)
        match = sa.update(t_leases).where(t_leases.c.host == lease.host,
                                          t_leases.c.epoch == lease.epoch)

        def fenced(conn: sa.Connection) -> errors.Fenced:
            row = conn.execute(sa.select(t_leases).where(
                t_leases.c.host == lease.host)).one_or_none()
            return errors.Fenced(lease.host, lease.epoch,
                                 None if row is None else database.lease_of(row))

        def renewed(expires: datetime.datetime) -> AgentLease:
            return AgentLease(host=lease.host, epoch=lease.epoch, node=lease.node,
                              holder=lease.holder, expires_at=expires.replace(tzinfo=None))

        def renew_one_statement() -> AgentLease:
            # NOTE: the server's clock in the statement, the expiry read
            # back: one statement, on its own (Database.single: one round
            # trip), built once (_renew_statement).
            params = {"lease_host": lease.host, "lease_epoch": lease.epoch,
                      "lease_length": length}
            expires = self.db.single(lambda conn: conn.execute(
                _renew_statement(), params).scalar())
            if expires is None:
                with self.db.read() as conn:
                    raise fenced(conn)
            return renewed(expires)

        def renew() -> AgentLease:
            with self.db.write() as conn:
                expires = database.server_now(conn) + length
                if conn.execute(match.values(expires_at=expires)).rowcount != 1:
                    raise fenced(conn)
            return renewed(expires)

        if engines.backend(self.db.engine) == "postgresql":
            return self.db.retrying(renew_one_statement)
        return self.db.retrying(renew)

    def end_lease(self, lease: AgentLease) -> bool:
        """Let the lease lapse now (an agent that stops cleanly): another
        node may take the host at once. False when it was not ours any more."""
        with self.db.write() as conn:
            done = conn.execute(sa.update(t_leases).where(
                t_leases.c.host == lease.host, t_leases.c.epoch == lease.epoch)
                .values(expires_at=database.server_now(conn)))
        return bool(done.rowcount == 1)

    def fenced(self: S, lease: AgentLease) -> S:
        """This store, its writes carrying ``lease``'s token: each write
        first checks, in its own transaction, that the lease is still the
        host's (:meth:`~compute_plugins.hoststate.database.OnDatabase.check_fence`).
        Shares the connections."""
        view = copy.copy(self)
        view.fence = (lease.host, lease.epoch)
        return view

    # -- renaming -----------------------------------------------------------

    def rename_host(self, old: str, new: str, node: Optional[str] = None) -> int:
        """Move ``old``'s records to ``new`` (an operator renaming the host,
        its agent stopped): its decisions in force are re-addressed (their
        spec's decision names the new host), its published rows and its
        lease dropped (the agent publishes again under the new name).

        Nothing left under ``old`` (a rename run again after it stopped
        past this step) moves nothing and is not refused for the records
        it moved to ``new``.

        :param node: the renamed node's uuid: a lease of another node in
            force on either name is an agent running for it (refused); the
            node's own (its agent was killed: its state directory's lock,
            held by the caller, says it is gone) is not.
        :returns: the decisions moved.
        :raises AgentLeaseHeld: another node's agent holds either name.
        :raises HostNameTaken: ``new`` has published states or decisions in
            force already (another host has that name).
        """
        database.check_name("host name", old, database.NAME_LENGTH)
        database.check_name("host name", new, database.NAME_LENGTH)

        def move() -> int:
            with self.db.write() as conn:
                for name in (new, old):
                    self._refuse_held(conn, name, node)
                rows = conn.execute(sa.select(t_decisions.c.id, t_decisions.c.spec).where(
                    t_decisions.c.host == old,
                    t_decisions.c.active_consumer.is_not(None))).all()
                published = conn.execute(sa.select(t_hosts.c.host).where(
                    t_hosts.c.host == old)).first()
                if not rows and published is None:
                    # NOTE: moved already (or never published): the new
                    # name's decisions in force may be the ones moved.
                    conn.execute(sa.delete(t_leases).where(t_leases.c.host == old))
                    return 0
                self._refuse_taken(conn, new)
                for row in rows:
                    conn.execute(sa.update(t_decisions).where(
                        t_decisions.c.id == row.id).values(
                            host=new, spec=renamed_spec(row.spec, old, new),
                            updated_at=database.utcnow()))
                for table in (t_states, t_providers, t_leases, t_hosts):
                    conn.execute(sa.delete(table).where(table.c.host == old))
                # NOTE: the host keeps its disabled flag (or its absence)
                # under its new name.
                conn.execute(sa.delete(t_disabled).where(t_disabled.c.host == new))
                conn.execute(sa.update(t_disabled).where(
                    t_disabled.c.host == old).values(host=new))
                if published is not None:
                    # NOTE: last: the change counter stays locked until the
                    # commit (:mod:`.changes`).
                    changes.count_removal(conn)
            return len(rows)

        return self.db.retrying(move)

    @staticmethod
    def _refuse_held(conn: Connection, host: str, node: Optional[str]) -> None:
        row = conn.execute(sa.select(t_leases).where(
            t_leases.c.host == host).with_for_update()).one_or_none()
        if row is None:
            return
        lease = database.lease_of(row)
        if lease.node != node and lease.expires_at > database.server_now(conn):
            raise errors.AgentLeaseHeld(lease)

    @staticmethod
    def _refuse_taken(conn: Connection, new: str) -> None:
        published = conn.execute(sa.select(t_hosts.c.host).where(
            t_hosts.c.host == new)).first()
        active = conn.execute(sa.select(t_decisions.c.id).where(
            t_decisions.c.host == new,
            t_decisions.c.active_consumer.is_not(None))).first()
        if published is not None or active is not None:
            raise errors.HostNameTaken(
                "cannot rename to host %s: the host-state store has %s for "
                "that name (another host has it)"
                % (new, "its published state" if published is not None
                   else "decisions in force"))


def renamed_spec(text: str, old: str, new: str) -> str:
    """A serialised RequestSpec whose decision names ``new`` where it named
    ``old`` (its host and node name); other text is left as it is."""
    try:
        document: Any = json.loads(text)
    except ValueError:
        return text
    decision = document.get("decision") if isinstance(document, dict) else None
    if not isinstance(decision, dict):
        return text
    for key in ("host", "nodename"):
        if decision.get(key) == old:
            decision[key] = new
    return json.dumps(document, sort_keys=True)


__all__ = ["SqlAgentLeases", "renamed_spec"]
