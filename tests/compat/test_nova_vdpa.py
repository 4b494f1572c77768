"""The driver mixin sees nova's vDPA devices as nova's libvirt driver does.

nova's fake libvirt host of nova's ``VDPAServersTest`` (a ConnectX-6 Dx PF
``0000:06:00.0`` and 4 VFs, each VF the parent of a ``vdpa_vdpaN`` node
device whose ``<chardev>`` is ``/dev/vhost-vdpa-N``): the mixin's
``plugin_host_info`` (through nova's ``Host``) must mark exactly the
devices nova's driver reports with ``dev_type`` ``vdpa``
(``_get_pci_passthrough_devices``), with the char device nova's
``Host.get_vdpa_device_path`` gives the guest; the sriov plugin then
offers them to ``vdpa`` ports only.

Skipped without nova unless ``COMPUTE_PLUGINS_COMPAT`` is set.
"""

from __future__ import annotations

import json
import os

import pytest

if os.environ.get("COMPUTE_PLUGINS_COMPAT"):
    import nova.virt.libvirt.driver  # noqa: F401
else:
    pytest.importorskip("nova.virt.libvirt.driver")

from nova.virt.libvirt import driver as libvirt_driver  # noqa: E402

from compute_plugins.nova.driver import PluginProviderTreeMixin  # noqa: E402
from compute_plugins.plugin import names  # noqa: E402
from resources.sriov import SRIOVPlugin  # noqa: E402
from tests.compat.nova_libvirt import NovaLibvirt, fakelibvirt  # noqa: E402
from tests.unit.resources import helpers  # noqa: E402

NODE = "compute1"
VFS = 4


class PluginLibvirtDriver(PluginProviderTreeMixin, libvirt_driver.LibvirtDriver):
    """nova's libvirt driver with the plugins."""


def vdpa_host():
    """nova's VDPAServersTest host (``start_vdpa_compute``)."""
    pci_info = fakelibvirt.HostPCIDevicesInfo(num_pci=0, num_pfs=0, num_vfs=0)
    vdpa_info = fakelibvirt.HostVDPADevicesInfo()
    pci_info.add_device(
        dev_type="PF", bus=0x6, slot=0x0, function=0, iommu_group=40,
        numa_node=0, vf_ratio=VFS, vend_id="15b3",
        vend_name="Mellanox Technologies", prod_id="101d",
        prod_name="MT2892 Family [ConnectX-6 Dx]", driver_name="mlx5_core")
    for idx in range(VFS):
        vf = pci_info.add_device(
            dev_type="VF", bus=0x6, slot=0x0, function=idx + 1,
            iommu_group=idx + 41, numa_node=0, vf_ratio=VFS,
            parent=(0x6, 0x0, 0), vend_id="15b3",
            vend_name="Mellanox Technologies", prod_id="101e",
            prod_name="ConnectX Family mlx5Gen Virtual Function",
            driver_name="mlx5_core")
        vdpa_info.add_device("vdpa_vdpa%d" % idx, idx, vf)
    return pci_info, vdpa_info


@pytest.fixture
def world():
    fixture = NovaLibvirt()
    fixture.setUp()
    try:
        pci_info, vdpa_info = vdpa_host()
        fixture.connect(NODE, pci_info=pci_info, vdpa_info=vdpa_info)
        fixture.conf.set_override("device_spec", [json.dumps(
            {"vendor_id": "15b3", "physical_network": "physnet4"})], "pci")
        yield fixture
    finally:
        fixture.cleanUp()


def test_mixin_sees_the_vdpa_devices_nova_sees(world):
    driver = world.driver(PluginLibvirtDriver)
    theirs = {d["address"]: d for d in json.loads(
        driver._get_pci_passthrough_devices())}
    ours = driver.plugin_host_info(NODE)
    vdpa = {d.address: d.vdpa_dev for d in ours.pci_devices if d.vdpa_dev}
    assert sorted(vdpa) == sorted(
        a for a, d in theirs.items() if d["dev_type"] == "vdpa")
    assert len(vdpa) == VFS
    for address, chardev in vdpa.items():
        assert chardev == driver._host.get_vdpa_device_path(address)


def test_sriov_plugin_offers_them_to_vdpa_ports(world):
    driver = world.driver(PluginLibvirtDriver)
    conf, fixture = helpers.make_conf()
    try:
        conf.set_override("device_spec", [json.dumps(
            {"vendor_id": "15b3", "physical_network": "physnet4"})], "pci")
        plugin = SRIOVPlugin(conf)
        view = plugin.discover(driver.plugin_host_info(NODE))
        [provider] = plugin.provider_contributions(view, NODE)
    finally:
        fixture.cleanUp()
    assert provider.traits == {names.VNIC_TYPE_VDPA,
                               names.physnet_trait("physnet4")}
    assert provider.inventory["SRIOV_NET_VF"]["total"] == VFS
