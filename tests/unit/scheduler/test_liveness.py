"""A long-running scheduler's view of the hosts (:class:`liveness.KeptLiveness`)
on a real SQLite store (issue 19, item 2): the same answer as reading every
host (:func:`liveness.read`), from one read of what changed per decision;
every host read again when the store's counter says so, another store is
given, or the full-read period passed."""

from __future__ import annotations

import shutil
import threading
import time
import weakref

from compute_plugins import hoststate
from compute_plugins.hoststate import database, records
from compute_plugins.scheduler import liveness
from tests.unit.hoststate.cases import statements, states


def open_store(tmp_path, name="s"):
    return hoststate.HostStateStore("sqlite:///%s" % (tmp_path / ("%s.sqlite" % name)))


class Rows:
    """The store, the rows of hoststate_hosts each change read returned
    counted (``host_status_changes``' generations)."""

    def __init__(self, store):
        self._store = store
        self.read: list[int] = []

    def __getattr__(self, name):
        return getattr(self._store, name)

    def host_status_changes(self, *args, **kw):
        found = self._store.host_status_changes(*args, **kw)
        self.read.append(len(found.generations))
        return found


def test_a_second_read_reads_only_the_changed_hosts_and_agrees_with_a_full_one(tmp_path):
    with open_store(tmp_path) as store:
        for i in range(20):
            store.publish("h%02d" % i, states(a=1), 0)
        kept = liveness.KeptLiveness()
        rows = Rows(store)
        first = kept.read(rows)
        assert first == liveness.read(store)
        store.publish("h03", states(a=2), 1)
        with statements(store) as seen:
            second = kept.read(rows)
        # NOTE: no read of every host (the rule before: every host's
        # generation and lease, per decision), only the one that changed:
        # one statement.
        assert rows.read == [20, 1] and kept.full_reads == 1
        (read,) = [q for q in seen if q.startswith("SELECT")]
        assert "change_number >" in read and "expires_at <=" in read, seen
        assert second == liveness.read(store) and second.generations["h03"] == 2
        assert kept.read(rows) == second and rows.read[-1] == 0


def test_a_host_is_down_once_its_lease_expired_and_back_once_renewed(tmp_path):
    with open_store(tmp_path) as store:
        for host in ("live", "dying", "toolmade"):
            store.publish(host, states(a=1), 0)
        store.acquire_lease("live", "node-1", "pid 1", 60)
        lease = store.acquire_lease("dying", "node-2", "pid 2", 0.2)
        kept = liveness.KeptLiveness()
        assert sorted(kept.read(store).generations) == ["dying", "live", "toolmade"]
        time.sleep(0.3)
        down = kept.read(store)
        # NOTE: a host without a lease (published by a tool) is not judged.
        assert sorted(down.generations) == ["live", "toolmade"]
        (why,) = down.down["dying"]
        assert why.reason.startswith("host dying is down: its agent's lease expired at ")
        assert down == liveness.read(store)
        store.renew_lease(store.acquire_lease("dying", "node-2", "pid 3", 60), 60)
        back = kept.read(store)
        assert sorted(back.generations) == ["dying", "live", "toolmade"]
        assert not back.down and back == liveness.read(store)
        assert lease.expires_at < store.get_lease("dying").expires_at


def test_a_renamed_host_is_gone_at_the_next_read(tmp_path):
    with open_store(tmp_path) as store:
        for host in ("old", "other"):
            store.publish(host, states(a=1), 0)
        kept = liveness.KeptLiveness()
        kept.read(store)
        store.rename_host("old", "new")
        assert sorted(kept.read(store).generations) == ["other"]
        assert kept.full_reads == 2


def test_another_store_or_the_full_read_period_reads_every_host(tmp_path):
    now = [0.0]
    kept = liveness.KeptLiveness(full_read_seconds=60, clock=lambda: now[0])
    with open_store(tmp_path, "a") as first, open_store(tmp_path, "b") as second:
        first.publish("h1", states(a=1), 0)
        first.publish("h1", states(a=2), 1)
        second.publish("h2", states(a=1), 0)
        assert dict(kept.read(first).generations) == {"h1": 2}
        # NOTE: another store, its counter ahead of the first's: read whole.
        second.publish("h2", states(a=2), 1)
        second.publish("h2", states(a=3), 2)
        assert dict(kept.read(second).generations) == {"h2": 3}
        assert kept.full_reads == 2
        now[0] = 59.0
        kept.read(second)
        assert kept.full_reads == 2
        now[0] = 61.0
        kept.read(second)
        assert kept.full_reads == 3


