"""The mixin moves nova's PCI claim onto the scheduler's decision.

nova 34's own pieces: nova's ``ResourceTracker`` over nova's fake libvirt
(one PF ``0000:81:00.0`` with 4 VFs ``.1``-``.4``, nova's ``[pci]
device_spec`` and alias ``vfs``), nova's DB; nova's ``instance_claim``
claims the instance's PCI request as a nova compute does before ``spawn``
(it takes the *last* free VF of its pool), then the mixin's
``plugin_carry_pci`` (what its ``spawn`` calls) gets the sriov plugin's
decision (the decision's ``SRIOVAssignment``, made here: the scheduler
side is tests/compat/test_nova_decision.py). nova's tracker, DB, the
instance's ``pci_devices`` must all name the decided VF, and later claims
and the delete must count it.

Skipped without nova unless ``COMPUTE_PLUGINS_COMPAT`` is set.
"""

from __future__ import annotations

import json
import os
import types
import uuid
import warnings
from typing import Any

import pytest

if os.environ.get("COMPUTE_PLUGINS_COMPAT"):
    import nova.compute.resource_tracker  # noqa: F401
else:
    pytest.importorskip("nova.compute.resource_tracker")

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from nova import context as nova_context
    from nova import objects
    from nova.compute import resource_tracker
    from nova.pci import request as pci_request
    from nova.scheduler.client import report
    from nova.virt.libvirt import driver as libvirt_driver

from compute_plugins.nova.driver import (  # noqa: E402
    DecisionRefused,
    PluginProviderTreeMixin,
)
from compute_plugins.request.groups import Decision  # noqa: E402
from compute_plugins.request.types import FrozenMap  # noqa: E402
from resources.sriov.request import DeviceAssignment, SRIOVAssignment  # noqa: E402
from tests.compat.nova_libvirt import NovaLibvirt, fakelibvirt  # noqa: E402
from tests.unit.resources import helpers  # noqa: E402

NODE = "compute1"
PROJECT = "a0000000-0000-0000-0000-000000000001"
USER = "b0000000-0000-0000-0000-000000000001"
VF = "0000:81:00.%d"


class PluginLibvirtDriver(PluginProviderTreeMixin, libvirt_driver.LibvirtDriver):
    """nova's libvirt driver with the plugins."""


@pytest.fixture(scope="module")
def world():
    nova = NovaLibvirt()
    nova.setUp()
    conf, fixture = helpers.make_conf()
    try:
        nova.services()
        nova.connect(NODE, pci_info=fakelibvirt.HostPCIDevicesInfo(
            num_pci=0, num_pfs=1, num_vfs=4))
        nova.conf.set_override("host", NODE)
        nova.conf.set_override("device_spec", [json.dumps(
            {"vendor_id": fakelibvirt.PCI_VEND_ID,
             "product_id": fakelibvirt.VF_PROD_ID})], "pci")
        nova.conf.set_override("alias", [json.dumps(
            {"name": "vfs", "vendor_id": fakelibvirt.PCI_VEND_ID,
             "product_id": fakelibvirt.VF_PROD_ID, "device_type": "type-VF"})], "pci")
        driver = nova.driver(PluginLibvirtDriver)
        driver.plugin_manager = helpers.manager(conf, ("disk",))
        context = nova_context.get_admin_context()
        service = objects.Service(context, host=NODE, binary="nova-compute",
                                  topic="compute")
        service.create()
        rt = resource_tracker.ResourceTracker(NODE, driver, report.SchedulerReportClient())
        rt.service_ref = service
        rt.update_available_resource(context, NODE, startup=True)
        # what the driver reaches nova's compute manager by (its virtapi)
        driver.virtapi._compute = types.SimpleNamespace(rt=rt, network_api=None)
        yield types.SimpleNamespace(nova=nova, driver=driver, rt=rt, context=context)
    finally:
        nova.conf.clear_override("device_spec", "pci")
        nova.conf.clear_override("alias", "pci")
        fixture.cleanUp()
        nova.cleanUp()


def vfs_instance(world: Any, **fields: Any) -> Any:
    """An instance (in nova's DB) whose flavor asks one ``vfs`` device."""
    flavor = objects.Flavor(name="vf", vcpus=1, memory_mb=512, root_gb=1,
                            ephemeral_gb=0, swap=0, flavorid="vf",
                            extra_specs={"pci_passthrough:alias": "vfs:1"})
    inst = objects.Instance(world.context, uuid=str(uuid.uuid4()),
                            project_id=PROJECT, user_id=USER,
                            flavor=flavor, vcpus=1, memory_mb=512, root_gb=1,
                            ephemeral_gb=0, numa_topology=None, **fields)
    inst.pci_requests = pci_request.get_pci_requests_from_flavor(flavor)
    inst.pci_requests.instance_uuid = inst.uuid
    inst.create()
    return inst


