"""A database per module and backend on the session's private PostgreSQL
and MariaDB servers (:mod:`tests.servers`), without a row (``url``) or
without a table (``empty_url``) when a test starts. A server that cannot
start fails the test with the package to install; it never skips."""

from __future__ import annotations

import uuid

import pymysql
import pytest
import sqlalchemy as sa

from compute_plugins import hoststate
from compute_plugins.hoststate import schema
from tests.servers import DatabaseServer
from tests.unit.hoststate.cases import make_store, store  # noqa: F401 - fixtures

BACKENDS = ("postgresql", "mariadb")

#: In the PostgreSQL URLs (trust auth ignores it), never in a message.
PASSWORD = "s3cret"


def create_database(server: DatabaseServer):
    """``(url, drop)``: a new empty database on ``server`` and the function
    dropping it."""
    name = "hoststate_%s" % uuid.uuid4().hex[:12]
    admin = server.admin()
    if server.backend == "postgresql":
        with admin.cursor() as cur:
            cur.execute("CREATE DATABASE %s" % name)

        def drop():
            with admin.cursor() as cur:
                cur.execute("DROP DATABASE IF EXISTS %s WITH (FORCE)" % name)
            admin.close()
        # NOTE: trust auth ignores the password: it is there for the tests
        # to check that no message shows it.
        return server.url(name, PASSWORD), drop
    with admin.cursor() as cur:
        cur.execute("CREATE DATABASE %s CHARACTER SET utf8mb4" % name)

    def drop_mysql():
        with admin.cursor() as cur:
            cur.execute("DROP DATABASE IF EXISTS %s" % name)
        admin.close()
    return server.url(name), drop_mysql


def empty_database(url: str) -> None:
    """Make ``url``'s database empty, as a new one, for a fraction of the
    time: PostgreSQL drops the host-state tables (its CREATE DATABASE
    copies a template and checkpoints), MariaDB the database (dropping
    its tables takes longer)."""
    parsed = sa.engine.make_url(url)
    if parsed.get_backend_name() != "postgresql":
        admin = pymysql.connect(host=parsed.host, port=parsed.port, user=parsed.username,
                                password=parsed.password or "", connect_timeout=10,
                                autocommit=True)
        try:
            with admin.cursor() as cur:
                cur.execute("DROP DATABASE IF EXISTS %s" % parsed.database)
                cur.execute("CREATE DATABASE %s CHARACTER SET utf8mb4" % parsed.database)
        finally:
            admin.close()
        return
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            # NOTE: a connection left in a transaction by a broken test
            # fails this fixture in 10 s rather than hanging it.
            conn.exec_driver_sql("SET LOCAL lock_timeout = '10s'")
            names = [n for n in sa.inspect(conn).get_table_names()
                     if n.startswith("hoststate_")]
            if names:
                conn.exec_driver_sql("DROP TABLE %s CASCADE" % ", ".join(names))
    finally:
        engine.dispose()


def clear_database(url: str) -> None:
    """Delete every row of the host-state tables of ``url`` when they are
    this code's schema (creating it again takes longer); else empty the
    database."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            names = set(sa.inspect(conn).get_table_names())
            current = (names >= {t.name for t in schema.metadata.sorted_tables}
                       and conn.execute(sa.select(schema.version.c.version)).scalars().all()
                       == [hoststate.SCHEMA_VERSION])
            if current:
                for table in reversed(schema.DATA_TABLES):
                    conn.execute(sa.delete(table))
    finally:
        engine.dispose()
    if not current:
        empty_database(url)


@pytest.fixture(scope="module", params=BACKENDS)
def backend(request):
    return request.param


@pytest.fixture(scope="module")
def database(backend, request):
    """One database per module and backend, emptied for each test."""
    url, drop = create_database(request.getfixturevalue("%s_server" % backend))
    yield url
    drop()


@pytest.fixture
def url(database):
    """The module's database: no host-state rows (its tables may be there)."""
    clear_database(database)
    return database


@pytest.fixture
def empty_url(database):
    """The module's database, empty: no host-state tables."""
    empty_database(database)
    return database
