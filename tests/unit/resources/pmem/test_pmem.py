"""The pmem plugin: nova's [libvirt] pmem_namespaces on namespaces from
``ndctl list -X``, hw:pmem, which namespaces a guest gets, and the NVDIMM
devices compared with nova's ``LibvirtConfigGuestVPMEM``."""

from __future__ import annotations

import dataclasses
import pathlib
import xml.etree.ElementTree as ET

import pytest

from compute_plugins.compute.guest import assemble
from compute_plugins.exception import ConfigError
from compute_plugins.host.errors import HostDataError
from compute_plugins.host.ndctl import parse_namespaces
from compute_plugins.host.snapshot import load_snapshot
from compute_plugins.plugin.contract import Rejection
from compute_plugins.request.inputs import RequestInput
from resources.pmem import PMEMAssignment, PMEMNamespaceMissing, PMEMPlugin, PMEMRequest
from tests.unit.resources.helpers import NODE, manager, on_cells, parse, state_of, update

FIXTURES = pathlib.Path(__file__).parents[3] / "fixtures"
CONFIG = ["4GB:ns_0", "SMALL:ns_1|ns_2"]


@pytest.fixture
def pmem_host():
    return load_snapshot(str(FIXTURES / "hosts" / "pmem"))


@pytest.fixture
def plugin(conf):
    conf.set_override("pmem_namespaces", CONFIG, "libvirt")
    return PMEMPlugin(conf)


def test_ndctl_capture_as_nova_reads_it(pmem_host):
    ns = {n.name: n for n in pmem_host.pmem_namespaces}
    assert sorted(ns) == ["ns_0", "ns_1", "ns_2"]
    assert (ns["ns_1"].devpath, ns["ns_1"].size, ns["ns_1"].align) == (
        "/dev/dax0.1", 4292870144, 2097152)
    assert ns["ns_0"].numa_node == 0 and ns["ns_0"].dev == "namespace0.0"


def test_newer_ndctl_align_and_an_unnamed_namespace():
    text = (FIXTURES / "ndctl" / "papr-scm-list-N-v.json").read_text()
    # a real capture: no name (nova cannot use it either), align outside daxregion
    assert parse_namespaces(text, "x") == ()
    named = text.replace('"dev":"namespace0.0",', '"dev":"namespace0.0","name":"pm0",')
    (one,) = parse_namespaces(named, "x")
    assert (one.devpath, one.align, one.numa_node) == ("/dev/dax0.0", 2097152, 3)


@pytest.mark.parametrize("text, rule", [
    ("{not json", "not JSON"),
    ('[{"name": "a", "size": "4 GiB", "daxregion": {"align": 1, '
     '"devices": [{"chardev": "dax0.0"}]}}]', "a size must be a non-negative"),
    ('[{"name": "a", "dev": "n0", "size": 1, "daxregion": {"align": 1, '
     '"devices": [{"chardev": "dax0.0"}]}}, {"name": "a", "dev": "n1", "size": 1, '
     '"daxregion": {"align": 1, "devices": [{"chardev": "dax0.1"}]}}]', "given twice"),
    # ndctl list -R (regions), not -X: no namespace in it, not "none on the host"
    ('{"regions": [{"dev": "region0", "namespaces": []}]}', "not a namespace"),
    ('[{"dev": "namespace0.0", "name": ["a"], "size": 1, "daxregion": {"align": 1, '
     '"devices": [{"chardev": "dax0.0"}]}}]', "name must be a string"),
    ('[{"dev": "namespace0.0", "name": "a", "size": 1, "daxregion": {"align": 1, '
     '"devices": [{"chardev": 7}]}}]', "chardev must be a device name"),
])
def test_bad_ndctl_output_names_the_file(text, rule):
    with pytest.raises(HostDataError, match="ndctl.json.*" + rule.replace(" a ", ".*")):
        parse_namespaces(text, "ndctl.json")


