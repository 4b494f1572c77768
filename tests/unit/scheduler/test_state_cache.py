"""The scheduler's decoded host states (:class:`fitting.StateCache`) on a
real SQLite store: a state is served again only while its host's generation
stands, and never across a recreated store whose generations restarted;
and the fits kept with them (one per generation and request)."""

from __future__ import annotations

import dataclasses
import datetime

from oslo_config import cfg

from compute_plugins import hoststate
from compute_plugins.hoststate.records import HostSnapshot
from compute_plugins.request.inputs import RequestInput
from compute_plugins.request.spec import RequestSpec
from compute_plugins.request.types import FrozenMap
from compute_plugins.runtime import PluginSet
from compute_plugins.scheduler import fitting, liveness, weighers
from tests.unit import fit_plugins
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


class CountingSlots(fit_plugins.Slots):
    """The test-only ``slots`` plugin, counting its fits."""

    fits = 0

    def fit(self, state, request, placement, earlier):
        type(self).fits += 1
        return super().fit(state, request, placement, earlier)


def slots_host(generation, free):
    snapshot = HostSnapshot(host="h1", generation=generation, nodename="h1",
                            providers=FrozenMap(), states=FrozenMap(),
                            updated_at=datetime.datetime(2026, 12, 4))
    return fitting.DecodedHost(snapshot, {"slots": fit_plugins.SlotsState(
        free=FrozenMap({0: frozenset(range(free))}))}, {})


def slots_spec(plugins, vcpus):
    return RequestSpec.build(plugins, RequestInput.from_dicts(
        {"vcpus": vcpus, "memory_mb": 512, "extra_specs": {"slots:pin": "true"}}))


def test_a_host_is_fitted_once_per_generation_and_request():
    CountingSlots.fits = 0
    plugins = PluginSet.of({"slots": CountingSlots(cfg.ConfigOpts())})
    host = slots_host(1, free=4)
    two, again, three = (slots_spec(plugins, 2), slots_spec(plugins, 2),
                         slots_spec(plugins, 3))
    first = fitting.fit_host(plugins, two, host)
    assert first.result.fits
    # NOTE: another spec object of the same request (another consumer of
    # the same flavor): the same fit, not fitted again.
    assert fitting.fit_host(plugins, again, host) is first
    assert CountingSlots.fits == 1
    assert fitting.fit_host(plugins, three, host).result.fits
    assert CountingSlots.fits == 2
    # the host published a new state (generation 2): fitted again, on it
    fuller = slots_host(2, free=2)
    assert not fitting.fit_host(plugins, three, fuller).result.fits
    assert fitting.fit_host(plugins, two, fuller).generation == 2
    assert CountingSlots.fits == 4


def test_the_fits_kept_per_host_are_bounded():
    plugins = PluginSet.of({"slots": CountingSlots(cfg.ConfigOpts())})
    host = slots_host(1, free=64)
    for vcpus in range(1, fitting.MAX_KEPT_FITS + 10):
        fitting.fit_host(plugins, slots_spec(plugins, vcpus), host)
    assert len(host.fits) == fitting.MAX_KEPT_FITS


def test_the_fits_kept_are_bounded_over_all_hosts():
    """32 fits per host at 10,000 hosts reached about 1 GiB in one
    scheduler: the fits kept are bounded all hosts together too, the
    oldest dropped first; a dropped fit is fitted again when asked."""
    CountingSlots.fits = 0
    plugins = PluginSet.of({"slots": CountingSlots(cfg.ConfigOpts())})
    kept = fitting.KeptFits(limit=5)
    hosts = {"h%d" % i: slots_host(1, free=4) for i in range(4)}
    two, three = slots_spec(plugins, 2), slots_spec(plugins, 3)
    fitting.fit_hosts(plugins, two, hosts, kept)
    fitting.fit_hosts(plugins, three, hosts, kept)
    assert CountingSlots.fits == 8
    assert sum(len(h.fits) for h in hosts.values()) == 5
    # the oldest (h0 to h2 for two vCPUs) went; the newest stay
    assert [len(hosts["h%d" % i].fits) for i in range(4)] == [1, 1, 1, 2]
    fitting.fit_hosts(plugins, three, hosts, kept)
    assert CountingSlots.fits == 8  # all kept
    assert fitting.fit_host(plugins, two, hosts["h0"], kept).result.fits
    assert CountingSlots.fits == 9  # dropped: fitted again
    assert sum(len(h.fits) for h in hosts.values()) == 5
    # a host's states replaced (a new generation) go with their fits: the
    # bound does not hold them
    import gc
    import weakref

    old = weakref.ref(hosts.pop("h3"))
    gc.collect()
    assert old() is None


class WeighingSlots(fit_plugins.Slots):
    """The ``slots`` plugin with an opinion on how full a host is (the
    share of 8 CPUs not free), counting its ``utilization`` calls."""

    weighed = 0

    def utilization(self, state):
        type(self).weighed += 1
        return 1.0 - sum(len(cpus) for cpus in state.free.values()) / 8


