"""``[pci] report_in_placement``: nova's own translator finds the sriov
plugin's providers already there and changes nothing.

nova's resource tracker runs ``nova.compute.pci_placement_translator`` after
the driver's ``update_provider_tree``; here nova's ``PlacementView`` is fed
nova's ``PciDevice`` objects and nova's own ``Whitelist`` of the same
``device_spec``, on the provider tree the plugins filled (the framework's
``ProviderTree``, nova's API; the driver mixin copies it into nova's).

Skipped without nova unless ``COMPUTE_PLUGINS_COMPAT`` is set.
"""

from __future__ import annotations

import json
import os

import pytest

if os.environ.get("COMPUTE_PLUGINS_COMPAT"):
    import nova.compute.pci_placement_translator as translator
else:
    translator = pytest.importorskip("nova.compute.pci_placement_translator")

from nova import objects  # noqa: E402
from nova.pci import whitelist  # noqa: E402

from compute_plugins.exception import ConfigError  # noqa: E402
from resources.sriov import SRIOVPlugin  # noqa: E402
from tests.unit.resources import helpers  # noqa: E402
from tests.unit.resources.test_sriov_devspec import PF2, devices  # noqa: E402

objects.register_all()

SPECS = [
    {"vendor_id": "8086", "product_id": "1515", "address": "*:81:00.*",
     "traits": "blue,HW_NIC_SRIOV", "live_migratable": "yes"},
    {"vendor_id": "10de", "product_id": "25b6", "resource_class": "pgpu"},
    {"vendor_id": "8086", "product_id": "1528", "address": PF2},
]


def nova_device(device):
    if device.phys_function:
        dev_type = "type-VF"
    elif device.virt_functions:
        dev_type = "type-PF"
    else:
        dev_type = "type-PCI"
    return objects.PciDevice(
        address=device.address, vendor_id=device.vendor_id,
        product_id=device.product_id, dev_type=dev_type,
        parent_addr=device.phys_function, status="available",
        instance_uuid=None, extra_info={})


def test_novas_translator_changes_nothing_in_the_plugins_tree(conf):
    conf.set_override("device_spec", [json.dumps(s) for s in SPECS], "pci")
    conf.set_override("report_in_placement", True, "pci")
    info = devices()
    tree = helpers.ProviderTree()
    tree.new_root(helpers.NODE, helpers.NODE + "-uuid")
    helpers.update(helpers.manager(conf, ["numa", "sriov"]), info, tree)
    before = helpers.dump(tree)
    assert {n: p["inventory"] for n, p in before.items() if "_0000:" in n} == {
        "node1_0000:81:00.0": {"CUSTOM_PCI_8086_1515": helpers.record(2)},
        "node1_0000:82:00.0": {"CUSTOM_PCI_8086_1528": helpers.record(1)},
        "node1_0000:84:00.0": {"PGPU": helpers.record(1)},
    }

    view = translator.PlacementView(helpers.NODE, [])
    specs = whitelist.Whitelist([json.dumps(s) for s in SPECS])
    for device in info.pci_devices:
        nova_dev = nova_device(device)
        view.process_dev(nova_dev, specs.get_devspec(nova_dev))
    view.update_provider_tree(tree, allocations={})

    after = helpers.dump(tree)
    # nova adds its OWNER_NOVA trait to its PCI providers (the plugins keep
    # traits they did not set); nothing else moves
    for name, provider in after.items():
        if name.startswith("node1_0000:"):
            provider["traits"].discard("OWNER_NOVA")
    assert after == before


def _novas_error(values, info):
    view = translator.PlacementView(helpers.NODE, [])
    specs = whitelist.Whitelist([json.dumps(s) for s in values])
    try:
        for device in sorted(info.pci_devices, key=lambda d: d.address):
            nova_dev = nova_device(device)
            view.process_dev(nova_dev, specs.get_devspec(nova_dev))
    except Exception as err:  # nova's PlacementPciException family
        return str(err)
    return None


@pytest.mark.parametrize("values", [
    # a PF with its VFs
    [{"address": PF2, "product_id": "1528"}, {"address": "*:82:00.*"}],
    [{"address": "*:82:00.*"}],
    # VFs of one PF with other classes, other traits (the third VF differs)
    [{"address": "0000:81:00.3", "resource_class": "a"},
     {"vendor_id": "8086", "product_id": "1515", "address": "*:81:00.*"}],
    [{"address": "0000:81:00.1", "traits": "a"},
     {"vendor_id": "8086", "product_id": "1515"}],
    # a VF saying one_time_use
    [{"address": "0000:81:00.2", "one_time_use": "false"},
     {"vendor_id": "8086", "product_id": "1515", "address": "*:81:00.*"}],
])
def test_the_plugins_refusal_is_novas(conf, values):
    conf.set_override("device_spec", [json.dumps(s) for s in values], "pci")
    conf.set_override("report_in_placement", True, "pci")
    info = devices(vfs=3)
    expected = _novas_error(values, info)
    assert expected is not None
    plugin = SRIOVPlugin(conf)
    with pytest.raises(ConfigError) as err:
        plugin.provider_contributions(plugin.discover(info), helpers.NODE)
    assert str(err.value) == expected


@pytest.mark.parametrize("given", [
    "blue", "blue, red", " pgpu", "custom_foo", "CUSTOM_foo", "foo-bar",
    "HW_NIC_SRIOV", "hw_nic_sriov", "PGPU", "vgpu"])
def test_resource_classes_and_traits_are_normalised_as_nova_does(given):
    # the same function serves nova's provider (device_spec) and its request
    # group (alias): a name nova writes otherwise moves the provider's traits
    from compute_plugins.conf import pci as pci_conf
    from resources.sriov import alias as alias_rules
    assert alias_rules.spec_traits(given) == translator.get_traits(given) | {
        "COMPUTE_MANAGED_PCI_DEVICE"}
    if "," not in given:
        assert pci_conf.normalize_rc(given) == translator.get_resource_class(
            given, "8086", "1515")
