"""The NUMA plugin end to end: flavor -> RequestSpec -> PluginSet.fit ->
decision JSON -> PluginSet.verify on the host's state, and guest XML."""

from __future__ import annotations

import json

from compute_plugins.host.model import CPU, HostInfo, NUMACell, PagePool
from compute_plugins.request.groups import Decision
from compute_plugins.request.spec import RequestSpec, build_request_spec
from resources.numa import networks
from resources.numa.request import NUMAAssignment
from tests.unit.resources.helpers import manager, state_of

NODE = "node1"
GIB_KB = 1024 * 1024


def smt_host() -> HostInfo:
    """Two cells of 4 cores x 2 threads; 1 GiB of 2 MiB pages each."""
    cells = []
    for c in range(2):
        cpus = []
        for core in range(4):
            a = c * 8 + 2 * core
            cpus += [CPU(id=a, siblings=frozenset({a, a + 1})),
                     CPU(id=a + 1, siblings=frozenset({a, a + 1}))]
        cells.append(NUMACell(id=c, cpus=tuple(cpus), memory_kb=8 * GIB_KB,
                              pages=(PagePool(4, 7 * GIB_KB // 4),
                                     PagePool(2048, 512))))
    return HostInfo(hostname=NODE, source="test", cells=tuple(cells))


def flavor(vcpus, memory_mb, **extra_specs):
    return {"name": "f", "vcpus": vcpus, "memory_mb": memory_mb, "root_gb": 0,
            "extra_specs": extra_specs}


def setup(conf):
    conf.set_override("cpu_dedicated_set", "0-5,8-13", "compute")
    conf.set_override("cpu_shared_set", "6-7,14-15", "compute")
    conf.set_override("reserved_host_memory_mb", 0, "compute")
    mgr = manager(conf, ["numa"])
    mgr.discover(smt_host())
    plugin = mgr.plugins["numa"]
    view = plugin.discover(smt_host())
    return mgr, plugin, view


def test_flavor_to_decision_to_claim(conf):
    mgr, plugin, view = setup(conf)
    spec = build_request_spec(mgr.plugins, flavor(
        4, 1024, **{"hw:cpu_policy": "dedicated", "hw:numa_nodes": "2",
                    "hw:cpu_thread_policy": "require",
                    "hw:mem_page_size": "2MB",
                    "hw:emulator_threads_policy": "isolate"}))
    states = {"numa": state_of(plugin, view, [])}
    result = mgr.plugins.fit(states, spec, None)
    assert result.fits, result.rejections
    numa = result.assignments["numa"]
    assert isinstance(numa, NUMAAssignment)
    assert [c.page_size_kb for c in numa.cells] == [2048, 2048]
    # require: each guest node's two vCPUs on one core's two threads.
    for c in numa.cells:
        a, b = sorted(c.pinning.values())
        assert b == a + 1 and a % 2 == 0
    mappings = {"_NUMA%d" % c.guest_cell: (c.provider_uuid,) for c in numa.cells}
    decided = spec.with_decision(Decision(host="h", nodename=NODE, mappings=mappings,
                                          assignments={"numa": numa}))
    # The decision travels as JSON; the compute host reads it back.
    doc = json.loads(decided.to_json())["decision"]["assignments"]["numa"]
    assert set(doc) == {"cells", "emulator_threads", "floating"}
    assert set(doc["cells"][0]) == {
        "guest_cell", "host_cell", "provider_uuid", "pinning", "shared_cpus",
        "page_size_kb", "memory_mb", "shared_vcpus", "held_cpus"}
    assert doc["emulator_threads"] == sorted(numa.emulator_threads)
    again = RequestSpec.from_json(decided.to_json(), mgr.plugins)
    assert again.decision.assignments["numa"] == numa
    assert mgr.plugins.verify(states, again) == ()
    # The scheduler's fit on the mappings makes the same decision.
    assert mgr.plugins.fit(states, spec, mappings).assignments["numa"] == numa
    # Once the guest is in force, another claim of the same decision fails.
    busy = {"numa": state_of(plugin, view, [numa])}
    (rejection,) = mgr.plugins.verify(busy, again)
    assert rejection.plugin == "numa" and "taken by other guests" in rejection.reason
    # The host state round-trips the guest's usage: pages and held CPU.
    cells = busy["numa"].cells
    assert sum(p.used for c in cells for p in c.pages) == 512
    assert len(set().union(*(c.pinned for c in cells))) == 5


def test_rejections_are_named(conf):
    mgr, plugin, view = setup(conf)
    spec = build_request_spec(mgr.plugins, flavor(8, 1024, **{"hw:cpu_policy": "dedicated"}))
    states = {"numa": state_of(plugin, view, [])}
    result = mgr.plugins.fit(states, spec, None)
    (rejection,) = result.rejections
    assert rejection.plugin == "numa"
    assert rejection.reason == ("guest node 0 fits no host cell: host cells 0-1 "
                                "each have 6 free dedicated CPUs, guest node 0 "
                                "needs 8")


def test_floating_guest_and_its_xml(conf):
    mgr, plugin, view = setup(conf)
    spec = build_request_spec(mgr.plugins, flavor(2, 1024))
    states = {"numa": state_of(plugin, view, [])}
    numa = mgr.plugins.fit(states, spec, None).assignments["numa"]
    assert [(c.host_cell, c.shared_vcpus, c.memory_mb) for c in numa.cells] == [
        (0, 2, 1024)]
    xml = "".join(f.xml for f in plugin.guest_config(spec.requests["numa"], numa))
    assert '<vcpupin vcpu="1" cpuset="6-7" />' in xml
    assert '<memory mode="strict" nodeset="0" />' in xml


# -- hosts whose base page is 16 KiB or 64 KiB (aarch64, ppc64le) -------------


def base_page_host(base_kb: int) -> HostInfo:
    """One cell: 3 GiB in base pages of ``base_kb``, 1 GiB in 512 MiB pages
    (libvirt lists the base pool first, as on aarch64/ppc64le)."""
    cpus = tuple(CPU(id=i) for i in range(4))
    cell = NUMACell(id=0, cpus=cpus, memory_kb=4 * GIB_KB,
                    pages=(PagePool(base_kb, 3 * GIB_KB // base_kb),
                           PagePool(524288, 2)))
    return HostInfo(hostname=NODE, source="test", cells=(cell,),
                    base_page_kb=base_kb)


def fit_on(conf, info, page):
    conf.set_override("cpu_dedicated_set", "0-3", "compute")
    conf.set_override("reserved_host_memory_mb", 0, "compute")
    mgr = manager(conf, ["numa"])
    mgr.discover(info)
    plugin = mgr.plugins["numa"]
    view = plugin.discover(info)
    spec = build_request_spec(mgr.plugins, flavor(
        2, 1024, **{"hw:cpu_policy": "dedicated", "hw:mem_page_size": page}))
    return mgr.plugins.fit({"numa": state_of(plugin, view, [])}, spec, None)


def test_small_and_the_base_page_size_mean_the_hosts_smallest_page(conf):
    """nova's ``_numa_cell_supports_pagesize_request``: ``small`` is the
    cell's smallest page, and an explicit size is that pool: ``16`` fits a
    16 KiB host (as small pages, MEMORY_MB), ``64`` a 64 KiB one; ``4`` is
    refused on a cell without 4 KiB pages (compat:
    test_page_sizes_on_16k_and_64k_hosts_as_nova)."""
    for base, page in ((16, "small"), (16, "16"), (16, "16KiB"), (64, "small"),
                       (64, "64"), (4, "4"), (4, "small")):
        result = fit_on(conf, base_page_host(base), page)
        assert result.fits, (base, page, result.rejections)
        (cell,) = result.assignments["numa"].cells
        assert cell.page_size_kb is None, (base, page)     # small pages
    for base, page in ((64, "4"), (16, "4"), (64, "16"), (4, "64")):
        result = fit_on(conf, base_page_host(base), page)
        assert not result.fits, (base, page)
        reason = " ".join(r.reason for r in result.rejections)
        assert "has no %s KiB pages" % page in reason, reason
        assert "its small pages are %d KiB" % base in reason, reason
    result = fit_on(conf, base_page_host(64), "large")
    assert result.assignments["numa"].cells[0].page_size_kb == 524288


# -- NUMA-affine networks ([neutron_physnet_NAME], [neutron_tunnel]) -----------


def network_fit(conf, ports, **extra_specs):
    conf.set_override("cpu_dedicated_set", "0-5,8-13", "compute")
    conf.set_override("cpu_shared_set", "6-7,14-15", "compute")
    conf.set_override("reserved_host_memory_mb", 0, "compute")
    mgr = manager(conf, ["numa"])
    # NOTE: physnet bar is not listed: no affinity (nova refuses one listed
    # without numa_nodes: test_network_affinity_nova_refuses_is_refused)
    conf.set_override("physnets", ["foo"], "neutron")
    plugin = mgr.plugins["numa"]
    networks.register_dynamic_opts(conf)           # as nova, once physnets is read
    conf.set_override("numa_nodes", [1], "neutron_physnet_foo")
    conf.set_override("numa_nodes", [0], "neutron_tunnel")
    mgr.discover(smt_host())
    view = plugin.discover(smt_host())
    assert [(c.physnets, c.tunneled) for c in view.cells] == [
        (frozenset(), True), ({"foo"}, False)]
    spec = build_request_spec(mgr.plugins, flavor(2, 1024, **extra_specs),
                              ports=ports)
    return mgr.plugins.fit({"numa": state_of(plugin, view, [])}, spec, None)


def test_ports_on_numa_affine_networks_place_the_guest_on_their_cells(conf):
    """nova's options as nova spells them: the guest goes on a cell of each
    of its networks with an affinity; physnet bar, not in [neutron]
    physnets, has none (compat:
    test_network_numa_affinity_as_nova)."""
    pinned = {"hw:cpu_policy": "dedicated"}
    cells = lambda result: [c.host_cell for c in result.assignments["numa"].cells]  # noqa: E731
    assert cells(network_fit(conf, [], **pinned)) == [0]
    assert cells(network_fit(conf, [{"physnet": "foo"}], **pinned)) == [1]
    assert cells(network_fit(conf, [{"physnet": "bar"}], **pinned)) == [0]
    assert cells(network_fit(conf, [{"tunneled": True}], **pinned)) == [0]
    both = network_fit(conf, [{"physnet": "foo"}, {"tunneled": True}], **pinned)
    assert not both.fits
    assert ("the guest's ports on physnet foo need one of its NUMA nodes on "
            "host cell(s) 1 ([neutron_physnet_foo] numa_nodes), it is on 0"
            ) in both.rejections[0].reason
    two = network_fit(conf, [{"physnet": "foo"}, {"tunneled": True}],
                      **pinned, **{"hw:numa_nodes": "2"})
    assert sorted(cells(two)) == [0, 1]
    # a guest without NUMA topology floats: no affinity, as in nova
    assert network_fit(conf, [{"physnet": "foo"}, {"tunneled": True}]).fits


#: The capabilities of a 64 KiB-page aarch64 host as libvirt writes them (the
#: host's <pages> list its base page first; each cell's pools by size).
AARCH64_64K_CAPS = """<capabilities><host>
  <cpu><arch>aarch64</arch><pages unit='KiB' size='64'/>
    <pages unit='KiB' size='2048'/><pages unit='KiB' size='524288'/></cpu>
  <topology><cells num='1'><cell id='0'>
    <memory unit='KiB'>4194304</memory>
    <pages unit='KiB' size='64'>49152</pages>
    <pages unit='KiB' size='2048'>0</pages>
    <pages unit='KiB' size='524288'>2</pages>
    <cpus num='4'><cpu id='0'/><cpu id='1'/><cpu id='2'/><cpu id='3'/></cpus>
  </cell></cells></topology>
</host></capabilities>"""


def test_a_64k_host_from_its_capabilities(conf):
    """Discovery reads the base page from <host><cpu><pages>: on this host
    ``64`` and ``small`` are its small pages, ``4`` is refused, as nova."""
    from compute_plugins.host.libvirt_xml import host_info_from_xml
    info = host_info_from_xml(hostname=NODE, source="test",
                              capabilities_xml=AARCH64_64K_CAPS, nodedev_xmls={})
    assert info.base_page_kb == 64
    for page, fits in (("small", True), ("64", True), ("64KiB", True),
                       ("4", False), ("512MB", True)):
        result = fit_on(conf, info, page)
        assert result.fits is fits, (page, result.rejections)
    assert "its small pages are 64 KiB" in fit_on(conf, info, "4").rejections[0].reason


def test_a_bad_physnet_numa_nodes_names_its_group_where_nothing_checked_it(tmp_path):
    """Where no start-time check read the options (nova's adapters), the
    discovery's error names the group and option (it named neither: oslo's
    'Value for option numa_nodes from LocationInfo(...)')."""
    import pytest
    from oslo_config import cfg

    from compute_plugins.exception import ConfigError
    from resources.numa import networks

    path = tmp_path / "n.conf"
    path.write_text("[neutron]\nphysnets = foo\n[neutron_physnet_foo]\nnuma_nodes = 1,x\n")
    conf = cfg.ConfigOpts()
    conf([], default_config_files=[str(path)], default_config_dirs=[])
    with pytest.raises(ConfigError) as err:
        networks.affinity(conf)
    assert str(err.value) == ("[neutron_physnet_foo] numa_nodes: invalid literal "
                              "for int() with base 10: 'x'")


def test_network_affinity_nova_refuses_is_refused(conf):
    """nova's driver refuses (InvalidNetworkNUMAAffinity) a physnet listed
    in [neutron] physnets without numa_nodes, and a numa_nodes cell the host
    does not have: a typo there would silently drop the affinity. Both were
    accepted here (the first as no affinity, the second with a warning)."""
    import pytest

    from compute_plugins.exception import ConfigError
    from resources.numa import networks

    plugin = manager(conf, ["numa"]).plugins["numa"]
    conf.set_override("physnets", ["foo"], "neutron")
    with pytest.raises(ConfigError, match=r"^\[neutron\] physnets lists foo, but "
                       r"\[neutron_physnet_foo\] numa_nodes is not set"):
        plugin.discover(smt_host())
    networks.register_dynamic_opts(conf)
    conf.set_override("numa_nodes", [1, 7], "neutron_physnet_foo")
    with pytest.raises(ConfigError, match=r"^invalid \[neutron_physnet_foo\] numa_nodes "
                       r"value '1,7': host cell 7 does not exist \(the host's "
                       r"cells: 0, 1\)$"):
        plugin.discover(smt_host())
    conf.set_override("numa_nodes", [1], "neutron_physnet_foo")
    conf.set_override("numa_nodes", [2], "neutron_tunnel")
    with pytest.raises(ConfigError, match=r"^invalid \[neutron_tunnel\] numa_nodes "
                       r"value '2': host cell 2 does not exist"):
        plugin.discover(smt_host())
    conf.clear_override("numa_nodes", "neutron_tunnel")
    assert [c.physnets for c in plugin.discover(smt_host()).cells] == [
        frozenset(), {"foo"}]