def boot(world: Any) -> Any:
    """An instance asking one ``vfs`` device, claimed by nova's tracker."""
    inst = vfs_instance(world, vm_state="building", task_state="spawning")
    inst.pci_devices = objects.PciDeviceList(objects=[])
    world.rt.instance_claim(world.context, inst, NODE, None)
    return inst


def decision(*addresses: str) -> Any:
    """The part of a recorded request the mixin reads: the decision's
    sriov assignment naming ``addresses`` for the alias."""
    return types.SimpleNamespace(decision=Decision(
        host=NODE, nodename=NODE,
        assignments=FrozenMap({"sriov": SRIOVAssignment(devices=tuple(
            DeviceAssignment(requester_id="", alias="vfs", address=a)
            for a in addresses))})))


def in_db(world: Any) -> dict[str, tuple[str, Any]]:
    devs = objects.PciDeviceList.get_by_compute_node(
        world.context, world.rt.compute_nodes[NODE].id)
    return {d.address: (d.status, d.instance_uuid) for d in devs
            if d.dev_type == "type-VF"}


def test_nova_claim_moves_onto_the_decided_vf_everywhere(world, caplog):
    inst = boot(world)
    # nova's claim took the last VF of the pool
    assert [d.address for d in inst.pci_devices] == [VF % 4]
    with caplog.at_level("ERROR"):
        world.driver.plugin_carry_pci(world.context, inst, decision(VF % 1),
                                      host=NODE)
    assert "nova's PCI claim differs" in caplog.text
    assert VF % 1 in caplog.text and VF % 4 in caplog.text
    assert [d.address for d in inst.pci_devices] == [VF % 1]
    db = in_db(world)
    assert db[VF % 1] == ("allocated", inst.uuid)
    assert db[VF % 4] == ("available", None)
    free = {d.address for d in world.rt.pci_tracker.stats.get_free_devs()}
    assert VF % 1 not in free and VF % 4 in free

    # a later boot never gets the decided VF; nova's pool gave .4 back
    other = boot(world)
    assert [d.address for d in other.pci_devices] == [VF % 4]

    # a decision naming another instance's VF is refused, nova's claim stays
    third = boot(world)
    kept = [d.address for d in third.pci_devices]
    with pytest.raises(DecisionRefused) as refused:
        world.driver.plugin_carry_pci(world.context, third, decision(VF % 1),
                                      host=NODE)
    assert VF % 1 in str(refused.value) and third.uuid in str(refused.value)
    assert [d.address for d in third.pci_devices] == kept
    assert in_db(world)[kept[0]] == ("allocated", third.uuid)

    # the delete frees the decided VF, not the one nova had claimed
    world.rt.pci_tracker.free_instance(world.context, inst)
    world.rt.pci_tracker.save(world.context)
    assert in_db(world)[VF % 1] == ("available", None)
    assert in_db(world)[VF % 4] == ("allocated", other.uuid)


def test_nova_claim_already_the_decision_is_left_alone(world, caplog):
    inst = boot(world)
    mine = [d.address for d in inst.pci_devices]
    with caplog.at_level("ERROR"):
        world.driver.plugin_carry_pci(world.context, inst, decision(*mine), host=NODE)
    assert "differs" not in caplog.text
    assert [d.address for d in inst.pci_devices] == mine


def moving_in(world: Any) -> Any:
    """An instance live-migrating to this host: nova's destination claim of
    its ``vfs`` request (``check_can_live_migrate_destination``'s
    ``_flavor_based_pci_claim``: nova's tracker, devices ``claimed``)."""
    inst = vfs_instance(world, host="source", vm_state="active",
                        task_state="migrating")
    inst.migration_context = None
    world.rt.claim_pci_devices(world.context, objects.InstancePCIRequests(
        requests=inst.pci_requests.requests, instance_uuid=inst.uuid), None)
    return inst


def claimed(world: Any, inst: Any) -> list[str]:
    return sorted(d.address for d in world.rt.pci_tracker.pci_devs
                  if d.instance_uuid == inst.uuid and d.status == "claimed")


def free_all(world: Any) -> Any:
    """nova's tracker with every device free again (the module's world is
    shared); the tracker."""
    tracker = world.rt.pci_tracker
    for uuid_ in set(tracker.allocations) | set(tracker.claims):
        tracker.free_instance(world.context, objects.Instance.get_by_uuid(
            world.context, uuid_, expected_attrs=["pci_devices"]))
    tracker.save(world.context)
    return tracker


