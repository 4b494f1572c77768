"""The host-state store: what each host published, and the decisions
addressed to it.

Compute agents publish, per host, every plugin's host state (the documents
:meth:`compute_plugins.runtime.PluginSet.encode_state` makes), the host's node name and
its resource providers, under one generation written compare-and-swap.
Schedulers read them (a host's states and generation always together) and
address decisions to hosts; the host's agent claims or rejects each one,
and the scheduler waits for that answer. It is the channel between
scheduler and compute, as the Kubernetes API server is between its
scheduler and kubelet.

Decision statuses and who moves them (each move is a compare-and-swap on
the status; :class:`~compute_plugins.hoststate.errors.DecisionStatusConflict`
when the decision is not in a status the move starts from)::

    scheduler  submit_decision          -> pending
    agent      mark_claimed      pending -> claimed
    agent      mark_rejected     pending -> rejected (with reasons)
    scheduler  withdraw          pending -> released  (gave up waiting)
    anyone     request_release   claimed -> releasing, pending -> released
    agent      mark_released     claimed, releasing -> released

A consumer has at most one decision in force (pending, claimed or
releasing); rejected and released ones stay as history until purged.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import enum
import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Optional, TypeVar

import sqlalchemy as sa
from oslo_config import cfg
from oslo_log import log as logging
from sqlalchemy.engine import Connection, Engine

from compute_plugins.hoststate import engine as engines
from compute_plugins.hoststate import errors
from compute_plugins.hoststate.schema import decisions as t_decisions
from compute_plugins.hoststate.schema import hosts as t_hosts
from compute_plugins.hoststate.schema import providers as t_providers
from compute_plugins.hoststate.schema import states as t_states
from compute_plugins.plugin import Rejection
from compute_plugins.request.types import FrozenMap

LOG = logging.getLogger(__name__)

T = TypeVar("T")

#: Host names per ``IN (...)`` list.
_CHUNK = 500
#: Longest host, node, plugin and provider name (their columns' size).
_NAME = 255
#: Longest consumer and provider uuid.
_UUID = 36
#: Attempts of a write that the database aborted as a deadlock.
_DEADLOCK_ATTEMPTS = 5


class DecisionStatus(enum.StrEnum):
    """Where a decision addressed to a host stands."""

    PENDING = "pending"
    CLAIMED = "claimed"
    REJECTED = "rejected"
    RELEASING = "releasing"
    RELEASED = "released"


#: Statuses of a decision in force (its consumer cannot get another).
ACTIVE = frozenset({DecisionStatus.PENDING, DecisionStatus.CLAIMED,
                    DecisionStatus.RELEASING})


@dataclasses.dataclass(frozen=True)
class HostSnapshot:
    """One host as the store holds it, read in one transaction.

    :param host: the compute host (service host name).
    :param generation: bumped by every write of this host (>= 1).
    :param nodename: its node name (the root provider's name).
    :param providers: its resource providers: uuid -> name.
    :param states: plugin name -> the document ``encode_state`` made
        (``{"plugin", "version", "state"}``), a fresh copy per read.
    :param updated_at: when it was last written (naive UTC).
    """

    host: str
    generation: int
    nodename: str
    providers: FrozenMap[str, str]
    states: FrozenMap[str, dict[str, Any]]
    updated_at: datetime.datetime


@dataclasses.dataclass(frozen=True)
class PublishResult:
    """What :meth:`HostStateStore.publish` did.

    :param generation: the host's generation now (the one to give next).
    :param written: False when nothing changed: nothing was written and the
        generation is the one given.
    """

    generation: int
    written: bool


@dataclasses.dataclass(frozen=True)
class HostDecision:
    """A decision addressed to a host.

    :param id: its id in the store (increasing: older decisions have
        smaller ids).
    :param consumer: the consumer (instance) uuid.
    :param host: the host it is addressed to.
    :param spec: the serialised RequestSpec carrying the decision
        (``RequestSpec.to_json()``), as the scheduler wrote it.
    :param status: see :class:`DecisionStatus`.
    :param reasons: why the host rejected it (status rejected), else ().
    :param created_at: when the scheduler wrote it (naive UTC).
    :param updated_at: when its status last changed (naive UTC).
    """

    id: int
    consumer: str
    host: str
    spec: str
    status: DecisionStatus
    reasons: tuple[Rejection, ...]
    created_at: datetime.datetime
    updated_at: datetime.datetime

    @property
    def answered(self) -> bool:
        """True once the host answered (or the decision was withdrawn)."""
        return self.status != DecisionStatus.PENDING


@dataclasses.dataclass(frozen=True)
class _HostRows:
    generation: int
    nodename: str
    updated_at: datetime.datetime
    states: dict[str, str]
    providers: dict[str, str]


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC).replace(tzinfo=None)


def _canonical(document: Any) -> str:
    return json.dumps(document, sort_keys=True, separators=(",", ":"),
                      allow_nan=False)


def _check_name(what: str, value: Any, limit: int) -> str:
    """``value``, a string of 1 to ``limit`` characters (its column's
    size: a longer one failed as a driver error on PostgreSQL and MySQL and
    went in unchecked on SQLite)."""
    if not isinstance(value, str) or not value or len(value) > limit:
        raise ValueError("%s %r: expected 1 to %d characters" % (what, value, limit))
    return value


def _state_texts(states: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """plugin -> canonical JSON of its document, checked."""
    texts = {}
    for plugin, document in states.items():
        if not isinstance(plugin, str) or not plugin:
            raise ValueError("host state keyed by %r: expected a plugin name" % (plugin,))
        _check_name("plugin name", plugin, _NAME)
        if (not isinstance(document, Mapping)
                or set(document) != {"plugin", "version", "state"}):
            raise ValueError("host state of %s: expected the document "
                             "encode_state makes ({plugin, version, state})" % plugin)
        if document["plugin"] != plugin:
            raise ValueError("host state of %r published under plugin %r"
                             % (document["plugin"], plugin))
        try:
            texts[plugin] = _canonical(dict(document))
        except (TypeError, ValueError) as err:
            raise ValueError("host state of %s is not JSON: %s" % (plugin, err)) from None
    return texts


def _rejection_dicts(reasons: Iterable[Rejection | Mapping[str, Any]]) -> list[dict[str, str]]:
    result = []
    for item in reasons:
        if isinstance(item, Rejection):
            item = dataclasses.asdict(item)
        if not isinstance(item, Mapping) or not isinstance(item.get("reason"), str):
            raise ValueError("a rejection reason is a Rejection or a mapping "
                             "with a reason, got %r" % (item,))
        result.append({"plugin": str(item.get("plugin") or ""),
                       "provider": str(item.get("provider") or ""),
                       "reason": item["reason"]})
    return result


def _decision(row: Any) -> HostDecision:
    reasons = tuple(Rejection(reason=r["reason"], provider=r["provider"],
                              plugin=r["plugin"])
                    for r in json.loads(row.reasons or "[]"))
    return HostDecision(id=int(row.id), consumer=row.consumer, host=row.host,
                        spec=row.spec, status=DecisionStatus(row.status),
                        reasons=reasons, created_at=row.created_at,
                        updated_at=row.updated_at)


def _listed(items: Iterable[str], what: str) -> list[str]:
    """``items`` as a list; a lone string is refused (it would be read as
    its characters, and the call would silently find nothing)."""
    if isinstance(items, (str, bytes)):
        raise TypeError("expected an iterable of %s, got the string %r" % (what, items))
    return list(items)


def _chunks(items: Sequence[str]) -> Iterator[Sequence[str]]:
    for start in range(0, len(items), _CHUNK):
        yield items[start:start + _CHUNK]


def _is_deadlock(err: sa.exc.DBAPIError) -> bool:
    """The database aborted the transaction to break a deadlock or a
    serialisation conflict: running it again is safe."""
    orig = err.orig
    code = getattr(orig, "pgcode", None) or getattr(orig, "sqlstate", None)
    if code in ("40P01", "40001"):
        return True
    args: Sequence[Any] = getattr(orig, "args", ())
    return bool(args) and args[0] == 1213  # MySQL ER_LOCK_DEADLOCK


class HostStateStore:
    """The host-state store on one database.

    Safe to share between threads; every process opens its own (an engine
    does not survive ``fork``). Opening checks the schema version and
    creates the tables in an empty database.

    :param connection: an SQLAlchemy URL: ``sqlite:////abs/file`` (created
        0600 when missing), ``sqlite://`` (in memory, this object only),
        ``postgresql+psycopg2://...`` or ``mysql+pymysql://...``.
    :param lock_timeout: seconds a writer waits for another's lock before
        failing with StoreUnavailable (SQLite's busy timeout, PostgreSQL's
        ``lock_timeout``, MySQL's ``innodb_lock_wait_timeout``).
    :raises SchemaVersionMismatch: the database has another schema version.
    :raises StoreUnavailable: the database cannot be reached.
    """

    def __init__(self, connection: str, lock_timeout: float = 30.0) -> None:
        self.url = engines.safe_url(connection)
        self._engine = engines.create_engine(connection, lock_timeout)
        # NOTE: an in-memory SQLite database is one connection: transactions
        # of several threads must not interleave on it.
        self._serial: contextlib.AbstractContextManager[Any] = (
            threading.RLock() if engines.is_sqlite_memory(connection)
            else contextlib.nullcontext())
        self._read_options = engines.transaction_options(self._engine, write=False)
        self._write_options = engines.transaction_options(self._engine, write=True)
        try:
            with self._serial:
                engines.ensure_schema(self._engine)
        except (sa.exc.OperationalError, sa.exc.InterfaceError,
                sa.exc.DatabaseError) as err:
            # NOTE: DatabaseError: SQLite's "file is not a database".
            self._engine.dispose()
            raise errors.StoreUnavailable(self.url, str(err.orig)) from err
        except BaseException:
            self._engine.dispose()
            raise

    @classmethod
    def from_config(cls, conf: cfg.ConfigOpts) -> HostStateStore:
        """The store ``[host_state]`` of ``conf`` names."""
        from compute_plugins.conf import host_state

        url = host_state.connection(conf)
        return cls(url, lock_timeout=conf.host_state.lock_timeout)

    @property
    def engine(self) -> Engine:
        return self._engine

    def close(self) -> None:
        """Close the store's connections."""
        self._engine.dispose()

    def __enter__(self) -> HostStateStore:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    # -- transactions -------------------------------------------------------

    @contextlib.contextmanager
    def _transaction(self, write: bool) -> Iterator[Connection]:
        try:
            with self._serial, self._engine.connect() as conn:
                conn.execution_options(
                    **(self._write_options if write else self._read_options))
                with conn.begin():
                    yield conn
        except sa.exc.DBAPIError as err:
            if isinstance(err, (sa.exc.OperationalError, sa.exc.InterfaceError)) \
                    and not _is_deadlock(err):
                raise errors.StoreUnavailable(self.url, str(err.orig)) from err
            raise

    def _read(self) -> contextlib.AbstractContextManager[Connection]:
        return self._transaction(write=False)

    def _write(self) -> contextlib.AbstractContextManager[Connection]:
        return self._transaction(write=True)

    def _retrying(self, operation: Callable[[], T]) -> T:
        """Run ``operation`` (whole transactions, compare-and-swap) again
        when the database aborted it to break a deadlock."""
        for attempt in range(1, _DEADLOCK_ATTEMPTS + 1):
            try:
                return operation()
            except sa.exc.DBAPIError as err:
                if not _is_deadlock(err) or attempt == _DEADLOCK_ATTEMPTS:
                    raise
                LOG.debug("host-state store: deadlock, attempt %d: %s", attempt, err)
        raise AssertionError("unreachable")

    # -- host states --------------------------------------------------------

    def _load_hosts(self, conn: Connection,
                    hosts: Optional[Sequence[str]]) -> dict[str, _HostRows]:
        """The rows of ``hosts`` (None: every host), in ``conn``'s snapshot."""
        if hosts is None:
            filters: list[Any] = [None]
        else:
            filters = [list(chunk) for chunk in _chunks(sorted(set(hosts)))]
        host_rows: list[sa.Row[Any]] = []
        state_rows: list[sa.Row[Any]] = []
        provider_rows: list[sa.Row[Any]] = []
        for chunk in filters:
            def where(query: Any, column: Any, chunk: Any = chunk) -> Any:
                return query if chunk is None else query.where(column.in_(chunk))
            host_rows += conn.execute(where(sa.select(
                t_hosts.c.host, t_hosts.c.generation, t_hosts.c.nodename,
                t_hosts.c.updated_at), t_hosts.c.host)).all()
            state_rows += conn.execute(where(sa.select(
                t_states.c.host, t_states.c.plugin, t_states.c.document),
                t_states.c.host)).all()
            provider_rows += conn.execute(where(sa.select(
                t_providers.c.host, t_providers.c.uuid, t_providers.c.name),
                t_providers.c.host)).all()
        result = {row.host: _HostRows(int(row.generation), row.nodename,
                                      row.updated_at, {}, {})
                  for row in host_rows}
        for row in state_rows:
            result[row.host].states[row.plugin] = row.document
        for row in provider_rows:
            result[row.host].providers[row.uuid] = row.name
        return result

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
        listed = None if hosts is None else _listed(hosts, "host names")
        with self._read() as conn:
            rows = self._load_hosts(conn, listed)
        return {host: self._snapshot(host, r) for host, r in sorted(rows.items())}

    def generations(self, hosts: Optional[Iterable[str]] = None) -> dict[str, int]:
        """host -> generation (None: every host): what changed since a read,
        without reading the states."""
        query = sa.select(t_hosts.c.host, t_hosts.c.generation)
        result: dict[str, int] = {}
        if hosts is None:
            chunks: list[Any] = [None]
        else:
            chunks = list(_chunks(sorted(set(_listed(hosts, "host names")))))
        with self._read() as conn:
            for chunk in chunks:
                q = query if chunk is None else query.where(t_hosts.c.host.in_(chunk))
                result.update((r.host, int(r.generation)) for r in conn.execute(q))
        return result

    def hosts_for_providers(self, uuids: Iterable[str]) -> dict[str, str]:
        """provider uuid -> the host that published it (unknown uuids absent)."""
        result: dict[str, str] = {}
        listed = sorted(set(_listed(uuids, "provider uuids")))
        with self._read() as conn:
            for chunk in _chunks(listed):
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
        _check_name("host name", host, _NAME)
        if nodename is not None:
            _check_name("node name", nodename, _NAME)
        texts = _state_texts(states)
        wanted_providers = None if providers is None else {
            _check_name("provider uuid", str(uuid), _UUID):
            _check_name("name of provider %s" % uuid, str(name), _NAME)
            for uuid, name in providers.items()}
        return self._retrying(lambda: self._publish(
            host, texts, int(expected_generation), nodename, wanted_providers))

    def _publish(self, host: str, texts: dict[str, str], expected: int,
                 nodename: Optional[str],
                 providers: Optional[dict[str, str]]) -> PublishResult:
        # NOTE: compare in a read first: a publish that changes nothing
        # writes nothing and takes no write lock.
        with self._read() as conn:
            current = self._load_hosts(conn, [host]).get(host)
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
        old = current or _HostRows(0, "", _utcnow(), {}, {})
        try:
            with self._write() as conn:
                if not self._bump(conn, host, expected, nodename):
                    raise errors.GenerationConflict(
                        host, expected, self._generation(conn, host))
                # NOTE: the bump succeeded, so the host's rows are still those
                # read at ``expected``: every writer bumps before it writes
                # them, under the row lock the bump holds.
                self._check_providers(conn, host, set(providers) - set(old.providers))
                self._write_delta(conn, host, old, texts, providers)
        except sa.exc.IntegrityError:
            # NOTE: a concurrent first publish of this host, or another host
            # taking one of these providers between the check and the insert.
            with self._read() as conn:
                now = self._generation(conn, host)
                if now != expected:
                    raise errors.GenerationConflict(host, expected, now) from None
                self._check_providers(conn, host, set(providers) - set(old.providers))
            raise
        return PublishResult(generation=expected + 1, written=True)

    @staticmethod
    def _generation(conn: Connection, host: str) -> int:
        found = conn.execute(sa.select(t_hosts.c.generation)
                             .where(t_hosts.c.host == host)).scalar()
        return int(found or 0)

    @staticmethod
    def _bump(conn: Connection, host: str, expected: int, nodename: str) -> bool:
        """Move the host from ``expected`` to the next generation (insert it
        at 1 from 0); False when it is not at ``expected``."""
        now = _utcnow()
        if expected == 0:
            conn.execute(sa.insert(t_hosts).values(
                host=host, generation=1, nodename=nodename, updated_at=now))
            return True
        result = conn.execute(
            sa.update(t_hosts)
            .where(t_hosts.c.host == host, t_hosts.c.generation == expected)
            .values(generation=expected + 1, nodename=nodename, updated_at=now))
        return result.rowcount == 1

    @staticmethod
    def _check_providers(conn: Connection, host: str, new: set[str]) -> None:
        if not new:
            return
        for chunk in _chunks(sorted(new)):
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

    # -- decisions ----------------------------------------------------------

    def submit_decision(self, consumer: str, host: str, spec: str) -> HostDecision:
        """Address a decision to ``host`` (status pending).

        :param spec: the RequestSpec with its decision, ``to_json()``.
        :raises DecisionExists: the consumer has a decision in force.
        """
        _check_name("consumer", consumer, _UUID)
        _check_name("host name", host, _NAME)
        try:
            if not isinstance(json.loads(spec), dict):
                raise ValueError("not a JSON object")
        except (TypeError, ValueError) as err:
            raise ValueError("the spec of consumer %s is not a serialised "
                             "RequestSpec: %s" % (consumer, err)) from None
        now = _utcnow()
        values = {"consumer": consumer, "host": host, "spec": spec,
                  "status": DecisionStatus.PENDING.value, "reasons": None,
                  "active_consumer": consumer, "created_at": now, "updated_at": now}

        def insert() -> HostDecision:
            with self._write() as conn:
                key = conn.execute(sa.insert(t_decisions).values(**values)
                                   ).inserted_primary_key
                # None only for an executemany or a statement that is no INSERT.
                assert key is not None
                new_id = key[0]
            return HostDecision(id=int(new_id), consumer=consumer, host=host,
                                spec=spec, status=DecisionStatus.PENDING,
                                reasons=(), created_at=now, updated_at=now)

        for _ in range(3):
            try:
                return self._retrying(insert)
            except sa.exc.IntegrityError:
                existing = self.active_decision(consumer)
                if existing is not None:
                    raise errors.DecisionExists(existing) from None
                # NOTE: it was released in between: try again.
        raise errors.HostStateError("consumer %s: could not submit its decision "
                                    "(its decisions keep changing)" % consumer)

    def get_decision(self, decision_id: int) -> HostDecision:
        """:raises DecisionNotFound: no decision with this id."""
        with self._read() as conn:
            row = conn.execute(sa.select(t_decisions)
                               .where(t_decisions.c.id == decision_id)).one_or_none()
        if row is None:
            raise errors.DecisionNotFound(decision_id)
        return _decision(row)

    def active_decision(self, consumer: str) -> Optional[HostDecision]:
        """The consumer's decision in force (pending, claimed, releasing)."""
        with self._read() as conn:
            row = conn.execute(sa.select(t_decisions).where(
                t_decisions.c.active_consumer == consumer)).one_or_none()
        return None if row is None else _decision(row)

    def latest_decision(self, consumer: str) -> Optional[HostDecision]:
        """The consumer's most recent decision, whatever its status."""
        with self._read() as conn:
            row = conn.execute(
                sa.select(t_decisions).where(t_decisions.c.consumer == consumer)
                .order_by(t_decisions.c.id.desc()).limit(1)).one_or_none()
        return None if row is None else _decision(row)

    def history(self, consumer: str) -> list[HostDecision]:
        """Every decision of the consumer, oldest first."""
        with self._read() as conn:
            rows = conn.execute(
                sa.select(t_decisions).where(t_decisions.c.consumer == consumer)
                .order_by(t_decisions.c.id)).all()
        return [_decision(r) for r in rows]

    def list_decisions(self, host: str,
                       status: DecisionStatus | str = DecisionStatus.PENDING,
                       limit: Optional[int] = None) -> list[HostDecision]:
        """The decisions addressed to ``host`` in ``status``, oldest first:
        an agent's work list (pending: to claim or reject; releasing: to
        free)."""
        query = (sa.select(t_decisions)
                 .where(t_decisions.c.host == host,
                        t_decisions.c.status == DecisionStatus(status).value)
                 .order_by(t_decisions.c.id))
        if limit is not None:
            query = query.limit(limit)
        with self._read() as conn:
            rows = conn.execute(query).all()
        return [_decision(r) for r in rows]

    def _transition(self, decision_id: int, target: DecisionStatus,
                    allowed: Iterable[DecisionStatus],
                    reasons: Optional[list[dict[str, str]]] = None) -> HostDecision:
        allowed = tuple(allowed)
        values: dict[str, Any] = {"status": target.value, "updated_at": _utcnow()}
        if target not in ACTIVE:
            values["active_consumer"] = None
        if reasons is not None:
            values["reasons"] = _canonical(reasons)

        def swap() -> tuple[int, Any]:
            with self._write() as conn:
                result = conn.execute(
                    sa.update(t_decisions)
                    .where(t_decisions.c.id == decision_id,
                           t_decisions.c.status.in_([s.value for s in allowed]))
                    .values(**values))
                row = conn.execute(sa.select(t_decisions)
                                   .where(t_decisions.c.id == decision_id)).one_or_none()
            return result.rowcount, row

        count, row = self._retrying(swap)
        if row is None:
            raise errors.DecisionNotFound(decision_id)
        decision = _decision(row)
        if count != 1:
            raise errors.DecisionStatusConflict(decision, target.value,
                                                [s.value for s in allowed])
        return decision

    def mark_claimed(self, decision_id: int) -> HostDecision:
        """pending -> claimed: the host's agent executed the decision.

        :raises DecisionStatusConflict: not pending (claimed already by a
            retry or another agent, or withdrawn: undo the claim).
        """
        return self._transition(decision_id, DecisionStatus.CLAIMED,
                                [DecisionStatus.PENDING])

    def mark_rejected(self, decision_id: int,
                      reasons: Iterable[Rejection | Mapping[str, Any]]) -> HostDecision:
        """pending -> rejected, with every plugin's reason.

        :param reasons: Rejections (or ``{plugin, provider, reason}``), at
            least one.
        :raises DecisionStatusConflict: not pending.
        """
        listed = _rejection_dicts(reasons)
        if not listed:
            raise ValueError("a rejection needs at least one reason")
        return self._transition(decision_id, DecisionStatus.REJECTED,
                                [DecisionStatus.PENDING], listed)

    def withdraw(self, decision_id: int) -> HostDecision:
        """pending -> released: the scheduler gives up before an answer.

        :raises DecisionStatusConflict: answered already (``.decision``
            says how).
        """
        return self._transition(decision_id, DecisionStatus.RELEASED,
                                [DecisionStatus.PENDING])

    def request_release(self, consumer: str) -> Optional[HostDecision]:
        """Ask the host to free the consumer: claimed -> releasing (the
        agent frees it and marks it released); pending -> released (never
        claimed); releasing stays. None when nothing is in force."""
        for _ in range(4):
            decision = self.active_decision(consumer)
            if decision is None or decision.status == DecisionStatus.RELEASING:
                return decision
            target = (DecisionStatus.RELEASED if decision.status == DecisionStatus.PENDING
                      else DecisionStatus.RELEASING)
            try:
                return self._transition(decision.id, target, [decision.status])
            except errors.DecisionStatusConflict:
                continue  # NOTE: claimed or released in between
        raise errors.HostStateError("consumer %s: could not request its release "
                                    "(its decision keeps changing)" % consumer)

    def mark_released(self, decision_id: int) -> HostDecision:
        """claimed or releasing -> released: the host freed the consumer.

        :raises DecisionStatusConflict: in another status.
        """
        return self._transition(decision_id, DecisionStatus.RELEASED,
                                [DecisionStatus.CLAIMED, DecisionStatus.RELEASING])

    def wait_for_answer(self, consumer: str, timeout: float, *,
                        withdraw_on_timeout: bool = True,
                        poll_interval: float = 0.05,
                        max_poll_interval: float = 1.0) -> HostDecision:
        """Wait until the host answers the consumer's latest decision.

        Polls with exponential back-off from ``poll_interval`` (> 0) to
        ``max_poll_interval`` seconds, never past the deadline.

        :returns: the decision once it is not pending (claimed, rejected,
            or released by a withdrawal).
        A store that is unavailable while it waits (a database restart, a
        fail-over) is polled again until the deadline: the decision stays
        pending meanwhile, and giving up early would leave it to a late
        agent while the caller moved on.

        :raises DecisionNotFound: the consumer has no decision.
        :raises AnswerTimeout: still pending after ``timeout`` seconds. With
            ``withdraw_on_timeout`` the decision is withdrawn first (pending
            -> released) so that a late agent cannot claim it; an answer
            that lands just before is returned instead. ``withdrawn`` is
            False when the store could not be reached to withdraw it: the
            host may still claim it.
        """
        # NOTE: "not >": NaN too (it never passed the deadline).
        if not timeout >= 0:
            raise ValueError("timeout %r: expected seconds >= 0" % (timeout,))
        if not poll_interval > 0:
            # NOTE: 0 made the back-off 0 too: a busy loop on the database.
            raise ValueError("poll_interval %r: expected seconds > 0" % (poll_interval,))
        decision = self.latest_decision(consumer)
        if decision is None:
            raise errors.DecisionNotFound(consumer)
        deadline = time.monotonic() + timeout
        delay = poll_interval
        unavailable: Optional[errors.StoreUnavailable] = None
        while not decision.answered:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                break
            time.sleep(min(delay, remaining))
            delay = min(delay * 2, max(max_poll_interval, poll_interval))
            try:
                decision = self.get_decision(decision.id)
                unavailable = None
            except errors.StoreUnavailable as err:
                LOG.warning("waiting for host %s to answer consumer %s: %s",
                            decision.host, consumer, err)
                unavailable = err
        if decision.answered:
            return decision
        withdrawn = False
        if withdraw_on_timeout:
            try:
                self.withdraw(decision.id)
                withdrawn = True
            except errors.DecisionStatusConflict as err:
                return err.decision
            except errors.StoreUnavailable as err:
                unavailable = err
        raise errors.AnswerTimeout(
            consumer, decision.host, timeout, withdrawn=withdrawn,
            unavailable=None if unavailable is None else unavailable.reason
        ) from unavailable

    def purge_decisions(self, before: datetime.datetime) -> int:
        """Delete rejected and released decisions last changed before
        ``before`` (naive UTC); returns how many."""
        def delete() -> int:
            with self._write() as conn:
                return conn.execute(sa.delete(t_decisions).where(
                    t_decisions.c.status.in_([DecisionStatus.REJECTED.value,
                                              DecisionStatus.RELEASED.value]),
                    t_decisions.c.updated_at < before)).rowcount
        return self._retrying(delete)
