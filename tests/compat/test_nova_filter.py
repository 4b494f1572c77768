"""PluginFitFilter and nova_spec.from_nova inside nova's own scheduler code.

The filter is loaded by class path through nova's ``HostFilterHandler`` (as
``[filter_scheduler] available_filters`` does), constructed without
arguments (its configuration comes from nova's ``[compute_plugins]
config_file``), and filters nova ``HostState`` objects whose states were
published to a real host-state store (SQLite). The decision it keeps
travels in nova's ``RequestSpec`` through ``obj_to_primitive`` /
``obj_from_primitive`` and the compute side reads it back and verifies it
with the same code, without the flavor.

Skipped without nova unless ``COMPUTE_PLUGINS_COMPAT`` is set (see
test_nova_compat).
"""

from __future__ import annotations

import json
import os
import warnings

import pytest

if os.environ.get("COMPUTE_PLUGINS_COMPAT"):
    import nova.conf  # noqa: F401
else:
    pytest.importorskip("nova.scheduler.filters")

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    import nova.conf as nova_conf_mod
    from nova import objects
    from nova.scheduler import filters as nova_filters
    from nova.scheduler import host_manager

from compute_plugins.hoststate.store import HostStateStore  # noqa: E402
from compute_plugins.nova import filters as plugin_filters  # noqa: E402
from compute_plugins.nova import spec as nova_spec  # noqa: E402
from compute_plugins.plugin import names  # noqa: E402
from compute_plugins.request.spec import FORMAT_VERSION, RequestSpec  # noqa: E402
from resources.numa.request import NUMAAssignment  # noqa: E402
from tests.unit.resources import helpers  # noqa: E402

objects.register_all()

FILTER = "compute_plugins.nova.filters.PluginFitFilter"
NAMES = ("numa", "sriov")


def host_info(name, cells, devices=()):
    return helpers.HostInfo(hostname=name, source="/snapshots/" + name,
                            cells=tuple(cells), pci_devices=tuple(devices))


def two_cells(size):
    return [helpers.cell(0, range(0, size), memory_gb=4),
            helpers.cell(1, range(size, 2 * size), memory_gb=4)]


PF = helpers.pf("0000:5e:00.0", vfs=4, numa_node=1, netdev="ens1f0")
#: host -> (cells, [compute] cpu_dedicated_set, cpu_shared_set, devices):
#: 2, 8 and 4 dedicated CPUs per cell, one shared CPU per cell.
HOSTS = {
    "small": (two_cells(3), "0-1,3-4", "2,5", []),
    "big": (two_cells(9), "0-7,9-16", "8,17", []),
    "sriov": (two_cells(5), "0-3,5-8", "4,9", [PF]),
}


def host_conf(name):
    """The configuration of host ``name``'s agent (and its fixture)."""
    conf, fixture = helpers.make_conf()
    _cells, dedicated, shared, _devices = HOSTS[name]
    conf.set_override("reserved_host_memory_mb", 0, "compute")
    conf.set_override("cpu_dedicated_set", dedicated, "compute")
    conf.set_override("cpu_shared_set", shared, "compute")
    return conf, fixture


def host_states(name, usage=()):
    """Host ``name``'s plugin states (under ``usage``: numa assignments)."""
    conf, fixture = host_conf(name)
    try:
        manager = helpers.manager(conf, NAMES)
        cells, _, _, devices = HOSTS[name]
        manager.discover(host_info(name, cells, devices))
        states, broken = manager.host_states(name, {"numa": tuple(usage)})
        assert not broken, broken
        return states, manager
    finally:
        fixture.cleanUp()


@pytest.fixture
def conf():
    conf, fixture = helpers.make_conf()
    yield conf
    fixture.cleanUp()


@pytest.fixture
def store(tmp_path):
    url = "sqlite:///%s" % (tmp_path / "hs.sqlite")
    with HostStateStore(url) as store:
        for name in HOSTS:
            states, manager = host_states(name)
            store.publish(name, {n: manager.plugins.encode_state(n, s)
                                 for n, s in states.items()}, 0, nodename=name)
        yield store


