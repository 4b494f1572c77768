"""The built-in plugins on recorded host snapshots and on libvirt's test driver.

Discovery is real (libvirt XML parsers, udev replay where the snapshot has
one); the plugins run through the real entry points onto a real ProviderTree.
"""

from __future__ import annotations

import pathlib

import pytest
from oslo_config import cfg

from compute_plugins.host import discover_host
from compute_plugins.host.libvirt_xml import host_info_from_xml
from compute_plugins.runtime.manager import PluginManager
from compute_plugins.tree.provider_tree import ProviderTree
from tests.unit.resources.helpers import dump, make_conf, record

HOSTS = pathlib.Path(__file__).parents[2] / "fixtures" / "hosts"
PAGE_2M = "CUSTOM_MEMORY_PAGE_2048KB"
PAGE_1G = "CUSTOM_MEMORY_PAGE_1048576KB"


@pytest.fixture
def conf():
    conf, fixture = make_conf()
    yield conf
    fixture.cleanUp()


def run(conf: cfg.ConfigOpts, info, tree=None):
    mgr = PluginManager(conf)
    tree = tree if tree is not None else ProviderTree()
    mgr.discover(info)
    mgr.update_provider_tree(tree, info.hostname)
    assert not mgr.degraded, mgr.failures
    return tree


def shape(tree):
    """``{name: (parent, {rc: (total, reserved)}, traits)}``."""
    return {
        name: (p["parent"],
               {rc: (r["total"], r.get("reserved", 0))
                for rc, r in p["inventory"].items()},
               p["traits"])
        for name, p in dump(tree).items()
    }


def test_numa4_snapshot(conf):
    conf.set_override("cpu_dedicated_set", "4-15", "compute")
    conf.set_override("cpu_shared_set", "0-3", "compute")
    info = discover_host(host_snapshot=str(HOSTS / "numa4"))
    got = shape(run(conf, info))
    numa = {"HW_NUMA_ROOT"}
    # NOTE: this capture (libvirt's test data) lists more memory in huge
    # pages than in the cell; MEMORY_MB is the base 4 KiB pool only.
    assert got == {
        "numa4": (None, {}, set()),
        "numa4_NUMA0": ("numa4", {"VCPU": (4, 0), "MEMORY_MB": (8, 8),
                                  PAGE_2M: (4096, 0), PAGE_1G: (6144, 0)},
                        numa),
        "numa4_NUMA1": ("numa4", {"PCPU": (4, 0), "MEMORY_MB": (16, 16),
                                  PAGE_2M: (6144, 0), PAGE_1G: (8192, 0)},
                        numa),
        "numa4_NUMA2": ("numa4", {"PCPU": (4, 0), "MEMORY_MB": (24, 24),
                                  PAGE_2M: (8192, 0), PAGE_1G: (10240, 0)},
                        numa),
        "numa4_NUMA3": ("numa4", {"PCPU": (4, 0), "MEMORY_MB": (32, 32),
                                  PAGE_2M: (10240, 0), PAGE_1G: (12288, 0)},
                        numa),
    }


def test_sriov_snapshot(conf):
    conf.set_override("physical_device_mappings", ["physnet1:ens1f0"],
                      "sriov")
    conf.set_override("bandwidth", ["0000:02:10.7:1000000:"], "sriov")
    conf.set_override("reserved_host_disk_mb", 1, "disk")
    info = discover_host(host_snapshot=str(HOSTS / "sriov"))
    tree = run(conf, info)
    node = "sriov-compute-01"
    assert shape(tree) == {
        # The capture has thread siblings (SMT): the numa plugin says so.
        node: (None, {"DISK_GB": (893, 1)}, {"HW_CPU_HYPERTHREADING"}),
        node + "_NUMA0": (node, {"VCPU": (32, 0), "MEMORY_MB": (61907, 512)},
                          {"HW_NUMA_ROOT"}),
        node + "_pf_0000_02_10_7": (
            node + "_NUMA0",
            {"SRIOV_NET_VF": (4, 0), "NET_BW_EGR_KILOBIT_PER_SEC": (1000000, 0)},
            {"CUSTOM_VNIC_TYPE_DIRECT", "CUSTOM_PHYSNET_PHYSNET1"}),
    }


