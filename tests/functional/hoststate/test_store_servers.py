"""The host-state store on PostgreSQL and MariaDB: the shared cases of
:mod:`tests.unit.hoststate.cases` on each server (threads), and concurrent
writers and readers in separate processes, as agents and schedulers on
several machines are."""

from __future__ import annotations

import multiprocessing

import pytest

from compute_plugins import hoststate
from tests.unit.hoststate import workers
from tests.unit.hoststate.cases import (  # noqa: F401 - collected here
    SPEC,
    TestDecisions,
    TestPublish,
    TestSchema,
    TestWaitForAnswer,
    make_store,
    store,
)


@pytest.fixture
def pool():
    with multiprocessing.get_context("spawn").Pool(4) as p:
        yield p


def test_writer_processes_lose_no_update(url, pool):
    with hoststate.HostStateStore(url) as s:
        s.publish("h1", {"counter": workers.doc("counter", n=0)}, 0)
    conflicts = pool.starmap(workers.increment, [(url, "h1", 20)] * 4)
    with hoststate.HostStateStore(url) as s:
        snap = s.get_host("h1")
    assert snap.states["counter"]["state"]["n"] == 80, conflicts
    assert snap.generation == 81


def test_reads_are_atomic_across_processes(url, pool):
    """Two writer processes (one host each) and two reader processes: no
    read mixes two generations of a host."""
    with hoststate.HostStateStore(url) as s:
        workers.publish_round(s, "h1", 1)
        workers.publish_round(s, "h2", 1)
    last = 80
    readers = [pool.apply_async(workers.read_rounds, (url, host, last))
               for host in ("h1", "h2")]
    writers = [pool.apply_async(workers.publish_rounds, (url, host, 2, last))
               for host in ("h1", "h2")]
    for w in writers:
        w.get(300)
    reads = [r.get(300) for r in readers]
    assert all(n > 0 for n in reads), reads
    with hoststate.HostStateStore(url) as s:
        assert s.generations() == {"h1": last, "h2": last}


def test_agent_processes_cannot_double_claim(url, pool):
    with hoststate.HostStateStore(url) as s:
        ids = [s.submit_decision("c%d" % i, "h1", SPEC).id for i in range(40)]
    won = pool.starmap(workers.claim, [(url, ids)] * 4)
    assert sorted(sum(won, [])) == ids
    with hoststate.HostStateStore(url) as s:
        assert {d.status for d in map(s.get_decision, ids)} == {"claimed"}


def test_processes_create_the_schema_once(url, pool):
    assert pool.map(workers.open_store, [url] * 4) == [hoststate.SCHEMA_VERSION] * 4


def test_password_is_hidden(backend):
    url = {"postgresql": "postgresql+psycopg2://postgres:s3cret@127.0.0.1:1/none",
           "mariadb": "mysql+pymysql://root:s3cret@127.0.0.1:1/none"}[backend]
    with pytest.raises(hoststate.StoreUnavailable) as info:
        hoststate.HostStateStore(url)
    assert "s3cret" not in str(info.value) and "127.0.0.1:1" in str(info.value)
