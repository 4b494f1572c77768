"""Host publication on the host-state database: each agent publishes its
host, schedulers read hosts.

A host's rows (every plugin's state document, its node name, its resource
providers) change together under one generation, compare-and-swap: a
publish names the generation it read, bumps it under the row lock of the
host and writes only the rows that differ; one that changes nothing
writes nothing. Reads take one snapshot, so a host's states and generation
always belong together. A resource provider belongs to one host.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import Connection

from compute_plugins.hoststate import changes, database, errors
from compute_plugins.hoststate.records import (
    ChangeMark,
    HostDisabled,
    HostSnapshot,
    HostStatus,
    PublishResult,
    StatusChanges,
)
from compute_plugins.hoststate.schema import disabled as t_disabled
from compute_plugins.hoststate.schema import hosts as t_hosts
from compute_plugins.hoststate.schema import leases as t_leases
from compute_plugins.hoststate.schema import providers as t_providers
from compute_plugins.hoststate.schema import states as t_states
from compute_plugins.request.types import FrozenMap

#: Inserts of a disabled record whose conflicting record was removed
#: before it was read (enabled meanwhile) before :meth:`disable_host` gives up.
_DISABLE_ATTEMPTS = 3

#: Where a store keeps the rows it last wrote per host (:attr:`Database.info
#: <compute_plugins.hoststate.database.Database.info>`).
_WRITTEN = "compute_plugins.hoststate.written_hosts"

#: The kind of an operator's ``host disable`` record (an evacuation's fence
#: is ``evacuated``: :mod:`compute_plugins.compute.moves`).
OPERATOR = "operator"


@dataclasses.dataclass(frozen=True)
class _HostRows:
    generation: int
    nodename: str
    updated_at: datetime.datetime
    states: dict[str, str]
    providers: dict[str, str]


def _state_texts(states: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """plugin -> canonical JSON of its document, checked."""
    texts = {}
    for plugin, document in states.items():
        if not isinstance(plugin, str) or not plugin:
            raise ValueError("host state keyed by %r: expected a plugin name" % (plugin,))
        database.check_name("plugin name", plugin, database.NAME_LENGTH)
        if (not isinstance(document, Mapping)
                or set(document) != {"plugin", "version", "state"}):
            raise ValueError("host state of %s: expected the document "
                             "encode_state makes ({plugin, version, state})" % plugin)
        if document["plugin"] != plugin:
            raise ValueError("host state of %r published under plugin %r"
                             % (document["plugin"], plugin))
        try:
            texts[plugin] = database.canonical(dict(document))
        except (TypeError, ValueError) as err:
            raise ValueError("host state of %s is not JSON: %s" % (plugin, err)) from None
    return texts


@functools.cache
def _publish_statement(fenced: bool, at_written: bool, documents: bool) -> Any:
    """The in-place publish's one statement (PostgreSQL; see
    :meth:`SqlHostPublication._publish_in_one_statement`), built once per
    shape (the arguments; every value a bound parameter): the row
    of ``pub_host`` locked at ``pub_expected`` (under the writer's fence
    when ``fenced``, at ``pub_written_at`` when ``at_written``), the
    change counter taken, the row bumped to ``pub_next`` with
    ``pub_nodename`` and ``pub_stamp``, and when ``documents`` the
    documents ``pub_documents`` of the plugins ``pub_plugins`` written,
    as two array parameters (the statement's text the same whatever they
    hold)."""
    conditions: list[Any] = [database.FENCE_BOUND] if fenced else []
    if at_written:
        conditions.append(t_hosts.c.updated_at == sa.bindparam(
            "pub_written_at", type_=t_hosts.c.updated_at.type))
    locked = (sa.select(t_hosts.c.host)
              .where(t_hosts.c.host == sa.bindparam("pub_host"),
                     t_hosts.c.generation == sa.bindparam("pub_expected"),
                     *conditions)
              .with_for_update().cte("locked"))
    taken = changes.take_after(sa.exists(sa.select(locked.c.host)))
    bump = (sa.update(t_hosts).where(t_hosts.c.host.in_(sa.select(locked.c.host)))
            .values(generation=sa.bindparam("pub_next", type_=t_hosts.c.generation.type),
                    nodename=sa.bindparam("pub_nodename", type_=t_hosts.c.nodename.type),
                    updated_at=sa.bindparam("pub_stamp", type_=t_hosts.c.updated_at.type),
                    change_number=sa.func.coalesce(
                        sa.select(taken.c.last_number).scalar_subquery(), 0))
            .returning(t_hosts.c.change_number))
    if not documents:
        return bump
    written = sa.func.unnest(
        sa.bindparam("pub_plugins", type_=postgresql.ARRAY(sa.Text())),
        sa.bindparam("pub_documents", type_=postgresql.ARRAY(sa.Text()))
    ).table_valued("plugin", "document").render_derived(name="documents")
    return bump.add_cte(
        sa.update(t_states)
        .where(t_states.c.host.in_(sa.select(locked.c.host)),
               t_states.c.plugin == written.c.plugin)
        .values(document=written.c.document)
        .returning(t_states.c.plugin).cte("written"))


@functools.cache
def _host_queries() -> tuple[Any, Any]:
    """The read of hosts' rows (their row, their states, their providers)
    as one statement, ``UNION ALL`` of the three tables (a row's ``kind``
    says which; ``name`` is the node name, the plugin or the provider
    uuid, ``text`` the document or the provider's name): of every host,
    and of the hosts in the expanding parameter ``hosts``. Built once: a
    scheduler reads the hosts it fits at every plan, and building the
    statements was a good part of its CPU there. One statement is one
    snapshot by itself: on PostgreSQL it runs on its own
    (:meth:`~compute_plugins.hoststate.database.Database.read_one`), one
    round trip where three reads in a transaction were five."""
    def none(type_: Any) -> Any:
        return sa.cast(sa.null(), type_)

    def row(kind: str, table: Any, name: Any, text: Any, generation: Any,
            updated_at: Any) -> Any:
        return sa.select(sa.literal(kind).label("kind"), table.c.host.label("host"),
                         name.label("name"), text.label("text"),
                         generation.label("generation"), updated_at.label("updated_at"))

    text_type = t_states.c.document.type
    parts = (
        row("h", t_hosts, t_hosts.c.nodename, none(text_type), t_hosts.c.generation,
            t_hosts.c.updated_at),
        row("s", t_states, t_states.c.plugin, t_states.c.document,
            none(t_hosts.c.generation.type), none(t_hosts.c.updated_at.type)),
        row("p", t_providers, t_providers.c.uuid, t_providers.c.name,
            none(t_hosts.c.generation.type), none(t_hosts.c.updated_at.type)))
    hosts: Any = sa.bindparam("hosts", expanding=True)
    every = sa.union_all(*parts)
    some = sa.union_all(*(part.where(table.c.host.in_(hosts)) for part, table in
                          zip(parts, (t_hosts, t_states, t_providers), strict=True)))
    return every, some


@functools.cache
def _disabled_query() -> Any:
    """Every disabled host's record (a scheduler's view reads them at every
    ask), built once."""
    return sa.select(t_disabled)


class SqlHostPublication(database.OnDatabase):
    """Hosts as their agents published them, on one database (the
    :class:`~compute_plugins.hoststate.transport.HostPublication` of the SQL
    store)."""

    @property
    def written_hosts(self) -> dict[str, _HostRows]:
        """host -> the rows this store's last publish of it wrote (shared
        with its fenced views: one agent's publishes), so that its next
        publish does not read them back (:meth:`_publish`)."""
        found: Optional[dict[str, _HostRows]] = self.db.info.get(_WRITTEN)
        if found is None:
            found = self.db.info.setdefault(_WRITTEN, {})
        return found

    def _load_hosts(self, conn: Connection,
                    hosts: Optional[Sequence[str]]) -> dict[str, _HostRows]:
        """The rows of ``hosts`` (None: every host), in ``conn``'s snapshot."""
        if hosts is None:
            filters: list[Any] = [None]
        else:
            # NOTE: the statement names the hosts three times (rows,
            # states, providers).
            filters = [list(chunk) for chunk in database.chunks(
                sorted(set(hosts)), database.chunk_for(conn, 3))]
        host_rows: list[Any] = []
        other_rows: list[Any] = []
        every, some = _host_queries()
        for chunk in filters:
            for row in conn.execute(every if chunk is None else some,
                                    None if chunk is None else {"hosts": chunk}):
                (host_rows if row.kind == "h" else other_rows).append(row)
        result = {row.host: _HostRows(int(row.generation), row.name,
                                      row.updated_at, {}, {})
                  for row in host_rows}
        for row in other_rows:
            found = result[row.host]
            (found.states if row.kind == "s" else found.providers)[row.name] = row.text
        return result

    def _read_hosts(self, hosts: Optional[Sequence[str]]) -> dict[str, _HostRows]:
        """:meth:`_load_hosts` in one snapshot: one statement on its own
        (:meth:`~compute_plugins.hoststate.database.Database.read_one`)
        unless the hosts take several (over :data:`~compute_plugins.
        hoststate.database.CHUNK`): a read transaction then."""
        if hosts is None or len(hosts) <= database.CHUNK:
            return self.db.read_one(lambda conn: self._load_hosts(conn, hosts))
        with self.db.read() as conn:
            return self._load_hosts(conn, hosts)

    @staticmethod
    def _snapshot(host: str, rows: _HostRows) -> HostSnapshot:
        return HostSnapshot(
            host=host, generation=rows.generation, nodename=rows.nodename,
            providers=FrozenMap(sorted(rows.providers.items())),
            states=FrozenMap((p, json.loads(text))
                             for p, text in sorted(rows.states.items())),
            updated_at=rows.updated_at)

    def get_host(self, host: str) -> Optional[HostSnapshot]:
        """``host`` as last published (None: it never published)."""
        return self.get_hosts([host]).get(host)

    def get_hosts(self, hosts: Optional[Iterable[str]] = None) -> dict[str, HostSnapshot]:
        """Several hosts (None: every host) in one consistent read; hosts
        that never published are absent."""
        listed = None if hosts is None else database.listed(hosts, "host names")
        rows = self._read_hosts(listed)
        return {host: self._snapshot(host, r) for host, r in sorted(rows.items())}

    def generations(self, hosts: Optional[Iterable[str]] = None) -> dict[str, int]:
        """host -> generation (None: every host): what changed since a read,
        without reading the states."""
        query = sa.select(t_hosts.c.host, t_hosts.c.generation)
        result: dict[str, int] = {}
        if hosts is None:
            chunks: list[Any] = [None]
        else:
            chunks = list(database.chunks(sorted(set(database.listed(hosts, "host names")))))
        with self.db.read() as conn:
            for chunk in chunks:
                q = query if chunk is None else query.where(t_hosts.c.host.in_(chunk))
                result.update((r.host, int(r.generation)) for r in conn.execute(q))
        return result

    def host_statuses(self, hosts: Optional[Iterable[str]] = None) -> dict[str, HostStatus]:
        """host -> its generation and its agent's lease expiry (None: every
        host that published): one statement (the hosts joined with the
        leases), what a scheduler reads first to tell which hosts changed
        and which are down (issue 19, item 3)."""
        query = sa.select(t_hosts.c.host, t_hosts.c.generation,
                          t_leases.c.expires_at).select_from(
            t_hosts.outerjoin(t_leases, t_leases.c.host == t_hosts.c.host))
        if hosts is None:
            chunks: list[Any] = [None]
        else:
            chunks = list(database.chunks(sorted(set(database.listed(hosts, "host names")))))
        result: dict[str, HostStatus] = {}
        if not chunks:
            return result
        with self.db.read() as conn:
            for chunk in chunks:
                q = query if chunk is None else query.where(t_hosts.c.host.in_(chunk))
                result.update((r.host, HostStatus(r.host, int(r.generation), r.expires_at))
                              for r in conn.execute(q))
        return result

    def host_status_changes(self, since: Optional[ChangeMark],
                            now: Optional[datetime.datetime] = None) -> StatusChanges:
        """The hosts written since ``since`` (None: every host) and the
        leases expired at ``now`` (naive UTC; default: this machine's
        clock), in one snapshot: what a long-running scheduler reads per
        decision instead of :meth:`host_statuses`, a few rows instead of
        one per host (:mod:`~compute_plugins.hoststate.changes`; issue 19,
        item 2). A connection lost before it read is read again once
        (:meth:`~compute_plugins.hoststate.database.Database.retrying`): the
        first statement of a scheduler's every plan."""
        when = database.utcnow() if now is None else now

        def read() -> StatusChanges:
            # NOTE: the one statement on its own (one round trip on
            # PostgreSQL); a transaction only when every host is read too.
            found = self.db.read_one(lambda conn: changes.read(conn, since, when,
                                                               whole=False))
            if found is None:
                with self.db.read() as conn:
                    found = changes.read(conn, since, when)
            assert found is not None
            return found
        return self.db.retrying(read)

    def hosts_for_providers(self, uuids: Iterable[str]) -> dict[str, str]:
        """provider uuid -> the host that published it (unknown uuids absent)."""
        result: dict[str, str] = {}
        listed = sorted(set(database.listed(uuids, "provider uuids")))
        with self.db.read() as conn:
            for chunk in database.chunks(listed):
                result.update((row.uuid, row.host) for row in conn.execute(
                    sa.select(t_providers.c.uuid, t_providers.c.host)
                    .where(t_providers.c.uuid.in_(chunk))))
        return result

    def publish(self, host: str, states: Mapping[str, Mapping[str, Any]],
                expected_generation: int, *, nodename: Optional[str] = None,
                providers: Optional[Mapping[str, str]] = None) -> PublishResult:
        """Replace ``host``'s published states, compare-and-swap.

        :param states: plugin name -> ``encode_state(plugin, state)``: every
            plugin's state; a plugin left out is removed.
        :param expected_generation: the generation last read (0 for a host
            that never published).
        :param nodename: the host's node name (None: keep the stored one).
        :param providers: its providers, uuid -> name (None: keep them).
        :returns: the new generation, and whether anything was written: with
            everything equal to what is stored, nothing is written.
        :raises GenerationConflict: the host's generation is not
            ``expected_generation``.
        :raises ProviderConflict: a provider uuid another host published.
        """
        database.check_name("host name", host, database.NAME_LENGTH)
        if nodename is not None:
            database.check_name("node name", nodename, database.NAME_LENGTH)
        texts = _state_texts(states)
        wanted_providers = None if providers is None else {
            database.check_name("provider uuid", str(uuid), database.UUID_LENGTH):
            database.check_name("name of provider %s" % uuid, str(name), database.NAME_LENGTH)
            for uuid, name in providers.items()}
        return self.db.retrying(lambda: self._publish(
            host, texts, int(expected_generation), nodename, wanted_providers))

    def _publish(self, host: str, texts: dict[str, str], expected: int,
                 nodename: Optional[str],
                 providers: Optional[dict[str, str]]) -> PublishResult:
        # NOTE: compare first: a publish that changes nothing writes
        # nothing and takes no write lock. The rows this store wrote last
        # at ``expected`` are the host's rows at ``expected`` (every writer
        # bumps the generation before it writes them): a publish that
        # changes them does not read them again, its bump checks their time
        # too (a store restored from a backup may have other rows at that
        # generation). Else (and for a publish that would change nothing:
        # its generation checked by the read) they are read.
        written: Optional[_HostRows] = self.written_hosts.get(host)
        if written is not None and written.generation == expected and not (
                written.states == texts and (nodename is None or written.nodename == nodename)
                and (providers is None or written.providers == providers)):
            current: Optional[_HostRows] = written
        else:
            written = None
            current = self._read_hosts([host]).get(host)
        actual = current.generation if current else 0
        if actual != expected:
            raise errors.GenerationConflict(host, expected, actual)
        if nodename is None:
            nodename = current.nodename if current else ""
        if providers is None:
            providers = dict(current.providers) if current else {}
        if (current is not None and current.states == texts
                and current.nodename == nodename and current.providers == providers):
            return PublishResult(generation=expected, written=False)
        old = current or _HostRows(0, "", database.utcnow(), {}, {})
        self.written_hosts.pop(host, None)
        stamp = database.utcnow()
        if (self.db.single_engine is not None and expected > 0
                and providers == old.providers and set(texts) == set(old.states)):
            # NOTE: PostgreSQL, the host's documents changed in place (a
            # claim's, a release's publish): one statement, one round trip
            # (:meth:`_publish_in_one_statement`).
            self._publish_in_one_statement(host, expected, nodename, stamp, old, texts,
                                           None if written is None else written.updated_at)
            self.written_hosts[host] = _HostRows(expected + 1, nodename, stamp,
                                                 dict(texts), dict(providers))
            return PublishResult(generation=expected + 1, written=True)
        try:
            with self.db.write() as conn:
                # NOTE: the fence a condition of the bump's own UPDATE
                # where the database locks in it (fence_clauses); checked
                # by a statement of its own elsewhere, and for an INSERT.
                in_bump = expected > 0 and bool(conn.dialect.update_returning)
                if not in_bump:
                    self.check_fence(conn)
                conditions = self.fence_clauses() if in_bump else []
                if written is not None:
                    conditions.append(t_hosts.c.updated_at == written.updated_at)
                if not self._bump(conn, host, expected, nodename, stamp, conditions):
                    if in_bump:
                        self.check_fence(conn, share=True)
                    raise errors.GenerationConflict(
                        host, expected, self._generation(conn, host))
                # NOTE: the bump succeeded, so the host's rows are still those
                # read at ``expected``: every writer bumps before it writes
                # them, under the row lock the bump holds.
                self._check_providers(conn, host, set(providers) - set(old.providers))
                self._write_delta(conn, host, old, texts, providers)
                # NOTE: last: the change counter stays locked until the commit.
                changes.stamp(conn, host)
        except sa.exc.IntegrityError:
            # NOTE: a concurrent first publish of this host, or another host
            # taking one of these providers between the check and the insert.
            with self.db.read() as conn:
                now = self._generation(conn, host)
                if now != expected:
                    raise errors.GenerationConflict(host, expected, now) from None
                self._check_providers(conn, host, set(providers) - set(old.providers))
            raise
        self.written_hosts[host] = _HostRows(expected + 1, nodename, stamp, dict(texts),
                                             dict(providers))
        return PublishResult(generation=expected + 1, written=True)

    def _publish_in_one_statement(self, host: str, expected: int, nodename: str,
                                  stamp: datetime.datetime, old: _HostRows,
                                  texts: dict[str, str],
                                  written_at: Optional[datetime.datetime]) -> None:
        """A publish that changes the host's node name or the documents of
        the plugins it has already, as one statement on its own (PostgreSQL:
        :meth:`~compute_plugins.hoststate.database.Database.single`), where
        a transaction sent five (``BEGIN``, the bump, the documents, the
        change number, ``COMMIT``). In its order of locks: the host's row
        (``locked``: at ``expected``, under the writer's fence and, when
        the rows are the ones this store wrote, at their time), then the
        change counter (``taken``, only when the host's row was locked) in
        the host's bump, which reads it, then the documents; the counter
        stays locked from there to the commit, as :func:`~compute_plugins.
        hoststate.changes.stamp` keeps it (the numbers in commit order).
        Built once per shape (:func:`_publish_statement`).

        :raises GenerationConflict: the host is not at ``expected`` (or its
            rows are not the ones written at ``written_at``).
        :raises Fenced: the writer's lease is not the host's any more.
        """
        changed = sorted((p, text) for p, text in texts.items() if old.states[p] != text)
        bump = _publish_statement(self.fence is not None, written_at is not None,
                                  bool(changed))
        params: dict[str, Any] = {
            "pub_host": host, "pub_expected": expected, "pub_next": expected + 1,
            "pub_nodename": nodename, "pub_stamp": stamp, "pub_written_at": written_at,
            "pub_plugins": [p for p, _ in changed],
            "pub_documents": [text for _, text in changed]}
        params.update(self.fence_params())

        def publish(conn: Connection) -> Optional[int]:
            number = conn.execute(bump, params).scalar()
            if number is None:
                self.check_fence(conn, share=True)
                raise errors.GenerationConflict(host, expected, self._generation(conn, host))
            return int(number)

        if not self.db.single(publish, retry=False):
            # NOTE: the counter's row is missing (deleted by hand): made
            # again and the write numbered, as stamp does.
            with self.db.write() as conn:
                changes.stamp(conn, host)

    @staticmethod
    def _generation(conn: Connection, host: str) -> int:
        found = conn.execute(sa.select(t_hosts.c.generation)
                             .where(t_hosts.c.host == host)).scalar()
        return int(found or 0)

    @staticmethod
    def _bump(conn: Connection, host: str, expected: int, nodename: str,
              now: datetime.datetime, conditions: Sequence[Any] = ()) -> bool:
        """Move the host from ``expected`` to the next generation at
        ``now`` (insert it at 1 from 0); False when it is not at
        ``expected``, or ``conditions`` (of the UPDATE) do not hold."""
        if expected == 0:
            conn.execute(sa.insert(t_hosts).values(
                host=host, generation=1, nodename=nodename, updated_at=now))
            return True
        result = conn.execute(
            sa.update(t_hosts)
            .where(t_hosts.c.host == host, t_hosts.c.generation == expected,
                   *conditions)
            .values(generation=expected + 1, nodename=nodename, updated_at=now))
        return result.rowcount == 1

    @staticmethod
    def _check_providers(conn: Connection, host: str, new: set[str]) -> None:
        if not new:
            return
        for chunk in database.chunks(sorted(new)):
            for row in conn.execute(
                    sa.select(t_providers.c.uuid, t_providers.c.host)
                    .where(t_providers.c.uuid.in_(chunk),
                           t_providers.c.host != host)):
                raise errors.ProviderConflict(row.uuid, host, row.host)

    @staticmethod
    def _write_delta(conn: Connection, host: str, old: _HostRows,
                     texts: dict[str, str], providers: dict[str, str]) -> None:
        """Write only the rows that differ from ``old``."""
        gone = sorted(set(old.states) - set(texts))
        if gone:
            conn.execute(sa.delete(t_states).where(
                t_states.c.host == host, t_states.c.plugin.in_(gone)))
        changed = [{"b_plugin": p, "document": text} for p, text in sorted(texts.items())
                   if p in old.states and old.states[p] != text]
        if changed:
            conn.execute(sa.update(t_states).where(
                t_states.c.host == host,
                t_states.c.plugin == sa.bindparam("b_plugin")), changed)
        added = [{"host": host, "plugin": p, "document": text}
                 for p, text in sorted(texts.items()) if p not in old.states]
        if added:
            conn.execute(sa.insert(t_states), added)

        gone = sorted(set(old.providers) - set(providers))
        if gone:
            conn.execute(sa.delete(t_providers).where(
                t_providers.c.host == host, t_providers.c.uuid.in_(gone)))
        renamed = [{"b_uuid": u, "name": name} for u, name in sorted(providers.items())
                   if u in old.providers and old.providers[u] != name]
        if renamed:
            conn.execute(sa.update(t_providers).where(
                t_providers.c.host == host,
                t_providers.c.uuid == sa.bindparam("b_uuid")), renamed)
        added = [{"uuid": u, "host": host, "name": name}
                 for u, name in sorted(providers.items()) if u not in old.providers]
        if added:
            conn.execute(sa.insert(t_providers), added)

    # -- hosts an operator disabled ------------------------------------------

    def disabled_hosts(self, hosts: Optional[Iterable[str]] = None) -> dict[str, HostDisabled]:
        """host -> why it is disabled, for the disabled ones of ``hosts``
        (None: every disabled host)."""
        query = _disabled_query()
        if hosts is None:
            chunks: list[Any] = [None]
        else:
            chunks = list(database.chunks(sorted(set(database.listed(hosts, "host names")))))
        result: dict[str, HostDisabled] = {}

        def read(conn: Connection) -> None:
            for chunk in chunks:
                q = query if chunk is None else query.where(t_disabled.c.host.in_(chunk))
                result.update((row.host, _disabled_of(row)) for row in conn.execute(q))

        if len(chunks) == 1:
            # NOTE: a scheduler's every plan: one statement on its own.
            self.db.read_one(read)
        else:
            with self.db.read() as conn:
                read(conn)
        return dict(sorted(result.items()))

    def disable_host(self, host: str, reason: str, by: str,
                     kind: str = OPERATOR) -> tuple[HostDisabled, bool]:
        """Record ``host`` as disabled (``compute-plugins host disable``).

        :param reason: the operator's text ("" for none), at most
            :data:`REASON_LENGTH` characters.
        :param by: who disabled it (cut to 255 characters).
        :param kind: :data:`OPERATOR`, or ``evacuated`` (an evacuation's
            fence, which the host's agent lifts once back and reconciled).
        :returns: the host's record, and whether this call disabled it
            (False: it was disabled already; its record is kept as it was,
            but that an operator's disabling of a host fenced by an
            evacuation makes the record the operator's: never lifted by
            its agent).
        """
        database.check_name("host name", host, database.NAME_LENGTH)
        if not isinstance(reason, str) or len(reason) > REASON_LENGTH:
            raise ValueError("reason %r: expected at most %d characters"
                             % (reason, REASON_LENGTH))
        record = HostDisabled(host, reason, by[:database.NAME_LENGTH] or "?",
                              database.utcnow(), kind)

        def write() -> tuple[HostDisabled, bool]:
            # NOTE: a record removed between the refused insert and what
            # follows (an evacuation's fence lifted by its agent): the
            # host is enabled now, the insert is made again.
            for _ in range(_DISABLE_ATTEMPTS):
                try:
                    with self.db.write() as conn:
                        conn.execute(sa.insert(t_disabled).values(
                            host=host, reason=record.reason, disabled_by=record.by,
                            disabled_at=record.at, kind=kind))
                        self.notify_host(conn, host, "disabled")
                    return record, True
                except sa.exc.IntegrityError:
                    pass
                # NOTE: disabled already (or by a concurrent command): keep
                # the first record, its reason and time; an operator's takes
                # over an evacuation's fence.
                if kind == OPERATOR:
                    with self.db.write() as conn:
                        taken = conn.execute(sa.update(t_disabled).where(
                            t_disabled.c.host == host, t_disabled.c.kind != OPERATOR)
                            .values(reason=record.reason, disabled_by=record.by,
                                    disabled_at=record.at, kind=kind)).rowcount
                    if taken:
                        return record, True
                found = self.disabled_hosts([host]).get(host)
                if found is not None:
                    return found, False
            raise errors.HostStateError("host %s: enabled while being disabled %d "
                                        "times: try again" % (host, _DISABLE_ATTEMPTS))

        return self.db.retrying(write)

    def enable_host(self, host: str, kind: Optional[str] = None) -> Optional[HostDisabled]:
        """Forget that ``host`` was disabled (``kind``: only when its record
        is of that kind: an evacuation's fence lifted by the host's agent
        leaves an operator's record alone).

        :returns: the record removed (None: it was not disabled, or not so).
        """
        database.check_name("host name", host, database.NAME_LENGTH)

        def write() -> Optional[HostDisabled]:
            with self.db.write() as conn:
                row = conn.execute(sa.select(t_disabled).where(
                    t_disabled.c.host == host).with_for_update()).one_or_none()
                if row is None or (kind is not None and row.kind != kind):
                    return None
                conn.execute(sa.delete(t_disabled).where(t_disabled.c.host == host))
                self.notify_host(conn, host, "enabled")
                return _disabled_of(row)

        return self.db.retrying(write)


#: Longest reason an operator may give for disabling a host.
REASON_LENGTH = 255


def _disabled_of(row: Any) -> HostDisabled:
    """A ``hoststate_disabled`` row as a :class:`HostDisabled`."""
    return HostDisabled(host=row.host, reason=row.reason, by=row.disabled_by,
                        at=row.disabled_at, kind=row.kind)


__all__ = ["OPERATOR", "REASON_LENGTH", "SqlHostPublication"]