def nova_spec_obj(vcpus=2, memory_mb=1024, extra_specs=None, image=None,
                  hints=None, pci_requests=()):
    spec = objects.RequestSpec(
        flavor=objects.Flavor(name="m1", vcpus=vcpus, memory_mb=memory_mb,
                              root_gb=0, ephemeral_gb=0, swap=0,
                              extra_specs=extra_specs or {}),
        image=objects.ImageMeta.from_dict({"name": "img",
                                           "properties": image or {}}),
        scheduler_hints=hints or {},
        pci_requests=objects.InstancePCIRequests(requests=list(pci_requests)),
        requested_resources=[], num_instances=1,
        instance_uuid="22222222-2222-2222-2222-222222222222")
    return spec


def nova_candidates(name, spec_obj=None):
    """nova's candidates for a host, as Placement answers nova's query on
    the plugins' tree: the guest's CPUs (PCPU when pinned) and memory are
    one unsuffixed group, each resource class from one cell provider;
    the cross ones (CPUs on one cell, memory on the other) first."""
    flavor = spec_obj.flavor if spec_obj is not None else None
    vcpus = flavor.vcpus if flavor is not None else 1
    memory = flavor.memory_mb if flavor is not None else 512
    extra = (flavor.extra_specs if flavor is not None
             and flavor.obj_attr_is_set("extra_specs") else {})
    cpu_rc = "PCPU" if extra.get("hw:cpu_policy") == "dedicated" else "VCPU"
    cells = [c.provider_uuid for c in host_states(name)[0]["numa"].cells]
    out = []
    for cpu_rp in cells:
        for mem_rp in sorted(cells, key=lambda rp: rp == cpu_rp):
            allocations = {cpu_rp: {"resources": {cpu_rc: vcpus}}}
            allocations.setdefault(mem_rp, {"resources": {}})[
                "resources"]["MEMORY_MB"] = memory
            out.append({"allocations": allocations,
                        "mappings": {"": sorted({cpu_rp, mem_rp})}})
    return out


def nova_hosts(spec_obj=None):
    hosts = []
    for name in HOSTS:
        state = host_manager.HostState(name, name, None)
        state.uuid = names.provider_uuid(name)
        state.allocation_candidates = nova_candidates(name, spec_obj)
        hosts.append(state)
    return hosts


@pytest.fixture
def nova_conf(tmp_path, store):
    path = tmp_path / "compute-plugins.conf"
    path.write_text("[compute_plugins]\nenabled_plugins = numa,sriov\n"
                    "[host_state]\nconnection = %s\n" % store.url)
    conf = nova_conf_mod.CONF
    from compute_plugins.nova import conf as adapter_conf
    adapter_conf.register_nova_opts(conf)
    conf.set_override("config_file", [str(path)], "compute_plugins")
    yield conf
    conf.clear_override("config_file", "compute_plugins")


def loaded_filter():
    handler = nova_filters.HostFilterHandler()
    classes = handler.get_matching_classes([FILTER])
    assert classes == [plugin_filters.PluginFitFilter]
    return handler, classes[0]()


def run(handler, filt, hosts, spec_obj):
    return [h.host for h in handler.get_filtered_objects([filt], hosts, spec_obj)]


def test_filter_loads_from_nova_config_and_filters_host_states(nova_conf):
    handler, filt = loaded_filter()
    assert sorted(filt.plugins) == ["numa", "sriov"]
    pinned = nova_spec_obj(vcpus=6, extra_specs={"hw:cpu_policy": "dedicated"})
    assert run(handler, filt, nova_hosts(pinned), pinned) == ["big"]
    floating = nova_spec_obj(vcpus=2)
    assert run(handler, filt, nova_hosts(floating), floating) == ["small", "big", "sriov"]
    two = nova_spec_obj(vcpus=6, extra_specs={"hw:cpu_policy": "dedicated",
                                              "hw:numa_nodes": "2"})
    assert run(handler, filt, nova_hosts(two), two) == ["big", "sriov"]


def test_rejections_and_decisions_are_kept_on_the_host(nova_conf):
    handler, filt = loaded_filter()
    spec_obj = nova_spec_obj(vcpus=6, extra_specs={"hw:cpu_policy": "dedicated"})
    hosts = nova_hosts(spec_obj)
    run(handler, filt, hosts, spec_obj)
    small, big = hosts[0], hosts[1]
    assert small.allocation_candidates == []
    assert small.plugin_decisions == {}
    assert [r.plugin for r in small.plugin_rejections] == ["numa"]
    assert "6" in small.plugin_rejections[0].reason
    (decision,) = big.plugin_decisions.values()
    numa = decision.assignments["numa"]
    assert isinstance(numa, NUMAAssignment)
    assert len(numa.cells[0].pinning) == 6
    assert decision.host == "big"