def test_a_store_replaced_by_another_at_its_address_is_read_whole(tmp_path):
    """A store is told apart from another by its object, not by its id: a
    store closed and freed, and another (here a copy of its database: the
    same store identity, its counter at the same number) made at the
    address the first had, is another store, read whole; taken for the
    first, its hosts were read from the first's mark and its own missed."""
    with open_store(tmp_path, "a") as store:
        store.publish("h1", states(a=1), 0)
    shutil.copy(tmp_path / "a.sqlite", tmp_path / "b.sqlite")
    kept = liveness.KeptLiveness()
    with open_store(tmp_path, "a") as first, open_store(tmp_path, "b") as second:
        first.publish("h2", states(a=1), 0)
        second.publish("h3", states(a=1), 0)  # the same change number
        old = Rows(first)
        address, gone = id(old), weakref.ref(old)
        assert dict(kept.read(old).generations) == {"h1": 1, "h2": 1}
        del old
        assert gone() is None  # NOTE: the liveness does not keep it alive
        # NOTE: CPython gives a new object of the same size the memory the
        # old one freed, unless another thread took it first (under xdist,
        # seen once): the objects made meanwhile are kept, so each try
        # takes another block; the store read is the one at that address.
        others = []
        new = Rows(second)
        while id(new) != address and len(others) < 10_000:
            others.append(new)
            new = Rows(second)
        assert dict(kept.read(new).generations) == {"h1": 1, "h3": 1}
        assert kept.full_reads == 2


def test_the_changes_are_the_hosts_written_gone_down_or_back_since_last_taken(tmp_path):
    """What a scheduler prunes its kept states by instead of looking at
    every host (:meth:`KeptLiveness.take_changes`): the hosts written, gone
    down or come back since it last took them, over every read meanwhile;
    None (everything) after a read of every host."""
    with open_store(tmp_path) as store:
        for host in ("a", "b", "c", "d"):
            store.publish(host, states(a=1), 0)
        lease = store.acquire_lease("d", "node-d", "pid 1", 0.3)
        kept = liveness.KeptLiveness()
        kept.read(store)
        assert kept.take_changes() is None  # the first read: every host
        assert kept.take_changes() == frozenset()
        store.publish("a", states(a=2), 1)
        kept.read(store)
        store.publish("b", states(a=2), 1)
        kept.read(store)  # two reads before one take: both seen
        assert kept.take_changes() == {"a", "b"}
        kept.read(store)
        assert kept.take_changes() == frozenset()
        time.sleep(0.4)
        kept.read(store)
        assert kept.take_changes() == {"d"}  # down
        kept.read(store)
        assert kept.take_changes() == frozenset()  # still down: no change
        store.renew_lease(store.acquire_lease("d", "node-d", "pid 2", 60), 60)
        kept.read(store)
        assert kept.take_changes() == {"d"}  # back
        assert lease.expires_at < store.get_lease("d").expires_at
        store.rename_host("c", "e")  # a host gone: every host read again
        kept.read(store)
        assert kept.take_changes() is None


def test_the_live_hosts_are_the_same_set_until_one_joins_goes_down_or_leaves(tmp_path):
    with open_store(tmp_path) as store:
        for host in ("a", "b"):
            store.publish(host, states(a=1), 0)
        store.acquire_lease("b", "node-b", "pid 1", 0.3)
        kept = liveness.KeptLiveness()
        first = kept.read(store).hosts
        assert first == {"a", "b"}
        store.publish("a", states(a=2), 1)
        # NOTE: a new generation, the same hosts: the same object (what
        # the view's kept answer, restricted to them, is kept by).
        assert kept.read(store).hosts is first
        store.publish("c", states(a=1), 0)
        joined = kept.read(store).hosts
        assert joined == {"a", "b", "c"} and kept.read(store).hosts is joined
        time.sleep(0.4)
        down = kept.read(store)
        assert down.hosts == {"a", "c"} == set(down.generations)
        assert kept.read(store).hosts is down.hosts
        # a Liveness made without one: its generations' hosts
        assert liveness.read(store).hosts == {"a", "c"}


