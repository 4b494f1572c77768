"""Engines for the host-state store, and its schema check at start.

One engine per store, configured per backend so that the store's two kinds
of transaction mean the same everywhere:

- a *read* sees one snapshot of the database from its first statement to
  its end (PostgreSQL and MySQL: ``REPEATABLE READ``; SQLite: a deferred
  ``BEGIN`` in WAL mode), so the rows of one host read by several statements
  belong to one generation;
- a *write* sees the latest committed rows and locks what it updates
  (PostgreSQL and MySQL: ``READ COMMITTED`` and row locks taken by the
  conditional ``UPDATE``; SQLite: ``BEGIN IMMEDIATE``, one writer at a time,
  others wait up to the busy timeout).

NOTE: Python's sqlite3 module opens transactions only before DML, never
before a ``SELECT``; the store's reads would then be one snapshot per
statement. As SQLAlchemy's documentation recommends, the driver's own
transaction handling is turned off and the store emits ``BEGIN`` itself.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import sqlite3
import time
import uuid
from collections.abc import Iterator
from typing import Any, Optional

import sqlalchemy as sa
from sqlalchemy import event, pool
from sqlalchemy.engine import URL, Connection, Engine

from compute_plugins.conf import compute as compute_conf
from compute_plugins.hoststate import errors, schema
from compute_plugins.util import files, pools

#: Execution option of a connection whose transaction writes.
WRITE_OPTION = "compute_plugins_hoststate_write"

_ISOLATION = {
    # backend: (read, write)
    "postgresql": ("REPEATABLE READ", "READ COMMITTED"),
    # NOTE: READ COMMITTED for MySQL writers: InnoDB then takes no gap
    # locks, which under REPEATABLE READ make writers of different hosts
    # deadlock on the secondary indexes.
    "mysql": ("REPEATABLE READ", "READ COMMITTED"),
}

#: Key of the PostgreSQL advisory lock and name of the MySQL named lock
#: taken while the schema is checked or created.
_PG_LOCK_KEY = 0x636F6D7075746531  # "compute1"
_MYSQL_LOCK = "compute_plugins.hoststate.schema"


def backend(engine: Engine) -> str:
    """``sqlite``, ``postgresql`` or ``mysql`` (MariaDB included)."""
    name = engine.dialect.name
    return "mysql" if name == "mariadb" else name


def safe_url(url: str | URL) -> str:
    """``url`` with its password hidden, for messages: the one after the
    user name, and any in the query string (libpq and the MySQL drivers
    read ``?password=``, ``?passwd=`` and ``?sslpassword=``)."""
    parsed = sa.engine.make_url(url)
    secret = {key: "***" for key in parsed.query if "passw" in key.lower()}
    if secret:
        parsed = parsed.update_query_dict(secret)
    return parsed.render_as_string(hide_password=True)


def sqlite_path(url: str | URL) -> Optional[str]:
    """The file of an SQLite URL (None: not SQLite, or in memory)."""
    parsed = sa.engine.make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return None
    database = parsed.database
    if not database or database == ":memory:" or database.startswith("file:"):
        return None
    return os.path.abspath(database)


def is_sqlite_memory(url: str | URL) -> bool:
    parsed = sa.engine.make_url(url)
    return (parsed.get_backend_name() == "sqlite"
            and (not parsed.database or parsed.database == ":memory:"))


#: Seconds to establish a connection to a database server before failing
#: (unless the URL sets its own).
CONNECT_TIMEOUT = 10
#: libpq's TCP keepalives on every connection to PostgreSQL (the pool's, the
#: heartbeat's, the listener's): a server that vanished without a word (no
#: FIN nor RST: a crashed machine, a dropped route, a failed-over address)
#: is noticed on an idle connection within idle + interval x count = 60 s
#: instead of never (the listener sends nothing while it waits).
PG_KEEPALIVES = {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10,
                 "keepalives_count": 3}
#: The least ``tcp_user_timeout`` (seconds): a few retransmissions of a
#: packet lost on a busy network are not a dead server.
MIN_TCP_USER_TIMEOUT = 10.0


#: The agents' lease duration a store assumes unless told: ``[compute]
#: agent_lease_duration``'s default, taken from the option's module (one
#: value: a change of the option's default changes this).
DEFAULT_LEASE_DURATION: float = compute_conf.AGENT_LEASE_DURATION


def pg_socket_params(lock_timeout: float,
                     lease_duration: float = DEFAULT_LEASE_DURATION) -> dict[str, int]:
    """The libpq parameters every store connection to PostgreSQL gets
    unless its URL sets them (:func:`create_engine`,
    :func:`compute_plugins.hoststate.notify.connector`).

    - :data:`PG_KEEPALIVES`, for a connection that waits;
    - ``tcp_user_timeout``: a statement sent to a server that vanished
      without a RST fails once it has gone unacknowledged this long,
      instead of the kernel's ~15 minutes of retransmissions (while an
      agent's lease renewal, or a writer holding the decision queue, waits
      on it). It is the least of ``lock_timeout`` and a third of
      ``lease_duration`` (the agents' lease, renewed every third of it), at
      least :data:`MIN_TCP_USER_TIMEOUT`: a renewal stalled on a server
      that vanished fails while the lease still holds, and the next poll
      renews it on a new connection (to the address's new server after a
      failover); as long as the lease, the lease was lost before the
      renewal failed. A statement that waits for a lock or runs long is
      not cut short: the server acknowledged it;
    - ``connect_timeout`` (:data:`CONNECT_TIMEOUT`).

    libpq applies the socket options (``SO_KEEPALIVE``, ``TCP_KEEPIDLE``,
    ``TCP_KEEPINTVL``, ``TCP_KEEPCNT``, ``TCP_USER_TIMEOUT``) on Linux.
    """
    user_timeout = max(min(lock_timeout, lease_duration / 3), MIN_TCP_USER_TIMEOUT)
    return {**PG_KEEPALIVES,
            "tcp_user_timeout": int(user_timeout * 1000),
            "connect_timeout": CONNECT_TIMEOUT}


#: Seconds ensure_schema waits for MySQL's schema lock.
_MYSQL_SCHEMA_LOCK_WAIT = 60


def _server_events(engine: Engine, kind: str, lock_timeout: float) -> None:
    """Make a writer that waits for a row lock give up after
    ``lock_timeout`` seconds (PostgreSQL waits forever by default, MySQL
    50 s), as SQLite's busy timeout does: the store then raises
    StoreUnavailable instead of hanging behind a stuck transaction."""
    if kind == "postgresql":
        statement = "SET SESSION lock_timeout = %d" % max(1, round(lock_timeout * 1000))
    else:
        # NOTE: whole seconds, at least 1.
        statement = "SET SESSION innodb_lock_wait_timeout = %d" % max(1, round(lock_timeout))

    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, record: Any) -> None:
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(statement)
        finally:
            cursor.close()
        dbapi_connection.commit()


def _set_wal(cursor: Any, lock_timeout: float) -> None:
    """Switch the database to WAL, waiting while another connection holds
    the lock: SQLite answers a journal-mode change "database is locked" at
    once, without its busy handler (a new file opened by several agents)."""
    deadline = time.monotonic() + lock_timeout
    delay = 0.005
    while True:
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as err:
            if "locked" not in str(err) or time.monotonic() >= deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.2)


def _sqlite_events(engine: Engine, wal: bool, lock_timeout: float) -> None:
    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, record: Any) -> None:
        # NOTE: None: the driver never opens transactions; _begin does.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            if wal:
                _set_wal(cursor, lock_timeout)
            cursor.execute("PRAGMA foreign_keys=ON")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        write = conn.get_execution_options().get(WRITE_OPTION)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


def create_engine(url: str | URL, lock_timeout: float = 30.0, *,
                  autocommit: bool = False, write: bool = True,
                  lease_duration: float = DEFAULT_LEASE_DURATION) -> Engine:
    """An engine for ``url``, set up as the module docstring says.

    :param write: (PostgreSQL, MySQL) the engine runs write transactions
        (else read ones): their isolation level is the engine's, set once
        per connection when it connects, not set and reset around every
        transaction (two round trips each). A store has one engine of each
        kind (:class:`~compute_plugins.hoststate.database.Database`).
        A pooled connection is pinged before a transaction only when it
        waited in the pool over a second or its socket shows the server
        closed it (:func:`compute_plugins.util.pools.ping_when_idle`), not
        before every transaction (a round trip each).

    :param autocommit: (PostgreSQL, MySQL) each statement commits on its
        own, and a connection taken from the pool is not pinged first: for
        single statements that are atomic by themselves (the heartbeat),
        one round trip instead of a ping, an isolation level set and reset,
        the statement and its commit. A pooled connection the server closed
        meanwhile then fails the statement (``connection_invalidated``): the
        caller tries once more (:meth:`Database.single
        <compute_plugins.hoststate.database.Database.single>`).
    :param lease_duration: the agents' lease (``[compute]
        agent_lease_duration``), which bounds PostgreSQL's
        ``tcp_user_timeout`` (:func:`pg_socket_params`).

    SQLite files are created 0600 (their directory 0700) when missing;
    ``sqlite://`` is one in-memory database shared by the engine's users.
    A writer waits ``lock_timeout`` seconds for another's lock (SQLite's
    busy timeout, PostgreSQL's ``lock_timeout``, MySQL's
    ``innodb_lock_wait_timeout``); connecting to a server gives up after
    :data:`CONNECT_TIMEOUT` seconds. A server that vanished without a word
    is noticed: on PostgreSQL by TCP keepalives and ``tcp_user_timeout``
    (:func:`pg_socket_params`), on MySQL by the driver's read and write
    timeouts (a statement unanswered for ``max(lock_timeout, 60) + 10``
    seconds: it may wait for a row lock or the schema lock); each unless
    the URL sets its own.
    """
    parsed = sa.engine.make_url(url)
    name = parsed.get_backend_name()
    if name == "sqlite":
        memory = is_sqlite_memory(parsed)
        path = sqlite_path(parsed)
        if path is not None:
            # NOTE: 0600 in a 0700 directory when missing; a symlink at the
            # file's path is refused (OSError), never followed.
            files.ensure_private_dir(os.path.dirname(path))
            files.create_private_file(path)
        kwargs: dict[str, Any] = {
            "connect_args": {"timeout": lock_timeout,
                             "check_same_thread": False}}
        if memory:
            kwargs["poolclass"] = pool.StaticPool
        engine = sa.create_engine(parsed, **kwargs)
        _sqlite_events(engine, wal=not memory, lock_timeout=lock_timeout)
        return engine
    kind = "mysql" if name in ("mysql", "mariadb") else name
    driver = parsed.get_driver_name()
    connect_args: dict[str, Any] = {}
    timeouts: tuple[str, ...] = ()
    if kind == "postgresql" and driver in ("psycopg2", "psycopg"):
        # NOTE: libpq's own parameters, which both drivers pass on; the
        # URL's win (connect_args would override them).
        connect_args = {key: value for key, value in pg_socket_params(
            lock_timeout, lease_duration).items() if key not in parsed.query}
    elif kind == "mysql" and driver in ("pymysql", "mysqldb"):
        timeouts = ("connect_timeout", "read_timeout", "write_timeout")
    for key in timeouts:
        if key not in parsed.query:
            # NOTE: PyMySQL waits for the server's greeting and answers
            # without a timeout by default: a URL naming a server that does
            # not speak first (another service's port) hung forever.
            # A statement's answer may legitimately wait for a row lock or
            # the schema lock, then take its time.
            connect_args[key] = CONNECT_TIMEOUT if key == "connect_timeout" else int(
                max(lock_timeout, _MYSQL_SCHEMA_LOCK_WAIT) + CONNECT_TIMEOUT)
    kwargs = {"pool_pre_ping": False, "connect_args": connect_args}
    if autocommit:
        kwargs["isolation_level"] = "AUTOCOMMIT"
    else:
        kwargs["isolation_level"] = isolation_level(kind, write)
    if kind == "mysql":
        if "charset" not in parsed.query:
            parsed = parsed.update_query_dict({"charset": "utf8mb4"})
        kwargs["pool_recycle"] = 3600
    engine = sa.create_engine(parsed, **kwargs)
    if kind in ("postgresql", "mysql"):
        _server_events(engine, kind, lock_timeout)
    if autocommit:
        # NOTE: pinged by the caller where a lost connection matters
        # (Database.single's statements that are not run twice).
        pools.record_checkins(engine)
    else:
        pools.ping_when_idle(engine)
    return engine


def isolation_level(kind: str, write: bool) -> Optional[str]:
    """The isolation level of a write or a read transaction on a
    ``kind`` database (:func:`backend`; None: SQLite, whose transactions
    the ``BEGIN`` they start with sets)."""
    levels = _ISOLATION.get(kind)
    if levels is None:
        return None
    return levels[1] if write else levels[0]


def transaction_options(engine: Engine, write: bool) -> dict[str, Any]:
    """Execution options of a read or a write transaction on ``engine``
    (its isolation level is the engine's: :func:`create_engine`)."""
    return {WRITE_OPTION: write}


@contextlib.contextmanager
def _schema_transaction(conn: Connection) -> Iterator[None]:
    """A write transaction on ``conn`` that holds the schema lock, so that
    schema checks and creation are serialised across processes.

    The lock is held until the transaction has committed: a second opener
    that takes it next sees the tables and the version row together.
    """
    kind = backend(conn.engine)
    if kind == "mysql":
        # NOTE: a MySQL named lock belongs to the session, not to the
        # transaction: take it before the transaction begins and release it
        # after the commit. Released before the commit, another opener would
        # see the tables (MySQL's DDL commits at once) without the version
        # row, and report a schema without version.
        got = conn.execute(sa.text("SELECT GET_LOCK(:name, :wait)"),
                           {"name": _MYSQL_LOCK, "wait": _MYSQL_SCHEMA_LOCK_WAIT}).scalar()
        conn.commit()
        if got != 1:
            raise errors.StoreUnavailable(
                safe_url(conn.engine.url),
                "could not take the schema lock %s in %d s"
                % (_MYSQL_LOCK, _MYSQL_SCHEMA_LOCK_WAIT))
        try:
            with conn.begin():
                yield
        finally:
            conn.execute(sa.text("SELECT RELEASE_LOCK(:name)"), {"name": _MYSQL_LOCK})
            conn.commit()
        return
    with conn.begin():
        if kind == "postgresql":
            # NOTE: a transaction lock, released by the commit.
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"),
                         {"key": _PG_LOCK_KEY})
        # NOTE: SQLite: the BEGIN IMMEDIATE of the write transaction.
        yield


