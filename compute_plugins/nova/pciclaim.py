"""Moving nova's PCI claim onto the scheduler's decision (the mixin's
``spawn``, and a live migration's destination).

nova's PCI tracker hands out the *last* free device of a pool
(``PciDeviceStats._allocate_devs`` pops it), the ``sriov`` plugin's decision
names the first free VF of the PF, or the first matching device: same pool,
another device. Why the swap is done this way:

- Making nova's claim pick the decided devices by itself (the instance's
  ``InstancePCIRequest`` spec naming the address) does not work: nova
  matches a spec against its *pools*, whose ``address`` is the PF's (all the
  VFs of a PF are one pool), never against a device; nor is the driver
  called between the scheduler and nova's claim.
- So, before nova's driver builds the guest, the devices nova claimed for a
  request whose devices differ from the decision's are given back to nova's
  tracker (nova's own ``PciDevice.free``, which puts them back in their
  pools), the decided devices are moved to the end of their pools and
  nova's own ``consume_requests`` is run again for that request: nova's
  filters (spec, NUMA cells, the Placement provider of the request, PF/VF
  dependents) therefore decide whether the decided devices fit the
  request, and nova's accounting (device states, pools, the instance's
  ``pci_devices``, the DB through the resource tracker's ``_update``) is
  nova's. When nova's claim then takes other devices than the decision's
  (a decided device is taken, or does not match the request), nova's
  previous devices are taken back the same way and the spawn is refused.
- A neutron port's binding profile (``pci_slot``...) was written from
  nova's claim before ``spawn``: it is rewritten from the new device with
  nova's own ``_get_pci_device_profile``, in ``network_info`` (which the
  guest XML is built from), in neutron and in the instance's cache.

- A live migration runs no ``spawn`` on its destination: nova claims the
  destination's devices in ``check_can_live_migrate_destination`` (left
  ``claimed``, allocated when the move ends) and the source writes them
  into the migrated guest from ``migrate_data`` (the flavor devices'
  ``pci_dev_map_src_dst``, the ports' destination binding profiles in
  ``vifs``). :func:`move_migration_claim` moves that claim the same way,
  from the driver's last destination check
  (``check_source_migrate_data_at_dest``), and rewrites both.

It runs under nova's ``compute_resources`` lock, as nova's claims do.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Optional

__all__ = ["decided_addresses", "move_migration_claim", "move_pci_claim"]

LOG = logging.getLogger(__name__)

#: (nova's PCI request, the device nova had taken, the decided one it has now)
Moved = list[tuple[Any, Any, Any]]


def decided_addresses(assignment: Any, requests: list[Any]) -> dict[str, list[str]]:
    """The decision's device addresses per nova PCI request id, for the
    requests the decision names devices of (a port's VF by the port id, an
    alias's devices by alias, split over nova's requests of that alias in
    order, ``count`` each)."""
    out: dict[str, list[str]] = {}
    by_alias: dict[str, list[str]] = {}
    for dev in assignment.devices:
        by_alias.setdefault(dev.alias, []).append(dev.address)
    for req in requests:
        if req.alias_name is None:
            addrs = [vf.vf_address for vf in assignment.vfs
                     if vf.port_id and vf.port_id == req.requester_id and vf.vf_address]
        else:
            pending = by_alias.get(req.alias_name, [])
            addrs, by_alias[req.alias_name] = pending[:req.count], pending[req.count:]
        if addrs:
            out[req.request_id] = addrs
    return out


def _take(tracker: Any, instance: Any, request: Any, numa_cells: Any,
          addresses: list[str], allocate: bool = True) -> list[Any]:
    """nova's claim of ``request`` for ``instance``, the devices at
    ``addresses`` first (moved to the end of their pools, where nova's
    claim takes from); the devices nova took: claimed, then allocated
    (``allocate``, a spawn's) or left claimed (a live migration's
    destination, allocated by nova when the move ends: its tracker's
    ``claims``)."""
    stats = tracker.stats
    for pool in stats.pools:
        wanted = [d for d in pool["devices"] if d.address in addresses]
        for dev in wanted:
            pool["devices"].remove(dev)
            pool["devices"].append(dev)
    devs = stats.consume_requests([request], numa_cells) or []
    for dev in devs:
        dev.claim(instance.uuid)
        if allocate:
            dev.allocate(instance)
    if devs:
        (tracker.allocations if allocate else tracker.claims)[instance.uuid] += devs
    return list(devs)


def _give_back(tracker: Any, instance: Any, devs: list[Any]) -> None:
    """nova's devices ``devs`` of ``instance`` freed, back in nova's pools."""
    for dev in devs:
        for mapping in (tracker.allocations, tracker.claims):
            tracker._remove_device_from_pci_mapping(instance.uuid, dev, mapping)
        tracker._free_device(dev, instance)


def _move(tracker: Any, instance: Any, requests: list[Any],
          wanted: dict[str, list[str]], cells: Any, host: str,
          refuse: Callable[[str], Exception], allocate: bool
          ) -> tuple[Moved, list[str]]:
    """Each request's devices in nova's ``tracker`` made the decided ones
    (``wanted``: request id -> addresses): the (request, old device, new
    device) moved and the differences found; under nova's lock."""
    moved: Moved = []
    differences: list[str] = []
    for req in requests:
        addrs = wanted.get(req.request_id)
        if not addrs:
            continue
        theirs = [d for d in tracker.pci_devs
                  if d.instance_uuid == instance.uuid and d.request_id == req.request_id
                  and d.status in ("claimed", "allocated")]
        if sorted(d.address for d in theirs) == sorted(addrs):
            continue
        if not theirs:
            # NOTE: nova claimed nothing for it here (a live migration's
            # port without neutron's binding-extended): never a claim nova
            # did not make
            LOG.warning("instance %s on host %s: nova claimed no device for "
                        "PCI request %s, the decision's %s are not claimed",
                        instance.uuid, host, req.alias_name or req.requester_id,
                        sorted(addrs))
            continue
        differences.append("PCI request %s: %s (nova) -> %s (decision)" % (
            req.alias_name or req.requester_id,
            sorted(d.address for d in theirs), sorted(addrs)))
        old = [d.address for d in theirs]
        _give_back(tracker, instance, theirs)
        got = _take(tracker, instance, req, cells, addrs, allocate)
        if sorted(d.address for d in got) != sorted(addrs):
            _give_back(tracker, instance, got)
            back = _take(tracker, instance, req, cells, old, allocate)
            if sorted(d.address for d in back) != sorted(old):
                LOG.error("instance %s: nova's PCI claim %s could not be "
                          "taken back, it holds %s", instance.uuid, old,
                          [d.address for d in back])
            raise refuse(
                "instance %s on host %s: nova's PCI claim cannot carry the "
                "scheduler's decision: PCI request %s takes %s (nova), the "
                "decision %s, which nova's tracker does not give it (taken, "
                "or not matching the request)" % (
                    instance.uuid, host, req.alias_name or req.requester_id,
                    sorted(old), sorted(addrs)))
        by_addr = {d.address: d for d in got}
        for old_dev, addr in zip(sorted(theirs, key=lambda d: d.address),
                                 sorted(addrs), strict=True):
            moved.append((req, old_dev, by_addr[addr]))
    return moved, differences


