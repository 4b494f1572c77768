"""The scheduler's decision for a nova instance on a host, kept where the
compute reads it.

Stock nova's scheduler returns ``Selection`` objects and drops its copy of
the ``RequestSpec``: nothing ``PluginFitFilter`` writes into nova's spec
reaches the conductor or the compute. The host-state store does (the
filter and the driver mixin both open it from ``[host_state]
connection``). When nova's scheduler selects a host for an instance
(``HostState.consume_from_request``, which nova calls on the claimed host
right after the Placement claim), the filter records our spec with the
decision of the candidate nova claimed in one table of the store,
``hoststate_nova_decisions`` (instance uuid, host, our spec's JSON): one row
per (instance, host) selection, the newest winning (a resize or a
migration selects again). The compute reads it back with
:func:`decision_for`, without parsing the flavor.

The table belongs to the nova adapter (it is made on first use, next to the
store's own tables, whose version it does not change) and carries no
protocol: the rows are history, :meth:`NovaDecisions.purge` removes old
ones.
"""

from __future__ import annotations

import datetime
import threading
from typing import Optional

import sqlalchemy as sa

from compute_plugins.hoststate import database
from compute_plugins.hoststate.store import HostStateStore
from compute_plugins.request.spec import RequestSpec
from compute_plugins.runtime import PluginSet

__all__ = ["TABLE", "NovaDecisions", "decision_for"]

_metadata = sa.MetaData()
_TEXT = sa.Text().with_variant(sa.dialects.mysql.LONGTEXT(), "mysql", "mariadb")

#: instance uuid, host, our spec (decision included) as JSON.
TABLE = sa.Table(
    "hoststate_nova_decisions", _metadata,
    sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"),
              primary_key=True, autoincrement=True),
    sa.Column("consumer", sa.String(36), nullable=False),
    sa.Column("host", sa.String(255), nullable=False),
    sa.Column("spec", _TEXT, nullable=False),
    sa.Column("created_at", sa.DateTime(), nullable=False),
    sa.Index("hoststate_nova_decisions_consumer_host", "consumer", "host", "id"),
    sa.Index("hoststate_nova_decisions_host", "host", "id"),
    mysql_charset="utf8mb4", mariadb_charset="utf8mb4",
)


class NovaDecisions:
    """The nova decisions table of one host-state store.

    :param store: the host-state store (its database holds the table).
    """

    def __init__(self, store: HostStateStore) -> None:
        self.store = store
        self._made = False
        self._lock = threading.Lock()

    def _ensure(self) -> None:
        with self._lock:
            if not self._made:
                _metadata.create_all(self.store.engine, checkfirst=True)
                self._made = True

    def record(self, instance_uuid: str, host: str, spec: RequestSpec) -> None:
        """Record ``spec`` (its decision for ``host``) for the instance.

        :raises ValueError: the spec carries no decision, or one for
            another host.
        :raises HostStateError: the store cannot be written.
        """
        if spec.decision is None or spec.decision.host != host:
            raise ValueError("instance %s: a decision for host %s is needed"
                             % (instance_uuid, host))
        database.check_name("consumer", instance_uuid, database.UUID_LENGTH)
        database.check_name("host name", host, database.NAME_LENGTH)
        self._ensure()
        values = {"consumer": instance_uuid, "host": host, "spec": spec.to_json(),
                  "created_at": database.utcnow()}

        def insert() -> None:
            with self.store.db.write() as conn:
                conn.execute(sa.insert(TABLE).values(**values))

        self.store.db.retrying(insert)

    def spec_text(self, instance_uuid: str, host: str,
                  since: Optional[datetime.datetime] = None) -> Optional[str]:
        """The newest spec recorded for the instance on ``host`` (JSON);
        ``since`` (naive UTC): only one recorded at or after it."""
        self._ensure()
        where = [TABLE.c.consumer == instance_uuid, TABLE.c.host == host]
        if since is not None:
            where.append(TABLE.c.created_at >= since)
        with self.store.db.read() as conn:
            row = conn.execute(
                sa.select(TABLE.c.spec).where(*where)
                .order_by(TABLE.c.id.desc()).limit(1)).one_or_none()
        return None if row is None else str(row.spec)

    def on_host(self, host: str) -> dict[str, str]:
        """instance uuid -> the newest spec recorded for it on ``host``."""
        self._ensure()
        with self.store.db.read() as conn:
            rows = conn.execute(sa.select(TABLE.c.consumer, TABLE.c.spec)
                                .where(TABLE.c.host == host)
                                .order_by(TABLE.c.id)).all()
        return {str(r.consumer): str(r.spec) for r in rows}

    def forget_since(self, instance_uuid: str, host: str,
                     since: datetime.datetime) -> int:
        """Delete the rows for the instance on ``host`` recorded at or
        after ``since`` (naive UTC): the decisions of a move nova reverted,
        so that the one the instance runs under again is the newest.
        Returns how many were deleted."""
        self._ensure()

        def delete() -> int:
            with self.store.db.write() as conn:
                return int(conn.execute(sa.delete(TABLE).where(
                    TABLE.c.consumer == instance_uuid, TABLE.c.host == host,
                    TABLE.c.created_at >= since)).rowcount or 0)

        return self.store.db.retrying(delete)

    def purge(self, before: datetime.datetime) -> int:
        """Delete the rows recorded before ``before`` (naive UTC)."""
        self._ensure()

        def delete() -> int:
            with self.store.db.write() as conn:
                return int(conn.execute(sa.delete(TABLE).where(
                    TABLE.c.created_at < before)).rowcount or 0)

        return self.store.db.retrying(delete)


def decision_for(decisions: NovaDecisions, instance_uuid: str, host: str,
                 plugins: PluginSet,
                 since: Optional[datetime.datetime] = None) -> Optional[RequestSpec]:
    """The scheduler's decision for instance ``instance_uuid`` on host
    ``host`` (nova's service host name, ``CONF.host``), as our spec with the
    decision included (``spec.decision``: the host, the allocation nova
    claimed, each plugin's assignment), read back with ``plugins``; None
    when ``PluginFitFilter`` recorded none (the instance was not scheduled
    by it on this host: an alternate host of a reschedule, a filter not
    enabled). ``since`` (naive UTC): only a decision recorded at or after
    it (a move's, recorded after nova created its migration; not one of an
    earlier stay of the instance on the host).

    This is the stable entry point for whoever compares a guest with the
    decision (the driver mixin, ``make nova-functional``): it never parses
    the flavor.

    :raises RequestFormatError: a recorded spec that cannot be read (a
        newer format, a plugin not loaded).
    """
    text = decisions.spec_text(instance_uuid, host, since)
    return None if text is None else RequestSpec.from_json(text, plugins)
