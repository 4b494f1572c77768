"""``bench.scale``'s split of a private PostgreSQL's CPU
(:mod:`bench.scale.cpu`): each backend counted in the part it serves (by
database, the store's by the client that named its connections), and a
backend whose client closed it counted as ``reaped``, with its whole
life's CPU, and as ended: what a client that connected per request would
show (issue 19: "the postmaster with the backends it reaped" was a tenth of
a decision's CPU, and nothing said whose)."""

from __future__ import annotations

import time
import uuid

import psycopg2
import pytest
import sqlalchemy as sa

from bench.scale import cpu


@pytest.fixture
def store_url(postgresql_server):
    admin = postgresql_server.admin()
    name = "bench_cpu_%s" % uuid.uuid4().hex[:12]
    with admin.cursor() as cur:
        cur.execute("CREATE DATABASE %s" % name)
    try:
        yield name, postgresql_server.url(name)
    finally:
        with admin.cursor() as cur:
            cur.execute("DROP DATABASE IF EXISTS %s WITH (FORCE)" % name)
        admin.close()


def connect(url: str) -> psycopg2.extensions.connection:
    parsed = sa.engine.make_url(url)
    conn = psycopg2.connect(host=parsed.host, port=parsed.port, user=parsed.username,
                            dbname=parsed.database, **parsed.query)
    conn.autocommit = True
    return conn


def busy(conn: psycopg2.extensions.connection) -> int:
    """Spend some of the backend's CPU; its pid."""
    with conn.cursor() as cur:
        cur.execute("SELECT count(*) FROM generate_series(1, 2000000)")
        cur.execute("SELECT pg_backend_pid()")
        return int(cur.fetchone()[0])


def gone(pid: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while cpu.process_seconds(pid) and time.monotonic() < deadline:
        time.sleep(0.05)


def test_named_urls_name_postgresql_connections_only():
    url = "postgresql+psycopg2://u:secret@db:5432/hoststate"
    assert sa.engine.make_url(cpu.named(url, "agents")).query == {
        "application_name": "bench-scale-agents"}
    assert "secret" in cpu.named(url, "agents")
    # NOTE: the URL's own name is kept; SQLite's is no server's.
    own = url + "?application_name=mine"
    assert cpu.named(own, "agents") == own
    assert cpu.named("sqlite:////tmp/x.sqlite", "agents") == "sqlite:////tmp/x.sqlite"


def test_each_backend_counts_in_its_part_and_a_closed_one_as_reaped(postgresql_server,
                                                                    store_url):
    name, url = store_url
    watcher = postgresql_server.admin()
    databases = {name: "store"}
    schedulers = connect(cpu.named(url, "schedulers"))
    closing = connect(cpu.named(url, "agents"))
    main = connect(url)
    try:
        before_pids = cpu.database_pids(watcher, databases)
        before = cpu.snapshot((), (), before_pids)
        pids = {part: busy(conn) for part, conn in
                (("store_schedulers", schedulers), ("store_agents", closing),
                 ("store", main))}
        assert {before_pids[pid] for pid in pids.values()} == set(pids)
        spent = cpu.process_seconds(pids["store_agents"])
        closing.close()
        gone(pids["store_agents"])
        after_pids = cpu.database_pids(watcher, databases)
        after = cpu.snapshot((), (), after_pids)
    finally:
        for conn in (schedulers, closing, main):
            conn.close()
        watcher.close()
    assert set(after) >= {"database." + part for part in cpu.DATABASE_PARTS}
    split = {part: after["database." + part] - before["database." + part]
             for part in cpu.DATABASE_PARTS}
    assert split["store_schedulers"] > 0 and split["store"] > 0, split
    # NOTE: the closed backend's time left its part for the reaped
    # children's, whole (the time before the first snapshot included).
    assert split["reaped"] >= spent > 0, split
    assert split["store_agents"] <= 0, split
    assert after["database"] == pytest.approx(sum(after["database." + part]
                                                  for part in cpu.DATABASE_PARTS))
    changed = cpu.backends_changed(before_pids, after_pids)
    assert changed["ended"].get("store_agents") == 1, changed
    assert "store_schedulers" not in changed["ended"], changed