def _upgrade(conn: Connection, found: int, tables: set[str]) -> None:
    """Bring a store of schema version ``found`` (a key of
    :data:`~compute_plugins.hoststate.schema.UPGRADES`) to
    :data:`~compute_plugins.hoststate.schema.SCHEMA_VERSION`: create the
    tables it lacks, then record the new version (last: on MySQL, whose
    DDL commits at once, an interrupted upgrade is run again)."""
    missing = [t for t in schema.UPGRADES[found] if t.name not in tables]
    if missing:
        schema.metadata.create_all(conn, tables=missing)
    for table, name in schema.ADDED_COLUMNS:
        if table.name not in tables or table in missing:
            continue
        if name in {c["name"] for c in sa.inspect(conn).get_columns(table.name)}:
            continue    # NOTE: added by an interrupted upgrade (MySQL's DDL)
        column = table.c[name]
        default = column.server_default
        assert isinstance(default, sa.DefaultClause)
        conn.execute(sa.text("ALTER TABLE %s ADD COLUMN %s %s NOT NULL DEFAULT '%s'" % (
            table.name, name, column.type.compile(dialect=conn.dialect),
            default.arg)))
    for index in schema.ADDED_INDEXES:
        indexed = index.table
        assert indexed is not None
        if indexed.name not in tables or indexed in missing:
            continue
        if index.name in {i["name"] for i in sa.inspect(conn).get_indexes(indexed.name)}:
            continue    # NOTE: made by an interrupted upgrade (MySQL's DDL)
        index.create(conn)
    _seed(conn)
    conn.execute(sa.delete(schema.version))
    conn.execute(sa.insert(schema.version).values(version=schema.SCHEMA_VERSION))


