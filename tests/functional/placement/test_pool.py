"""The embedded Placement's database pool on PostgreSQL holds a connection
for each of its HTTP server's threads.

oslo.db's pool keeps ``max_pool_size`` connections (5 by default) and opens
more as overflow, closed when given back: a server of 8 threads
(``bench.scale``'s) under load opened and closed connections per burst of
requests, a new PostgreSQL backend each (its whole life's CPU, fork and
authentication; doc/source/benchmarks.md, "Who connects to PostgreSQL").
Here a burst of as many requests as the server has threads is held in
PostgreSQL (a lock on the table they read) until every thread has taken a
connection, twice: the second burst runs on the first one's connections.

Uses the session's private PostgreSQL server (:mod:`tests.servers`).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg2
import pytest
import requests
import sqlalchemy as sa

from compute_plugins.placement import embedded

#: The HTTP server's threads: more than oslo.db's default pool of 5.
THREADS = 8
#: Seconds a burst may take to reach PostgreSQL, or to be answered.
WAIT = 60.0


@pytest.fixture
def database(postgresql_server) -> Iterator[tuple[str, str]]:
    admin = postgresql_server.admin()
    name = "placement_pool_%s" % uuid.uuid4().hex[:12]
    with admin.cursor() as cur:
        cur.execute("CREATE DATABASE %s" % name)
    try:
        yield name, postgresql_server.url(name)
    finally:
        with admin.cursor() as cur:
            cur.execute("DROP DATABASE IF EXISTS %s WITH (FORCE)" % name)
        admin.close()


def connect(url: str, autocommit: bool = False) -> Any:
    parsed = sa.engine.make_url(url)
    conn = psycopg2.connect(host=parsed.host, port=parsed.port, user=parsed.username,
                            password=parsed.password, dbname=parsed.database)
    conn.autocommit = autocommit
    return conn


def backends(watcher: Any, locker: Any, waiting: bool = False) -> set[tuple[int, Any]]:
    """Placement's connections to its database now (pid and start time:
    a pid reused by a new backend is a new connection; ``waiting``: those
    waiting for a lock), the test's own left out. ``watcher`` reads in
    autocommit: a transaction reads one snapshot of the statistics."""
    with watcher.cursor() as cur:
        cur.execute("SELECT pid, backend_start FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                    "AND pid <> %s AND backend_type = 'client backend'"
                    + (" AND wait_event_type = 'Lock'" if waiting else ""),
                    (locker.get_backend_pid(),))
        return set(cur.fetchall())


def burst(url: str, watcher: Any, locker: Any) -> set[tuple[int, Any]]:
    """``THREADS`` requests at once, each held by PostgreSQL on its own
    connection until all are; the connections they held."""
    answers: list[int] = []

    def ask() -> None:
        answers.append(requests.get(url + "/resource_providers", timeout=WAIT,
                                    headers={"X-Auth-Token": "admin"}).status_code)

    with locker.cursor() as cur:
        cur.execute("LOCK TABLE resource_providers IN ACCESS EXCLUSIVE MODE")
    asking = [threading.Thread(target=ask) for _ in range(THREADS)]
    try:
        for thread in asking:
            thread.start()
        deadline = time.monotonic() + WAIT
        while True:
            held = backends(watcher, locker, waiting=True)
            if len(held) == THREADS or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    finally:
        locker.rollback()
        for thread in asking:
            thread.join(WAIT)
    assert len(held) == THREADS, held
    assert answers == [200] * THREADS, answers
    return held


def test_a_burst_as_wide_as_the_servers_threads_opens_no_connection_past_the_pool(
        database):
    _, url = database
    locker, watcher = connect(url), connect(url, autocommit=True)
    try:
        with embedded.EmbeddedPlacement(url) as service:
            server = service.make_server(threads=THREADS)
            serving = threading.Thread(target=server.serve_forever, daemon=True)
            serving.start()
            try:
                # NOTE: the first request's one-off work (Placement's
                # resource classes' sync, under a lock of its own) before.
                assert requests.get(server.url + "/resource_providers", timeout=WAIT,
                                    headers={"X-Auth-Token": "admin"}).status_code == 200
                first = burst(server.url, watcher, locker)
                kept = backends(watcher, locker)
                second = burst(server.url, watcher, locker)
            finally:
                server.shutdown()
                serving.join(10)
    finally:
        locker.close()
        watcher.close()
    # NOTE: every connection of the first burst kept in the pool, and the
    # second burst on them: none closed, none opened.
    assert first <= kept, (first, kept)
    assert second == first, (first, second)