def test_an_alternate_gets_its_candidates_decision_of_this_request_only(nova_conf):
    """nova with contrib/nova's 0003 patch tells a host state it went out
    as an alternate of an instance with a candidate: the decision kept for
    that candidate in this request is recorded for that instance (not the
    host state's last filtered one), nothing counted; a candidate the
    filter did not keep, or the host as filtered for another request,
    records nothing."""
    from compute_plugins.nova import decisions as nova_decisions
    handler, filt = loaded_filter()
    spec_obj = nova_spec_obj(vcpus=6, extra_specs={"hw:cpu_policy": "dedicated"})
    hosts = nova_hosts(spec_obj)
    run(handler, filt, hosts, spec_obj)
    big = hosts[1]
    instance = "33333333-3333-3333-3333-333333333333"
    candidate = big.allocation_candidates[0]
    decision = filt.alternate(big, spec_obj, instance, candidate)
    assert decision is not None
    assert decision == big.plugin_decisions[plugin_filters.candidate_key(candidate)]
    recorded = nova_decisions.decision_for(filt.decisions, instance, "big", filt.plugins)
    assert recorded is not None and recorded.decision == decision
    assert getattr(big, "plugin_given", None) is None
    other = "44444444-4444-4444-4444-444444444444"
    assert filt.alternate(big, spec_obj, other, {"allocations": {}}) is None
    # the same candidate for another instance of the request: none (the
    # two would take the same CPUs); the first instance's stays
    assert filt.alternate(big, spec_obj, other, candidate) is None
    assert filt.alternate(big, spec_obj, instance, candidate) == decision
    later = nova_spec_obj(vcpus=6, extra_specs={"hw:cpu_policy": "dedicated"})
    assert filt.alternate(big, later, other, candidate) is None
    assert nova_decisions.decision_for(filt.decisions, other, "big", filt.plugins) is None


def test_a_host_without_published_state_fails(nova_conf):
    handler, filt = loaded_filter()
    ghost = host_manager.HostState("ghost", "ghost", None)
    ghost.allocation_candidates = [{"allocations": {}, "mappings": {}}]
    spec_obj = nova_spec_obj(vcpus=1, extra_specs={"hw:cpu_policy": "dedicated"})
    assert run(handler, filt, [ghost], spec_obj) == []
    assert "published no state" in ghost.plugin_rejections[0].reason


def publish(store, name, generation, states_of=None):
    """Publish host ``name``'s plugin states (those of host ``states_of``:
    default its own) over ``generation``."""
    states, manager = host_states(states_of or name)
    store.publish(name, {n: manager.plugins.encode_state(n, s)
                         for n, s in states.items()}, generation, nodename=name)


def test_the_store_states_forget_the_hosts_gone_and_gone_back(conf, store):
    """The filter's kept states are pruned as the scheduler's are, by the
    hosts that changed: a host gone is forgotten (the states kept do not
    grow with every host that ever was), and a host removed and published
    again is not served its old state once back at the number it had."""
    manager = helpers.manager(conf, NAMES)
    source = plugin_filters.StoreStates(store, manager.plugins)
    publish(store, "big", 1)  # big at generation 2
    old = source.get(["big", "small"])["big"]
    assert len(source._cache) == 2
    store.rename_host("big", "retired")  # big's rows dropped: gone
    assert set(source.get(["small"])) == {"small"}
    assert len(source._cache) == 1
    # a new host named big, with sriov's resources, back at generation 2
    publish(store, "big", 0, states_of="sriov")
    assert set(source.get(["small"])) == {"small"}
    publish(store, "big", 1, states_of="sriov")
    new = source.get(["big", "sriov"])
    assert new["big"] == new["sriov"] != old


def test_candidates_with_our_mappings_restrict_the_cells(conf, store):
    manager = helpers.manager(conf, NAMES)
    filt = plugin_filters.PluginFitFilter(
        manager.plugins, plugin_filters.StoreStates(store, manager.plugins))
    cells = [c.provider_uuid for c in host_states("big")[0]["numa"].cells]
    spec_obj = nova_spec_obj(vcpus=2, extra_specs={"hw:cpu_policy": "dedicated"})
    big = nova_hosts()[1]
    big.allocation_candidates = [
        {"allocations": {cells[0]: {"resources": {"PCPU": 2}}},
         "mappings": {"_NUMA0": [cells[0]]}},
        {"allocations": {cells[1]: {"resources": {"PCPU": 2}}},
         "mappings": {"_NUMA0": [cells[1]]}},
    ]
    assert filt.filter_all([big], spec_obj) == [big]
    assert len(big.allocation_candidates) == 2
    for candidate in big.allocation_candidates:
        decision = big.plugin_decisions[plugin_filters.candidate_key(candidate)]
        (placed,) = decision.assignments["numa"].cells
        assert [placed.provider_uuid] == candidate["mappings"]["_NUMA0"]