def port_moving_in(world: Any, port: str) -> Any:
    """An instance live-migrating to this host with one VF port ``port``
    (its PCI request; nova's claim not made yet)."""
    flavor = objects.Flavor(name="small", vcpus=1, memory_mb=512, root_gb=1,
                            ephemeral_gb=0, swap=0, flavorid="small", extra_specs={})
    inst = objects.Instance(world.context, uuid=str(uuid.uuid4()),
                            project_id=PROJECT, user_id=USER, host="source",
                            flavor=flavor, vcpus=1, memory_mb=512, root_gb=1,
                            ephemeral_gb=0, vm_state="active",
                            task_state="migrating", numa_topology=None)
    inst.pci_requests = objects.InstancePCIRequests(instance_uuid=inst.uuid, requests=[
        objects.InstancePCIRequest(
            count=1, requester_id=port, request_id=str(uuid.uuid4()),
            spec=[{"vendor_id": fakelibvirt.PCI_VEND_ID,
                   "product_id": fakelibvirt.VF_PROD_ID}])])
    inst.create()
    inst.migration_context = None
    return inst


def test_a_live_migrations_destination_claim_moves_onto_its_decision(world, caplog):
    from nova import exception as nova_exception

    free_all(world)
    inst = moving_in(world)
    [nova_pick] = claimed(world, inst)  # the last free VF of its pool
    decided = min(VF % n for n in range(1, 5) if VF % n != nova_pick)
    source = "0000:05:00.3"
    data = objects.LibvirtLiveMigrateData(pci_dev_map_src_dst={source: nova_pick})
    with caplog.at_level("ERROR"):
        world.driver.plugin_move_pci(world.context, inst, decision(decided), data, NODE)
    assert "live migration to host %s: nova's PCI claim differs" % NODE in caplog.text
    # what nova's source writes into the migrated guest's XML
    assert data.pci_dev_map_src_dst == {source: decided}
    assert claimed(world, inst) == [decided]
    assert in_db(world)[decided] == ("claimed", inst.uuid)
    assert in_db(world)[nova_pick] == ("available", None)
    # the move's end (post_live_migration_at_destination) allocates it
    world.rt.allocate_pci_devices_for_instance(world.context, inst)
    assert in_db(world)[decided] == ("allocated", inst.uuid)

    # a decision naming a device nova's tracker does not give: refused as
    # a destination's precheck (nova's conductor tries another host), nova's
    # claim and map kept
    other = moving_in(world)
    kept = claimed(world, other)
    data = objects.LibvirtLiveMigrateData(pci_dev_map_src_dst={source: kept[0]})
    with pytest.raises(nova_exception.MigrationPreCheckError) as refused:
        world.driver.plugin_move_pci(world.context, other, decision(decided), data, NODE)
    assert decided in str(refused.value) and other.uuid in str(refused.value)
    assert claimed(world, other) == kept
    assert data.pci_dev_map_src_dst == {source: kept[0]}


def test_a_migrating_ports_destination_profile_follows_the_decision(world):
    # a port's VF on the destination: nova's _claim_pci_for_instance_vifs
    # claims it, nova's _update_migrate_vifs_profile_with_pci writes the
    # destination binding profile the conductor binds the port with; after
    # the move it names the decided VF
    from nova.compute import manager as compute_manager
    from nova.network import model as network_model

    from resources.sriov.request import VFAssignment

    free_all(world)
    port = "d0000000-0000-0000-0000-000000000001"
    inst = port_moving_in(world, port)
    [nova_dev] = world.rt.claim_pci_devices(world.context, inst.pci_requests, None)
    decided = min(VF % n for n in range(1, 5) if VF % n != nova_dev.address)
    source_vif = network_model.VIF(id=port, profile={"pci_slot": "0000:05:00.1"})
    vif = objects.VIFMigrateData(port_id=port, source_vif=source_vif)
    manager = compute_manager.ComputeManager.__new__(compute_manager.ComputeManager)
    manager._update_migrate_vifs_profile_with_pci([vif], {port: nova_dev})
    assert vif.profile["pci_slot"] == nova_dev.address
    data = objects.LibvirtLiveMigrateData(pci_dev_map_src_dst={}, vifs=[vif])
    compute = world.driver.virtapi._compute
    compute._update_migrate_vifs_profile_with_pci = (
        manager._update_migrate_vifs_profile_with_pci)
    try:
        world.driver.plugin_move_pci(world.context, inst, types.SimpleNamespace(
            decision=Decision(host=NODE, nodename=NODE, assignments=FrozenMap({
                "sriov": SRIOVAssignment(vfs=(VFAssignment(
                    requester_id=port, provider_uuid="", pf_address=VF % 0,
                    vf_address=decided, port_id=port),))}))), data, NODE)
    finally:
        del compute._update_migrate_vifs_profile_with_pci
    assert claimed(world, inst) == [decided]
    assert data.vifs[0].profile["pci_slot"] == decided
    assert data.pci_dev_map_src_dst == {}