def test_a_kept_fit_is_weighed_once_with_the_same_weights_and_order():
    """A weight is a pure function of the fitted states: kept with the fit,
    a plan on kept fits weighs by lookups, to the same weights and order
    as weighing afresh; other multipliers, or a new generation (a new
    fit), weigh again."""
    WeighingSlots.weighed = 0
    plugins = PluginSet.of({"slots": WeighingSlots(cfg.ConfigOpts())})
    spec = slots_spec(plugins, 1)
    hosts = {"h%d" % free: dataclasses.replace(
        slots_host(1, free), snapshot=dataclasses.replace(
            slots_host(1, free).snapshot, host="h%d" % free, nodename="h%d" % free))
        for free in (2, 7, 4, 4)}
    fits = list(fitting.fit_hosts(plugins, spec, hosts).values())
    for factor in (1.0, -1.0):
        factors = {"slots": factor}
        fresh = sorted(((factor * plugins.utilization("slots", f.states["slots"]), f)
                        for f in fits), key=lambda pair: (-pair[0], pair[1].host))
        WeighingSlots.weighed = 0
        first = weighers.weigh(plugins, fits, factors)
        again = weighers.weigh(plugins, list(fitting.fit_hosts(
            plugins, spec, hosts).values()), factors)
        assert WeighingSlots.weighed == len(fits)  # the second weighing: lookups
        assert first == again == fresh
        assert [f.host for _, f in first] == (
            ["h2", "h4", "h7"] if factor > 0 else ["h7", "h4", "h2"])
    fuller = {"h7": dataclasses.replace(hosts["h7"], snapshot=dataclasses.replace(
        hosts["h7"].snapshot, generation=2), states={"slots": fit_plugins.SlotsState(
            free=FrozenMap({0: frozenset(range(1))}))}, fits={})}
    WeighingSlots.weighed = 0
    (weight, _fit), = weighers.weigh(plugins, list(fitting.fit_hosts(
        plugins, spec, fuller).values()), {"slots": 1.0})
    assert (weight, WeighingSlots.weighed) == (7 / 8, 1)


def test_a_prune_by_changes_looks_at_the_changed_hosts_only(tmp_path):
    """A decision prunes the kept states by the hosts that changed since
    the last one (:meth:`~liveness.KeptLiveness.take_changes`), not by
    every host kept: a host not among them is not looked at, even when
    the generations given would drop it."""
    plugins = PluginSet()
    cache = fitting.StateCache()
    with hoststate.HostStateStore("sqlite:///%s" % (tmp_path / "s.sqlite")) as store:
        for host in ("a", "b", "c"):
            store.publish(host, states(numa=1), 0)
            store.publish(host, states(numa=2), 1)
        cache.get(plugins, store, ["a", "b", "c"], store.generations())
        assert len(cache) == 3
        # a's generation went back, b is gone: only a was said to change
        cache.prune({"a": 1, "c": 2}, changed=["a"])
        assert len(cache) == 2
        assert cache.get(plugins, store, ["b"], {"b": 2})["b"].snapshot.generation == 2
        cache.prune({"c": 2}, changed=frozenset(["b", "x"]))  # b gone, x unknown
        assert len(cache) == 1
        cache.prune({"c": 2}, changed=None)  # None: every host, as before
        assert len(cache) == 1
        cache.prune({}, changed=None)
        assert len(cache) == 0


def test_the_changes_a_plan_prunes_by_are_those_of_its_own_read(tmp_path):
    """A plan reads the hosts and takes the changes at once
    (:meth:`~liveness.KeptLiveness.read_changes`): a read of another thread
    of the scheduler (its prefetch) landing just after the plan's read
    keeps the changes it saw for the next plan. Taken after the read, they
    went to a plan whose generations predate them: a host removed and
    published again (its generation lower) was not pruned, and once back
    at its old number was served its old state."""
    plugins = PluginSet()
    cache = fitting.StateCache()
    kept = liveness.KeptLiveness()

    def plan(meanwhile=lambda: None):
        alive, changed = kept.read_changes(store)
        meanwhile()  # what happens before it prunes
        cache.prune(alive.generations, changed)
        return alive

    def renamed_and_read():
        store.rename_host("a", "gone")  # a removed, a new host named a
        store.publish("a", states(numa=100), 0)
        kept.read(store)  # another thread's read: every host (one went)

    with hoststate.HostStateStore("sqlite:///%s" % (tmp_path / "s.sqlite")) as store:
        for generation in range(3):
            store.publish("a", states(numa=generation + 1), generation)
        store.publish("b", states(numa=1), 0)
        cache.get(plugins, store, ["a"], plan().generations)
        plan(renamed_and_read)
        assert plan().generations["a"] == 1
        store.publish("a", states(numa=101), 1)
        store.publish("a", states(numa=102), 2)  # back at the kept number
        alive = plan()
        served = cache.get(plugins, store, ["a"], alive.generations)["a"].snapshot
        assert served.generation == 3 and served.states == states(numa=102)