def test_inventory_on_the_root_as_nova(conf, pmem_host):
    conf.set_override("pmem_namespaces", CONFIG, "libvirt")
    tree = update(manager(conf, ["pmem"]), pmem_host)
    inventory = tree.data(NODE).inventory
    assert inventory == {
        "CUSTOM_PMEM_NAMESPACE_4GB": {"total": 1, "min_unit": 1, "max_unit": 1,
                                      "step_size": 1, "allocation_ratio": 1.0},
        "CUSTOM_PMEM_NAMESPACE_SMALL": {"total": 2, "min_unit": 1, "max_unit": 2,
                                        "step_size": 1, "allocation_ratio": 1.0}}


@pytest.mark.parametrize("config, match", [
    (["4GB"], r"\[libvirt\] pmem_namespaces.*\$LABEL:\$NSNAME"),
    (["A:ns_0", "B:ns_0"], "namespace ns_0 is configured twice"),
    # CUSTOM_PMEM_NAMESPACE_A_B / _: no hw:pmem label could ever ask them
    (["a-b:ns_0"], "label 'a-b' is not one hw:pmem can name"),
    (["\u00c4:ns_0"], "label '\u00c4' is not one hw:pmem can name"),
])
def test_bad_option_is_the_operators(conf, pmem_host, config, match):
    conf.set_override("pmem_namespaces", config, "libvirt")
    with pytest.raises(ConfigError, match=match):
        PMEMPlugin(conf).discover(pmem_host)


def test_a_namespace_the_host_lacks(conf, pmem_host):
    conf.set_override("pmem_namespaces", ["BIG:ns_9"], "libvirt")
    with pytest.raises(PMEMNamespaceMissing, match="ns_9.*ns_0, ns_1, ns_2"):
        PMEMPlugin(conf).discover(pmem_host)


def test_request_as_nova_translates_it(plugin):
    request = parse(plugin, {"hw:pmem": "SMALL,4GB,SMALL"})
    assert request == PMEMRequest(labels=("SMALL", "4GB", "SMALL"))
    (group,) = plugin.request_groups(request)
    assert dict(group.resources) == {"CUSTOM_PMEM_NAMESPACE_SMALL": 2,
                                     "CUSTOM_PMEM_NAMESPACE_4GB": 1}


def test_bad_value_in_novas_words(plugin):
    ri = RequestInput.from_dicts({"name": "f", "vcpus": 1, "memory_mb": 512,
                                  "extra_specs": {"hw:pmem": "a b"}}).for_plugin("pmem")
    assert plugin.parse_request(ri) is None
    (problem,) = ri.problems
    assert "is not of the format '([a-zA-Z0-9_]+(,)?)+'" in problem.rule


def test_fit_gives_free_namespaces_in_order_and_verify_refuses_them_later(
        plugin, pmem_host):
    view = plugin.discover(pmem_host)
    request = PMEMRequest(labels=("SMALL", "4GB"))
    state = state_of(plugin, view)
    first = plugin.fit(state, request, None, on_cells(0))
    assert isinstance(first, PMEMAssignment)
    assert [n.name for n in first.namespaces] == ["ns_1", "ns_0"]
    assert first.guest_node == 0 and first.provider_uuid == state.provider_uuid
    held = state_of(plugin, view, [first])
    why = plugin.verify(held, request, first)
    assert isinstance(why, Rejection) and "ns_1 (/dev/dax0.1) is in use" in why.reason
    second = plugin.fit(held, PMEMRequest(labels=("SMALL",)), None, on_cells(1))
    assert [n.name for n in second.namespaces] == ["ns_2"]
    assert second.guest_node == 0
    none_left = plugin.fit(held, request, None, on_cells(0))
    assert isinstance(none_left, Rejection)
    assert "no free CUSTOM_PMEM_NAMESPACE_4GB namespace for label 4GB: 1 of 1" in (
        none_left.reason)


def test_verify_refuses_a_namespace_of_another_label(plugin, pmem_host):
    state = state_of(plugin, plugin.discover(pmem_host))
    decided = plugin.fit(state, PMEMRequest(labels=("SMALL",)), None, on_cells(0))
    forged = dataclasses.replace(decided, namespaces=(dataclasses.replace(
        decided.namespaces[0], name="ns_0"),))
    why = plugin.verify(state, PMEMRequest(labels=("SMALL",)), forged)
    assert "ns_0 is CUSTOM_PMEM_NAMESPACE_4GB" in why.reason