def _move_locked(context: Any, compute: Any, instance: Any, assignment: Any,
                 host: str, refuse: Callable[[str], Exception], allocate: bool,
                 cells: Callable[[], Any], save: Callable[[Any, Any], None]
                 ) -> tuple[Moved, list[str]]:
    """:func:`_move` for the instance's PCI requests the decision's
    ``assignment`` names devices of, under nova's ``compute_resources``
    lock (nova's claims take it); ``cells()``: the guest cells nova's claim
    is checked against, ``save(rt, tracker)``: nova's accounting written
    when something moved."""
    from nova import utils as nova_utils
    from nova.compute import resource_tracker

    requests = list(getattr(instance.pci_requests, "requests", None) or [])
    wanted = decided_addresses(assignment, requests)
    rt: Any = getattr(compute, "rt", None)
    tracker = getattr(rt, "pci_tracker", None)
    moved: Moved = []
    differences: list[str] = []
    if not wanted or tracker is None:
        return moved, differences

    @nova_utils.synchronized(  # type: ignore[untyped-decorator]  # nova is untyped
        resource_tracker.COMPUTE_RESOURCE_SEMAPHORE, fair=True)
    def locked() -> None:
        done, found = _move(tracker, instance, requests, wanted, cells(), host,
                            refuse, allocate)
        moved.extend(done)
        differences.extend(found)
        if differences:
            save(rt, tracker)

    locked()
    return moved, differences