def two_nodes_on_big(conf, store):
    """The filter, host "big"'s cell providers, a guest of 2 nodes of 2
    pinned CPUs and its allocation of 2 PCPUs on each cell."""
    manager = helpers.manager(conf, NAMES)
    filt = plugin_filters.PluginFitFilter(
        manager.plugins, plugin_filters.StoreStates(store, manager.plugins))
    cells = [c.provider_uuid for c in host_states("big")[0]["numa"].cells]
    spec_obj = nova_spec_obj(vcpus=4, extra_specs={"hw:cpu_policy": "dedicated",
                                                   "hw:numa_nodes": "2"})
    allocations = {rp: {"resources": {"PCPU": 2, "MEMORY_MB": 512}} for rp in cells}
    return filt, cells, spec_obj, allocations


def test_candidates_of_one_allocation_keep_the_first_ones_decision(conf, store):
    """Two guest nodes of the same size: Placement answers both orders of
    the groups (``_NUMA0`` on cell 0 and ``_NUMA1`` on cell 1, and the
    reverse), one allocation. nova claims the first: its decision puts
    each node on the cell Placement gave the node's group in it. With
    ``group_policy=none`` (contrib/nova's 0002 patch beside a port's group)
    Placement may also put both nodes on one cell: refused."""
    filt, cells, spec_obj, allocations = two_nodes_on_big(conf, store)
    big = nova_hosts()[1]
    one_cell = {"allocations": {cells[0]: {"resources": {"PCPU": 4, "MEMORY_MB": 1024}}},
                "mappings": {"_NUMA0": [cells[0]], "_NUMA1": [cells[0]]}}
    big.allocation_candidates = [one_cell] + [
        {"allocations": allocations, "mappings": {"_NUMA0": [b], "_NUMA1": [a]}}
        for a, b in (cells, reversed(cells))]
    assert filt.filter_all([big], spec_obj) == [big]
    # group_policy=none: two guest nodes on one cell are refused
    assert len(big.allocation_candidates) == 2 and one_cell not in big.allocation_candidates
    first = big.allocation_candidates[0]
    decision = big.plugin_decisions[plugin_filters.candidate_key(first)]
    assert decision.mappings == {g: tuple(rps) for g, rps in first["mappings"].items()}
    for placed in decision.assignments["numa"].cells:
        assert [placed.provider_uuid] == first["mappings"]["_NUMA%d" % placed.guest_cell]


def test_nova_candidates_naming_our_groups_in_part_agree_with_the_decision(conf, store):
    """nova's candidates name some of our groups only (contrib/nova's 0002
    patch asks ``_NUMA<N>``, not a device group of ours): the plugins
    decide offline, and of the candidates of that allocation the one whose
    mappings give each group the decision's provider comes first (nova
    claims it), with its decision, in either order Placement answers."""
    filt, cells, spec_obj, allocations = two_nodes_on_big(conf, store)
    candidates = [{"allocations": allocations, "mappings": {"_NUMA0": [rp]}}
                  for rp in cells]
    for answer in (candidates, candidates[::-1]):
        big = nova_hosts()[1]
        big.allocation_candidates = list(answer)
        assert filt.filter_all([big], spec_obj) == [big]
        first = big.allocation_candidates[0]
        decision = big.plugin_decisions[plugin_filters.candidate_key(first)]
        assert decision.mappings == {"_NUMA0": tuple(first["mappings"]["_NUMA0"])}
        (node0,) = [c for c in decision.assignments["numa"].cells if c.guest_cell == 0]
        assert [node0.provider_uuid] == first["mappings"]["_NUMA0"]


