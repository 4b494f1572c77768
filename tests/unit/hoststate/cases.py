"""The host-state store's behaviour, the same on every backend.

``tests/unit/hoststate`` runs these classes on SQLite and
``tests/functional/hoststate`` on PostgreSQL and MariaDB: each directory's
conftest provides ``url``, a database without host-state rows, and
``empty_url``, one without tables (the schema tests).
:class:`TestTransitions` needs only a decision queue: ``test_protocol``
runs it on the in-memory transport too.
"""

from __future__ import annotations

import contextlib
import threading
import time
import uuid

import pytest
import sqlalchemy as sa
from sqlalchemy import event

from compute_plugins import hoststate
from compute_plugins.hoststate import changes, database, errors, protocol, schema
from compute_plugins.plugin.contract import Rejection
from tests.unit.hoststate.workers import check_round, doc, publish_round

#: (``WITH``: an update in a CTE, PostgreSQL's numbering of a publish.)
WRITES = ("INSERT", "UPDATE", "DELETE", "BEGIN IMMEDIATE", "WITH")

SPEC = '{"format_version": "1.0", "decision": {"host": "h1"}}'


@pytest.fixture
def make_store(url):
    opened = []

    def make():
        opened.append(hoststate.HostStateStore(url))
        return opened[-1]
    yield make
    for s in opened:
        s.close()


@pytest.fixture
def store(make_store):
    return make_store()


@contextlib.contextmanager
def statements(store):
    """Every SQL statement ``store`` sends while the block runs."""
    seen: list[str] = []

    def before(conn, cursor, statement, parameters, context, executemany):
        seen.append(" ".join(statement.split()))
    # NOTE: every engine: writes, reads and those run on their own (the
    # heartbeat, PostgreSQL).
    engines = store.db.engines
    for engine in engines:
        event.listen(engine, "before_cursor_execute", before)
    try:
        yield seen
    finally:
        for engine in engines:
            event.remove(engine, "before_cursor_execute", before)


def writes(seen):
    return [s for s in seen if s.upper().startswith(WRITES)]


def states(**rounds):
    return {p: doc(p, n=n) for p, n in rounds.items()}


def _downgrade(url, version, *statements):
    """Make the store at ``url`` look like one of an older schema: run
    ``statements`` (SQL text, or SQLAlchemy statements) in one transaction,
    then record ``version`` (None: none recorded), as the upgrade tests
    start from."""
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            for statement in statements:
                conn.execute(sa.text(statement) if isinstance(statement, str) else statement)
            if version is not None:
                conn.execute(sa.update(schema.version).values(version=version))
    finally:
        engine.dispose()