def test_nvdimm_device_is_novas_and_max_memory_counts_it(plugin, pmem_host):
    from nova.virt.libvirt import config as vconfig

    state = state_of(plugin, plugin.discover(pmem_host))
    decided = plugin.fit(state, PMEMRequest(labels=("4GB",)), None, on_cells(0))
    (fragment,) = plugin.guest_config(PMEMRequest(labels=("4GB",)), decided)
    theirs = vconfig.LibvirtConfigGuestVPMEM()
    theirs.source_path, theirs.align_size = "/dev/dax0.0", 2097152 // 1024
    theirs.target_size = 4292870144 // 1024
    assert fragment.parent == "devices"
    assert (ET.canonicalize(fragment.xml, strip_text=True)
            == ET.canonicalize(theirs.to_xml(), strip_text=True))
    domain = ET.fromstring(assemble([("pmem", [fragment])], name="g", vcpus=2,
                                    memory_mb=2048))
    max_memory = domain.find("maxMemory")
    # nova: guest memory + each device, one slot each
    assert max_memory.get("slots") == "1"
    assert int(max_memory.text) == 2048 * 1024 + 4292870144 // 1024


def test_conformance_on_the_pmem_snapshot():
    from compute_plugins.testing import assert_conformant, snapshot_host

    report = assert_conformant(PMEMPlugin, hosts=[snapshot_host(
        str(FIXTURES / "hosts" / "pmem"))])
    assert report.result("double-booking").status == "PASS"
    assert "rejected once held" in report.result("double-booking").detail


def test_a_guest_without_numa_topology_gets_no_nvdimm(plugin, pmem_host):
    # libvirt: "At least one numa node has to be configured when enabling
    # memory hotplug"; nova never builds such a guest
    state = state_of(plugin, plugin.discover(pmem_host))
    why = plugin.fit(state, PMEMRequest(labels=("SMALL",)), None, {})
    assert isinstance(why, Rejection) and "no NUMA topology" in why.reason
    decided = plugin.fit(state, PMEMRequest(labels=("SMALL",)), None, on_cells(0))
    recorded = dataclasses.replace(decided, guest_node=None)
    why = plugin.verify(state, PMEMRequest(labels=("SMALL",)), recorded)
    assert isinstance(why, Rejection) and "no guest NUMA node" in why.reason


@pytest.mark.parametrize("specs, nodes", [
    ({"hw:pmem": "SMALL"}, 1),  # nova's fourth trigger: one node
    ({"hw:pmem": "SMALL", "hw:numa_nodes": "2"}, 2),
    ({"hw:pmem": " , "}, 0),  # no label (nova's get_vpmems): no trigger
])
def test_a_vpmem_guest_has_a_numa_topology_as_nova(conf, specs, nodes):
    from nova import objects
    from nova.virt import hardware

    from resources.numa import NUMAPlugin

    request = parse(NUMAPlugin(conf), specs)
    assert len(request.cells) == nodes
    objects.register_all()
    flavor = objects.Flavor(vcpus=2, memory_mb=2048, extra_specs=specs)
    theirs = hardware.numa_get_constraints(flavor, objects.ImageMeta.from_dict({}))
    assert (len(theirs.cells) if theirs else 0) == nodes


def test_hw_pmem_is_checked_as_novas_pattern_in_linear_time(plugin):
    import re
    import time

    from resources.pmem.request import MATCH, PATTERN

    for value in ["a", "a,", "a,b", "a,b,", "A_1,b2", ",a", "a,,b", "a b", "", "a,b,,",
                  "ä", "a-b"]:
        assert bool(re.fullmatch(MATCH, value, re.ASCII)) == bool(
            re.fullmatch(PATTERN, value, re.ASCII)), value
    # nova's pattern backtracks exponentially here (~1.5 s at 24 characters,
    # x4 per 2 more): a flavor must not hang the parser
    ri = RequestInput.from_dicts({"name": "f", "vcpus": 1, "memory_mb": 512,
                                  "extra_specs": {"hw:pmem": "a" * 200 + "!"}}
                                 ).for_plugin("pmem")
    start = time.monotonic()
    assert plugin.parse_request(ri) is None
    assert time.monotonic() - start < 1
    assert "is not of the format '([a-zA-Z0-9_]+(,)?)+'" in ri.problems[0].rule