def test_a_candidate_on_a_full_cell_is_dropped(conf, store):
    manager = helpers.manager(conf, NAMES)
    filt = plugin_filters.PluginFitFilter(
        manager.plugins, plugin_filters.StoreStates(store, manager.plugins))
    cells = [c.provider_uuid for c in host_states("small")[0]["numa"].cells]
    spec_obj = nova_spec_obj(vcpus=2, memory_mb=5000,
                             extra_specs={"hw:cpu_policy": "dedicated"})
    small = nova_hosts()[0]
    small.allocation_candidates = [
        {"allocations": {}, "mappings": {"_NUMA0": [cells[0]]}}]
    assert filt.filter_all([small], spec_obj) == []
    assert small.allocation_candidates == []
    assert "MiB" in small.plugin_rejections[0].reason


def test_rebuild_is_not_filtered(nova_conf):
    handler, filt = loaded_filter()
    spec_obj = nova_spec_obj(vcpus=64, extra_specs={"hw:cpu_policy": "dedicated"},
                             hints={"_nova_check_type": ["rebuild"]})
    assert run(handler, filt, nova_hosts(spec_obj), spec_obj) == ["small", "big", "sriov"]


def test_an_invalid_request_passes_no_host_and_logs_the_key(nova_conf, caplog):
    # NOTE: a nova filter never raises (an exception in select_destinations
    # is a traceback in the scheduler's log and an RPC error): nova's answer
    # is NoValidHost, the reason one ERROR line naming the key.
    handler, filt = loaded_filter()
    spec_obj = nova_spec_obj(extra_specs={"hw:cpu_policy": "pinned"})
    with caplog.at_level("ERROR", logger="compute_plugins.nova.filters"):
        assert run(handler, filt, nova_hosts(spec_obj), spec_obj) == []
        host = nova_hosts()[0]
        assert filt.host_passes(host, spec_obj) is False
    assert "hw:cpu_policy" in caplog.text and "pinned" in caplog.text
    assert "hw:cpu_policy" in host.plugin_rejections[0].reason


def test_the_scheduler_parses_the_flavor_never_a_recorded_spec(nova_conf, conf):
    # A resize keeps nova's RequestSpec (its scheduler_hints, our recorded
    # spec with the first host's decision included) and changes its flavor:
    # the filter must fit the new flavor. A user can also send any hint
    # through the API (nova's schema accepts unknown hints): a forged or
    # broken record must neither choose the hosts nor break the filter.
    handler, filt = loaded_filter()
    manager = helpers.manager(conf, NAMES)
    spec_obj = nova_spec_obj(vcpus=1, extra_specs={"hw:cpu_policy": "dedicated"})
    nova_spec.record(spec_obj, nova_spec.from_nova(spec_obj, manager.plugins))
    spec_obj.flavor = objects.Flavor(
        name="m2", vcpus=6, memory_mb=1024, root_gb=0, ephemeral_gb=0, swap=0,
        extra_specs={"hw:cpu_policy": "dedicated"})
    assert run(handler, filt, nova_hosts(spec_obj), spec_obj) == ["big"]
    spec_obj.scheduler_hints = {nova_spec.HINT: ["{not json"]}
    assert run(handler, filt, nova_hosts(spec_obj), spec_obj) == ["big"]


def test_boot_from_volume_asks_no_root_disk(conf):
    # nova's resources_from_request_spec: no DISK_GB for the root disk of a
    # boot-from-volume guest (spec_obj.is_bfv), only ephemeral and swap.
    spec_obj = nova_spec_obj(vcpus=1)
    spec_obj.flavor.root_gb = 40
    spec_obj.flavor.ephemeral_gb = 2
    assert nova_spec.request_input(spec_obj).flavor.root_gb == 40
    spec_obj.is_bfv = True
    read = nova_spec.request_input(spec_obj).flavor
    assert (read.root_gb, read.ephemeral_gb) == (0, 2)


