"""A fresh database per test on the PostgreSQL and MariaDB servers this
machine kind runs (see README "Services"). A server that is not there
fails the test with what to start; it never skips."""

from __future__ import annotations

import uuid

import psycopg2
import pymysql
import pytest

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


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


@pytest.fixture
def url(backend):
    url, drop = create_database(backend)
    yield url
    drop()