def test_the_destination_check_moves_the_claim_onto_the_moves_decision_only(
        world, conf, tmp_path):
    # nova's last destination check (LibvirtDriver's, through the mixin)
    # with nova's Migration: a decision recorded before nova created the
    # migration (an earlier stay here) is not the move's and leaves nova's
    # claim; the one recorded since moves it; a migration without PCI
    # requests is not looked at; a rollback frees the decided device
    from compute_plugins.hoststate.store import HostStateStore
    from compute_plugins.nova import decisions as nova_decisions
    from compute_plugins.request.inputs import Flavor as OurFlavor
    from compute_plugins.request.spec import RequestSpec

    tracker = free_all(world)
    manager = world.driver.plugin_manager
    world.driver.plugin_manager = helpers.manager(conf, ("disk", "sriov"))
    source = "0000:05:00.3"
    with HostStateStore("sqlite:///%s" % (tmp_path / "hs.sqlite")) as store:
        world.driver.plugin_decisions = nova_decisions.NovaDecisions(store)
        try:
            inst = moving_in(world)
            [nova_pick] = claimed(world, inst)
            decided = min(VF % n for n in range(1, 5) if VF % n != nova_pick)
            spec = RequestSpec(
                flavor=OurFlavor(vcpus=1, memory_mb=512),
                plugin_versions=FrozenMap({"sriov": "1.1"}),
                decision=decision(decided).decision)
            world.driver.plugin_decisions.record(inst.uuid, NODE, spec)
            migration = objects.Migration(
                world.context, instance_uuid=inst.uuid, source_compute="source",
                migration_type="live-migration", status="accepted")
            migration.create()

            def check(instance: Any) -> Any:
                data = objects.LibvirtLiveMigrateData(
                    pci_dev_map_src_dst={source: nova_pick})
                return world.driver.check_source_migrate_data_at_dest(
                    world.context, instance, data, migration, None, {})

            assert check(inst).pci_dev_map_src_dst == {source: nova_pick}
            assert claimed(world, inst) == [nova_pick]

            world.driver.plugin_decisions.record(inst.uuid, NODE, spec)
            assert check(inst).pci_dev_map_src_dst == {source: decided}
            assert claimed(world, inst) == [decided]
            assert in_db(world)[nova_pick] == ("available", None)

            # no PCI request: nothing read, nothing moved
            plain = objects.Instance(world.context, uuid=str(uuid.uuid4()),
                                     pci_requests=objects.InstancePCIRequests(requests=[]))
            world.driver.plugin_decisions = None
            world.driver.plugin_manager = None
            check(plain)
            assert world.driver.plugin_decisions is None
            assert world.driver.plugin_manager is None

            # nova's rollback at the destination frees the decided device
            world.rt.free_pci_device_claims_for_instance(world.context, inst)
            assert in_db(world)[decided] == ("available", None)
            assert inst.uuid not in tracker.claims
        finally:
            world.driver.plugin_manager = manager
            world.driver.plugin_decisions = None


def test_a_request_nova_claimed_nothing_for_here_is_left_alone(world):
    # nova claims a port's VF on a live migration's destination only when
    # neutron has the binding-extended extension (and the port's source
    # profile names a device): a request nova claimed nothing for here gets
    # no claim from the decision either
    from resources.sriov.request import VFAssignment

    tracker = free_all(world)
    port = "d0000000-0000-0000-0000-000000000002"
    inst = port_moving_in(world, port)
    data = objects.LibvirtLiveMigrateData(pci_dev_map_src_dst={})
    world.driver.plugin_move_pci(world.context, inst, types.SimpleNamespace(
        decision=Decision(host=NODE, nodename=NODE, assignments=FrozenMap({
            "sriov": SRIOVAssignment(vfs=(VFAssignment(
                requester_id=port, provider_uuid="", pf_address=VF % 0,
                vf_address=VF % 1, port_id=port),))}))), data, NODE)
    assert claimed(world, inst) == []
    assert inst.uuid not in tracker.claims
    assert in_db(world)[VF % 1] == ("available", None)