def test_the_providers_owners_are_kept_with_the_generations_and_follow_them(tmp_path):
    """Issue 19: which host published a provider (what maps Placement's
    answer to hosts) is kept with the hosts' generations, read by change:
    no read of the store per look-up, and the answer follows a provider
    that moves to another host, a host renamed, one that publishes again
    under its name, and one published after the last read (at the next)."""
    with open_store(tmp_path) as store:
        store.publish("a", states(a=1), 0, providers={"u-a": "a", "u-a1": "a-cell"})
        store.publish("b", states(a=1), 0, providers={"u-b": "b"})
        store.publish("c", states(a=1), 0, providers={"u-c": "c"})
        kept = liveness.KeptLiveness()
        kept.read(store)
        every = ["u-a", "u-a1", "u-b", "u-c"]
        expected = store.hosts_for_providers(every)
        with statements(store) as seen:
            assert kept.owners(store, every) == expected
        assert seen == []
        with statements(store) as seen:
            # NOTE: a uuid no host published (Placement's sharing
            # provider, a compute node of another service): none.
            assert kept.owners(store, ["u-a1", "gone"]) == {"u-a1": "a"}
        assert seen == []
        # a provider moves from a to b: a drops it, b takes it
        store.publish("a", states(a=1), 1, providers={"u-a": "a"})
        store.publish("b", states(a=2), 1, providers={"u-b": "b", "u-a1": "b-cell"})
        kept.read(store)
        with statements(store) as seen:
            assert kept.owners(store, every) == {
                "u-a": "a", "u-a1": "b", "u-b": "b", "u-c": "c"}
        assert seen == []
        # a host renamed (its row removed, the name published again)
        store.rename_host("c", "c2")
        store.publish("c2", states(a=1), 0, providers={"u-c": "c2"})
        kept.read(store)
        assert kept.full_reads == 2
        expected = store.hosts_for_providers(every)
        with statements(store) as seen:
            assert kept.owners(store, every) == expected
        assert seen == [] and expected["u-c"] == "c2"
        # a host published after the last read: known from the next one
        store.publish("d", states(a=1), 0, providers={"u-d": "d"})
        assert kept.owners(store, ["u-d", "u-b"]) == {"u-b": "b"}
        kept.read(store)
        with statements(store) as seen:
            assert kept.owners(store, ["u-d"]) == {"u-d": "d"}
        assert seen == []


def test_the_providers_owners_of_a_recreated_store_are_its_own(tmp_path):
    """The store dropped and made again under a running scheduler (its
    identity in the mark): the owners kept from the old one are dropped
    with its generations, none served for the new one's hosts."""
    import sqlalchemy as sa

    from compute_plugins.hoststate import schema

    url = "sqlite:///%s" % (tmp_path / "s.sqlite")
    with hoststate.HostStateStore(url) as store:
        store.publish("old", states(a=1), 0, providers={"u-1": "old"})
        kept = liveness.KeptLiveness()
        kept.read(store)
        assert kept.owners(store, ["u-1"]) == {"u-1": "old"}
        engine = sa.create_engine(url)
        try:
            schema.metadata.drop_all(engine)
        finally:
            engine.dispose()
        with hoststate.HostStateStore(url) as again:
            for i in range(3):
                again.publish("new%d" % i, states(a=1), 0,
                              providers={"u-%d" % (i + 1): "new%d" % i})
        kept.read(store)
        assert kept.full_reads == 2
        with statements(store) as seen:
            assert kept.owners(store, ["u-1", "u-2", "u-3"]) == {
                "u-1": "new0", "u-2": "new1", "u-3": "new2"}
        assert seen == []


def test_the_providers_owners_of_a_store_not_read_are_asked_of_it(tmp_path):
    with open_store(tmp_path, "a") as first, open_store(tmp_path, "b") as second:
        first.publish("h1", states(a=1), 0, providers={"u-1": "h1"})
        second.publish("h2", states(a=1), 0, providers={"u-1": "h2"})
        kept = liveness.KeptLiveness()
        assert kept.owners(first, ["u-1"]) == {"u-1": "h1"}  # none read yet
        kept.read(first)
        assert kept.owners(second, ["u-1"]) == {"u-1": "h2"}
        assert kept.owners(first, ["u-1"]) == {"u-1": "h1"}