def test_mdev_snapshot(conf):
    conf.set_override("enabled_mdev_types", ["foo2"], "vgpu")
    info = discover_host(host_snapshot=str(HOSTS / "mdev"))
    got = dump(run(conf, info))
    gpu = got["mdev_pci_0000_02_10_7"]
    assert gpu["parent"] == "mdev_NUMA0"
    assert gpu["inventory"] == {"VGPU": record(2)}
    assert gpu["traits"] == {"CUSTOM_MDEV_TYPE_FOO2"}
    assert sorted(got) == ["mdev", "mdev_NUMA0", "mdev_NUMA1",
                           "mdev_pci_0000_02_10_7"]
    # NOTE: cell 1 has memory but no CPU: no VCPU record, still a provider.
    assert "VCPU" not in got["mdev_NUMA1"]["inventory"]


def test_libvirt_test_driver(conf, tmp_path):
    conf.set_override("instances_path", str(tmp_path), "disk")
    conf.set_override("reserved_host_memory_mb", 0, "compute")
    info = discover_host(libvirt_uri="test:///default", use_udev=False)
    tree = run(conf, info)
    got = shape(tree)
    root = info.hostname
    assert got[root + "_NUMA0"] == (
        root, {"VCPU": (8, 0), "MEMORY_MB": (2048, 0)}, {"HW_NUMA_ROOT"})
    # NOTE: the test driver lists all of cell 1 in 8 KiB pages (the host's
    # base page is 4 KiB): as in nova, the cell's smallest pool is its small
    # pages, 4096 MiB of MEMORY_MB.
    assert got[root + "_NUMA1"] == (
        root, {"VCPU": (8, 0), "MEMORY_MB": (4096, 0)}, {"HW_NUMA_ROOT"})
    assert set(got) == {root, root + "_NUMA0", root + "_NUMA1"}
    # test:/// is not this machine: instances_path is not measured.
    assert got[root][1] == {}
    tree2 = run(conf, info, tree)
    assert shape(tree2) == got


def test_bare_one_cell_host(conf):
    """caps-qemu-kvm.xml: one cell, four bare CPUs, no memory size."""
    xml = (HOSTS / "libvirt" / "capabilityschemadata" /
           "caps-qemu-kvm.xml").read_text()
    info = host_info_from_xml(hostname="bare", source=str(HOSTS),
                              capabilities_xml=xml, nodedev_xmls={},
                              memory_kb=8 * 1024 * 1024)
    assert shape(run(conf, info)) == {
        "bare": (None, {}, set()),
        "bare_NUMA0": ("bare", {"VCPU": (4, 0), "MEMORY_MB": (8192, 512)},
                       {"HW_NUMA_ROOT"}),
    }


def test_custom_test_driver_host(conf):
    """<cells num='0'>: one cell with every CPU; netdev from libvirt."""
    conf.set_override("physical_device_mappings", ["physnet1:ens1f0"],
                      "sriov")
    conf.set_override("bandwidth", ["ens1f0:1000:2000"], "sriov")
    conf.set_override("enabled_mdev_types", ["nvidia-222"], "vgpu")
    info = discover_host(
        libvirt_uri=f"test://{HOSTS / 'testdriver-devices.xml'}")
    got = shape(run(conf, info))
    root = info.hostname
    assert got[root + "_NUMA0"] == (
        root, {"VCPU": (16, 0), "MEMORY_MB": (8192, 512)}, {"HW_NUMA_ROOT"})
    assert got[root + "_pf_0000_5e_00_0"] == (
        root,
        {"SRIOV_NET_VF": (2, 0), "NET_BW_EGR_KILOBIT_PER_SEC": (1000, 0),
         "NET_BW_IGR_KILOBIT_PER_SEC": (2000, 0)},
        {"CUSTOM_VNIC_TYPE_DIRECT", "CUSTOM_PHYSNET_PHYSNET1"})
