"""One host-state database: its engine, its two kinds of transaction, and
the checks every table's writer shares.

The SQL store's two parts (host publication,
:mod:`compute_plugins.hoststate.hosts`; the decision queue,
:mod:`compute_plugins.hoststate.decisions`) run their statements in the
transactions a :class:`Database` opens: a *read* sees one snapshot, a
*write* the latest rows and locks what it updates (see
:mod:`compute_plugins.hoststate.engine`). A driver's connection failure
becomes :class:`~compute_plugins.hoststate.errors.StoreUnavailable`; a
transaction the database aborted to break a deadlock is run again by
:meth:`Database.retrying`.

The statements of the agents' and the schedulers' every decision (a
heartbeat, a swap, a publish, the reads of a plan, of an agent's work) are
built once: each by a module-level shape function under
:func:`functools.cache`, whose arguments are the statement's shape (what is
not a bound parameter, e.g. whether it is fenced) and whose values are
bound parameters given at each execution (``conn.execute(stmt, params)``).
Building a SQLAlchemy statement and its cache key costs more CPU than
sending it (0.3 ms for the heartbeat's ``UPDATE``, about half of the
heartbeat's CPU, measured in ``bench.scale.agent``); SQLAlchemy memoizes a
kept statement's cache key, and its compiled form is then found in the
engine's cache at once.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Optional, TypeVar

import sqlalchemy as sa
from oslo_log import log as logging
from sqlalchemy.engine import Connection, Engine

from compute_plugins.hoststate import broker, errors, notify, schema
from compute_plugins.hoststate import engine as engines
from compute_plugins.hoststate import push as push_backends
from compute_plugins.hoststate.records import AgentLease
from compute_plugins.util import forks, pools

LOG = logging.getLogger(__name__)

T = TypeVar("T")

#: Where a write transaction keeps the wake-ups to deliver after its commit
#: (its connection's ``info``; :meth:`Database.wake`).
_WAKEUPS = "compute_plugins.wakeups"

#: Names per ``IN (...)`` list.
CHUNK = 500
#: Longest host, node, plugin and provider name (their columns' size).
NAME_LENGTH = 255
#: Longest consumer and provider uuid.
UUID_LENGTH = 36
#: Attempts of a write that the database aborted as a deadlock.
DEADLOCK_ATTEMPTS = 5


def utcnow() -> datetime.datetime:
    """Now, naive UTC (the columns' time zone)."""
    return datetime.datetime.now(datetime.UTC).replace(tzinfo=None)


def server_now(conn: Connection) -> datetime.datetime:
    """Now, naive UTC, by the database server's clock (PostgreSQL: its
    current time, not the transaction's start; MySQL: the statement's):
    the leases' expiries are compared with one clock whichever machine an
    agent runs on. SQLite has no server: the local clock."""
    kind = engines.backend(conn.engine)
    if kind == "postgresql":
        found = conn.execute(sa.text("SELECT clock_timestamp() AT TIME ZONE 'UTC'")).scalar_one()
    elif kind == "mysql":
        found = conn.execute(sa.text("SELECT UTC_TIMESTAMP(6)")).scalar_one()
    else:
        return utcnow()
    if not isinstance(found, datetime.datetime):
        raise TypeError("the database's clock answered %r" % (found,))
    return found.replace(tzinfo=None)


def canonical(document: Any) -> str:
    """``document`` as canonical JSON (sorted keys, no spaces, no NaN): two
    equal documents have the same text."""
    return json.dumps(document, sort_keys=True, separators=(",", ":"),
                      allow_nan=False)


def check_name(what: str, value: Any, limit: int) -> str:
    """``value``, a string of 1 to ``limit`` characters (its column's
    size: a longer one failed as a driver error on PostgreSQL and MySQL and
    went in unchecked on SQLite)."""
    if not isinstance(value, str) or not value or len(value) > limit:
        raise ValueError("%s %r: expected 1 to %d characters" % (what, value, limit))
    return value


def listed(items: Iterable[str], what: str) -> list[str]:
    """``items`` as a list; a lone string is refused (it would be read as
    its characters, and the call would silently find nothing)."""
    if isinstance(items, (str, bytes)):
        raise TypeError("expected an iterable of %s, got the string %r" % (what, items))
    return list(items)


def chunks(items: Sequence[str], size: int = CHUNK) -> Iterator[Sequence[str]]:
    """``items`` in slices of ``size`` (one ``IN (...)`` each)."""
    for start in range(0, len(items), size):
        yield items[start:start + size]


#: The most variables an SQLite statement may take before SQLite 3.32
#: (Ubuntu 20.04's 3.31.1, still in service): 999.
SQLITE_OLD_VARIABLES = 999


def chunk_for(conn: Connection, lists: int) -> int:
    """How many names go in each of the ``lists`` ``IN (...)`` lists of
    one statement on ``conn``: :data:`CHUNK`, but on SQLite together no
    more than :data:`SQLITE_OLD_VARIABLES` less 99 for the statement's
    other parameters (its literals are some: its reads are transactions
    there, several statements cost no round trip)."""
    if conn.dialect.name != "sqlite":
        return CHUNK
    return min(CHUNK, (SQLITE_OLD_VARIABLES - 99) // lists)


def lease_of(row: Any) -> AgentLease:
    """A ``hoststate_leases`` row as an :class:`AgentLease`."""
    return AgentLease(host=row.host, epoch=int(row.epoch), node=row.node,
                      holder=row.holder, expires_at=row.expires_at)


def _unavailable(err: sa.exc.DBAPIError) -> bool:
    """The database could not be reached or refused the work for now
    (connection lost, lock wait timeout, read-only): a retry may succeed.

    NOTE: a server that only takes reads (a standby after a failover,
    ``default_transaction_read_only``, MySQL's ``read_only``) answers with
    its own codes, not as an operational error."""
    if _is_deadlock(err):
        return False
    if isinstance(err, (sa.exc.OperationalError, sa.exc.InterfaceError)):
        return True
    orig = err.orig
    if getattr(orig, "pgcode", None) == "25006":  # read_only_sql_transaction
        return True
    args: Sequence[Any] = getattr(orig, "args", ())
    # NOTE: ER_OPTION_PREVENTS_STATEMENT (--read-only),
    # ER_CANT_EXECUTE_IN_READ_ONLY_TRANSACTION.
    return bool(args) and args[0] in (1290, 1792)


#: SQLite's answers for a file that is not (or no longer) a database.
_SQLITE_CORRUPT = ("SQLITE_NOTADB", "SQLITE_CORRUPT")


def _corrupt(err: sa.exc.DBAPIError) -> bool:
    """SQLite found the file damaged or not a database at all: no retry
    helps (an operator moves it aside or restores a backup)."""
    return getattr(err.orig, "sqlite_errorname", None) in _SQLITE_CORRUPT


def _is_deadlock(err: sa.exc.DBAPIError) -> bool:
    """The database aborted the transaction to break a deadlock or a
    serialisation conflict: running it again is safe."""
    orig = err.orig
    code = getattr(orig, "pgcode", None) or getattr(orig, "sqlstate", None)
    if code in ("40P01", "40001"):
        return True
    args: Sequence[Any] = getattr(orig, "args", ())
    return bool(args) and args[0] == 1213  # MySQL ER_LOCK_DEADLOCK


class Database:
    """The host-state database at ``connection``.

    Safe to share between threads; every process opens its own, or, forked
    with its parent's, opens connections of its own at its first statement
    (:meth:`_forked`). Opening checks the schema version and creates the
    tables in an empty database.

    :param connection: an SQLAlchemy URL: ``sqlite:////abs/file`` (created
        0600 when missing), ``sqlite://`` (in memory, this object only),
        ``postgresql+psycopg2://...`` or ``mysql+pymysql://...``.
    :param lock_timeout: seconds a writer waits for another's lock before
        failing with StoreUnavailable (SQLite's busy timeout, PostgreSQL's
        ``lock_timeout``, MySQL's ``innodb_lock_wait_timeout``).
    :param push: wake waiters: through the broker ``push_transport_url``
        names, else by ``LISTEN``/``NOTIFY`` where the database can
        (:mod:`~compute_plugins.hoststate.notify`; PostgreSQL).
    :param safety_poll_interval: with push, seconds between a waiter's
        reads of the store while nothing is pushed (lost notifications).
    :param push_transport_url: an oslo.messaging transport URL
        (``rabbit://USER:PASS@HOST:PORT/VHOST``, or ``fake://``: this
        process only) that carries the wake-ups, whatever the database
        (:mod:`~compute_plugins.hoststate.broker`); empty: none.
    :param push_tls: how that broker is reached over TLS
        (:class:`~compute_plugins.hoststate.broker.TLS`: ``[host_state]
        push_ssl*``); None: as the URL says (plain by default).
    :param push_heartbeat: that broker's connections' heartbeat
        (:class:`~compute_plugins.hoststate.broker.Heartbeat`: ``[host_state]
        push_heartbeat_*``); None: their defaults.
    :param lease_duration: the agents' lease (``[compute]
        agent_lease_duration``): on PostgreSQL, a statement sent to a server
        that vanished fails within a third of it (``tcp_user_timeout``:
        :func:`~compute_plugins.hoststate.engine.pg_socket_params`), so that
        a stalled lease renewal is retried before the lease ends.
    :raises ValueError: ``push_transport_url`` is not one of those, or its
        TLS files do not load.
    :raises SchemaVersionMismatch: the database has another schema version.
    :raises StoreUnavailable: the database cannot be reached.
    """

    def __init__(self, connection: str, lock_timeout: float = 30.0, *,
                 push: bool = True, safety_poll_interval: float = 300.0,
                 push_transport_url: str = "",
                 push_tls: Optional[broker.TLS] = None,
                 push_heartbeat: Optional[broker.Heartbeat] = None,
                 lease_duration: float = engines.DEFAULT_LEASE_DURATION) -> None:
        if not safety_poll_interval > 0:
            raise ValueError("safety_poll_interval %r: expected seconds > 0"
                             % (safety_poll_interval,))
        self.url = engines.safe_url(connection)
        self.safety_poll_interval = safety_poll_interval
        #: What the store's parts keep in memory for this database, by
        #: key (the hosts' rows a publish wrote: :mod:`~compute_plugins.
        #: hoststate.hosts`): shared by every view of the store.
        self.info: dict[str, Any] = {}
        self._listener_lock = threading.Lock()
        #: Closed: no listener is opened again (its waiters poll).
        self._closed = False
        #: The SQLite file (None: a server, or in memory).
        self.path = engines.sqlite_path(connection)
        try:
            self.engine: Engine = engines.create_engine(connection, lock_timeout,
                                                        lease_duration=lease_duration)
        except OSError as err:
            # NOTE: the SQLite file's directory cannot be made (a file in
            # the path, no permission): one line, not a traceback.
            raise errors.StoreUnavailable(self.url, str(err)) from err
        #: The read transactions' engine (PostgreSQL, MySQL: their isolation
        #: level is the engine's, not set and reset per transaction:
        #: :func:`~compute_plugins.hoststate.engine.create_engine`); SQLite:
        #: :attr:`engine` (a read is its ``BEGIN``).
        self.read_engine: Engine = self.engine
        if engines.isolation_level(engines.backend(self.engine), write=False) is not None:
            self.read_engine = engines.create_engine(connection, lock_timeout, write=False,
                                                     lease_duration=lease_duration)
        #: PostgreSQL: connections that run each statement on its own
        #: (autocommit, no ping: :meth:`single`); None elsewhere.
        self.single_engine: Optional[Engine] = (
            engines.create_engine(connection, lock_timeout, autocommit=True,
                                  lease_duration=lease_duration)
            if engines.backend(self.engine) == "postgresql" else None)
        self._memory = engines.is_sqlite_memory(connection)
        # NOTE: an in-memory SQLite database is one connection: transactions
        # of several threads must not interleave on it.
        self._serial: contextlib.AbstractContextManager[Any] = (
            threading.RLock() if self._memory else contextlib.nullcontext())
        self._read_options = engines.transaction_options(self.engine, write=False)
        self._write_options = engines.transaction_options(self.engine, write=True)
        try:
            with self._serial:
                engines.ensure_schema(self.engine)
        except (sa.exc.OperationalError, sa.exc.InterfaceError,
                sa.exc.DatabaseError) as err:
            self.engine.dispose()
            if _corrupt(err) and self.path is not None:
                raise errors.StoreCorrupt(self.url, self.path, str(err.orig)) from err
            raise errors.StoreUnavailable(self.url, str(err.orig)) from err
        except BaseException:
            self.engine.dispose()
            raise
        #: What a forked child inherited of its parent's pools (kept, never
        #: used: :meth:`_forked`).
        self._parents: list[Any] = []
        forks.renew_in_child(self)
        try:
            #: How waiters are woken (None: they poll).
            self.push: Optional[notify.Push] = push_backends.choose(
                self.engine, self.url, push=push, transport_url=push_transport_url,
                safety_poll_interval=safety_poll_interval, tls=push_tls,
                heartbeat=push_heartbeat,
                lock_timeout=lock_timeout, lease_duration=lease_duration)
        except BaseException:
            self.engine.dispose()
            raise

    def close(self) -> None:
        """Close the database's connections (the listener's too)."""
        with self._listener_lock:
            self._closed = True
        if self.push is not None:
            self.push.close()
        self.engine.dispose()
        if self.single_engine is not None:
            self.single_engine.dispose()
        if self.read_engine is not self.engine:
            self.read_engine.dispose()

    @property
    def engines(self) -> list[Engine]:
        """Every engine of this database (the writes', the reads', the
        single statements'): each has its own pool."""
        found = [self.engine]
        if self.read_engine is not self.engine:
            found.append(self.read_engine)
        if self.single_engine is not None:
            found.append(self.single_engine)
        return found

    def _forked(self) -> None:
        """In a child forked with this object: the pooled connections of
        both engines (the transactions' and the heartbeat's) are the
        parent's sockets, its sessions on the server. The child opens its
        own (SQLAlchemy's ``dispose(close=False)`` for a forked child) and
        keeps the parent's from the garbage collector, whose close would
        end the parent's sessions. The broker push forgets the parent's
        threads likewise (:mod:`~compute_plugins.hoststate.broker`). An
        in-memory SQLite database is its one connection: kept."""
        if self._memory:
            return
        for engine in self.engines:
            self._parents.append(engine.pool)
            engine.dispose(close=False)

    @property
    def pushes(self) -> bool:
        """Whether waiters on this database are woken (push asked for, and
        a broker named or PostgreSQL with psycopg2)."""
        return self.push is not None

    def listener(self) -> Optional[notify.Hub]:
        """The one hub of this database's waiters in this process, opened
        at the first call (None: no push, or the database was closed: they
        poll)."""
        if self.push is None:
            return None
        with self._listener_lock:
            if self._closed:
                return None
            return self.push.listener()

    def wake(self, conn: Connection, channels: Sequence[str], payload: str) -> None:
        """In a write transaction on ``conn``: wake ``channels``' waiters
        once it commits (in the transaction on PostgreSQL; after the commit
        through a broker: :meth:`_transaction`)."""
        if self.push is None or not channels:
            return
        if not self.push.send(conn, channels, payload):
            conn.info.setdefault(_WAKEUPS, []).append((list(channels), payload))

    @property
    def notifies_in_statement(self) -> bool:
        """Whether a write may wake its waiters from its own statement
        (PostgreSQL's ``LISTEN``/``NOTIFY`` push: ``pg_notify`` in the
        statement's ``RETURNING``, :func:`~compute_plugins.hoststate.notify.
        notification`) instead of a ``SELECT pg_notify`` of its own: one
        round trip less per write that wakes someone."""
        return self.push is not None and self.push.kind == "postgresql"

    @contextlib.contextmanager
    def _transaction(self, write: bool) -> Iterator[Connection]:
        wakeups: Optional[list[tuple[list[str], str]]] = None
        # NOTE: once the commit is being sent, a lost connection may have
        # committed: no Disconnected (no retry) from then on.
        committing = False
        try:
            engine = self.engine if write else self.read_engine
            with self._serial, engine.connect() as conn:
                conn.execution_options(
                    **(self._write_options if write else self._read_options))
                conn.info.pop(_WAKEUPS, None)
                try:
                    with conn.begin():
                        yield conn
                        committing = True
                except sa.exc.DBAPIError as err:
                    conn.info.pop(_WAKEUPS, None)
                    if _unavailable(err) or _corrupt(err):
                        self._reconnect(conn)
                    raise
                except BaseException:
                    conn.info.pop(_WAKEUPS, None)
                    raise
                wakeups = conn.info.pop(_WAKEUPS, None)
        except sa.exc.DBAPIError as err:
            if _corrupt(err) and self.path is not None:
                raise errors.StoreCorrupt(self.url, self.path, str(err.orig)) from err
            if err.connection_invalidated and not committing:
                raise errors.Disconnected(self.url, str(err.orig)) from err
            if _unavailable(err):
                raise errors.StoreUnavailable(self.url, str(err.orig)) from err
            raise
        if wakeups and self.push is not None:
            # NOTE: after the commit (and the connection given back), never
            # before: a waiter woken reads what woke it. A crash between
            # the commit and this loses the wake-up: the waiters' safety
            # net reads it (notify.Push.committed).
            self.push.committed(wakeups)

    def single(self, operation: Callable[[Connection], T], *, retry: bool = True) -> T:
        """``operation(conn)``, which runs one statement that is atomic by
        itself (an ``UPDATE ... RETURNING``), on PostgreSQL on a connection
        of :attr:`single_engine`: one round trip (no ping, no isolation
        level set and reset, no ``BEGIN``/``COMMIT``), where a write
        transaction costs three to five. The heartbeat of every idle agent
        is such a statement (10,000 hosts: a thousand a second), and so are
        a decision's insert and its status swaps (issue 19). Elsewhere: in
        a write transaction.

        A pooled connection the server closed since (which the ping would
        have caught) fails the statement before it ran: with ``retry``
        (a statement that may run twice: the heartbeat) tried once more on
        a fresh one. Without it (an insert, a swap: run twice, the second
        would find the first's row and fail) a connection whose socket
        shows the server closed it is replaced before the statement is
        sent (:meth:`_replace_if_lost`: a ping where the transactions'
        pools ping), and a failure is :class:`~compute_plugins.hoststate.errors.
        StoreUnavailable`, as a transaction's. The wake-ups ``operation``
        asked for (:meth:`wake`) are delivered once it returned: each of
        its statements committed by itself.

        :raises StoreUnavailable: the database cannot be reached.
        """
        engine = self.single_engine
        if engine is None:
            with self.write() as conn:
                return operation(conn)
        wakeups: Optional[list[tuple[list[str], str]]] = None
        for attempt in (1, 2):
            try:
                with engine.connect() as conn:
                    if not retry:
                        self._replace_if_lost(conn)
                    conn.info.pop(_WAKEUPS, None)
                    found = operation(conn)
                    # NOTE: not after a failure: the connection may be
                    # invalid (its info not to be read); the next call
                    # clears what it left.
                    wakeups = conn.info.pop(_WAKEUPS, None)
                break
            except sa.exc.DBAPIError as err:
                if retry and attempt == 1 and err.connection_invalidated:
                    engine.dispose()
                    continue
                if _unavailable(err):
                    engine.dispose()
                    raise errors.StoreUnavailable(self.url, str(err.orig)) from err
                raise
        else:
            raise AssertionError("unreachable")
        if wakeups and self.push is not None:
            self.push.committed(wakeups)
        return found

    def _replace_if_lost(self, conn: Connection) -> None:
        """Before a statement that must not run twice (:meth:`single`
        without ``retry``): a pooled connection that may be stale (idle
        over a second, or its socket shows the server closed it:
        :func:`~compute_plugins.util.pools.may_be_stale`) is pinged, the
        rule of the transactions' pools, and replaced when the ping fails
        (a connection lost without a word, a fail-over: the statement
        would have failed on it with its outcome unknown)."""
        dbapi_conn = conn.connection.dbapi_connection
        if dbapi_conn is None or not pools.may_be_stale(dbapi_conn, conn.info):
            return  # NOTE: None: invalidated already (a fresh one at the statement)
        try:
            conn.dialect.do_ping(dbapi_conn)
        except Exception:  # noqa: BLE001 - any failure: a fresh connection
            # NOTE: a fresh connection at the statement.
            conn.invalidate()

    def read_one(self, operation: Callable[[Connection], T]) -> T:
        """``operation(conn)``, which runs one read statement: on
        PostgreSQL on a connection of :attr:`single_engine` (its own
        snapshot: one round trip, where a read transaction's ``BEGIN``,
        statement and ``COMMIT`` are three; a lost pooled connection tried
        again, as the heartbeat's); elsewhere in a read transaction.

        :raises StoreUnavailable: the database cannot be reached.
        """
        if self.single_engine is None:
            with self.read() as conn:
                return operation(conn)
        return self.single(operation)

    def _reconnect(self, conn: Connection) -> None:
        """After a failure that may be the connection's own, drop it and
        every connection pooled with it, so that the next transaction opens
        a fresh one.

        NOTE: a connection keeps what it was opened with: an SQLite
        connection opened while the file could not be written (``attempt to
        write a readonly database``), one to a server that restarted, stay
        broken after the outage while a fresh connection works (issue 20,
        item 6: the agent failed every poll until restarted). An in-memory
        database is its one connection: kept.
        """
        if self._memory:
            return
        conn.invalidate()
        self.engine.dispose()
        if self.read_engine is not self.engine:
            self.read_engine.dispose()

    def read(self) -> contextlib.AbstractContextManager[Connection]:
        """A read transaction: one snapshot from its first statement on."""
        return self._transaction(write=False)

    def write(self) -> contextlib.AbstractContextManager[Connection]:
        """A write transaction: the latest rows, locked as it updates them."""
        return self._transaction(write=True)

    def retrying(self, operation: Callable[[], T]) -> T:
        """Run ``operation`` (whole transactions, compare-and-swap) again
        when the database aborted it to break a deadlock, and once when its
        connection was lost before a commit was sent
        (:class:`~compute_plugins.hoststate.errors.Disconnected`: nothing
        committed; a pooled connection the server ended since its last use,
        less than a second ago, is not pinged: :mod:`compute_plugins.util.
        pools`). A connection lost during a commit is never retried (the
        commit may have landed): StoreUnavailable."""
        reconnected = False
        attempt = 1
        while True:
            try:
                return operation()
            except errors.Disconnected as err:
                if reconnected:
                    raise
                reconnected = True
                LOG.debug("host-state store: connection lost, once more: %s", err)
            except sa.exc.DBAPIError as err:
                if not _is_deadlock(err) or attempt == DEADLOCK_ATTEMPTS:
                    raise
                LOG.debug("host-state store: deadlock, attempt %d: %s", attempt, err)
                attempt += 1


#: The writer's fence as a condition of its statement, bound
#: (:meth:`OnDatabase.fence_params`): as :meth:`OnDatabase.fence_clauses`.
FENCE_BOUND = sa.exists(sa.select(schema.leases.c.epoch).where(
    schema.leases.c.host == sa.bindparam("fence_host"),
    schema.leases.c.epoch == sa.bindparam("fence_epoch")).with_for_update(read=True))


class OnDatabase:
    """Base of the SQL store's parts: they run on one :class:`Database`.

    :param db: the database.
    """

    def __init__(self, db: Database) -> None:
        self.db = db
        #: The fencing token every write carries: (host, epoch), None for a
        #: writer that is no host's agent (a scheduler, an operator).
        self.fence: Optional[tuple[str, int]] = None

    def check_fence(self, conn: Connection, share: bool = False) -> None:
        """In a write transaction: refuse it unless the writer's token is
        still its host's lease (the lease row locked until the commit, so
        that a takeover cannot slip between the check and the write).

        :param share: take the share lock that :meth:`fence_clauses` took
            already (why an ``UPDATE`` with them matched nothing), not an
            exclusive one: two of the agent's writes that each held the
            share lock and asked for the exclusive one waited for each
            other (a deadlock, or a write waiting for another to commit).
        :raises Fenced: the lease has another epoch, or is gone.
        """
        if self.fence is None:
            return
        host, epoch = self.fence
        row = conn.execute(sa.select(schema.leases).where(
            schema.leases.c.host == host).with_for_update(read=share)).one_or_none()
        if row is None or int(row.epoch) != epoch:
            raise errors.Fenced(host, epoch, None if row is None else lease_of(row))

    def fence_clauses(self) -> list[Any]:
        """The writer's fence as conditions of its own ``UPDATE``: the
        host's lease still has the writer's epoch, read with a share lock
        held until the commit (a takeover, which updates the lease, waits
        for it; as :meth:`check_fence`, without a statement of its own).
        An update that matched nothing tells why with :meth:`check_fence`
        (``share``: the same lock, no exclusive one after it).
        Where a write cannot take the lock in its statement (MySQL's
        ``UPDATE`` has no ``RETURNING`` either: the store checks first
        there), callers use :meth:`check_fence`. None: no fence."""
        if self.fence is None:
            return []
        host, epoch = self.fence
        return [sa.exists(sa.select(schema.leases.c.epoch).where(
            schema.leases.c.host == host, schema.leases.c.epoch == epoch)
            .with_for_update(read=True))]

    def fence_params(self) -> dict[str, Any]:
        """The parameters of :data:`FENCE_BOUND` for this writer (``{}``:
        no fence, the statement built without it: its shape function is
        told whether ``self.fence`` is None)."""
        if self.fence is None:
            return {}
        return {"fence_host": self.fence[0], "fence_epoch": self.fence[1]}

    def host_changes(self, host: str) -> Optional[notify.Subscription]:
        """A subscription to what ``host``'s agent acts on (decisions
        addressed to the host changed by others, its disabled record):
        the :class:`~compute_plugins.hoststate.transport.HostWakeups` of
        the SQL store. None where nothing is pushed (the agent polls)."""
        listener = self.db.listener()
        return None if listener is None else listener.subscribe(notify.host_channel(host))

    def notify_host(self, conn: Connection, host: str, what: str) -> None:
        """In a write transaction: wake ``host``'s agent at the commit
        (not for the agent's own writes)."""
        if self.fence is None or self.fence[0] != host:
            self.db.wake(conn, [notify.host_channel(host)], what)

    @property
    def url(self) -> str:
        """The database URL, password hidden."""
        return self.db.url

    @property
    def engine(self) -> Engine:
        return self.db.engine


__all__ = ["lease_of", "FENCE_BOUND", "CHUNK", "DEADLOCK_ATTEMPTS",
           "NAME_LENGTH", "SQLITE_OLD_VARIABLES", "UUID_LENGTH", "Database",
           "chunk_for",
           "OnDatabase", "canonical", "check_name", "chunks", "listed", "server_now",
           "utcnow"]
