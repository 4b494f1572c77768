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
import os
from collections.abc import Iterator
from typing import Any, Optional

import sqlalchemy as sa
from sqlalchemy import event, pool
from sqlalchemy.engine import URL, Connection, Engine

from compute_plugins.hoststate import errors, schema

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
    """``url`` with its password hidden, for messages."""
    return sa.engine.make_url(url).render_as_string(hide_password=True)


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


def _create_private_file(path: str) -> None:
    """Create the SQLite file (and its directory) readable by its owner
    only, before SQLite opens it; an existing file is left as it is."""
    directory = os.path.dirname(path)
    if not os.path.isdir(directory):
        os.makedirs(directory, mode=0o700, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    # NOTE: os.open applies the umask, which can only remove bits; fchmod
    # makes it 0600 whatever the umask. SQLite gives its -wal and -shm
    # files the database file's mode.
    os.fchmod(fd, 0o600)
    os.close(fd)


def _sqlite_events(engine: Engine, wal: bool) -> None:
    @event.listens_for(engine, "connect")
    def _connect(dbapi_connection: Any, record: Any) -> None:
        # NOTE: None: the driver never opens transactions; _begin does.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            if wal:
                cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA foreign_keys=ON")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Connection) -> None:
        write = conn.get_execution_options().get(WRITE_OPTION)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


def create_engine(url: str | URL, sqlite_busy_timeout: float = 30.0) -> Engine:
    """An engine for ``url``, set up as the module docstring says.

    SQLite files are created 0600 (their directory 0700) when missing;
    ``sqlite://`` is one in-memory database shared by the engine's users.
    """
    parsed = sa.engine.make_url(url)
    name = parsed.get_backend_name()
    if name == "sqlite":
        memory = is_sqlite_memory(parsed)
        path = sqlite_path(parsed)
        if path is not None:
            _create_private_file(path)
        kwargs: dict[str, Any] = {
            "connect_args": {"timeout": sqlite_busy_timeout,
                             "check_same_thread": False}}
        if memory:
            kwargs["poolclass"] = pool.StaticPool
        engine = sa.create_engine(parsed, **kwargs)
        _sqlite_events(engine, wal=not memory)
        return engine
    if name in ("mysql", "mariadb"):
        if "charset" not in parsed.query:
            parsed = parsed.update_query_dict({"charset": "utf8mb4"})
        return sa.create_engine(parsed, pool_pre_ping=True, pool_recycle=3600)
    return sa.create_engine(parsed, pool_pre_ping=True)


def transaction_options(engine: Engine, write: bool) -> dict[str, Any]:
    """Execution options of a read or a write transaction on ``engine``."""
    levels = _ISOLATION.get(backend(engine))
    options: dict[str, Any] = {WRITE_OPTION: write}
    if levels is not None:
        options["isolation_level"] = levels[1] if write else levels[0]
    return options


@contextlib.contextmanager
def _schema_lock(conn: Connection) -> Iterator[None]:
    """Serialise schema checks and creation across processes (inside the
    connection's transaction)."""
    kind = backend(conn.engine)
    if kind == "postgresql":
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(:key)"), {"key": _PG_LOCK_KEY})
        yield
    elif kind == "mysql":
        got = conn.execute(sa.text("SELECT GET_LOCK(:name, 60)"),
                           {"name": _MYSQL_LOCK}).scalar()
        if got != 1:
            raise errors.StoreUnavailable(
                safe_url(conn.engine.url),
                "could not take the schema lock %s in 60 s" % _MYSQL_LOCK)
        try:
            yield
        finally:
            conn.execute(sa.text("SELECT RELEASE_LOCK(:name)"), {"name": _MYSQL_LOCK})
    else:
        # NOTE: SQLite: the BEGIN IMMEDIATE of the write transaction.
        yield


def ensure_schema(engine: Engine) -> None:
    """Create the tables in an empty database, else check their version.

    :raises SchemaVersionMismatch: another version, or host-state tables
        without a version.
    """
    with engine.connect() as conn:
        conn.execution_options(**transaction_options(engine, write=True))
        with conn.begin(), _schema_lock(conn):
            tables = set(sa.inspect(conn).get_table_names())
            if schema.version.name in tables:
                found = conn.execute(sa.select(sa.func.max(schema.version.c.version))).scalar()
            elif tables & {t.name for t in schema.DATA_TABLES}:
                found = None
            else:
                # NOTE: the version row last: on MySQL, whose DDL is not
                # transactional, an interrupted creation leaves no version.
                schema.metadata.create_all(conn, tables=list(schema.DATA_TABLES))
                schema.metadata.create_all(conn, tables=[schema.version])
                conn.execute(sa.insert(schema.version).values(version=schema.SCHEMA_VERSION))
                return
    if found != schema.SCHEMA_VERSION:
        raise errors.SchemaVersionMismatch(
            safe_url(engine.url), found, schema.SCHEMA_VERSION, sqlite_path(engine.url))