def test_from_nova_reads_flavor_image_ports_and_hints(conf):
    manager = helpers.manager(conf, ("numa", "sriov"))
    port = objects.InstancePCIRequest(
        count=1, spec=[{"physical_network": "physnet1", "remote_managed": "False"}],
        request_id="11111111-1111-1111-1111-111111111111",
        requester_id="port-a")
    spec_obj = nova_spec_obj(
        vcpus=4, memory_mb=2048,
        extra_specs={"hw:cpu_policy": "dedicated"},
        image={"hw_numa_nodes": "2", "hw_numa_cpus.0": "0,1",
               "hw_numa_cpus.1": "2-3", "hw_numa_mem.0": "1024",
               "hw_numa_mem.1": "1024"},
        hints={"group": ["g1"]}, pci_requests=[port])
    spec_obj.requested_resources = [objects.RequestGroup(
        requester_id="port-a", resources={"NET_BW_EGR_KILOBIT_PER_SEC": 1000})]
    ours = nova_spec.from_nova(spec_obj, manager.plugins)
    direct = RequestSpec.build(manager.plugins, helpers.RequestInput.from_dicts(
        {"name": "m1", "vcpus": 4, "memory_mb": 2048,
         "extra_specs": {"hw:cpu_policy": "dedicated"}},
        {"name": "img", "properties": {
            "hw_numa_nodes": 2, "hw_numa_cpus.0": "0,1", "hw_numa_cpus.1": "2,3",
            "hw_numa_mem.0": "1024", "hw_numa_mem.1": "1024"}},
        [{"id": "port-a", "vnic_type": "direct", "physnet": "physnet1",
          "min_kbps_egress": 1000}],
        {"group": ["g1"]}))
    assert ours.requests == direct.requests
    assert ours.groups == direct.groups
    assert ours.ports == direct.ports
    assert dict(ours.hints) == {"group": ("g1",)}
    assert [c.pcpus for c in ours.requests["numa"].cells] == [
        frozenset({0, 1}), frozenset({2, 3})]


def test_from_nova_reads_the_networks_numa_affinity_needs(conf):
    """nova's ``network_metadata`` (the physnets and tunnel of every port,
    normal ones too) reaches the numa plugin: a physnet no SR-IOV port
    already names becomes a normal port on it, a tunnel one tunneled port."""
    manager = helpers.manager(conf, ("numa", "sriov"))
    port = objects.InstancePCIRequest(
        count=1, spec=[{"physical_network": "physnet1", "remote_managed": "False"}],
        request_id="11111111-1111-1111-1111-111111111111",
        requester_id="port-a")
    spec_obj = nova_spec_obj(extra_specs={"hw:cpu_policy": "dedicated"},
                             pci_requests=[port])
    spec_obj.network_metadata = objects.NetworkMetadata(
        physnets={"physnet1", "physnet2"}, tunneled=True)
    ours = nova_spec.from_nova(spec_obj, manager.plugins)
    assert [(p.id, p.vnic_type, p.physnet, p.tunneled) for p in ours.ports] == [
        ("network:physnet2", "normal", "physnet2", False),
        ("network:tunneled", "normal", None, True),
        ("port-a", "direct", "physnet1", False)]
    numa = ours.requests["numa"]
    assert (numa.physnets, numa.tunneled) == ({"physnet1", "physnet2"}, True)


def test_decision_round_trips_through_nova_rpc_and_the_compute_verifies_it(
        nova_conf, conf, store):
    handler, filt = loaded_filter()
    spec_obj = nova_spec_obj(vcpus=6, extra_specs={"hw:cpu_policy": "dedicated",
                                                   "hw:numa_nodes": "2"})
    hosts = nova_hosts(spec_obj)
    passed = handler.get_filtered_objects([filt], hosts, spec_obj)
    chosen = [h for h in passed if h.host == "sriov"][0]
    decision = plugin_filters.record_selection(spec_obj, chosen)
    wire = spec_obj.obj_to_primitive()
    received = objects.RequestSpec.obj_from_primitive(wire)
    assert received.scheduler_hints[nova_spec.HINT] == \
        spec_obj.scheduler_hints[nova_spec.HINT]
    # another configuration than the scheduler's: the compute never parses
    compute_conf, fixture = helpers.make_conf()
    try:
        compute_conf.set_override("cpu_allocation_ratio", 1.0, "compute")
        compute = helpers.manager(compute_conf, NAMES)
        got = nova_spec.from_nova(received, compute.plugins)
        assert got.decision == decision
        assert got.requests["numa"].cpu_policy == "dedicated"
        assert got.decision.host == "sriov"
        live, _ = host_states("sriov")
        assert compute.plugins.verify(live, got) == ()
        # the same decision once another guest took those CPUs
        taken, _ = host_states("sriov", [decision.assignments["numa"]])
        problems = compute.plugins.verify(taken, got)
        assert [p.plugin for p in problems] == ["numa"]
    finally:
        fixture.cleanUp()


def test_a_recorded_spec_from_a_newer_writer_is_refused(conf):
    manager = helpers.manager(conf, NAMES)
    spec_obj = nova_spec_obj(vcpus=1)
    nova_spec.record(spec_obj, nova_spec.from_nova(spec_obj, manager.plugins))
    major = FORMAT_VERSION.split(".")[0]
    doc = json.loads(spec_obj.scheduler_hints[nova_spec.HINT][0])
    doc["version"] = "%s.9" % major
    spec_obj.scheduler_hints = {nova_spec.HINT: [json.dumps(doc)]}
    with pytest.raises(Exception, match="newer"):
        nova_spec.from_nova(spec_obj, manager.plugins)


