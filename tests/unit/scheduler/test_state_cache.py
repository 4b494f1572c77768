"""The scheduler's decoded host states (:class:`fitting.StateCache`) on a
real SQLite store: a state is served again only while its host's generation
stands, and never across a recreated store whose generations restarted."""

from __future__ import annotations

from compute_plugins import hoststate
from compute_plugins.runtime import PluginSet
from compute_plugins.scheduler import fitting
from tests.unit.hoststate.cases import states


def test_a_recreated_store_never_serves_the_old_state(tmp_path):
    plugins = PluginSet()
    cache = fitting.StateCache()
    with hoststate.HostStateStore("sqlite:///%s" % (tmp_path / "old.sqlite")) as old:
        old.publish("h1", states(numa=1), 0)
        old.publish("h1", states(numa=2), 1)
        before = cache.get(plugins, old, ["h1"], old.generations())["h1"]
        assert before.snapshot.generation == 2
    # the store recreated: h1 republishes, its generation restarts at 1
    with hoststate.HostStateStore("sqlite:///%s" % (tmp_path / "new.sqlite")) as new:
        new.publish("h1", states(numa=3), 0)
        cache.prune(new.generations())  # a decision saw generation 1
        assert len(cache) == 0
        new.publish("h1", states(numa=4), 1)  # back at generation 2
        after = cache.get(plugins, new, ["h1"], new.generations())["h1"]
        assert after.snapshot.states == states(numa=4)


def test_hosts_gone_or_down_are_forgotten(tmp_path):
    plugins = PluginSet()
    cache = fitting.StateCache()
    with hoststate.HostStateStore("sqlite:///%s" % (tmp_path / "s.sqlite")) as store:
        for host in ("a", "b"):
            store.publish(host, states(numa=1), 0)
        cache.get(plugins, store, ["a", "b"], store.generations())
        assert len(cache) == 2
        cache.prune({"a": 1})  # b is down or gone: not among the live hosts
        assert len(cache) == 1
        cache.prune({"a": 3})  # a published since: kept until read again
        assert len(cache) == 1
