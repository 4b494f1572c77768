"""``remote-managed`` ports and a port's own NUMA policy, against nova's code.

- The card serial number: nova's libvirt config parser
  (``LibvirtConfigNodeDevice``) and ours read the same one from the
  ``dpu/`` snapshot's node-device XML (libvirt's own BlueField-2 VPD), and
  a VF without VPD gets its PF's, as nova's ``Host._get_vpd_details``.
- Which devices a ``remote_managed`` device_spec gives: nova's own
  ``Whitelist.device_assignable`` and the sriov plugin's matcher agree on
  every device of the snapshot.
- A port's PCI request as nova's ``create_resource_requests`` makes it
  (``remote_managed`` tag, no physnet on a tunnel, ``numa_policy`` the
  port's) becomes a ``remote-managed`` port with the port's policy.

Skipped without nova unless ``COMPUTE_PLUGINS_COMPAT`` is set.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

if os.environ.get("COMPUTE_PLUGINS_COMPAT"):
    import nova.pci.whitelist as whitelist
else:
    whitelist = pytest.importorskip("nova.pci.whitelist")

import nova.conf  # noqa: E402
from nova import objects  # noqa: E402
from nova.virt.libvirt import config as vconfig  # noqa: E402

from compute_plugins.host import snapshot  # noqa: E402
from compute_plugins.nova import spec as nova_spec  # noqa: E402
from resources.sriov import devspec  # noqa: E402
from tests.unit.resources import helpers  # noqa: E402
from tests.unit.resources.test_sriov_remote_managed import TUNNEL_SPEC  # noqa: E402

objects.register_all()
CONF = nova.conf.CONF
DPU = Path(__file__).parents[1] / "fixtures" / "hosts" / "dpu"


def novas_serial(name: str) -> object:
    """nova's ``_get_vpd_details`` for node device ``name``: its VPD's card
    serial number, else a VF's PF's (nova parses the XML with its own
    config classes)."""
    def parsed(node: str) -> vconfig.LibvirtConfigNodeDevice:
        device = vconfig.LibvirtConfigNodeDevice()
        device.parse_str((DPU / "nodedev" / (node + ".xml")).read_text())
        return device

    device = parsed(name)
    vpd = device.pci_capability.vpd_capability
    serial = vpd.card_serial_number if vpd else None
    parents = [cap.device_addrs[0] for cap in device.pci_capability.fun_capability
               if cap.type == "phys_function"]
    if not serial and parents:
        pf = "pci_%04x_%02x_%02x_%x" % parents[0]
        if (DPU / "nodedev" / (pf + ".xml")).exists():
            vpd = parsed(pf).pci_capability.vpd_capability
            serial = vpd.card_serial_number if vpd else None
    return serial or None


@pytest.fixture
def dpu(tmp_path):
    shutil.copytree(DPU, tmp_path / "dpu")
    return snapshot.load_snapshot(str(tmp_path / "dpu"), use_udev=False)


def test_the_card_serial_numbers_are_novas(dpu):
    names = sorted(p.stem for p in (DPU / "nodedev").glob("pci_*.xml"))
    ours = {d.name: devspec.card_serial_number(d, dpu) for d in dpu.pci_devices}
    assert ours == {name: novas_serial(name) for name in names}
    assert ours["pci_0000_42_00_2"] == "MT2113X00000"


@pytest.mark.parametrize("specs", [
    TUNNEL_SPEC,
    [{"vendor_id": "15b3", "product_id": "101e", "physical_network": "physnet4",
      "remote_managed": "true"}],
    [{"vendor_id": "8086", "remote_managed": "true"}, {"vendor_id": "8086"}],
    [{"address": "0000:42:00.3", "remote_managed": "true"}],
])
def test_a_remote_managed_spec_gives_the_devices_nova_gives(dpu, specs):
    values = [json.dumps(s) for s in specs]
    CONF.set_override("device_spec", values, "pci")
    try:
        novas = whitelist.Whitelist(values)
        wanted = []
        for device in dpu.pci_devices:
            # NOTE: the dev_dict nova's libvirt driver reports
            dev = {"vendor_id": device.vendor_id, "product_id": device.product_id,
                   "address": device.address, "parent_addr": device.phys_function,
                   "capabilities": {"vpd": {"card_serial_number":
                                            novas_serial(device.name)}}}
            if novas.device_assignable(dev):
                wanted.append(device.address)
    finally:
        CONF.clear_override("device_spec", "pci")
    ours = devspec.parse(values)
    assert [d.address for d in dpu.pci_devices
            if devspec.first_match(ours, d, dpu) is not None] == wanted


@pytest.mark.parametrize("physnet, policy", [
    (None, "socket"), ("physnet4", None), (None, "preferred")])
def test_a_remote_managed_ports_pci_request_as_nova_makes_it(conf, physnet, policy):
    # NOTE: nova.network.neutron.API.create_resource_requests: the spec's
    # tags, and the port's numa_affinity_policy (else the flavor's) as the
    # request's numa_policy
    request = objects.InstancePCIRequest(
        count=1, spec=[{"physical_network": physnet,
                        "remote_managed": str(True)}],
        request_id="22222222-2222-2222-2222-222222222222",
        requester_id="dpu-port")
    if policy:
        request.numa_policy = policy
    spec_obj = objects.RequestSpec(
        flavor=objects.Flavor(name="m1", vcpus=2, memory_mb=1024, root_gb=0,
                              ephemeral_gb=0, swap=0, extra_specs={}),
        image=objects.ImageMeta.from_dict({"name": "img", "properties": {}}),
        scheduler_hints={},
        pci_requests=objects.InstancePCIRequests(requests=[request]))
    (port,) = nova_spec.ports(spec_obj)
    assert (port.id, port.vnic_type, port.physnet, port.affinity_policy) == (
        "dpu-port", "remote-managed", physnet, policy)
    manager = helpers.manager(conf, ("numa", "sriov"))
    ours = nova_spec.from_nova(spec_obj, manager.plugins)
    (wanted,) = ours.requests["sriov"].ports
    assert (wanted.remote_managed, wanted.physnet, wanted.affinity_policy) == (
        True, physnet, policy)


def _spec_obj(policy, flavor_policy=None, image_policy=None):
    """nova's RequestSpec of a guest with one direct port, its PCI request
    as ``create_resource_requests`` makes it: ``numa_policy`` the port's
    policy, else the flavor's or image's."""
    request = objects.InstancePCIRequest(
        count=1, spec=[{"physical_network": "physnet4", "remote_managed": "False"}],
        request_id="33333333-3333-3333-3333-333333333333", requester_id="port-1")
    if policy:
        request.numa_policy = policy
    extra = ({"hw:pci_numa_affinity_policy": flavor_policy} if flavor_policy
             else {})
    props = ({"hw_pci_numa_affinity_policy": image_policy} if image_policy
             else {})
    return objects.RequestSpec(
        flavor=objects.Flavor(name="m1", vcpus=2, memory_mb=1024, root_gb=0,
                              ephemeral_gb=0, swap=0, extra_specs=extra),
        image=objects.ImageMeta.from_dict({"name": "img", "properties": props}),
        scheduler_hints={},
        pci_requests=objects.InstancePCIRequests(requests=[request]))


@pytest.mark.parametrize("policy, flavor_policy, image_policy, own", [
    ("required", "required", None, None),     # the flavor's, set on the port
    (None, None, None, None),
    ("preferred", None, "preferred", None),   # the image's
    ("preferred", "required", None, "preferred"),  # the port's own
    ("socket", None, None, "socket"),
])
def test_a_port_has_its_own_policy_only_where_it_differs_from_the_flavors(
        policy, flavor_policy, image_policy, own):
    (port,) = nova_spec.ports(_spec_obj(policy, flavor_policy, image_policy))
    assert port.affinity_policy == own


def test_a_spec_recorded_before_ports_had_policies_is_still_used(conf):
    # NOTE: nova copies the flavor's policy into every port's PCI request: a
    # spec the previous release recorded (sriov 1.1, ports without their
    # own policy) is the one nova's spec holds after the upgrade.
    manager = helpers.manager(conf, ("numa", "sriov"))
    spec_obj = _spec_obj("required", "required")
    spec = nova_spec.from_nova(spec_obj, manager.plugins)
    doc = json.loads(spec.to_json())
    # ports without a policy of their own are written as before they had
    # one (format 2.0, without the field)
    assert doc["version"] == "2.0"
    assert not any("affinity_policy" in port for port in doc["ports"])
    for port in doc["requests"]["sriov"]["ports"]:
        port.pop("affinity_policy")
    doc["plugins"]["sriov"] = "1.1"
    spec_obj.scheduler_hints = {nova_spec.HINT: [json.dumps(doc)]}
    assert nova_spec.recorded(spec_obj, manager.plugins) is not None