def test_the_record_survives_novas_own_handling_of_the_spec(conf):
    # what nova's conductor does to a spec between the scheduler and the
    # compute: forced destinations reset, project and user ensured, the
    # legacy dicts of older RPC versions (hints: a one-item list becomes a
    # string and back) and the JSON it stores in the API database.
    from nova import context as nova_context
    manager = helpers.manager(conf, NAMES)
    spec_obj = nova_spec_obj(vcpus=2, extra_specs={"hw:cpu_policy": "dedicated"},
                             hints={"group": ["g1"]})
    spec_obj.force_hosts = ["big"]
    ours = nova_spec.from_nova(spec_obj, manager.plugins)
    nova_spec.record(spec_obj, ours)
    spec_obj.reset_forced_destinations()
    spec_obj.ensure_project_and_user_id(objects.Instance(project_id="p", user_id="u"))
    legacy = objects.RequestSpec.from_primitives(
        nova_context.get_admin_context(), spec_obj.to_legacy_request_spec_dict(),
        spec_obj.to_legacy_filter_properties_dict())
    stored = objects.RequestSpec.obj_from_primitive(
        spec_obj.obj_clone().obj_to_primitive())
    for received in (legacy, stored):
        assert received.scheduler_hints[nova_spec.HINT] == \
            spec_obj.scheduler_hints[nova_spec.HINT]
        assert nova_spec.recorded(received, manager.plugins) == ours
        assert received.scheduler_hints["group"] == ["g1"]


def test_a_bare_nova_spec_is_read(nova_conf):
    # a RequestSpec as nova's older paths build it: a flavor without extra
    # specs loaded, no image, no PCI requests, no hints, no requested
    # resources (fields unset, not empty)
    handler, filt = loaded_filter()
    spec_obj = objects.RequestSpec(flavor=objects.Flavor(
        vcpus=2, memory_mb=512, root_gb=1, ephemeral_gb=0, swap=0))
    assert not spec_obj.flavor.obj_attr_is_set("extra_specs")
    assert run(handler, filt, nova_hosts(spec_obj), spec_obj) == ["small", "big", "sriov"]
    ours = filt.spec_for(spec_obj)
    assert ours.flavor.vcpus == 2 and dict(ours.flavor.extra_specs) == {}


def test_one_filter_serves_concurrent_requests(nova_conf):
    # nova's scheduler keeps one filter object and serves requests on
    # several threads: no request may see another's spec or decisions.
    from concurrent.futures import ThreadPoolExecutor
    handler, filt = loaded_filter()
    pinned = nova_spec_obj(vcpus=6, extra_specs={"hw:cpu_policy": "dedicated"})
    floating = nova_spec_obj(vcpus=2)

    def one(index):
        spec_obj = pinned if index % 2 else floating
        hosts = nova_hosts(spec_obj)
        passed = run(handler, filt, hosts, spec_obj)
        cpus = {h.host: [len(d.assignments["numa"].cells[0].pinning)
                         for d in h.plugin_decisions.values()] for h in hosts}
        return index, passed, cpus

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(one, range(32)))
    for index, passed, cpus in results:
        if index % 2:
            assert passed == ["big"] and cpus["big"] == [6], (index, cpus)
        else:
            assert passed == ["small", "big", "sriov"], index
            assert all(v == [0] for v in cpus.values()), (index, cpus)


def test_the_compute_ignores_a_record_of_another_flavor(conf):
    # the record is only used for the request it was made for: a resize
    # keeps nova's hints (the old flavor's record and its host's decision)
    # and a user can send the hint through nova's API with any spec in it.
    manager = helpers.manager(conf, NAMES)
    spec_obj = nova_spec_obj(vcpus=1, extra_specs={"hw:cpu_policy": "dedicated"})
    nova_spec.record(spec_obj, nova_spec.from_nova(spec_obj, manager.plugins))
    assert nova_spec.recorded(spec_obj, manager.plugins) is not None
    spec_obj.flavor.vcpus = 4
    assert nova_spec.recorded(spec_obj, manager.plugins) is None
    assert nova_spec.from_nova(spec_obj, manager.plugins).flavor.vcpus == 4
    spec_obj.flavor.vcpus = 1
    spec_obj.image = objects.ImageMeta.from_dict(
        {"name": "img", "properties": {"hw_numa_nodes": "1"}})
    assert nova_spec.recorded(spec_obj, manager.plugins) is None