def _seed(conn: Connection) -> None:
    """The one-row tables' rows a new or upgraded store needs: the change
    counter (:data:`~compute_plugins.hoststate.schema.changes`), from 0,
    and the store's identity (:data:`~compute_plugins.hoststate.schema.
    store_identity`, a new uuid), which the readers of the change numbers
    hold with their mark: a store recreated under them is another store
    whatever its counter says (:mod:`~compute_plugins.hoststate.changes`).
    An agent asked for it first on stores made before."""
    if conn.execute(sa.select(schema.changes.c.id)).first() is None:
        conn.execute(sa.insert(schema.changes).values(id=1, last_number=0, removals=0))
    if conn.execute(sa.select(schema.store_identity.c.id)).first() is None:
        made = datetime.datetime.now(datetime.UTC).replace(tzinfo=None)
        conn.execute(sa.insert(schema.store_identity).values(
            id=1, uuid=str(uuid.uuid4()), created_at=made))


def ensure_schema(engine: Engine) -> None:
    """Create the tables in an empty database, else check their version.

    :raises SchemaVersionMismatch: another version, or host-state tables
        without a version.
    """
    with engine.connect() as conn:
        conn.execution_options(**transaction_options(engine, write=True))
        with _schema_transaction(conn):
            tables = set(sa.inspect(conn).get_table_names())
            if schema.version.name in tables:
                found = conn.execute(sa.select(sa.func.max(schema.version.c.version))).scalar()
                if found in schema.UPGRADES:
                    _upgrade(conn, int(found), tables)
                    return
            elif tables & {t.name for t in schema.DATA_TABLES}:
                found = None
            else:
                # NOTE: the version row last: on MySQL, whose DDL is not
                # transactional, an interrupted creation leaves no version.
                schema.metadata.create_all(conn, tables=list(schema.DATA_TABLES))
                schema.metadata.create_all(conn, tables=[schema.version])
                _seed(conn)
                conn.execute(sa.insert(schema.version).values(version=schema.SCHEMA_VERSION))
                return
    if found != schema.SCHEMA_VERSION:
        raise errors.SchemaVersionMismatch(
            safe_url(engine.url), found, schema.SCHEMA_VERSION, sqlite_path(engine.url))