class _Unnumbered:
    """A store without change numbers (no ``host_status_changes``)."""

    def __init__(self, store):
        self._store = store

    def __getattr__(self, name):
        if name == "host_status_changes":
            raise AttributeError(name)
        return getattr(self._store, name)


def test_the_providers_owners_are_not_those_of_a_store_freed_at_its_address(tmp_path):
    """The kept owners are those of the store read, told apart from
    another by the object, not by its id: a store read, then freed (a
    store without change numbers read meanwhile), and another made at
    its address is asked, not answered the first one's owners (another
    host)."""
    with open_store(tmp_path, "a") as first, open_store(tmp_path, "b") as second:
        first.publish("h1", states(a=1), 0, providers={"u-1": "h1"})
        second.publish("h2", states(a=1), 0, providers={"u-1": "h2"})
        kept = liveness.KeptLiveness()
        old = Rows(first)
        address = id(old)
        kept.read(old)
        assert kept.owners(old, ["u-1"]) == {"u-1": "h1"}
        kept.read(_Unnumbered(second))
        del old
        new = Rows(second)
        # NOTE: CPython gives the new object the memory the old one freed
        assert id(new) == address, "the replacement is not at the old address"
        assert kept.owners(new, ["u-1"]) == {"u-1": "h2"}


def test_a_store_read_is_not_kept_alive_by_the_liveness(tmp_path):
    """A store replaced under a long-running holder of a KeptLiveness (its
    engine, its connections) is freed once the holder lets it go."""
    import gc
    import weakref

    with open_store(tmp_path) as store:
        store.publish("h1", states(a=1), 0, providers={"u-1": "h1"})
        kept = liveness.KeptLiveness()
        wrapped = Rows(store)
        kept.read(wrapped)
        assert kept.owners(wrapped, ["u-1"]) == {"u-1": "h1"}
        gone = weakref.ref(wrapped)
        del wrapped
        gc.collect()
        assert gone() is None


def test_a_down_hosts_providers_stay_its_own(tmp_path):
    """A host down (its lease expired) is no candidate, but its providers
    are still its own, as the store says: Placement's answer never takes
    one for a provider of no host (a sharing provider's candidate), down
    from the first read or gone down since, nor once it is back."""
    import datetime

    with open_store(tmp_path) as store:
        store.publish("up", states(a=1), 0, providers={"u-up": "up"})
        store.publish("down", states(a=1), 0, providers={"u-down": "down", "u-vf": "pf"})
        store.acquire_lease("up", "node-1", "pid 1", 60)
        store.acquire_lease("down", "node-2", "pid 2", 1)
        every = ["u-up", "u-down", "u-vf"]
        expected = store.hosts_for_providers(every)
        later = datetime.datetime.utcnow() + datetime.timedelta(seconds=30)
        first = liveness.KeptLiveness()     # down from its first read
        assert set(first.read(store, now=later).down) == {"down"}
        assert first.owners(store, every) == expected
        kept = liveness.KeptLiveness()      # gone down since
        assert not kept.read(store).down
        assert set(kept.read(store, now=later).down) == {"down"}
        assert kept.owners(store, every) == expected
        store.renew_lease(store.acquire_lease("down", "node-2", "pid 3", 60), 60)
        assert not kept.read(store, now=later).down
        assert kept.owners(store, every) == expected == {
            "u-up": "up", "u-down": "down", "u-vf": "down"}


class _WithoutProviders(Rows):
    """A feed that numbers its changes but says nothing of the hosts'
    providers (a transport written before StatusChanges carried them)."""

    def host_status_changes(self, *args, **kw):
        import dataclasses

        found = super().host_status_changes(*args, **kw)
        return records.StatusChanges(**{
            f.name: getattr(found, f.name) for f in dataclasses.fields(found)
            if f.name != "providers"})


def test_a_feed_that_says_nothing_of_the_providers_has_them_asked_of_the_store(tmp_path):
    """A change feed whose StatusChanges leave the providers out is not
    taken as "no host published any provider" (every host's room would be
    no host's, every request refused): the owners are asked of the store."""
    with open_store(tmp_path) as store:
        store.publish("h1", states(a=1), 0, providers={"u-1": "h1"})
        feed = _WithoutProviders(store)
        kept = liveness.KeptLiveness()
        kept.read(feed)
        assert kept.owners(feed, ["u-1"]) == {"u-1": "h1"}
        store.publish("h2", states(a=1), 0, providers={"u-2": "h2"})
        kept.read(feed)
        assert kept.owners(feed, ["u-1", "u-2"]) == {"u-1": "h1", "u-2": "h2"}