def run_threads(target, count, *args):
    """Run ``target(i, *args)`` in ``count`` threads started together;
    returns their results (or raises the first error)."""
    barrier = threading.Barrier(count)
    results: list = [None] * count
    failures: list = []

    def body(i):
        try:
            barrier.wait()
            results[i] = target(i, *args)
        except BaseException as err:  # noqa: B036 - reported below
            failures.append(err)
    threads = [threading.Thread(target=body, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a thread did not finish"
    if failures:
        raise failures[0]
    return results


def store_lease(store):
    return store.get_lease("h1")


class TestPublish:
    def test_first_publish_and_read(self, store):
        result = store.publish("h1", states(numa=1, vgpu=2), 0, nodename="n1",
                               providers={"u-root": "n1", "u-cell": "n1_NUMA0"})
        assert result == hoststate.PublishResult(generation=1, written=True)
        snap = store.get_host("h1")
        assert snap.generation == 1
        assert snap.nodename == "n1"
        assert dict(snap.providers) == {"u-root": "n1", "u-cell": "n1_NUMA0"}
        assert dict(snap.states) == states(numa=1, vgpu=2)
        assert store.get_host("nowhere") is None

    def test_read_is_a_copy(self, store):
        store.publish("h1", states(numa=1), 0)
        snap = store.get_host("h1")
        snap.states["numa"]["state"]["n"] = 99
        assert store.get_host("h1").states["numa"]["state"]["n"] == 1

    def test_no_write_when_unchanged(self, store):
        store.publish("h1", states(numa=1, vgpu=2), 0, nodename="n1",
                      providers={"u1": "n1"})
        before = store.get_host("h1")
        with statements(store) as seen:
            # NOTE: another dict order and None for "keep": the same content.
            again = store.publish("h1", {"vgpu": doc("vgpu", n=2), "numa": doc("numa", n=1)},
                                  1)
            full = store.publish("h1", states(numa=1, vgpu=2), 1, nodename="n1",
                                 providers={"u1": "n1"})
        assert again == full == hoststate.PublishResult(generation=1, written=False)
        assert seen, "the comparison reads the store"
        assert writes(seen) == []
        assert store.get_host("h1") == before

    def test_only_changed_rows_are_written(self, store):
        store.publish("h1", states(a=1, b=1, c=1, d=1), 0, nodename="n1",
                      providers={"u1": "one", "u2": "two"})
        with statements(store) as seen:
            result = store.publish("h1", states(a=1, b=2, c=1, e=1), 1,
                                   providers={"u1": "one", "u3": "three"})
        assert result == hoststate.PublishResult(generation=2, written=True)
        changes = [s.split(" WHERE")[0] for s in writes(seen) if s != "BEGIN IMMEDIATE"]
        # NOTE: the host's generation, b changed, d removed, e added, u2
        # removed, u3 added; a and c and u1 untouched; then the write's
        # change number (the counter and the host's row: one statement on
        # PostgreSQL).
        numbered = 1 if store.engine.dialect.name == "postgresql" else 2
        assert len(changes) == 6 + numbered, changes
        snap = store.get_host("h1")
        assert dict(snap.states) == states(a=1, b=2, c=1, e=1)
        assert dict(snap.providers) == {"u1": "one", "u3": "three"}
        assert snap.nodename == "n1"

    def test_none_keeps_nodename_and_providers(self, store):
        store.publish("h1", states(a=1), 0, nodename="n1", providers={"u1": "n1"})
        assert store.publish("h1", states(a=2), 1).written
        snap = store.get_host("h1")
        assert (snap.nodename, dict(snap.providers)) == ("n1", {"u1": "n1"})
        assert store.publish("h1", states(a=2), 2, nodename="n2", providers={}).written
        snap = store.get_host("h1")
        assert (snap.nodename, dict(snap.providers)) == ("n2", {})

    def test_stale_generation_conflicts(self, store):
        store.publish("h1", states(a=1), 0)
        store.publish("h1", states(a=2), 1)
        with pytest.raises(hoststate.GenerationConflict) as info:
            store.publish("h1", states(a=3), 1)
        assert (info.value.host, info.value.expected, info.value.actual) == ("h1", 1, 2)
        assert "h1" in str(info.value) and "expected 1" in str(info.value)
        with pytest.raises(hoststate.GenerationConflict) as info:
            store.publish("h1", states(a=3), 0)
        assert info.value.actual == 2
        with pytest.raises(hoststate.GenerationConflict) as info:
            store.publish("new", states(a=3), 4)
        assert info.value.actual == 0
        # NOTE: an unchanged publish from a stale generation conflicts too:
        # the caller's view is stale.
        with pytest.raises(hoststate.GenerationConflict):
            store.publish("h1", states(a=2), 1)
        assert store.get_host("h1").states["a"]["state"]["n"] == 2
        assert store.get_host("new") is None

    def test_concurrent_writers_one_wins(self, make_store):
        """Writers from the same generation: exactly one per round wins."""
        stores = [make_store() for _ in range(4)]
        stores[0].publish("h1", states(a=0), 0)
        for generation in range(1, 6):
            def write(i, generation=generation):
                try:
                    return stores[i].publish("h1", states(a=generation * 10 + i),
                                             generation).generation
                except hoststate.GenerationConflict as err:
                    assert err.actual == generation + 1
                    return None
            results = run_threads(write, 4)
            winners = [i for i, r in enumerate(results) if r is not None]
            assert len(winners) == 1, results
            assert results[winners[0]] == generation + 1
            snap = stores[0].get_host("h1")
            assert snap.states["a"]["state"]["n"] == generation * 10 + winners[0]

    def test_concurrent_first_publish(self, make_store):
        stores = [make_store() for _ in range(4)]

        def first(i):
            try:
                return stores[i].publish("fresh", states(a=i), 0).generation
            except hoststate.GenerationConflict as err:
                assert (err.expected, err.actual) == (0, 1)
                return None
        results = run_threads(first, 4)
        assert sorted(results, key=str) == [1, None, None, None]

    def test_no_lost_update(self, make_store):
        """Read-modify-CAS increments from several threads all count."""
        stores = [make_store() for _ in range(3)]
        stores[0].publish("h1", {"counter": doc("counter", n=0)}, 0)

        def increment(i):
            for _ in range(8):
                while True:
                    snap = stores[i].get_host("h1")
                    n = snap.states["counter"]["state"]["n"]
                    try:
                        stores[i].publish("h1", {"counter": doc("counter", n=n + 1)},
                                          snap.generation)
                        break
                    except hoststate.GenerationConflict:
                        continue
        run_threads(increment, 3)
        snap = stores[0].get_host("h1")
        assert snap.states["counter"]["state"]["n"] == 24
        assert snap.generation == 25

    def test_read_is_atomic_under_a_concurrent_writer(self, make_store):
        """A reader never sees states, node name or providers of two
        generations, while a writer rewrites all of them every round."""
        writer, reader, batch_reader = make_store(), make_store(), make_store()
        publish_round(writer, "h1", 1)
        publish_round(writer, "h2", 1)
        last = 25
        done = threading.Event()
        reading = {"get_host": threading.Event(), "get_hosts": threading.Event()}
        seen: dict[str, set] = {"get_host": set(), "get_hosts": set()}

        def write(i):
            try:
                # NOTE: the readers are reading before the writes start.
                for started in reading.values():
                    assert started.wait(60), "a reader did not start"
                for n in range(2, last + 1):
                    publish_round(writer, "h1", n)
                    publish_round(writer, "h2", n)
            finally:
                done.set()

        def read_one(i):
            while not done.is_set():
                snap = reader.get_host("h1")
                check_round(snap)
                seen["get_host"].add(snap.generation)
                reading["get_host"].set()

        def read_many(i):
            while not done.is_set():
                snaps = batch_reader.get_hosts(["h1", "h2"])
                for snap in snaps.values():
                    check_round(snap)
                seen["get_hosts"].add(tuple(s.generation for s in snaps.values()))
                reading["get_hosts"].set()

        run_threads(lambda i: (write, read_one, read_many)[i](i), 3)
        # NOTE: the reads overlapped the writes (not all before or after).
        assert all(len(generations) > 1 for generations in seen.values()), seen
        assert reader.get_host("h1").generation == last

    def test_a_writer_behind_a_stuck_transaction_gives_up(self, url, store):
        """A transaction that holds the host's row (a process stopped
        mid-write) makes a writer fail after its lock timeout, on every
        backend (PostgreSQL alone waited forever)."""
        store.publish("h1", states(a=1), 0)
        impatient = hoststate.HostStateStore(url, lock_timeout=0.5)
        blocker = sa.create_engine(url)
        outcome: list = []

        def publish():
            try:
                outcome.append(impatient.publish("h1", states(a=2), 1))
            except Exception as err:  # noqa: BLE001 - checked below
                outcome.append(err)
        thread = threading.Thread(target=publish, daemon=True)
        try:
            with blocker.connect() as conn:
                conn.execute(sa.update(schema.hosts).values(nodename="stuck"))
                thread.start()
                thread.join(30)
                hung = thread.is_alive()
                conn.rollback()
            thread.join(30)
            assert not hung, "the writer waited past its lock timeout"
            assert isinstance(outcome[0], hoststate.StoreUnavailable), outcome
            assert impatient.publish("h1", states(a=2), 1).written
        finally:
            impatient.close()
            blocker.dispose()

    def test_provider_of_another_host(self, store):
        store.publish("h1", states(a=1), 0, providers={"u1": "n1"})
        with pytest.raises(hoststate.ProviderConflict) as info:
            store.publish("h2", states(a=1), 0, providers={"u1": "n2", "u2": "n2"})
        assert (info.value.uuid, info.value.host, info.value.owner) == ("u1", "h2", "h1")
        assert store.get_host("h2") is None
        # NOTE: once h1 drops it, h2 may publish it.
        store.publish("h1", states(a=1), 1, providers={})
        assert store.publish("h2", states(a=1), 0, providers={"u1": "n2"}).written
        assert store.hosts_for_providers(["u1"]) == {"u1": "h2"}

    def test_many_hosts(self, store, monkeypatch):
        # NOTE: a small chunk, so that the IN lists are split.
        monkeypatch.setattr(database, "CHUNK", 3)
        for i in range(8):
            store.publish("h%d" % i, states(a=i), 0, nodename="n%d" % i,
                          providers={"u%d-%d" % (i, j): "p" for j in range(2)})
        store.publish("h0", states(a=100), 1)
        assert store.generations() == {"h%d" % i: 1 + (i == 0) for i in range(8)}
        assert store.generations(["h0", "h7", "zz"]) == {"h0": 2, "h7": 1}
        snaps = store.get_hosts(["h%d" % i for i in range(8)] + ["zz"])
        assert sorted(snaps) == ["h%d" % i for i in range(8)]
        assert all(s.states["a"]["state"]["n"] == (100 if h == "h0" else int(h[1:]))
                   for h, s in snaps.items())
        assert sorted(store.get_hosts()) == sorted(snaps)
        uuids = ["u%d-%d" % (i, j) for i in range(8) for j in range(2)]
        assert store.hosts_for_providers(uuids + ["unknown"]) == {
            u: "h" + u[1:u.index("-")] for u in uuids}

    def test_a_schedulers_reads_are_one_statement_each(self, store):
        """What a scheduler reads at every plan (the hosts it fits, the
        changes since its mark, the disabled hosts) is one statement each:
        the hosts' rows, states and providers together (before: three)."""
        store.publish("h1", states(numa=1, vgpu=2), 0, nodename="n1",
                      providers={"u-root": "n1", "u-cell": "n1_NUMA0"})
        store.publish("h2", states(numa=3), 0, nodename="n2", providers={"u-2": "n2"})
        store.publish("h3", {}, 0, nodename="n3")
        mark = store.host_status_changes(None).mark
        with statements(store) as seen:
            snaps = store.get_hosts(["h1", "h3", "zz"])
            store.host_status_changes(mark)
            store.disabled_hosts()
        # NOTE: SQLite's BEGIN is a statement of the store's own there.
        assert [s.split()[0] for s in seen if s != "BEGIN"] == ["SELECT"] * 3, seen
        assert sorted(snaps) == ["h1", "h3"]
        assert snaps["h1"].nodename == "n1" and snaps["h1"].generation == 1
        assert dict(snaps["h1"].providers) == {"u-cell": "n1_NUMA0", "u-root": "n1"}
        assert snaps["h1"].states["vgpu"]["state"]["n"] == 2
        assert not snaps["h3"].states and not snaps["h3"].providers
        assert snaps["h3"].updated_at == store.get_host("h3").updated_at

    @pytest.mark.parametrize("bad", [
        {"numa": {"plugin": "vgpu", "version": "1.0", "state": None}},
        {"numa": {"plugin": "numa", "state": None}},
        {"numa": {"plugin": "numa", "version": "1.0", "state": {1, 2}}},
        {"numa": {"plugin": "numa", "version": "1.0", "state": float("nan")}},
        {"": {"plugin": "", "version": "1.0", "state": None}},
    ])
    def test_invalid_documents(self, store, bad):
        with pytest.raises(ValueError):
            store.publish("h1", bad, 0)
        assert store.get_host("h1") is None

    def test_names_longer_than_their_columns(self, store):
        """Rejected the same way on every backend, before the database
        (PostgreSQL and MySQL raised driver errors, SQLite stored them)."""
        for bad in ({"host": "h" * 256}, {"nodename": "n" * 256}, {"nodename": ""},
                    {"providers": {"u" * 37: "n1"}}, {"providers": {"u1": "n" * 256}},
                    {"states": {"p" * 256: doc("p" * 256, n=1)}}):
            args = {"host": "h1", "states": states(a=1), "nodename": "n1",
                    "providers": {"u1": "n1"}, **bad}
            with pytest.raises(ValueError):
                store.publish(args.pop("host"), args.pop("states"), 0, **args)
        assert store.generations() == {}
        longest = {"host": "h" * 255, "nodename": "n" * 255,
                   "providers": {"u" * 36: "n" * 255}}
        assert store.publish(longest.pop("host"), states(a=1), 0, **longest).written

    def test_large_state(self, store):
        big = states(numa=0)
        big["numa"]["state"] = {"cpus": list(range(20000)), "name": "é" * 1000}
        store.publish("h1", big, 0)
        assert dict(store.get_host("h1").states) == big


class TestDecisions:
    def test_a_release_request_reads_the_decision_in_force_once(self, store):
        """``release``'s request (the requester's side of a delete): the
        decision in force read once, then swapped (before: read twice, by
        the command and again by the protocol)."""
        from compute_plugins.compute import release

        decision = store.submit_decision("c1", "h1", SPEC)
        protocol.claim(store, decision.id)
        with statements(store) as seen:
            done = release.request_release(store, "c1")
        assert done.decision.status == "releasing" and done.was == "claimed"
        reads = [s for s in seen if "WHERE hoststate_decisions.active_consumer =" in s]
        assert len(reads) == 1, seen
        # nothing in force: a cancel recorded, as before
        assert release.request_release(store, "c9").outcome == "unknown"
        pending = store.submit_decision("c2", "h1", SPEC)
        done = release.request_release(store, "c2")
        assert done.outcome == "released" and done.decision.id == pending.id
        assert done.was == "pending"

    def test_in_force_and_latest_finds_what_the_two_reads_find(self, store):
        """The scheduler's one read of a consumer's decisions finds the
        decisions :meth:`active_decision` and :meth:`latest_decision` find,
        for the consumer as the database compares it (MariaDB's default
        collation ignores case and trailing spaces: before, the rows the
        statement found were dropped by a second, case-sensitive comparison
        in Python, and a scheduler saw no decision in force)."""
        first = store.submit_decision("cA", "h1", SPEC)
        protocol.claim(store, first.id)
        for asked in ("cA", "CA", "ca", "cA "):
            assert store.in_force_and_latest(asked) == (
                store.active_decision(asked), store.latest_decision(asked)), asked
        protocol.request_release(store, "cA")
        protocol.release(store, first.id)
        store.submit_decision("cA", "h2", SPEC)
        for asked in ("cA", "CA", "cA "):
            assert store.in_force_and_latest(asked) == (
                store.active_decision(asked), store.latest_decision(asked)), asked

    def test_lifecycle(self, store):
        first = store.submit_decision("c1", "h1", SPEC)
        second = store.submit_decision("c2", "h1", SPEC)
        store.submit_decision("c3", "h2", SPEC)
        assert first.status == hoststate.DecisionStatus.PENDING and not first.answered
        assert [d.consumer for d in store.list_decisions("h1")] == ["c1", "c2"]
        assert store.list_decisions("h1", limit=1) == [first]
        assert store.get_decision(first.id) == first

        claimed = protocol.claim(store, first.id)
        assert claimed.status == "claimed" and claimed.answered
        # NOTE: not updated_at >= first.updated_at: the wall clock may step back.
        assert claimed.created_at == first.created_at
        assert [d.consumer for d in store.list_decisions("h1")] == ["c2"]
        assert store.active_decision("c1") == claimed

        releasing = protocol.request_release(store, "c1")
        assert releasing.status == "releasing"
        assert protocol.request_release(store, "c1") == releasing
        assert store.list_decisions("h1", "releasing") == [releasing]
        released = protocol.release(store, first.id)
        assert released.status == "released"
        assert store.active_decision("c1") is None
        assert protocol.request_release(store, "c1") is None
        assert store.latest_decision("c1") == released

        # NOTE: one statement: the one in force and the latest together.
        with statements(store) as seen:
            assert store.in_force_and_latest("c1") == (None, released)
        assert len([s for s in seen if s != "BEGIN"]) == 1, seen
        again = store.submit_decision("c1", "h2", SPEC)
        assert store.in_force_and_latest("c1") == (again, again)
        assert store.in_force_and_latest("c9") == (None, None)
        assert protocol.in_force_and_latest(store, "c1") == (again, again)
        protocol.withdraw(store, again.id)
        assert store.in_force_and_latest("c1") == (None, store.get_decision(again.id))

        rejected = protocol.reject(store, second.id, [
            Rejection(reason="host cell 1 has 2 free dedicated CPUs", provider="u-cell1",
                      plugin="numa"),
            {"plugin": "vgpu", "reason": "no mdev of type nvidia-35"}])
        assert rejected.status == "rejected"
        assert rejected.reasons == (
            Rejection(reason="host cell 1 has 2 free dedicated CPUs", provider="u-cell1",
                      plugin="numa"),
            Rejection(reason="no mdev of type nvidia-35", provider="", plugin="vgpu"))
        assert store.get_decision(second.id).reasons == rejected.reasons
        assert store.list_decisions("h1") == []

    def test_status_is_compare_and_swap(self, store):
        d = store.submit_decision("c1", "h1", SPEC)
        protocol.claim(store, d.id)
        with pytest.raises(hoststate.DecisionStatusConflict) as info:
            protocol.claim(store, d.id)
        assert info.value.decision.status == "claimed"
        assert (info.value.target, info.value.allowed) == ("claimed", ("pending",))
        assert "claimed" in str(info.value) and "c1" in str(info.value)
        for move in (lambda: protocol.reject(store, d.id, [{"reason": "late"}]),
                     lambda: protocol.withdraw(store, d.id)):
            with pytest.raises(hoststate.DecisionStatusConflict):
                move()
        assert store.get_decision(d.id).status == "claimed"
        protocol.release(store, d.id)
        with pytest.raises(hoststate.DecisionStatusConflict):
            protocol.release(store, d.id)
        with pytest.raises(hoststate.DecisionNotFound):
            protocol.claim(store, d.id + 1000)
        with pytest.raises(hoststate.DecisionNotFound):
            store.get_decision(d.id + 1000)

    def test_two_agents_cannot_both_claim(self, make_store):
        stores = [make_store() for _ in range(4)]
        ids = [stores[0].submit_decision("c%d" % i, "h1", SPEC).id for i in range(5)]

        def claim(i):
            won = []
            for decision_id in ids:
                try:
                    protocol.claim(stores[i], decision_id)
                    won.append(decision_id)
                except hoststate.DecisionStatusConflict:
                    pass
            return won
        results = run_threads(claim, 4)
        assert sorted(sum(results, [])) == ids

    def test_claim_races_withdraw(self, make_store):
        agent, scheduler = make_store(), make_store()
        for i in range(5):
            d = scheduler.submit_decision("c%d" % i, "h1", SPEC)

            def move(who, d=d):
                try:
                    if who == 0:
                        return protocol.claim(agent, d.id)
                    return protocol.withdraw(scheduler, d.id)
                except hoststate.DecisionStatusConflict:
                    return None
            results = run_threads(move, 2)
            assert sum(r is not None for r in results) == 1, results
            final = scheduler.get_decision(d.id)
            assert final.status == ("claimed" if results[0] else "released")

    def test_one_decision_in_force_per_consumer(self, store):
        d = store.submit_decision("c1", "h1", SPEC)
        with pytest.raises(hoststate.DecisionExists) as info:
            store.submit_decision("c1", "h2", SPEC)
        assert info.value.decision == d
        protocol.reject(store, d.id, [{"plugin": "numa", "reason": "full"}])
        again = store.submit_decision("c1", "h2", SPEC)
        assert again.id > d.id
        protocol.claim(store, again.id)
        with pytest.raises(hoststate.DecisionExists):
            store.submit_decision("c1", "h3", SPEC)
        assert [x.host for x in store.history("c1")] == ["h1", "h2"]

    def test_concurrent_submits_for_one_consumer(self, make_store):
        stores = [make_store() for _ in range(4)]

        def submit(i):
            try:
                return stores[i].submit_decision("c1", "h%d" % i, SPEC)
            except hoststate.DecisionExists:
                return None
        results = run_threads(submit, 4)
        assert sum(r is not None for r in results) == 1

    def test_request_release_of_a_pending_decision(self, store):
        d = store.submit_decision("c1", "h1", SPEC)
        released = protocol.request_release(store, "c1")
        assert released.status == "released" and released.id == d.id
        with pytest.raises(hoststate.DecisionStatusConflict):
            protocol.claim(store, d.id)

    def test_bad_input(self, store):
        with pytest.raises(ValueError):
            store.submit_decision("c1", "h1", "not json")
        with pytest.raises(ValueError):
            store.submit_decision("c1", "h1", "[1]")
        with pytest.raises(ValueError):
            store.submit_decision("", "h1", SPEC)
        d = store.submit_decision("c1", "h1", SPEC)
        with pytest.raises(ValueError):
            protocol.reject(store, d.id, [])
        with pytest.raises(ValueError):
            protocol.reject(store, d.id, ["no reason"])
        assert store.get_decision(d.id).status == "pending"

    def test_purge(self, store):
        kept = store.submit_decision("c1", "h1", SPEC)
        gone = store.submit_decision("c2", "h1", SPEC)
        protocol.reject(store, gone.id, [{"reason": "full"}])
        old = store.submit_decision("c3", "h1", SPEC)
        protocol.claim(store, old.id)
        protocol.release(store, old.id)
        cutoff = database.utcnow()
        assert store.purge_decisions(cutoff) == 2
        assert store.history("c2") == [] and store.history("c3") == []
        assert store.get_decision(kept.id).status == "pending"


PENDING, CLAIMED, REJECTED, RELEASING, RELEASED = (
    hoststate.DecisionStatus.PENDING, hoststate.DecisionStatus.CLAIMED,
    hoststate.DecisionStatus.REJECTED, hoststate.DecisionStatus.RELEASING,
    hoststate.DecisionStatus.RELEASED)
Move = protocol.Move

#: The protocol's legal moves on a decision: (status, move) -> the status
#: it ends in. Every other pair is refused. (Written out here, not read
#: from protocol.TRANSITIONS: this is the specification it is checked
#: against.)
LEGAL = {
    (PENDING, Move.CLAIM): CLAIMED,
    (PENDING, Move.REJECT): REJECTED,
    (PENDING, Move.WITHDRAW): RELEASED,
    (PENDING, Move.WITHDRAW_HOST_DOWN): RELEASED,
    (PENDING, Move.EXPIRE): RELEASED,
    (CLAIMED, Move.REQUEST_RELEASE): RELEASING,
    (CLAIMED, Move.RELEASE): RELEASED,
    (RELEASING, Move.RELEASE): RELEASED,
}

#: The moves that make a new decision (not a move of an existing one).
NEW_DECISION = (Move.SUBMIT, Move.CANCEL)

#: The legal moves that bring a new decision to each status.
PATHS = {
    PENDING: (),
    CLAIMED: (Move.CLAIM,),
    REJECTED: (Move.REJECT,),
    RELEASING: (Move.CLAIM, Move.REQUEST_RELEASE),
    RELEASED: (Move.CLAIM, Move.RELEASE),
}

REASONS = (Rejection(reason="host cell 0 has 1 free dedicated CPU", provider="u-cell0",
                     plugin="numa"),)


def decision_in(queue, status, consumer="c1", host="h1"):
    """A new decision of ``consumer``, brought to ``status`` by legal moves."""
    decision = protocol.submit(queue, consumer, host, SPEC)
    for move in PATHS[status]:
        decision = protocol.apply(queue, decision.id, move,
                                  REASONS if move == Move.REJECT else ())
    assert decision.status == status
    return decision


class TestTransitions:
    """Every move of the decision protocol from every status, on the
    transport under test: the legal ones land where the table says, every
    other is refused with an error naming the move, the status and where
    the move starts from, and changes nothing."""

    @pytest.mark.parametrize("status", list(hoststate.DecisionStatus))
    @pytest.mark.parametrize("move", [m for m in Move if m not in NEW_DECISION])
    def test_move(self, store, move, status):
        decision = decision_in(store, status)
        reasons = REASONS if move == Move.REJECT else ()
        if (status, move) in LEGAL:
            moved = protocol.apply(store, decision.id, move, reasons)
            target = LEGAL[status, move]
            assert (moved.id, moved.status) == (decision.id, target)
            assert store.get_decision(decision.id) == moved
            assert moved.created_at == decision.created_at
            assert moved.reasons == (REASONS if target == REJECTED else ())
            assert store.active_decision("c1") == (
                moved if target in hoststate.ACTIVE else None)
            return
        with pytest.raises(hoststate.DecisionStatusConflict) as info:
            protocol.apply(store, decision.id, move, reasons)
        err = info.value
        transition = protocol.TRANSITIONS[move]
        assert err.move == move and err.decision == decision
        assert (err.target, err.allowed) == (transition.target, transition.sources)
        assert str(err) == (
            "%s refused: decision %d (consumer c1, host h1) is %s; %s takes a "
            "decision to %s only from %s" % (
                move, decision.id, status, move, transition.target,
                " or ".join(transition.sources)))
        assert store.get_decision(decision.id) == decision

    @pytest.mark.parametrize("status", list(hoststate.DecisionStatus))
    def test_submit(self, store, status):
        """A consumer gets a new decision only when its last one is final."""
        decision = decision_in(store, status)
        if status in (REJECTED, RELEASED):
            new = protocol.submit(store, "c1", "h2", SPEC)
            assert (new.status, new.host) == (PENDING, "h2") and new.id > decision.id
            assert store.active_decision("c1") == new
            assert [d.id for d in store.history("c1")] == [decision.id, new.id]
        else:
            with pytest.raises(hoststate.DecisionExists) as info:
                protocol.submit(store, "c1", "h2", SPEC)
            assert info.value.decision == decision
            assert "c1" in str(info.value) and str(status) in str(info.value)
        assert store.get_decision(decision.id) == decision

    @pytest.mark.parametrize("status, then", [
        (PENDING, RELEASED),       # withdrawn: never claimed
        (CLAIMED, RELEASING),      # its agent frees it
        (RELEASING, RELEASING),    # asked already
        (REJECTED, None),          # nothing in force
        (RELEASED, None),
    ])
    def test_request_release(self, store, status, then):
        decision = decision_in(store, status)
        done = protocol.request_release(store, "c1")
        if then is None:
            assert done is None
            assert store.get_decision(decision.id) == decision
        else:
            assert (done.id, done.status) == (decision.id, then)
        assert protocol.request_release(store, "nobody") is None

    def test_unknown_decision(self, store):
        for move in (m for m in Move if m not in NEW_DECISION):
            with pytest.raises(hoststate.DecisionNotFound):
                protocol.apply(store, 424242, move)


class TestWaitForAnswer:
    def test_returns_the_answer(self, make_store):
        scheduler, agent = make_store(), make_store()
        d = scheduler.submit_decision("c1", "h1", SPEC)

        def answer():
            time.sleep(0.2)
            protocol.claim(agent, d.id)
        thread = threading.Thread(target=answer)
        thread.start()
        try:
            answered = protocol.wait_for_answer(scheduler, "c1", timeout=60)
        finally:
            thread.join()
        assert answered.status == "claimed" and answered.id == d.id

    def test_rejection_carries_reasons(self, store):
        d = store.submit_decision("c1", "h1", SPEC)
        protocol.reject(store, d.id, [{"plugin": "sriov", "provider": "u-pf",
                                    "reason": "no free VF on physnet1"}])
        answer = protocol.wait_for_answer(store, "c1", timeout=5)
        assert answer.reasons == (Rejection(reason="no free VF on physnet1",
                                            provider="u-pf", plugin="sriov"),)

    def test_timeout_names_the_host_and_withdraws(self, store):
        d = store.submit_decision("c1", "agentless-host", SPEC)
        polls = []

        def count(conn, cursor, statement, parameters, context, executemany):
            if statement.lstrip().upper().startswith("SELECT") and \
                    "hoststate_decisions" in statement:
                polls.append(time.monotonic())
        event.listen(store.engine, "before_cursor_execute", count)
        start = time.monotonic()
        try:
            with pytest.raises(hoststate.AnswerTimeout) as info:
                protocol.wait_for_answer(store, "c1", timeout=0.4)
        finally:
            event.remove(store.engine, "before_cursor_execute", count)
        elapsed = time.monotonic() - start
        assert 0.4 <= elapsed < 30, "the timeout is honoured, boundedly"
        # NOTE: back-off from 50 ms doubling: about 6 reads in 0.4 s, not a
        # busy loop.
        assert len(polls) <= 10, len(polls)
        err = info.value
        assert (err.host, err.consumer, err.timeout, err.withdrawn) == (
            "agentless-host", "c1", 0.4, True)
        assert "agentless-host" in str(err) and isinstance(err, TimeoutError)
        assert store.get_decision(d.id).status == "released"
        with pytest.raises(hoststate.DecisionStatusConflict):
            protocol.claim(store, d.id)

    def test_timeout_without_withdrawal(self, store):
        d = store.submit_decision("c1", "h1", SPEC)
        with pytest.raises(hoststate.AnswerTimeout) as info:
            protocol.wait_for_answer(store, "c1", timeout=0.1, withdraw_on_timeout=False)
        assert not info.value.withdrawn
        assert store.get_decision(d.id).status == "pending"

    def test_answer_at_the_deadline_wins_over_withdrawal(self, store, monkeypatch):
        d = store.submit_decision("c1", "h1", SPEC)
        real_withdraw = protocol.withdraw

        def late_claim_then_withdraw(queue, decision_id):
            protocol.claim(queue, decision_id)
            return real_withdraw(queue, decision_id)
        monkeypatch.setattr(protocol, "withdraw", late_claim_then_withdraw)
        answer = protocol.wait_for_answer(store, "c1", timeout=0)
        assert answer.status == "claimed" and answer.id == d.id

    def test_unknown_consumer(self, store):
        with pytest.raises(hoststate.DecisionNotFound):
            protocol.wait_for_answer(store, str(uuid.uuid4()), timeout=1)


class TestSchema:
    def _set_version(self, url, version):
        if version is None:
            _downgrade(url, None, "DROP TABLE hoststate_version")
        else:
            _downgrade(url, version)

    def test_reopen_keeps_the_data(self, empty_url):
        with hoststate.HostStateStore(empty_url) as first:
            first.publish("h1", states(a=1), 0)
        with hoststate.HostStateStore(empty_url) as second:
            assert second.get_host("h1").generation == 1

    @pytest.mark.parametrize("found, word", [(99, "newer"), (0, "older")])
    def test_version_mismatch(self, empty_url, found, word):
        hoststate.HostStateStore(empty_url).close()
        self._set_version(empty_url, found)
        with pytest.raises(hoststate.SchemaVersionMismatch) as info:
            hoststate.HostStateStore(empty_url)
        err = info.value
        assert (err.found, err.expected) == (found, hoststate.SCHEMA_VERSION)
        message = str(err)
        assert "schema version %d" % found in message
        assert "expects version %d" % hoststate.SCHEMA_VERSION in message
        assert word in message and "stop the agents and schedulers" in message
        # NOTE: the PostgreSQL URLs of the functional tests carry one.
        assert "s3cret" not in message and "s3cret" not in err.url

    def test_tables_without_version(self, empty_url):
        hoststate.HostStateStore(empty_url).close()
        self._set_version(empty_url, None)
        with pytest.raises(hoststate.SchemaVersionMismatch) as info:
            hoststate.HostStateStore(empty_url)
        assert info.value.found is None
        assert "no schema version" in str(info.value)

    def test_concurrent_creation(self, empty_url):
        def open_store(i):
            with hoststate.HostStateStore(empty_url) as s:
                return s.generations()
        assert run_threads(open_store, 4) == [{}] * 4
        engine = sa.create_engine(empty_url)
        try:
            with engine.connect() as conn:
                assert conn.execute(sa.select(schema.version.c.version)).scalars().all() == [
                    hoststate.SCHEMA_VERSION]
        finally:
            engine.dispose()


class TestAgentLeases:
    """One agent per host (issue 20, item 2): a lease with a fencing token
    (epoch) per host; every write of a fenced agent carries its token."""

    def test_a_second_node_cannot_take_a_held_lease(self, store):
        first = store.acquire_lease("h1", "node-a", "pid 1 on m1", 60)
        assert (first.host, first.epoch, first.node) == ("h1", 1, "node-a")
        with pytest.raises(hoststate.AgentLeaseHeld) as info:
            store.acquire_lease("h1", "node-b", "pid 2 on m2", 60)
        message = str(info.value)
        assert "h1" in message and "node-a" in message and "pid 1 on m1" in message
        # the same node (a restart: its state-dir lock says the old one is
        # gone) takes it over at once, under a new epoch
        again = store.acquire_lease("h1", "node-a", "pid 3 on m1", 60)
        assert again.epoch == 2

    def test_an_expired_lease_is_taken_over_and_the_old_token_fenced(self, store):
        old = store.acquire_lease("h1", "node-a", "pid 1", 0.2)
        time.sleep(0.3)
        new = store.acquire_lease("h1", "node-b", "pid 2", 60)
        assert new.epoch == old.epoch + 1
        with pytest.raises(hoststate.Fenced) as info:
            store.renew_lease(old, 60)
        assert "node-b" in str(info.value) and "pid 2" in str(info.value)
        assert store.renew_lease(new, 60).epoch == new.epoch

    def test_a_renewal_is_one_statement_and_extends_the_lease(self, store):
        """The heartbeat is every idle agent's one steady-state write
        (issue 19, item 4): one ``UPDATE`` (no locking read, no clock read
        where the server's clock goes into the statement), and it extends
        the lease from now."""
        lease = store.acquire_lease("h1", "node-a", "pid 1", 1)
        with statements(store) as seen:
            renewed = store.renew_lease(lease, 60)
        sent = [s for s in seen if not s.startswith("BEGIN")]
        assert len(sent) == (2 if store.engine.dialect.name == "mysql" else 1), sent
        assert sent[-1].startswith("UPDATE")
        assert renewed.epoch == lease.epoch
        assert renewed.expires_at > lease.expires_at
        assert store.get_lease("h1").expires_at == renewed.expires_at
        time.sleep(1.2)
        # still the holder's: the first lease's second would have ended it
        with pytest.raises(hoststate.AgentLeaseHeld):
            store.acquire_lease("h1", "node-b", "pid 2", 60)

    def test_every_write_with_a_stale_token_is_refused(self, store):
        old = store.acquire_lease("h1", "node-a", "pid 1", 0.1)
        fenced_old = store.fenced(old)
        fenced_old.publish("h1", states(a=1), 0)
        d = store.submit_decision("c1", "h1", SPEC)
        time.sleep(0.2)
        new = store.acquire_lease("h1", "node-b", "pid 2", 60)
        with pytest.raises(hoststate.Fenced):
            fenced_old.publish("h1", states(a=2), 1)
        with pytest.raises(hoststate.Fenced):
            protocol.claim(fenced_old, d.id)
        with pytest.raises(hoststate.Fenced):
            fenced_old.restore_claim("c2", "h1", SPEC)
        assert store.get_host("h1").generation == 1
        assert store.get_decision(d.id).status == "pending"
        fenced_new = store.fenced(new)
        assert fenced_new.publish("h1", states(a=2), 1).written
        assert protocol.claim(fenced_new, d.id).status == "claimed"
        # the scheduler's and the operator's writes carry no token
        protocol.request_release(store, "c1")

    def test_a_store_without_the_lease_fences_the_writer(self, store):
        lease = store.acquire_lease("h1", "node-a", "pid 1", 60)
        with store.engine.begin() as conn:
            conn.execute(sa.delete(schema.leases))
        with pytest.raises(hoststate.Fenced) as info:
            store.fenced(lease).publish("h1", states(a=1), 0)
        assert info.value.lost

    @pytest.mark.parametrize("expired", [False, True], ids=["first", "takeover"])
    def test_nodes_racing_for_a_lease_one_takes_it(self, make_store, expired):
        # review: two agents of one host (other state directories) started
        # at the same moment, each with its own connections: the first
        # insert (no row to lock) and the takeover of an expired lease
        # (the row locked) give the lease to one of them only.
        count = 6
        stores = [make_store() for _ in range(count)]
        if expired:
            stores[0].acquire_lease("h1", "node-old", "pid 0", 0.05)
            time.sleep(0.1)

        def take(i):
            try:
                return stores[i].acquire_lease("h1", "node-%d" % i, "pid %d" % i, 60)
            except hoststate.AgentLeaseHeld as err:
                return err
        results = run_threads(take, count)
        won = [r for r in results if not isinstance(r, Exception)]
        assert len(won) == 1, results
        assert store_lease(stores[0]).epoch == won[0].epoch == (2 if expired else 1)
        assert store_lease(stores[0]).node == won[0].node

    def test_the_store_id_is_made_once_by_racing_openers(self, make_store):
        count = 6
        stores = [make_store() for _ in range(count)]
        ids = run_threads(lambda i: stores[i].store_id(), count)
        assert len(set(ids)) == 1 and uuid.UUID(ids[0])

    def test_the_store_has_a_stable_id(self, make_store):
        first = make_store().store_id()
        assert uuid.UUID(first) and make_store().store_id() == first

    def test_restore_claim(self, store):
        d = store.restore_claim("c1", "h1", SPEC)
        assert d.status == "claimed" and d.host == "h1"
        assert store.active_decision("c1") == d
        with pytest.raises(hoststate.DecisionExists):
            store.restore_claim("c1", "h1", SPEC)

    def test_rename_host(self, store):
        store.publish("h1", states(a=1), 0, nodename="h1", providers={"u1": "h1"})
        d = store.submit_decision("c1", "h1", SPEC)
        protocol.claim(store, d.id)
        store.acquire_lease("h1", "node-a", "pid 1", 60)
        # review: another node's agent holds the host: refused, nothing moved
        with pytest.raises(hoststate.AgentLeaseHeld, match="node-a"):
            store.rename_host("h1", "h2", "node-b")
        assert store.active_decision("c1").host == "h1"
        moved = store.rename_host("h1", "h2", "node-a")
        assert moved == 1
        assert store.get_host("h1") is None
        assert store.active_decision("c1").host == "h2"
        assert '"h2"' in store.active_decision("c1").spec
        assert store.acquire_lease("h2", "node-b", "pid 2", 60).epoch == 1
        # review: run again (it stopped after this step): nothing to move,
        # not refused for the decisions it moved
        assert store.rename_host("h1", "h2", "node-b") == 0
        assert store.active_decision("c1").host == "h2"
        # a name another host has is refused
        store.publish("h3", states(a=1), 0)
        store.publish("h4", states(a=1), 0)
        with pytest.raises(hoststate.HostStateError, match="another host has it"):
            store.rename_host("h3", "h4")

    def test_racing_openers_upgrade_a_version_2_store_with_data_once(self, empty_url):
        # review: several agents restarted on the new code at once
        with hoststate.HostStateStore(empty_url) as s:
            s.publish("h1", states(a=1), 0, nodename="h1", providers={"u1": "h1"})
            d = s.submit_decision("c1", "h1", SPEC)
            protocol.claim(s, d.id)
            s.submit_decision("c2", "h1", SPEC)
        _downgrade(empty_url, 2, "DROP TABLE hoststate_leases", "DROP TABLE hoststate_store")
        opened = run_threads(lambda i: hoststate.HostStateStore(empty_url), 4)
        try:
            ids = run_threads(lambda i: opened[i].store_id(), 4)
            assert len(set(ids)) == 1
            s = opened[0]
            assert s.get_host("h1").providers == {"u1": "h1"}
            assert s.active_decision("c1").status == "claimed"
            assert s.active_decision("c2").status == "pending"
            with s.engine.connect() as conn:
                assert conn.execute(sa.select(schema.version.c.version)).scalars().all() \
                    == [hoststate.SCHEMA_VERSION]
        finally:
            for each in opened:
                each.close()

    def test_rename_host_keeps_it_disabled(self, store):
        store.publish("h1", states(a=1), 0, nodename="h1", providers={"u1": "h1"})
        store.disable_host("h1", "disk swap", "ops@desk")
        store.disable_host("h2", "stale record of the new name", "ops@desk")
        store.rename_host("h1", "h2")
        assert list(store.disabled_hosts()) == ["h2"]
        assert store.disabled_hosts()["h2"].reason == "disk swap"

    def test_a_version_3_store_is_upgraded_in_place(self, empty_url):
        with hoststate.HostStateStore(empty_url) as s:
            s.publish("h1", states(a=1), 0)
            lease = s.acquire_lease("h1", "node-a", "pid 1", 60)
        _downgrade(empty_url, 3, "DROP TABLE hoststate_moves", "DROP TABLE hoststate_disabled")
        with hoststate.HostStateStore(empty_url) as s:
            assert s.get_host("h1").generation == 1
            assert s.get_lease("h1") == lease
            assert s.disabled_hosts() == {}
            record, changed = s.disable_host("h1", "bios update", "ops@desk")
            assert changed and s.disabled_hosts() == {"h1": record}
        engine = sa.create_engine(empty_url)
        try:
            with engine.connect() as conn:
                assert conn.execute(sa.select(schema.version.c.version)).scalars().all() == [
                    hoststate.SCHEMA_VERSION] == [7]
        finally:
            engine.dispose()

    def test_a_version_4_store_with_a_claim_is_upgraded_and_moves_it(self, empty_url):
        instance = "00000000-0000-0000-0000-00000000000c"
        migration = "00000000-0000-0000-0000-00000000000a"
        with hoststate.HostStateStore(empty_url) as s:
            s.publish("h1", states(a=1), 0)
            decision = protocol.claim(s, s.submit_decision(instance, "h1", SPEC).id)
        _downgrade(empty_url, 4, "DROP TABLE hoststate_moves")
        with hoststate.HostStateStore(empty_url) as s:
            assert s.active_decision(instance) == decision
            assert s.moves_in_force() == []
            move = s.start_move(migration, instance, "migrate", "h1", decision.id, SPEC)
            assert s.rekey_decision(decision.id, instance, migration).consumer == migration
            assert s.moves_in_force() == [move] and s.active_move(instance) == move
            with pytest.raises(errors.MoveExists):
                s.start_move("00000000-0000-0000-0000-00000000000b", instance, "resize",
                             "h1", decision.id, SPEC)

    def test_a_version_5_store_gets_the_fence_kind_of_its_disabled_hosts(self, empty_url):
        with hoststate.HostStateStore(empty_url) as s:
            s.publish("h1", states(a=1), 0)
            s.disable_host("h1", "bios update", "ops@desk")
        _downgrade(empty_url, 5, "DROP TABLE hoststate_disabled",
                   "CREATE TABLE hoststate_disabled (host VARCHAR(255) NOT NULL "
                   "PRIMARY KEY, reason TEXT NOT NULL, disabled_by VARCHAR(255) NOT "
                   "NULL, disabled_at TIMESTAMP NOT NULL)",
                   "INSERT INTO hoststate_disabled VALUES ('h1', 'bios update', "
                   "'ops@desk', '2026-01-02 03:04:05')")
        with hoststate.HostStateStore(empty_url) as s:
            record = s.disabled_hosts()["h1"]
            assert (record.reason, record.kind) == ("bios update", "operator")
            # an evacuation's fence, lifted only by its own kind
            assert s.disable_host("h2", "evacuated", "mover", kind="evacuated")[1]
            assert s.enable_host("h1", kind="evacuated") is None
            assert s.enable_host("h2", kind="evacuated").kind == "evacuated"
            assert list(s.disabled_hosts()) == ["h1"]

    def test_an_interrupted_upgrade_to_6_is_run_again(self, empty_url):
        """MySQL's DDL commits at once: an upgrade stopped after its
        ``ALTER TABLE`` leaves the column with the version still 5. Opened
        again, the store skips the column and records the current version."""
        with hoststate.HostStateStore(empty_url) as s:
            s.publish("h1", states(a=1), 0)
            fence, _ = s.disable_host("h1", "evacuated", "mover", kind="evacuated")
        _downgrade(empty_url, 5)
        with hoststate.HostStateStore(empty_url) as s:
            assert s.disabled_hosts()["h1"] == fence
        engine = sa.create_engine(empty_url)
        try:
            with engine.connect() as conn:
                assert conn.execute(sa.select(schema.version.c.version)).scalars().all() \
                    == [hoststate.SCHEMA_VERSION]
        finally:
            engine.dispose()

    def test_a_version_2_store_is_upgraded_in_place(self, empty_url):
        with hoststate.HostStateStore(empty_url) as s:
            s.publish("h1", states(a=1), 0)
        _downgrade(empty_url, 2, "DROP TABLE hoststate_moves", "DROP TABLE hoststate_disabled",
                   "DROP TABLE hoststate_leases", "DROP TABLE hoststate_store")
        with hoststate.HostStateStore(empty_url) as s:
            assert s.get_host("h1").generation == 1
            assert s.acquire_lease("h1", "node-a", "pid 1", 60).epoch == 1
            assert uuid.UUID(s.store_id())
            assert s.disable_host("h1", "", "ops@desk")[1]
        engine = sa.create_engine(empty_url)
        try:
            with engine.connect() as conn:
                assert conn.execute(sa.select(schema.version.c.version)).scalars().all() == [
                    hoststate.SCHEMA_VERSION]
        finally:
            engine.dispose()


class TestDisabledHosts:
    """An operator's record of a disabled host (``host disable``)."""

    def test_disable_records_reason_who_and_when(self, store):
        before = database.utcnow()
        record, changed = store.disable_host("h1", "firmware upgrade", "ops@desk")
        assert changed
        assert (record.host, record.reason, record.by) == ("h1", "firmware upgrade",
                                                           "ops@desk")
        assert before <= record.at <= database.utcnow()
        assert store.disabled_hosts() == {"h1": record}
        assert store.disabled_hosts(["h1", "h2"]) == {"h1": record}
        assert store.disabled_hosts(["h2"]) == {}
        assert record.describe() == "host h1 is disabled: firmware upgrade"

    def test_disabling_twice_keeps_the_first_record(self, store):
        first, _ = store.disable_host("h1", "first", "ops@desk")
        again, changed = store.disable_host("h1", "second", "other@desk")
        assert not changed and again == first
        assert store.disabled_hosts()["h1"].reason == "first"

    def test_an_operators_disable_takes_over_an_evacuations_fence(self, store):
        fence, _ = store.disable_host("h1", "evacuated", "mover@desk", kind="evacuated")
        assert fence.kind == "evacuated"
        record, changed = store.disable_host("h1", "disk swap", "ops@desk")
        assert changed and record.kind == "operator"
        assert store.disabled_hosts()["h1"].reason == "disk swap"
        # the agent's lifting of the evacuation's fence leaves it alone
        assert store.enable_host("h1", kind="evacuated") is None
        assert store.disabled_hosts()["h1"] == record
        # and an evacuation of an operator's disabled host keeps its record
        again, changed = store.disable_host("h1", "evacuated", "mover", kind="evacuated")
        assert not changed and again == record

    def test_an_operators_disable_racing_the_lifting_of_a_fence_disables(
            self, store, monkeypatch):
        """The host's agent lifts the evacuation's fence between the
        operator's insert (refused: the fence is there) and its take-over
        of the fence's record: the host is enabled, and the operator's
        ``host disable`` disables it, no "try again"."""
        store.disable_host("h1", "evacuated", "mover@desk", kind="evacuated")
        write = store.db.write
        writes = []

        @contextlib.contextmanager
        def lifted_meanwhile():
            writes.append(1)
            if len(writes) == 2:
                monkeypatch.setattr(store.db, "write", write)
                assert store.enable_host("h1", kind="evacuated") is not None
            with write() as conn:
                yield conn

        monkeypatch.setattr(store.db, "write", lifted_meanwhile)
        record, changed = store.disable_host("h1", "disk swap", "ops@desk")
        assert changed and (record.kind, record.reason) == ("operator", "disk swap")
        assert store.disabled_hosts() == {"h1": record}

    def test_enable_removes_the_record_and_returns_it(self, store):
        record, _ = store.disable_host("h1", "", "ops@desk")
        assert record.describe() == "host h1 is disabled (no reason given)"
        assert store.enable_host("h1") == record
        assert store.disabled_hosts() == {}
        assert store.enable_host("h1") is None

    def test_bad_input_is_refused_and_writes_nothing(self, store):
        with pytest.raises(ValueError, match="reason .* expected at most 255 characters"):
            store.disable_host("h1", "x" * 256, "ops@desk")
        with pytest.raises(ValueError, match="host name"):
            store.disable_host("", "why", "ops@desk")
        with pytest.raises(TypeError, match="string"):
            store.disabled_hosts("h1")
        assert store.disabled_hosts() == {}

    def test_a_disabled_host_still_publishes_and_answers(self, store):
        store.disable_host("h1", "maintenance", "ops@desk")
        assert store.publish("h1", states(a=1), 0).written
        d = store.submit_decision("c1", "h1", SPEC)
        protocol.claim(store, d.id)
        protocol.request_release(store, "c1")
        assert store.active_decision("c1").status == "releasing"


class TestLiveness:
    """Issue 19, item 3: the agents' leases tell which hosts are down; the
    scheduler reads them with the generations, in one statement, and stops
    waiting for an answer from a host whose lease expired."""

    def test_host_statuses_read_the_leases_with_the_generations(self, store):
        for host in ("h1", "h2", "h3"):
            store.publish(host, states(a=1), 0)
        live = store.acquire_lease("h1", "node-1", "pid 1", 60)
        gone = store.acquire_lease("h2", "node-2", "pid 2", 0.1)
        time.sleep(0.2)
        with statements(store) as seen:
            found = store.host_statuses()
        selects = [q for q in seen if q.upper().startswith("SELECT")]
        assert len(selects) == 1 and "hoststate_leases" in selects[0], seen
        assert not writes(seen)
        now = database.utcnow()
        assert {h: (s.generation, s.lease_expires_at) for h, s in found.items()} == {
            "h1": (1, live.expires_at), "h2": (1, gone.expires_at), "h3": (1, None)}
        # NOTE: no lease at all (published by a tool, not by an agent) is
        # not judged: only an agent's lapsed lease says its host is down.
        assert [h for h, s in sorted(found.items()) if s.down(now)] == ["h2"]
        assert found["h2"].down_reason() == (
            "host h2 is down: its agent's lease expired at %s UTC"
            % gone.expires_at.isoformat(sep=" ", timespec="seconds"))
        assert set(store.host_statuses(["h2", "nowhere"])) == {"h2"}
        assert store.host_statuses([]) == {}

    def test_a_clean_stop_ends_the_lease_and_the_host_is_down_at_once(self, store):
        store.publish("h1", states(a=1), 0)
        lease = store.acquire_lease("h1", "node-1", "pid 1", 60)
        assert not store.host_statuses()["h1"].down(database.utcnow())
        assert store.end_lease(lease)
        assert store.host_statuses()["h1"].down(database.utcnow())

    def test_waiting_on_a_host_whose_lease_expires_withdraws_at_once(self, store):
        store.acquire_lease("h1", "node-1", "pid 1", 0.3)
        d = store.submit_decision("c1", "h1", SPEC)
        start = time.monotonic()
        with pytest.raises(hoststate.HostDown) as info:
            protocol.wait_for_answer(store, "c1", timeout=60, until_host_down=True)
        assert time.monotonic() - start < 5, "not the answer timeout"
        err = info.value
        assert err.host == "h1" and "host h1 is down: its agent's lease expired at" in str(err)
        withdrawn = store.get_decision(d.id)
        assert err.decision == withdrawn and withdrawn.status == RELEASED
        assert [r.reason for r in withdrawn.reasons] == [err.reason]
        assert store.active_decision("c1") is None
        # the agent that comes back cannot claim it any more
        with pytest.raises(hoststate.DecisionStatusConflict):
            protocol.claim(store, d.id)

    def test_a_live_host_is_waited_for_and_a_leaseless_one_too(self, store):
        store.acquire_lease("h1", "node-1", "pid 1", 60)
        store.submit_decision("c1", "h1", SPEC)
        store.submit_decision("c2", "h2", SPEC)  # no lease: not judged
        for consumer in ("c1", "c2"):
            with pytest.raises(hoststate.AnswerTimeout):
                protocol.wait_for_answer(store, consumer, timeout=0.2,
                                         until_host_down=True)

    def test_an_answer_before_the_withdrawal_wins(self, store):
        store.acquire_lease("h1", "node-1", "pid 1", 0.1)
        d = store.submit_decision("c1", "h1", SPEC)
        time.sleep(0.2)
        protocol.claim(store, d.id)   # the agent answered just before
        answered = protocol.wait_for_answer(store, "c1", timeout=60, until_host_down=True)
        assert answered.status == CLAIMED

    def test_a_release_waiting_on_a_down_host_stops_at_once(self, store):
        store.acquire_lease("h1", "node-1", "pid 1", 0.1)
        d = store.submit_decision("c1", "h1", SPEC)
        protocol.claim(store, d.id)
        releasing = protocol.request_release(store, "c1")
        time.sleep(0.2)
        with pytest.raises(hoststate.HostDown) as info:
            store.wait_for_change(releasing, 0, until_host_down=True)
        # recorded for the agent: it frees it when it comes back
        assert info.value.decision.status == RELEASING
        assert store.get_decision(d.id).status == RELEASING


class TestChanges:
    """Issue 19, item 2: a reader asks for the hosts written since its last
    read (the store's change numbers) and the expired leases, not every
    host's generation and lease (:mod:`compute_plugins.hoststate.changes`)."""

    def test_a_reader_reads_only_the_hosts_written_since_its_mark(self, store):
        for i in range(5):
            store.publish("h%d" % i, states(a=1), 0)
        first = store.host_status_changes(None)
        assert first.full and dict(first.generations) == {
            "h%d" % i: 1 for i in range(5)}
        store.publish("h2", states(a=2), 1)
        store.publish("h9", states(a=1), 0)
        store.publish("h2", states(a=2), 2)   # nothing changed: not numbered
        with statements(store) as seen:
            later = store.host_status_changes(first.mark)
        assert not later.full and dict(later.generations) == {"h2": 2, "h9": 1}
        assert later.mark.number == first.mark.number + 2
        # NOTE: one statement, every part of it indexed: the counter, the
        # hosts numbered past the mark, the expired leases.
        (read,) = [q for q in seen if q.startswith("SELECT")]
        assert "change_number >" in read and "expires_at <=" in read, seen
        assert not writes(seen)
        idle = store.host_status_changes(later.mark)
        assert (idle.full, dict(idle.generations), idle.mark) == (False, {}, later.mark)

    def test_the_changed_hosts_come_with_their_providers(self, store):
        """Issue 19: the uuids of the providers of every host read, in the
        same statement: a scheduler keeps which host published which
        provider with the generations, not a read per provider."""
        store.publish("h1", states(a=1), 0, providers={"u1": "h1", "u1c": "h1-cell"})
        store.publish("h2", states(a=1), 0, providers={"u2": "h2"})
        store.publish("h3", states(a=1), 0)
        first = store.host_status_changes(None)
        assert dict(first.providers) == {"h1": ("u1", "u1c"), "h2": ("u2",), "h3": ()}
        store.publish("h1", states(a=1), 1, providers={"u1": "h1"})
        store.publish("h2", states(a=2), 1, providers={"u2": "h2", "u1c": "h2-cell"})
        with statements(store) as seen:
            later = store.host_status_changes(first.mark)
        assert dict(later.providers) == {"h1": ("u1",), "h2": ("u1c", "u2")}
        assert len([q for q in seen if q.startswith("SELECT")]) == 1, seen
        store.publish("h3", states(a=2), 1)  # its states only
        assert dict(store.host_status_changes(later.mark).providers) == {"h3": ()}
        store.rename_host("h2", "h2-new")
        full = store.host_status_changes(later.mark)
        assert full.full and full.providers == {
            h: tuple(sorted(s.providers)) for h, s in store.get_hosts().items()}

    def test_expired_leases_are_the_down_hosts_and_renewals_are_not_changes(self, store):
        for host in ("h1", "h2", "h3"):
            store.publish(host, states(a=1), 0)
        store.acquire_lease("h1", "node-1", "pid 1", 60)
        short = store.acquire_lease("h2", "node-2", "pid 2", 0.1)
        first = store.host_status_changes(None)
        time.sleep(0.2)
        later = store.host_status_changes(first.mark)
        assert dict(later.expired) == {"h2": short.expires_at}
        assert later.mark == first.mark and not later.generations
        # its agent back: renewed, not down, and still no change to read
        store.renew_lease(store.acquire_lease("h2", "node-2", "pid 3", 60), 60)
        back = store.host_status_changes(later.mark)
        assert (dict(back.expired), back.mark, dict(back.generations)) == (
            {}, first.mark, {})

    def test_a_rename_or_a_counter_gone_back_reads_every_host(self, store, url):
        for host in ("h1", "h2"):
            store.publish(host, states(a=1), 0)
        mark = store.host_status_changes(None).mark
        store.rename_host("h1", "h1-new")
        renamed = store.host_status_changes(mark)
        assert renamed.full and dict(renamed.generations) == {"h2": 1}
        # NOTE: a store restored from a backup older than the mark.
        engine = sa.create_engine(url)
        try:
            with engine.begin() as conn:
                conn.execute(sa.update(schema.changes).values(last_number=0))
        finally:
            engine.dispose()
        restored = store.host_status_changes(renamed.mark)
        assert restored.full and dict(restored.generations) == {"h2": 1}

    def test_a_store_recreated_past_the_mark_reads_every_host(self, store, url, make_store):
        """The store dropped and made again under a reader (a running
        scheduler), its new counter past the reader's mark by the time it
        reads: every host is read (the store's identity is in the mark),
        not only those numbered past the old store's mark (the others went
        unseen up to ``FULL_READ_SECONDS``)."""
        for host in ("h1", "h2"):
            store.publish(host, states(a=1), 0)
        mark = store.host_status_changes(None).mark
        engine = sa.create_engine(url)
        try:
            schema.metadata.drop_all(engine)
        finally:
            engine.dispose()
        again = make_store()
        for host in ("n1", "n2", "n3"):
            again.publish(host, states(a=1), 0)
        found = store.host_status_changes(mark)
        assert found.mark.number > mark.number and found.mark.store != mark.store
        assert found.full and dict(found.generations) == {"n1": 1, "n2": 1, "n3": 1}
        assert not store.host_status_changes(found.mark).full

    def test_interleaved_publishers_miss_no_change(self, store, url):
        """The sequence pitfall: a publisher that took its number first and
        commits last. Its rival waits for the counter until it committed,
        so a reader between them sees neither, and after both sees both."""
        store.publish("h1", states(a=1), 0)
        store.publish("h2", states(a=1), 0)
        mark = store.host_status_changes(None).mark
        engine = sa.create_engine(url)
        try:
            with engine.connect() as first:
                with first.begin():
                    # NOTE: a publish of h1 that numbered itself and has
                    # not committed yet.
                    first.execute(sa.update(schema.hosts).where(
                        schema.hosts.c.host == "h1").values(generation=2))
                    changes.stamp(first, "h1")
                    second = threading.Thread(
                        target=store.publish, args=("h2", states(a=2), 1))
                    second.start()
                    second.join(0.5)
                    assert second.is_alive(), "the second took a number meanwhile"
                    between = store.host_status_changes(mark)
                    assert (dict(between.generations), between.mark) == ({}, mark)
            second.join(60)
            assert not second.is_alive()
        finally:
            engine.dispose()
        after = store.host_status_changes(between.mark)
        assert dict(after.generations) == {"h1": 2, "h2": 2}
        assert after.mark.number == mark.number + 2

    def test_a_reader_following_concurrent_publishers_misses_none(self, make_store):
        """Publishers of different hosts, each on a store of its own (on
        PostgreSQL a publish that changes documents in place is one
        statement that takes its change number), and a reader that
        follows them by marks: whatever the interleaving, what the reader
        gathered is every host's last generation."""
        writers, hosts, rounds = 4, 3, 12
        stores = [make_store() for _ in range(writers)]
        for i, s in enumerate(stores):
            for h in range(hosts):
                s.publish("w%d-h%d" % (i, h), states(a=0), 0)
        reader = make_store()
        first = reader.host_status_changes(None)
        seen = dict(first.generations)
        done = threading.Event()
        fulls: list[int] = []

        def follow() -> None:
            mark = first.mark
            while not done.is_set():
                found = reader.host_status_changes(mark)
                fulls.append(found.full)
                seen.update(found.generations)
                mark = found.mark
            found = reader.host_status_changes(mark)
            seen.update(found.generations)

        follower = threading.Thread(target=follow)
        follower.start()

        def publish(i: int) -> None:
            for n in range(1, rounds + 1):
                for h in range(hosts):
                    stores[i].publish("w%d-h%d" % (i, h), states(a=n), n)
        try:
            run_threads(publish, writers)
        finally:
            done.set()
            follower.join(60)
        assert not any(fulls)
        assert seen == {"w%d-h%d" % (i, h): rounds + 1
                        for i in range(writers) for h in range(hosts)}

    def test_publishers_racing_to_remake_a_deleted_counter_both_publish(self, store, url):
        """The counter's row deleted by hand: the first publish makes it
        again; a rival that found no row meanwhile waits for it and numbers
        itself after, no duplicate-key error (review)."""
        store.publish("h1", states(a=1), 0)
        store.publish("h2", states(a=1), 0)
        engine = sa.create_engine(url)
        try:
            with engine.begin() as conn:
                conn.execute(sa.delete(schema.changes))
            with engine.connect() as first:
                with first.begin():
                    first.execute(sa.update(schema.hosts).where(
                        schema.hosts.c.host == "h1").values(generation=2))
                    changes.stamp(first, "h1")
                    failed: list[BaseException] = []

                    def rival() -> None:
                        try:
                            store.publish("h2", states(a=2), 1)
                        except BaseException as err:   # noqa: B902 - reported below
                            failed.append(err)
                    second = threading.Thread(target=rival)
                    second.start()
                    second.join(0.5)
            second.join(60)
        finally:
            engine.dispose()
        assert not failed, failed
        assert store.host_status_changes(None).mark.number == 2
        assert store.get_host("h2").generation == 2

    def test_a_version_6_store_is_upgraded_and_keeps_its_hosts(self, empty_url):
        with hoststate.HostStateStore(empty_url) as s:
            s.publish("h1", states(a=1), 0)
            s.publish("h1", states(a=2), 1)
            lease = s.acquire_lease("h1", "node-a", "pid 1", 60)
        _downgrade(empty_url, 6, *(sa.schema.DropIndex(i) for i in schema.ADDED_INDEXES),
                   "ALTER TABLE hoststate_hosts DROP COLUMN change_number",
                   "DROP TABLE hoststate_changes")
        with hoststate.HostStateStore(empty_url) as s:
            assert s.get_host("h1").generation == 2
            assert s.get_lease("h1") == lease
            first = s.host_status_changes(None)
            assert dict(first.generations) == {"h1": 2} and first.mark.number == 0
            s.publish("h1", states(a=3), 2)
            assert dict(s.host_status_changes(first.mark).generations) == {"h1": 3}
        engine = sa.create_engine(empty_url)
        try:
            with engine.connect() as conn:
                assert conn.execute(sa.select(schema.version.c.version)).scalars().all() \
                    == [hoststate.SCHEMA_VERSION]
                indexes = {i["name"] for t in ("hoststate_hosts", "hoststate_leases")
                           for i in sa.inspect(conn).get_indexes(t)}
                assert {"hoststate_hosts_change_number",
                        "hoststate_leases_expires_at"} <= indexes
        finally:
            engine.dispose()
