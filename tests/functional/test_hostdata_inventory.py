"""Every real libvirt document we have gives a tree or a clear error.

Each capabilities file and each node-device file from libvirt's own test
suite (tests/fixtures/hosts/libvirt, copied from ../shared/hostdata) is put
in a snapshot directory and run through ``compute-plugins inventory``, in
process: the command prints a provider tree (exit 0) or one line naming the
file and what is wrong (exit 1), never a traceback.
"""

from __future__ import annotations

import json
import pathlib
import shutil

import pytest

from compute_plugins.cmd.main import main

# NUMA cells of each capabilities file (None: refused), shared with the parser's tests.
from tests.unit.host.test_libvirt_xml import EXPECTED_CELLS

LIBVIRT = pathlib.Path(__file__).parents[1] / "fixtures" / "hosts" / "libvirt"
CAPS = sorted((LIBVIRT / "capabilityschemadata").glob("*.xml")) + sorted(
    (LIBVIRT / "vircaps2xmldata").glob("*.xml"))
NODEDEVS = sorted((LIBVIRT / "nodedevschemadata").glob("*.xml"))
BASIC_CAPS = LIBVIRT / "vircaps2xmldata" / "vircaps-x86_64-basic.xml"


#: What each node-device file must add to the tree of host1 (4 NUMA cells,
#: the device on cell 0), with ``[vgpu] enabled_mdev_types = foo2``:
#: ``{provider name: (parent, {resource class: total}, traits)}``.
EXPECTED_DEVICES = {
    "pci_0000_02_10_7_sriov_vfs.xml": {
        "host1_pf_0000_02_10_7": ("host1_NUMA0", {"SRIOV_NET_VF": 4},
                                  {"CUSTOM_VNIC_TYPE_DIRECT"})},
    # NOTE: pci_0000_02_10_7_sriov_pf_vfs_all.xml has a phys_function too:
    # a VF, whose own virt_functions (a schema test's oddity) are not offered.
    "pci_0000_02_10_7_mdev_types.xml": {
        "host1_pci_0000_02_10_7": ("host1_NUMA0", {"VGPU": 2},
                                   {"CUSTOM_MDEV_TYPE_FOO2"})},
}


def inventory(snapshot: pathlib.Path, capsys, *options: str) -> tuple[int, str, str]:
    rc = main([*options, "inventory", "--host-snapshot", str(snapshot), "--format", "json"])
    out, err = capsys.readouterr()
    return rc, out, err


def check(rc: int, out: str, err: str, source: pathlib.Path) -> None:
    assert "Traceback" not in err
    if rc == 0:
        providers = json.loads(out)["providers"]
        assert providers[0]["parent_provider_uuid"] is None
        uuids = {p["uuid"] for p in providers}
        assert all(p["parent_provider_uuid"] in uuids for p in providers[1:])
    else:
        # NOTE: a snapshot is the user's input: a file of it that is
        # refused is a usage error (exit 2), one line naming the file.
        assert rc == 2
        assert source.name in err, err


@pytest.mark.parametrize("caps", CAPS, ids=lambda p: p.name)
def test_capabilities_file(caps, tmp_path, capsys):
    snapshot = tmp_path / "host1"
    (snapshot / "nodedev").mkdir(parents=True)
    shutil.copy(caps, snapshot / "capabilities.xml")
    rc, out, err = inventory(snapshot, capsys)
    check(rc, out, err, pathlib.Path("capabilities.xml"))
    assert caps.name in EXPECTED_CELLS, "pin the new file in EXPECTED_CELLS"
    cells = EXPECTED_CELLS[caps.name]
    if cells is None:
        assert rc == 2
        return
    assert rc == 0, err
    names = [p["name"] for p in json.loads(out)["providers"]]
    assert names[0] == "host1"
    assert sorted(n for n in names if n.startswith("host1_NUMA")) == [
        f"host1_NUMA{i}" for i in range(cells)], names


def test_duplicate_cpu_ids_are_named(tmp_path, capsys):
    snapshot = tmp_path / "host1"
    (snapshot / "nodedev").mkdir(parents=True)
    shutil.copy(LIBVIRT / "vircaps2xmldata" / "vircaps-basic-4-4-2G.xml",
                snapshot / "capabilities.xml")
    rc, _, err = inventory(snapshot, capsys)
    assert rc == 2
    assert "capabilities.xml" in err and "CPU 0" in err


@pytest.mark.parametrize("nodedev", NODEDEVS, ids=lambda p: p.name)
def test_node_device_file(nodedev, tmp_path, capsys):
    snapshot = tmp_path / "host1"
    (snapshot / "nodedev").mkdir(parents=True)
    shutil.copy(BASIC_CAPS, snapshot / "capabilities.xml")
    shutil.copy(nodedev, snapshot / "nodedev" / nodedev.name)
    config = tmp_path / "vgpu.conf"
    config.write_text("[vgpu]\nenabled_mdev_types = foo2\n")
    rc, out, err = inventory(snapshot, capsys, "--config-file", str(config))
    check(rc, out, err, nodedev)
    assert rc == 0, err
    providers = {p["name"]: p for p in json.loads(out)["providers"]}
    by_uuid = {p["uuid"]: p["name"] for p in providers.values()}
    devices = {
        name: (by_uuid[p["parent_provider_uuid"]],
               {rc: inv["total"] for rc, inv in p["inventories"].items()},
               set(p["traits"]))
        for name, p in providers.items() if "_pf_" in name or "_pci_" in name}
    # Files without an SR-IOV PF that has VFs, or mdev types, add nothing.
    assert devices == EXPECTED_DEVICES.get(nodedev.name, {})