class Held(Rows):
    """The store, its reads of every host (no mark) held until
    :attr:`release` is set, :attr:`reading` set once one waits, and
    :attr:`after` called once one has read (a write after its snapshot)."""

    def __init__(self, store):
        super().__init__(store)
        self.reading = threading.Event()
        self.release = threading.Event()
        self.after = lambda: None

    def host_status_changes(self, since, *args, **kw):
        if since is None:
            self.reading.set()
            assert self.release.wait(30), "the held read was never released"
        found = super().host_status_changes(since, *args, **kw)
        if since is None:
            self.after()
        return found


def _in_thread(work):
    """``work()`` in a thread: a callable that waits up to 10 s for its
    answer and says whether it came (an exception raised is re-raised)."""
    answer = {}

    def run():
        try:
            answer["value"] = work()
        except BaseException as err:  # noqa: BLE001 - re-raised by the caller
            answer["error"] = err

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def result():
        thread.join(10)
        if "error" in answer:
            raise answer["error"]
        return answer
    return result


def test_the_periodic_read_of_every_host_holds_up_no_other_read_nor_owners(tmp_path):
    """Issue 19 (10,000 hosts: the periodic read of every host reads ~40,000
    rows): while it waits for the database, another thread's read is
    answered from the kept state and what changed, and which host
    published a provider without waiting; the read of every host, once
    back, leaves the kept state as a fresh read has it."""
    now = [0.0]
    kept = liveness.KeptLiveness(full_read_seconds=60, clock=lambda: now[0])
    with open_store(tmp_path) as store:
        store.publish("a", states(a=1), 0, providers={"u-a": "a"})
        store.publish("b", states(a=1), 0, providers={"u-b": "b"})
        held = Held(store)
        held.release.set()
        kept.read(held)
        held.release.clear()
        now[0] = 61.0
        every = _in_thread(lambda: kept.read(held))
        assert held.reading.wait(10)
        store.publish("a", states(a=2), 1, providers={"u-a": "a", "u-a2": "a"})
        try:
            owners = _in_thread(lambda: kept.owners(held, ["u-b"]))()
            read = _in_thread(lambda: kept.read(held))()
            # NOTE: b written after the read of every host's snapshot:
            # that read's answer has it all the same.
            held.after = lambda: store.publish("b", states(a=2), 1, providers={"u-b": "b"})
        finally:
            held.release.set()
        assert owners.get("value") == {"u-b": "b"}
        assert dict(read["value"].generations) == {"a": 2, "b": 1}
        assert dict(every()["value"].generations) == {"a": 2, "b": 2}
        assert kept.full_reads == 2
        assert kept.read(held) == liveness.read(store)
        assert kept.owners(held, ["u-a2", "u-b"]) == {"u-a2": "a", "u-b": "b"}


def test_a_host_seen_down_is_not_reported_live_by_the_periodic_read_applied_after(tmp_path):
    """The periodic read of every host applied after another thread's
    read judges the leases at its own time, not at the time it began
    (before its wait for the database): a host whose lease expired while
    it waited, which the other read already reported down, is down in its
    answer and in the kept view, not live again."""
    now = [0.0]
    kept = liveness.KeptLiveness(full_read_seconds=60, clock=lambda: now[0])
    with open_store(tmp_path) as store:
        for host in ("live", "dying"):
            store.publish(host, states(a=1), 0)
        store.acquire_lease("live", "node-1", "pid 1", 60)
        lease = store.acquire_lease("dying", "node-2", "pid 2", 3)
        held = Held(store)
        held.release.set()
        assert sorted(kept.read(held).generations) == ["dying", "live"]
        held.release.clear()
        now[0] = 61.0
        every = _in_thread(lambda: kept.read(held))
        try:
            assert held.reading.wait(10)
            while database.utcnow() <= lease.expires_at:
                time.sleep(0.05)
            other = _in_thread(lambda: kept.read(held))()
            assert sorted(other["value"].down) == ["dying"]
        finally:
            held.release.set()
        answer = every()["value"]
        assert sorted(answer.down) == ["dying"], dict(answer.generations)
        assert kept.full_reads == 2
        assert kept.read(held) == liveness.read(store)
