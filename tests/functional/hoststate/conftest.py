"""An empty database per test on the PostgreSQL and MariaDB servers this
machine kind runs (see README "Services"): one database per module and
backend, its host-state tables dropped before each test. A server that is
not there fails the test with what to start; it never skips."""

from __future__ import annotations

import uuid

import psycopg2
import pymysql
import pytest
import sqlalchemy as sa

from tests.unit.hoststate.cases import make_store, store  # noqa: F401 - fixtures

PG_ADMIN = {"host": "127.0.0.1", "port": 5432, "user": "postgres", "dbname": "postgres"}
MYSQL_ADMIN = {"host": "127.0.0.1", "port": 3306, "user": "root", "password": ""}

BACKENDS = ("postgresql", "mariadb")


def _pg_admin():
    try:
        conn = psycopg2.connect(connect_timeout=5, **PG_ADMIN)
    except psycopg2.OperationalError as err:
        pytest.fail("PostgreSQL is needed on 127.0.0.1:5432 (user postgres, trust "
                    "auth); start it with `pg_ctlcluster --skip-systemctl-redirect "
                    "$(ls /etc/postgresql) main start`: %s" % err)
    conn.autocommit = True
    return conn


def _mysql_admin():
    try:
        return pymysql.connect(connect_timeout=5, autocommit=True, **MYSQL_ADMIN)
    except pymysql.err.OperationalError as err:
        pytest.fail("MariaDB is needed on 127.0.0.1:3306 (user root, empty "
                    "password); start it with `service mariadb start`: %s" % err)


def create_database(backend: str):
    """``(url, drop)``: a new empty database and the function dropping it."""
    name = "hoststate_%s" % uuid.uuid4().hex[:12]
    if backend == "postgresql":
        admin = _pg_admin()
        with admin.cursor() as cur:
            cur.execute("CREATE DATABASE %s" % name)

        def drop():
            with admin.cursor() as cur:
                cur.execute("DROP DATABASE IF EXISTS %s WITH (FORCE)" % name)
            admin.close()
        return "postgresql+psycopg2://postgres@127.0.0.1:5432/%s" % name, drop
    admin = _mysql_admin()
    with admin.cursor() as cur:
        cur.execute("CREATE DATABASE %s CHARACTER SET utf8mb4" % name)

    def drop():
        with admin.cursor() as cur:
            cur.execute("DROP DATABASE IF EXISTS %s" % name)
        admin.close()
    return "mysql+pymysql://root@127.0.0.1:3306/%s" % name, drop


def empty_database(url: str) -> None:
    """Drop the host-state tables of ``url``'s database: what a test finds
    is an empty database, as with a new one, for a fraction of the time
    (PostgreSQL's CREATE DATABASE copies a template and checkpoints)."""
    engine = sa.create_engine(url, poolclass=sa.pool.NullPool)
    try:
        with engine.begin() as conn:
            # NOTE: a connection left in a transaction by a broken test
            # fails this fixture in 10 s rather than hanging it.
            if conn.dialect.name == "postgresql":
                conn.exec_driver_sql("SET LOCAL lock_timeout = '10s'")
            else:
                conn.exec_driver_sql("SET SESSION lock_wait_timeout = 10")
                conn.exec_driver_sql("SET FOREIGN_KEY_CHECKS = 0")
            names = [n for n in sa.inspect(conn).get_table_names()
                     if n.startswith("hoststate_")]
            if names:
                conn.exec_driver_sql("DROP TABLE %s%s" % (
                    ", ".join(names), " CASCADE" if conn.dialect.name == "postgresql" else ""))
    finally:
        engine.dispose()


@pytest.fixture(scope="module", params=BACKENDS)
def backend(request):
    return request.param


@pytest.fixture(scope="module")
def database(backend):
    """One database per module and backend, emptied for each test."""
    url, drop = create_database(backend)
    yield url
    drop()


@pytest.fixture
def url(database):
    empty_database(database)
    return database