def move_pci_claim(context: Any, compute: Any, instance: Any, assignment: Any,
                   host: str, network_info: Any,
                   refuse: Callable[[str], Exception]) -> list[str]:
    """Make nova's PCI claim of ``instance`` the decision's devices (see the
    module docstring); the differences found ("request R: [nova] -> [decision]"),
    empty when nova's claim was the decision's already.

    :param compute: nova's ``ComputeManager`` (``rt``, ``network_api``).
    :param refuse: builds the exception raised when nova's claim cannot
        carry the decision (nova's previous devices are kept then).
    """
    def cells() -> Any:
        topology = getattr(instance, "numa_topology", None)
        return topology.cells if topology else None

    def save(rt: Any, tracker: Any) -> None:
        node = getattr(instance, "node", None)
        cn = rt.compute_nodes.get(node) if node else None
        if cn is not None:
            rt._update(context.elevated(), cn)
        else:
            tracker.save(context)

    moved, differences = _move_locked(context, compute, instance, assignment, host,
                                      refuse, True, cells, save)
    if differences:
        _rebind_ports(context, compute, instance, network_info, moved)
    return differences


def move_migration_claim(context: Any, compute: Any, instance: Any, assignment: Any,
                         host: str, migrate_data: Any,
                         refuse: Callable[[str], Exception]) -> list[str]:
    """On a live migration's destination: make nova's PCI claim there
    (``check_can_live_migrate_destination``'s, devices ``claimed`` for the
    instance) the devices of the destination's decision, and what the
    source builds the destination's guest from follow them: the flavor
    devices' source-to-destination addresses
    (``migrate_data.pci_dev_map_src_dst``, which nova's
    ``libvirt.migration`` writes into the migrated XML) and a port's
    destination binding profile (``migrate_data.vifs``, by nova's own
    ``_update_migrate_vifs_profile_with_pci``, which the conductor binds
    the ports on the destination with). The differences found, empty
    when nova's claim was the decision's already.

    :param compute: nova's ``ComputeManager`` of the destination.
    :param refuse: builds the exception raised when nova's claim cannot
        carry the decision (nova's claim is kept then).
    """
    def cells() -> Any:
        # NOTE: nova's destination claim uses the move's new topology
        # (_claim_from_pci_reqs, _claim_pci_for_instance_vifs)
        migration_context = getattr(instance, "migration_context", None)
        topology = getattr(migration_context, "new_numa_topology", None)
        return topology.cells if topology else None

    def save(_rt: Any, tracker: Any) -> None:
        tracker.save(context)  # as nova's claim_pci_devices

    moved, differences = _move_locked(context, compute, instance, assignment, host,
                                      refuse, False, cells, save)
    if not differences:
        return []
    renamed = {old.address: new.address for _req, old, new in moved}
    mapping = dict(getattr(migrate_data, "pci_dev_map_src_dst", None) or {})
    if mapping:
        migrate_data.pci_dev_map_src_dst = {
            src: renamed.get(dst, dst) for src, dst in mapping.items()}
    ports = {req.requester_id: new for req, _old, new in moved
             if req.alias_name is None and req.requester_id}
    if ports and "vifs" in migrate_data:
        compute._update_migrate_vifs_profile_with_pci(migrate_data.vifs, ports)
    return differences


def _rebind_ports(context: Any, compute: Any, instance: Any, network_info: Any,
                  moved: list[tuple[Any, Any, Any]]) -> None:
    """The binding profile of the neutron ports whose device moved, from
    the new device (nova's ``_get_pci_device_profile``): in
    ``network_info``, in neutron and in the instance's network cache."""
    ports = [(req.requester_id, new) for req, _old, new in moved
             if req.alias_name is None and req.requester_id]
    if not ports:
        return
    from nova.network import neutron as neutron_api

    api = getattr(compute, "network_api", None) or neutron_api.API()
    vifs: dict[str, Any] = {vif["id"]: vif for vif in (network_info or [])}
    client: Optional[Any] = None
    for port_id, dev in ports:
        profile = api._get_pci_device_profile(dev)
        vif = vifs.get(port_id)
        if vif is not None:
            vif["profile"] = dict(vif.get("profile") or {}, **profile)
        if client is None:
            client = neutron_api.get_client(context, admin=True)
        port = client.show_port(port_id)["port"]
        binding = dict(port.get("binding:profile") or {}, **profile)
        client.update_port(port_id, {"port": {"binding:profile": binding}})
    if network_info is not None:
        neutron_api.update_instance_cache_with_nw_info(
            api, context, instance, nw_info=network_info)