def test_nova_candidates_are_kept_where_they_carry_the_decision():
    wanted = {"PCPU": {"c0": 2}, "MEMORY_MB": {"c0": 512}}
    same = {"allocations": {"c0": {"resources": {"PCPU": 2, "MEMORY_MB": 512}},
                            "root": {"resources": {"DISK_GB": 1}}},
            "mappings": {"": ["c0", "root"]}}
    cross = {"allocations": {"c0": {"resources": {"PCPU": 2}},
                             "c1": {"resources": {"MEMORY_MB": 512}},
                             "root": {"resources": {"DISK_GB": 1}}},
             "mappings": {"": ["c0", "c1", "root"], "port-a": ["c1"]}}
    fallback = {"allocations": {"c1": {"resources": {"VCPU": 2, "MEMORY_MB": 512}}}}
    assert plugin_filters.matches(same, wanted)
    assert not plugin_filters.matches(cross, wanted)
    # nova's VCPU fallback query: only MEMORY_MB compares, on another cell
    assert not plugin_filters.matches(fallback, wanted)
    moved = plugin_filters.carrying(cross, wanted)
    assert moved is not None and plugin_filters.matches(moved, wanted)
    assert moved["allocations"] == same["allocations"]
    # the unsuffixed group follows the providers; a port's group stays
    assert moved["mappings"] == {"": ["c0", "root"], "port-a": ["c1"]}
    assert cross["allocations"]["c1"] == {"resources": {"MEMORY_MB": 512}}
    # other totals (a split guest's 4 CPUs against nova's 2) are not moved
    assert plugin_filters.carrying(cross, {"PCPU": {"c0": 2, "c1": 2}}) is None


def test_an_alias_nova_gets_after_the_filter_started_is_known(nova_conf):
    # nova's scheduler reads [pci] alias on every request: an alias added to
    # nova's configuration after the filter was built is known to it too.
    handler, filt = loaded_filter()
    spec_obj = nova_spec_obj(extra_specs={"pci_passthrough:alias": "qat:1"})
    assert run(handler, filt, nova_hosts(spec_obj), spec_obj) == []
    host = nova_hosts()[0]
    filt.host_passes(host, spec_obj)
    assert "PCI alias qat is not defined" in host.plugin_rejections[0].reason
    nova_conf.set_override("alias", ['{"name": "qat", "vendor_id": "8086", '
                                     '"product_id": "0443"}'], "pci")
    try:
        later = nova_spec_obj(extra_specs={"pci_passthrough:alias": "qat:1"})
        hosts = nova_hosts(later)
        assert run(handler, filt, hosts, later) == []
        # parsed now: each host says it has no such device
        reasons = [r.reason for r in hosts[2].plugin_rejections]
        assert any("alias qat needs 1 device(s)" in r for r in reasons), reasons
    finally:
        nova_conf.clear_override("alias", "pci")
    again = nova_spec_obj(extra_specs={"pci_passthrough:alias": "qat:1"})
    filt.host_passes(host, again)
    assert "PCI alias qat is not defined" in host.plugin_rejections[0].reason


def test_a_request_parsed_before_nova_dropped_its_alias_is_parsed_again(nova_conf):
    # the parse cached on a spec object does not outlive a change of nova's
    # [pci] alias, even when another request saw the change first
    handler, filt = loaded_filter()
    nova_conf.set_override("alias", ['{"name": "qat", "vendor_id": "8086", '
                                     '"product_id": "0443"}'], "pci")
    try:
        first = nova_spec_obj(extra_specs={"pci_passthrough:alias": "qat:1"})
        host = nova_hosts()[0]
        filt.host_passes(host, first)
        reasons = [r.reason for r in host.plugin_rejections]
        assert any("alias qat needs 1 device(s)" in r for r in reasons), reasons
    finally:
        nova_conf.clear_override("alias", "pci")
    other = nova_spec_obj(extra_specs={"pci_passthrough:alias": "qat:1"})
    filt.host_passes(nova_hosts()[0], other)
    host = nova_hosts()[0]
    filt.host_passes(host, first)
    assert "PCI alias qat is not defined" in host.plugin_rejections[0].reason
