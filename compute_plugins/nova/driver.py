"""``PluginProviderTreeMixin``: a nova virt driver's provider tree, by the plugins.

Put it first in a driver's bases::

    class Driver(PluginProviderTreeMixin, libvirt_driver.LibvirtDriver):
        pass

``update_provider_tree(provider_tree, nodename, allocations=None)`` then
discovers the host (:meth:`PluginProviderTreeMixin.plugin_host_info`: by
default the driver's own libvirt connection, ``self._host``, read with
the same parsers as a host snapshot) and lets the
:class:`~compute_plugins.runtime.manager.PluginManager` update nova's own
``ProviderTree``: the tree is copied into ours (same uuids, generations,
inventories, traits, aggregates), every plugin contributes, and only what
changed is written back into nova's tree with nova's own methods. When
inventory must move between providers and ``allocations`` is None, nova's
``ReshapeNeeded`` is raised, as nova's resource tracker expects: it calls
again with the allocations, which are moved in place
(:mod:`compute_plugins.tree.reshape`). The driver's static traits (CPU
features, storage buses, video and vif models...) are then set on the root
as nova's libvirt driver sets them.

``spawn`` executes the scheduler's decision
(:meth:`PluginProviderTreeMixin.plugin_decision`): ``PluginFitFilter``
recorded it in the host-state store when nova's scheduler selected this
host for the instance (:func:`compute_plugins.nova.decisions.decision_for`);
the mixin reads it without parsing the flavor, verifies it on the live
host (the host discovered now, under the decisions of the other instances
nova has on it), compares it with the allocation nova claimed (less an
evacuation's source-host providers, which nova keeps under the instance)
and with nova's own claim on the compute (``instance.numa_topology``, fitted by
nova's resource tracker), says every difference in one ERROR line naming
both, and builds the guest from the decision: nova's NUMA cells are set to
the decision's host cells and pinning before nova's driver writes the
guest, and nova's PCI claim is moved onto the decision's devices
(:meth:`PluginProviderTreeMixin.plugin_carry_pci`,
:mod:`compute_plugins.nova.pciclaim`). A decision that no longer holds,
or that nova's claim cannot be made to carry (another number of guest
cells, a decided device nova's tracker does not give), fails the spawn with
:class:`DecisionRefused` (nova then reschedules or errors the instance):
never a third answer.

A live migration's destination runs no ``spawn``: there the mixin moves
nova's destination PCI claim onto the devices of the decision recorded for
the move, in nova's last destination check
(:meth:`PluginProviderTreeMixin.check_source_migrate_data_at_dest`), and
the addresses the source writes into the migrated guest follow. With
``[pci] report_in_placement`` turned off after it was on,
``update_provider_tree`` refuses as nova does, before touching the tree
(:meth:`PluginProviderTreeMixin._plugin_pci_reporting_kept`).

The plugins' configuration comes from nova's ``[compute_plugins]
config_file`` (:mod:`compute_plugins.nova.conf`), unless the driver sets
``plugin_manager`` itself.
"""

from __future__ import annotations

import copy
import dataclasses
import datetime
import logging
import shutil
from typing import Any, Optional

from nova import exception as nova_exception
from oslo_config import cfg

from compute_plugins import exception
from compute_plugins.host.model import DiskInfo, DomainCaps, HostInfo, PMEMNamespace
from compute_plugins.hoststate import errors as store_errors
from compute_plugins.hoststate.store import HostStateStore
from compute_plugins.nova import decisions as nova_decisions
from compute_plugins.nova import pciclaim
from compute_plugins.request.spec import RequestSpec
from compute_plugins.runtime.manager import PluginManager
from compute_plugins.tree.provider_tree import ProviderTree

__all__ = ["DecisionRefused", "PluginProviderTreeMixin", "claim_differences",
           "copy_tree", "write_back"]


class DecisionRefused(nova_exception.NovaException):  # type: ignore[misc]  # nova is untyped
    """The compute cannot execute the scheduler's decision (it no longer
    holds on the host, or nova's claim cannot carry it)."""

    msg_fmt = "%(reason)s"


def _nova_cells(numa_topology: Any) -> list[tuple[int, dict[int, int], Optional[int]]]:
    """nova's claim per guest node: (host cell, pinning, page size)."""
    if numa_topology is None:
        return []
    return [(int(c.id), dict(c.cpu_pinning or {}), c.pagesize)
            for c in numa_topology.cells]


def _our_cells(assignment: Any) -> list[tuple[int, dict[int, int], Optional[int]]]:
    """The decision per guest node, as :func:`_nova_cells` (a floating
    guest has no NUMA topology in nova)."""
    if assignment is None or assignment.floating:
        return []
    return [(c.host_cell, dict(c.pinning), c.page_size_kb)
            for c in sorted(assignment.cells, key=lambda c: c.guest_cell)]


def claim_differences(decision_cells: list[tuple[int, dict[int, int], Optional[int]]],
                      nova_cells: list[tuple[int, dict[int, int], Optional[int]]]
                      ) -> list[str]:
    """How nova's claim differs from the decision, guest node by guest node
    (empty: they agree). A page size only one of them names (nova's ``4``
    for small pages, our None) is no difference."""
    if len(decision_cells) != len(nova_cells):
        return ["the decision has %d guest NUMA nodes, nova's claim %d"
                % (len(decision_cells), len(nova_cells))]
    out = []
    for node, (ours, theirs) in enumerate(zip(decision_cells, nova_cells, strict=True)):
        if ours[0] != theirs[0]:
            out.append("guest node %d: host cell %d (decision) vs %d (nova)"
                       % (node, ours[0], theirs[0]))
        if theirs[1] and ours[1] != theirs[1]:
            out.append("guest node %d: pinning %s (decision) vs %s (nova)"
                       % (node, sorted(ours[1].items()), sorted(theirs[1].items())))
        if None not in (ours[2], theirs[2]) and ours[2] != theirs[2]:
            out.append("guest node %d: %s KiB pages (decision) vs %s KiB (nova)"
                       % (node, ours[2], theirs[2]))
    return out

LOG = logging.getLogger(__name__)


def _naive_utc(when: Optional[datetime.datetime]) -> Optional[datetime.datetime]:
    """``when`` as the decisions table keeps times (naive UTC)."""
    if when is not None and when.tzinfo is not None:
        return when.astimezone(datetime.UTC).replace(tzinfo=None)
    return when


def _nova_conf() -> Any:
    """nova's ``CONF`` (its ``[pci]`` options registered)."""
    import nova.conf
    return nova.conf.CONF


def copy_tree(nova_tree: Any) -> ProviderTree:
    """Our ProviderTree holding exactly what nova's holds."""
    ours = ProviderTree()
    ours.restore([nova_tree.data(u) for u in nova_tree.get_provider_uuids()])
    return ours


def _depth(tree: ProviderTree, uuid: str) -> int:
    depth, data = 0, tree.data(uuid)
    while data.parent_uuid is not None:
        depth, data = depth + 1, tree.data(data.parent_uuid)
    return depth


def write_back(ours: ProviderTree, nova_tree: Any) -> None:
    """Change ``nova_tree`` into ``ours`` with nova's own methods, touching
    only what differs (a provider that changes parent is removed and made
    again with its uuid, as Placement re-parents)."""
    wanted = {u: ours.data(u) for u in ours.get_provider_uuids()}
    have = {u: nova_tree.data(u) for u in nova_tree.get_provider_uuids()}
    gone = [u for u in have if u not in wanted
            or wanted[u].parent_uuid != have[u].parent_uuid]
    for uuid in sorted(gone, key=lambda u: -len(list(_ancestors(have, u)))):
        if nova_tree.exists(uuid):
            nova_tree.remove(uuid)
    for uuid in sorted(wanted, key=lambda u: _depth(ours, u)):
        data = wanted[uuid]
        if not nova_tree.exists(uuid):
            if data.parent_uuid is None:
                nova_tree.new_root(data.name, uuid, generation=data.generation)
            else:
                nova_tree.new_child(data.name, data.parent_uuid, uuid=uuid,
                                    generation=data.generation)
        inventory = {rc: dict(rec) for rc, rec in data.inventory.items()}
        if nova_tree.has_inventory_changed(uuid, inventory):
            nova_tree.update_inventory(uuid, inventory)
        if nova_tree.have_traits_changed(uuid, data.traits):
            nova_tree.update_traits(uuid, data.traits)
        if nova_tree.have_aggregates_changed(uuid, data.aggregates):
            nova_tree.update_aggregates(uuid, data.aggregates)


def _ancestors(have: dict[str, Any], uuid: str) -> Any:
    parent = have[uuid].parent_uuid
    while parent is not None and parent in have:
        yield parent
        parent = have[parent].parent_uuid


class PluginProviderTreeMixin:
    """``update_provider_tree`` done by the resource plugins (see the
    module docstring)."""

    #: The plugins (built on first use from nova's configuration).
    plugin_manager: Optional[PluginManager] = None
    #: nova's libvirt ``Host``, set by the LibvirtDriver this is mixed into
    #: (nova is untyped).
    _host: Any

    #: Where the scheduler's decisions are read (built on first use from
    #: the plugins' ``[host_state] connection``).
    plugin_decisions: Optional[nova_decisions.NovaDecisions] = None

    def get_plugin_manager(self) -> PluginManager:
        if self.plugin_manager is None:
            from compute_plugins.nova import conf as nova_conf
            self.plugin_manager = PluginManager(nova_conf.plugin_conf())
        return self.plugin_manager

    def get_plugin_decisions(self) -> nova_decisions.NovaDecisions:
        if self.plugin_decisions is None:
            conf = self.get_plugin_manager().conf
            self.plugin_decisions = nova_decisions.NovaDecisions(
                HostStateStore.from_config(conf))
        return self.plugin_decisions

    def plugin_decision(self, context: Any, instance: Any,
                        allocations: Optional[dict[str, Any]] = None,
                        host: Optional[str] = None) -> Optional[RequestSpec]:
        """The scheduler's decision for ``instance`` on this host, verified
        on the live host and set into nova's claim (see the module
        docstring); None when the scheduler recorded none (logged: nova's
        claim is then the only answer, as in stock nova).

        :param allocations: what nova claimed in Placement (``spawn``'s).
        :param host: nova's service host (default: the compute manager's,
            else ``CONF.host``).
        :raises DecisionRefused: the decision does not hold on the live
            host, or nova's claim cannot carry it (ERROR logged).
        """
        if host is None:
            host = self._plugin_service_host()
        manager = self.get_plugin_manager()
        store = self.get_plugin_decisions()
        spec = nova_decisions.decision_for(store, instance.uuid, host,
                                           manager.plugins)
        if spec is None or spec.decision is None:
            LOG.warning("no scheduler decision for instance %s on host %s "
                        "(not scheduled here by PluginFitFilter: a reschedule "
                        "to an alternate host?): nova's own claim is used",
                        instance.uuid, host)
            return None
        decision = spec.decision
        problems = self._plugin_verify(context, instance, spec, host)
        if allocations is not None:
            # NOTE: the decision's allocation is the candidate nova claimed.
            claimed = {rp: {rc: int(n) for rc, n in (body.get("resources") or {}).items()}
                       for rp, body in allocations.items()}
            decided = {rp: dict(res) for rp, res in decision.allocations.items()}
            claimed = self._plugin_this_host(context, instance, claimed,
                                             decided, host)
            if claimed != decided:
                problems.append("Placement holds %s, the decision takes %s"
                                % (claimed, decided))
        if problems:
            reason = ("the scheduler's decision for instance %s on host %s "
                      "cannot be executed: %s" % (instance.uuid, host,
                                                  "; ".join(problems)))
            LOG.error("%s", reason)
            raise DecisionRefused(reason=reason)
        self._plugin_carry(instance, spec, host)
        return spec

    def _plugin_this_host(self, context: Any, instance: Any,
                          claimed: dict[str, dict[str, int]],
                          decided: dict[str, dict[str, int]], host: str
                          ) -> dict[str, dict[str, int]]:
        """``claimed`` less an evacuation's source-host providers: nova's
        evacuation keeps them under the instance next to this host's (it
        frees them when the source's compute service comes back); they are
        not this host's to compare with the decision.

        Only providers positively the source's are left out (INFO logged):
        neither in this host's provider tree (``self.provider_tree``, nova's,
        kept at each ``update_provider_tree``) nor in the decision, the
        instance's migration an evacuation to ``host``, and Placement naming
        the root of their tree the migration's ``source_node`` (nova names a
        compute node's root provider by its node). Any other provider stays
        in ``claimed``, so that a mismatch is refused loudly: outside an
        evacuation, a provider of a third host, one Placement cannot say, a
        provider of this host the cached tree lacks.
        """
        tree = getattr(self, "provider_tree", None)
        if tree is None:
            return claimed
        others = sorted(rp for rp in claimed
                        if rp not in decided and not tree.exists(rp))
        if not others:
            return claimed
        migration = self._plugin_migration(context, instance)
        if (migration is None
                or getattr(migration, "migration_type", None) != "evacuation"
                or getattr(migration, "dest_compute", None) != host):
            return claimed
        source = getattr(migration, "source_node", None)
        reportclient = getattr(getattr(getattr(self, "virtapi", None),
                                       "_compute", None), "reportclient", None)
        if not source or reportclient is None:
            LOG.warning("instance %s: evacuation to %s, providers %s are not "
                        "this host's but their host cannot be read (source "
                        "node %r, nova's report client %s): compared",
                        instance.uuid, host, others, source,
                        "missing" if reportclient is None else "present")
            return claimed
        left_out = set()
        for rp in others:
            try:
                found = reportclient.get_providers_in_tree(context, rp)
            except Exception as err:  # noqa: BLE001 - compared, so refused loudly
                LOG.warning("instance %s: cannot read provider %s's tree from "
                            "Placement: %s: %s", instance.uuid, rp,
                            type(err).__name__, err)
                continue
            roots = [p.get("name") for p in found
                     if p.get("uuid") == p.get("root_provider_uuid")]
            if roots == [source]:
                left_out.add(rp)
        if left_out:
            LOG.info("instance %s: evacuation from %s to %s: providers %s of "
                     "the source host are left out of the comparison of "
                     "Placement's allocation with the decision",
                     instance.uuid, source, host, sorted(left_out))
        return {rp: res for rp, res in claimed.items() if rp not in left_out}

    def _plugin_verify(self, context: Any, instance: Any, spec: RequestSpec,
                       host: str) -> list[str]:
        """Every reason the decision does not hold on the live host: this
        host discovered now, under the decisions of the other instances
        nova has on it."""
        manager = self.get_plugin_manager()
        assert spec.decision is not None
        nodename = spec.decision.nodename or host
        manager.discover(self.plugin_host_info(nodename))
        usage = self._plugin_usage(host, context, leave_out=instance.uuid)
        try:
            states, broken = manager.host_states(
                nodename, {n: tuple(a) for n, a in usage.items()}, host=host)
        except exception.ComputePluginsError as err:
            return ["the host's state: %s" % err]
        return (["%s: %s" % (r.plugin, r.reason) for r in broken
                 if r.plugin in spec.requests]
                + ["%s: %s" % (r.plugin, r.reason)
                   for r in manager.plugins.verify(states, spec, host=host)])

    @staticmethod
    def _plugin_carry(instance: Any, spec: RequestSpec, host: str) -> None:
        """Make nova's claim (``instance.numa_topology``, which nova's driver
        builds the guest from) the decision's, saying loudly where nova's
        resource tracker had fitted otherwise.

        :raises DecisionRefused: nova's claim has another number of guest
            NUMA nodes than the decision (it cannot carry it).
        """
        assert spec.decision is not None
        assignment = spec.decision.assignments.get("numa")
        ours = _our_cells(assignment)
        topology = getattr(instance, "numa_topology", None)
        differences = claim_differences(ours, _nova_cells(topology))
        if not differences:
            return
        LOG.error("instance %s on host %s: nova's claim differs from the "
                  "scheduler's decision (%s); the guest gets the decision. "
                  "decision: %s; nova's claim: %s", instance.uuid, host,
                  "; ".join(differences), ours, _nova_cells(topology))
        if topology is None or len(ours) != len(topology.cells):
            reason = ("instance %s on host %s: nova's claim cannot carry the "
                      "scheduler's decision: %s"
                      % (instance.uuid, host, "; ".join(differences)))
            LOG.error("%s", reason)
            raise DecisionRefused(reason=reason)
        for cell, (host_cell, pinning, _pages) in zip(topology.cells, ours, strict=True):
            cell.id = host_cell
            if cell.cpu_pinning_raw is not None or pinning:
                cell.cpu_pinning = pinning

    def plugin_carry_pci(self, context: Any, instance: Any, spec: RequestSpec,
                         network_info: Any = None, host: Optional[str] = None) -> None:
        """Make nova's PCI claim of ``instance`` (its tracker, the instance's
        ``pci_devices``, a port's binding profile: what nova's driver builds
        the guest from) the devices of the decision's ``sriov`` assignment,
        saying in one ERROR line where nova's claim had taken others
        (:func:`compute_plugins.nova.pciclaim.move_pci_claim`, which says
        why it is done so).

        :raises DecisionRefused: nova's tracker does not give the decided
            devices to the request (nova's claim is kept).
        """
        assert spec.decision is not None
        assignment = spec.decision.assignments.get("sriov")
        compute = getattr(getattr(self, "virtapi", None), "_compute", None)
        if assignment is None or compute is None:
            return
        if host is None:
            host = self._plugin_service_host()

        def refuse(reason: str) -> Exception:
            LOG.error("%s", reason)
            return DecisionRefused(reason=reason)

        differences = pciclaim.move_pci_claim(context, compute, instance, assignment,
                                              host, network_info, refuse)
        if differences:
            LOG.error("instance %s on host %s: nova's PCI claim differs from the "
                      "scheduler's decision (%s); the guest gets the decision's "
                      "devices", instance.uuid, host, "; ".join(differences))

    def check_source_migrate_data_at_dest(self, context: Any, instance: Any,
                                          migrate_data: Any, migration: Any,
                                          limits: Any, allocs: Any) -> Any:
        """nova's last check on a live migration's destination, nova's PCI
        claim there moved onto the destination decision's devices first
        (:meth:`plugin_carry_pci_move`)."""
        self.plugin_carry_pci_move(context, instance, migrate_data, migration)
        return super().check_source_migrate_data_at_dest(  # type: ignore[misc]  # nova's driver
            context, instance, migrate_data, migration, limits, allocs)

    def plugin_carry_pci_move(self, context: Any, instance: Any, migrate_data: Any,
                              migration: Any, host: Optional[str] = None) -> None:
        """On a live migration's destination (this host): make nova's PCI
        claim here the devices of the decision the scheduler recorded for
        the move, and the addresses the source writes into the migrated
        guest follow (:func:`compute_plugins.nova.pciclaim.move_migration_claim`).

        nova claims the destination's devices itself in
        ``check_can_live_migrate_destination`` (its tracker's pick, the last
        free device of a pool) and hands the source the map of source to
        destination addresses (``migrate_data.pci_dev_map_src_dst``) and the
        ports' destination binding profiles (``migrate_data.vifs``); nothing
        of the spawn runs on the destination, so without this the migrated
        guest has nova's devices, not the decision's. Only a decision
        recorded since nova created the migration counts (an older one is
        of an earlier stay on this host); without one nova's claim stands
        (a WARNING, as a spawn without a decision).

        :raises nova.exception.MigrationPreCheckError: nova's tracker does
            not give the decided devices (nova's claim is kept; nova's
            conductor then tries another destination).
        """
        if host is None:
            host = self._plugin_service_host()
        if not getattr(instance.pci_requests, "requests", None):
            return
        manager = self.get_plugin_manager()
        since = _naive_utc(getattr(migration, "created_at", None))
        spec = nova_decisions.decision_for(self.get_plugin_decisions(), instance.uuid,
                                           host, manager.plugins, since=since)
        if spec is None or spec.decision is None:
            LOG.warning("no scheduler decision for the live migration of instance "
                        "%s to host %s: nova's own PCI claim is used",
                        instance.uuid, host)
            return
        self.plugin_move_pci(context, instance, spec, migrate_data, host)

    def plugin_move_pci(self, context: Any, instance: Any, spec: RequestSpec,
                        migrate_data: Any, host: str) -> None:
        """Make nova's PCI claim of ``instance`` on this live migration's
        destination the devices of the decision's ``sriov`` assignment
        (``spec``, recorded for this host), saying in one ERROR line where
        nova's claim had taken others (:meth:`plugin_carry_pci_move`).

        :raises nova.exception.MigrationPreCheckError: nova's tracker does
            not give the decided devices (nova's claim is kept).
        """
        assert spec.decision is not None
        assignment = spec.decision.assignments.get("sriov")
        compute = getattr(getattr(self, "virtapi", None), "_compute", None)
        if assignment is None or compute is None:
            return

        def refuse(reason: str) -> Exception:
            LOG.error("%s", reason)
            error: Exception = nova_exception.MigrationPreCheckError(reason=reason)
            return error

        differences = pciclaim.move_migration_claim(
            context, compute, instance, assignment, host, migrate_data, refuse)
        if differences:
            LOG.error("instance %s, live migration to host %s: nova's PCI claim "
                      "differs from the scheduler's decision (%s); the migrated "
                      "guest gets the decision's devices", instance.uuid, host,
                      "; ".join(differences))

    def spawn(self, context: Any, instance: Any, image_meta: Any,
              injected_files: Any, admin_password: Any, allocations: Any,
              network_info: Any = None, block_device_info: Any = None,
              power_on: bool = True, accel_info: Any = None) -> Any:
        """nova's ``spawn``, executing the scheduler's decision first
        (:meth:`plugin_decision`), nova's PCI claim moved onto the
        decision's devices first (:meth:`plugin_carry_pci`)."""
        spec = self.plugin_decision(context, instance, allocations)
        if spec is not None:
            self.plugin_carry_pci(context, instance, spec, network_info)
        return super().spawn(  # type: ignore[misc]  # nova's driver, after us
            context, instance, image_meta, injected_files, admin_password,
            allocations, network_info=network_info,
            block_device_info=block_device_info, power_on=power_on,
            accel_info=accel_info)

    def finish_revert_migration(self, context: Any, instance: Any, network_info: Any,
                                migration: Any, block_device_info: Any = None,
                                power_on: bool = True, **kwargs: Any) -> Any:
        """nova's ``finish_revert_migration`` (the source host of a reverted
        resize or cold migration), then :meth:`plugin_reverted`."""
        answer = super().finish_revert_migration(  # type: ignore[misc]  # nova's driver
            context, instance, network_info, migration, block_device_info,
            power_on, **kwargs)
        self.plugin_reverted(instance, migration)
        return answer

    def destroy(self, context: Any, instance: Any, network_info: Any,
                block_device_info: Any = None, destroy_disks: bool = True,
                **kwargs: Any) -> Any:
        """nova's ``destroy``; when nova reverts a move (the guest on the
        move's destination, ``task_state`` ``resize_reverting``), the move's
        decision on this host is forgotten first (:meth:`plugin_reverted`),
        so that the publish of nova's ``drop_move_claim_at_dest`` right
        after no longer counts the instance here."""
        answer = super().destroy(  # type: ignore[misc]  # nova's driver
            context, instance, network_info, block_device_info, destroy_disks,
            **kwargs)
        if getattr(instance, "task_state", None) == "resize_reverting":
            migration = self._plugin_migration(context, instance)
            if migration is not None and migration.dest_compute == self._plugin_service_host():
                self.plugin_reverted(instance, migration, publish=False)
        return answer

    @staticmethod
    def _plugin_migration(context: Any, instance: Any) -> Any:
        """The migration of the instance's migration context (None: none,
        or it cannot be read: logged)."""
        from nova import objects
        try:
            migration_context = instance.migration_context
            if migration_context is None:
                return None
            return objects.Migration.get_by_id(context, migration_context.migration_id)
        except Exception as err:  # noqa: BLE001 - never into nova's revert or spawn
            LOG.error("instance %s: cannot read its migration (of its migration context): %s: %s",
                      instance.uuid, type(err).__name__, err)
            return None

    def plugin_reverted(self, instance: Any, migration: Any, publish: bool = True) -> None:
        """nova reverted ``migration`` of ``instance`` back to this host:
        the decisions the scheduler recorded for the move (on its
        destination host, recorded after nova created the migration) are
        forgotten, so the instance counts again with the decision it runs
        under (a resize to the same host otherwise kept the new flavor's
        decision as the newest, and the host published the reverted
        flavor's resources as used); this host publishes again
        (``publish``: the source host, ``migration.source_node``). A failure
        is one ERROR line, never raised into nova."""
        created = _naive_utc(getattr(migration, "created_at", None))
        dest = getattr(migration, "dest_compute", None)
        if created is None or not dest:
            LOG.warning("instance %s: reverted migration without a creation "
                        "time or destination: its move's decision is kept",
                        instance.uuid)
            return
        try:
            forgotten = self.get_plugin_decisions().forget_since(
                instance.uuid, str(dest), created)
        except Exception as err:  # noqa: BLE001 - never into nova's revert
            LOG.error("instance %s: cannot forget the decision of its reverted "
                      "move to %s: %s: %s", instance.uuid, dest,
                      type(err).__name__, err)
            return
        LOG.info("instance %s: reverted move to %s, %d decision(s) of the move "
                 "forgotten", instance.uuid, dest, forgotten)
        nodename = getattr(migration, "source_node", None) or getattr(instance, "node", None)
        if publish and forgotten and nodename:
            self.plugin_publish(str(nodename))

    def plugin_host_info(self, nodename: str) -> HostInfo:
        """The host as the plugins see it, read through nova's own libvirt
        ``Host`` (``self._host``) with the parsers a host snapshot uses:

        - the capabilities XML (cells, CPUs, page pools);
        - the online CPUs from ``getCPUMap`` (``Host.get_online_cpus``), as
          nova's driver counts them, so an offline CPU is never offered;
        - the node devices nova lists itself (``Host.list_pci_devices``,
          ``Host.list_mediated_devices``), each dumped with
          ``Host.device_lookup_by_name``, and the vDPA devices
          (``Host.list_all_devices`` with libvirt's ``CAP_VDPA``, as nova's
          driver lists them): the same devices nova's PCI and vGPU code see;
        - the memory (``Host.get_memory_mb_total``) and CPU count;
        - the disk from the driver's ``_get_local_gb_info`` (nova's
          ``[libvirt] images_type`` aware measure), so DISK_GB is what
          nova's own driver would report;
        - the q35 domain capabilities, the kernel's SEV flavours and the
          persistent memory namespaces, as nova's driver reads them
          (:meth:`_plugin_domain_caps`, :meth:`_plugin_kvm_amd_sev`,
          :meth:`_plugin_pmem_namespaces`): the memenc and pmem plugins'
          facts.
        """
        from compute_plugins.host import libvirt_xml
        host = self._host
        conn = host.get_connection()
        names = list(host.list_pci_devices()) + list(host.list_mediated_devices())
        nodedevs = {
            "nova libvirt nodedev %s" % name:
                host.device_lookup_by_name(name).XMLDesc(0)
            for name in names}
        # NOTE: the vDPA devices as nova's driver lists them
        # (_get_pci_passthrough_devices), with the libvirt module nova's
        # host uses: their parent VF is a vdpa device.
        from nova.virt.libvirt import host as nova_host
        cap_vdpa = nova_host.libvirt.VIR_CONNECT_LIST_NODE_DEVICES_CAP_VDPA
        for dev in host.list_all_devices(cap_vdpa):
            nodedevs["nova libvirt nodedev %s" % dev.name()] = dev.XMLDesc(0)
        info = libvirt_xml.host_info_from_xml(
            hostname=nodename, source="nova libvirt driver",
            capabilities_xml=conn.getCapabilities(),
            capabilities_source="nova libvirt capabilities",
            nodedev_xmls=nodedevs,
            memory_kb=int(host.get_memory_mb_total()) * 1024,
            disk=self._plugin_disk_info(),
            online_cpus=frozenset(host.get_online_cpus()),
            cpu_count=int(conn.getInfo()[2]))
        return dataclasses.replace(
            info, domain_caps=self._plugin_domain_caps(),
            pmem_namespaces=self._plugin_pmem_namespaces(),
            kvm_amd_sev=self._plugin_kvm_amd_sev())

    def _plugin_domain_caps(self) -> Optional[DomainCaps]:
        """The domain capabilities of the host's q35 machine type, asked of
        nova's libvirt connection as nova's ``Host.get_domain_capabilities``
        asks (the host architecture's guest emulator, nova's ``[libvirt]
        virt_type``) and read with the snapshot's parser; None where the
        emulator has no q35 machine type (not x86) or libvirt refuses."""
        import nova.conf
        from nova.virt.libvirt import host as nova_host

        from compute_plugins.host import libvirt_xml
        caps = self._host.get_capabilities()
        arch = caps.host.cpu.arch
        virt_type = nova.conf.CONF.libvirt.virt_type
        for guest in caps.guests:
            domain = guest.domains.get(virt_type, guest.default_domain)
            if guest.arch != arch or domain is None or "q35" not in domain.aliases:
                continue
            try:
                xml = self._host.get_connection().getDomainCapabilities(
                    domain.emulator, arch, "q35", virt_type, 0)
            except nova_host.libvirt.libvirtError as exc:
                LOG.debug("no domain capabilities for %s q35: %s", arch, exc)
                return None
            return libvirt_xml.parse_domain_capabilities(
                xml, "nova libvirt domain capabilities (%s q35)" % arch)
        return None

    def _plugin_kvm_amd_sev(self) -> frozenset[str]:
        """The SEV flavours the kernel enables, by nova's own check
        (``Host._kernel_supports_amd_sev``: ``kvm_amd``'s parameters)."""
        from compute_plugins.host import kernel
        check = self._host._kernel_supports_amd_sev
        return frozenset(f for f in kernel.SEV_FLAVOURS if check(f))

    def _plugin_pmem_namespaces(self) -> tuple[PMEMNamespace, ...]:
        """The named devdax namespaces of ``ndctl list -X``, run as nova's
        driver runs it (``nova.privsep.libvirt.get_pmem_namespaces``) and
        read with the snapshot's parser, when ``[libvirt] pmem_namespaces``
        is set (as nova's ``_discover_vpmems``: nova runs it then, and only
        then); none otherwise (a host without persistent memory, the rule)
        or when it fails (logged, naming a missing ndctl)."""
        from compute_plugins.host import ndctl
        try:
            configured = list(self.get_plugin_manager().conf.libvirt.pmem_namespaces or ())
        except (cfg.NoSuchOptError, cfg.NoSuchGroupError, AttributeError):
            configured = []
        if not configured:
            return ()
        if shutil.which("ndctl") is None:
            LOG.warning("[libvirt] pmem_namespaces is set and ndctl is not on "
                        "the PATH: nova's privsep call may fail")
        import nova.privsep.libvirt
        try:
            output = nova.privsep.libvirt.get_pmem_namespaces()
        except Exception as exc:  # noqa: BLE001 - privsep re-raises any
            LOG.warning("ndctl list -X failed: %s; no persistent memory "
                        "namespaces", exc)
            return ()
        return ndctl.parse_namespaces(output or "", "nova privsep ndctl list -X")

    def _plugin_disk_info(self) -> Optional[DiskInfo]:
        """DISK_GB as nova's libvirt driver measures it (``_get_local_gb_info``:
        the instances path, or the RBD/LVM pool), ``None`` for a driver
        without it."""
        local_gb_info = getattr(self, "_get_local_gb_info", None)
        if local_gb_info is None:
            return None
        info = local_gb_info()
        return DiskInfo(total_gb=int(info["total"]),
                        free_gb=max(0, min(int(info["free"]), int(info["total"]))),
                        path="nova libvirt driver")

    def update_provider_tree(self, provider_tree: Any, nodename: str,
                             allocations: Optional[dict[str, Any]] = None) -> None:
        """nova's virt driver API: update nova's ``provider_tree`` for
        ``nodename`` with every plugin's contribution.

        :raises nova.exception.ReshapeNeeded: inventory moves between
            providers and ``allocations`` is None.
        :raises nova.exception.PlacementPciException: ``[pci]
            report_in_placement`` was turned off after it was on
            (:meth:`_plugin_pci_reporting_kept`).
        """
        manager = self.get_plugin_manager()
        self._plugin_pci_reporting_kept(provider_tree)
        manager.discover(self.plugin_host_info(nodename))
        ours = copy_tree(provider_tree)
        try:
            manager.update_provider_tree(ours, nodename, allocations)
        except exception.ReshapeNeeded as err:
            raise nova_exception.ReshapeNeeded() from err
        write_back(ours, provider_tree)
        self._plugin_static_traits(provider_tree, nodename)
        # NOTE: kept as nova's LibvirtDriver.update_provider_tree keeps it:
        # nova's spawn finds a VGPU allocation's pGPU there
        # (_allocate_mdevs: the provider's name less the root's).
        self.provider_tree = copy.deepcopy(provider_tree)
        self.plugin_publish(nodename, ours, instances=self._plugin_tracked())

    def _plugin_pci_reporting_kept(self, provider_tree: Any) -> None:
        """nova's refusal to turn ``[pci] report_in_placement`` off once it
        was on, made before the plugins touch nova's tree.

        nova's resource tracker checks it after the driver's
        ``update_provider_tree`` (``pci_placement_translator``: a provider
        with ``COMPUTE_MANAGED_PCI_DEVICE`` in the tree and the option off),
        and a compute at startup dies of it. With the ``sriov`` plugin the
        PCI providers of nova's layout are the plugin's: with the option off
        it no longer contributes them, the mixin's write-back would remove
        them from nova's tree, and nova's check would find nothing. So the
        mixin runs nova's own check first, on the tree nova handed in (read
        from Placement), when the option is off in both the plugins' and
        nova's configuration: nothing is removed, nova's
        ``PlacementPciException`` and message. With nova's on (the plugins'
        off: nova's translator keeps its own providers) nova refuses
        nothing and neither does the mixin; with the plugins' on (nova's
        off) the plugin's providers stay and nova's own check refuses.

        :raises nova.exception.PlacementPciException: the option is off in
            both and the tree has a provider of nova's PCI layout.
        """
        if self._plugin_option_on(self.get_plugin_manager().conf) or \
                self._plugin_option_on(_nova_conf()):
            return
        from nova.compute import pci_placement_translator
        pci_placement_translator.ensure_tracking_was_not_enabled_before(provider_tree)

    @staticmethod
    def _plugin_option_on(conf: Any) -> bool:
        """``[pci] report_in_placement`` of ``conf`` (off when not registered)."""
        try:
            return bool(conf.pci.report_in_placement)
        except (cfg.NoSuchOptError, cfg.NoSuchGroupError, AttributeError):
            return False

    #: The mixin publishes its host's plugin states (``PluginFitFilter``
    #: reads them): after every ``update_provider_tree``.
    PUBLISHES_HOST_STATES = True

    def _plugin_service_host(self) -> str:
        """nova's service host of this driver (the compute manager's
        ``host``, else ``CONF.host``): what nova's scheduler names hosts by."""
        compute = getattr(getattr(self, "virtapi", None), "_compute", None)
        host = getattr(compute, "host", None)
        if host:
            return str(host)
        import nova.conf
        return str(nova.conf.CONF.host)

    def _plugin_tracked(self) -> Optional[set[str]]:
        """The instances nova's resource tracker counts on this host now
        (``ResourceTracker.tracked_instances``, and those moving in:
        :meth:`_plugin_moving_in`; which it read from the database at the
        start of the periodic, or added in a claim, under its lock); None
        without a resource tracker (then :meth:`_plugin_usage` reads the
        database).

        ``update_provider_tree`` runs inside the tracker's periodic (nova's
        per-node update, a worker of its own): reading nova's database
        there again, late in the update, is a second round trip per host
        and period, and in nova's functional tests it deadlocked the live
        migration tests. Their ``_run_periodics`` runs in the migration's
        operation thread under ``target_cell`` (a read lock of nova's
        ``CellDatabases`` fixture) and waits for the per-node worker, while
        the test's API polling asks the fixture's write lock; the lock
        serves a pending writer first, so the worker's late read waited on
        the writer, the writer on the operation thread, and the operation
        thread on the worker (the hang of ``cause: varies``)."""
        tracker = self._plugin_tracker()
        tracked = getattr(tracker, "tracked_instances", None)
        if not isinstance(tracked, (set, frozenset)):
            return None
        return {str(uuid) for uuid in tracked} | self._plugin_moving_in()

    def _plugin_tracker(self) -> Any:
        """nova's resource tracker of this compute (None without one)."""
        compute = getattr(getattr(self, "virtapi", None), "_compute", None)
        return getattr(compute, "rt", None)

    def _plugin_moving_in(self) -> set[str]:
        """The instances moving onto this host that nova's resource tracker
        counts here (its ``tracked_migrations`` whose destination is this
        host).

        An instance moving in (resize, cold or live migration, evacuation)
        is in ``tracked_migrations`` only, from nova's move claim until the
        next periodic after its move finished (its host is the source's,
        its guest not defined here yet): nova counts its new flavor here
        all along, and so must the published state and the verify of a
        spawn here, or another guest gets the move's CPUs meanwhile. A move
        dropped here (reverted, rolled back) is still there at its drop's
        publish: its CPUs are free from the next periodic. An instance
        moving out counts on the source by its guest, defined there until
        the move is confirmed. The copy is one C-level read of the dict
        (no other thread's change can break it)."""
        tracker = self._plugin_tracker()
        migrations = getattr(tracker, "tracked_migrations", None)
        if not isinstance(migrations, dict):
            return set()
        host = getattr(tracker, "host", None)
        return {str(uuid) for uuid, migration in list(migrations.items())
                if getattr(migration, "dest_compute", None) == host}

    def _plugin_usage(self, host: str, context: Any = None,
                      leave_out: Optional[str] = None,
                      instances: Optional[set[str]] = None) -> dict[str, list[Any]]:
        """plugin -> the assignments of the decisions of the instances on
        this host (``instances``, default those nova's database assigns to
        it and those moving in, :meth:`_plugin_moving_in`; and the
        driver's guests), but ``leave_out``'s."""
        from nova import context as nova_context
        from nova import objects
        manager = self.get_plugin_manager()
        if instances is not None:
            here = set(instances)
        else:
            here = set(objects.InstanceList.get_uuids_by_host(
                context or nova_context.get_admin_context(), host))
            here |= self._plugin_moving_in()
        listed = getattr(self, "list_instance_uuids", None)
        if listed is not None:
            here.update(listed())
        usage: dict[str, list[Any]] = {}
        for uuid, text in self.get_plugin_decisions().on_host(host).items():
            if uuid == leave_out or uuid not in here:
                continue
            other = RequestSpec.from_json(text, manager.plugins).decision
            for name, assignment in (other.assignments.items() if other else ()):
                usage.setdefault(name, []).append(assignment)
        return usage

    def plugin_publish(self, nodename: str, tree: Optional[ProviderTree] = None,
                       instances: Optional[set[str]] = None) -> None:
        """Publish the plugins' host states of ``nodename`` (under the
        decisions of the instances on this host: ``instances``, default
        those nova's database assigns to it) to the host-state store,
        under nova's service host, for ``PluginFitFilter``; a failure is
        logged (the scheduler keeps the last published states)."""
        manager = self.get_plugin_manager()
        host = self._plugin_service_host()
        try:
            usage = self._plugin_usage(host, instances=instances)
            states, broken = manager.host_states(
                nodename, {n: tuple(a) for n, a in usage.items()}, host=host)
            for rejection in broken:
                LOG.warning("host %s: plugin %s publishes no state: %s", host,
                            rejection.plugin, rejection.reason)
            documents, _ = manager.plugins.encode_states(states)
            providers = None if tree is None else {
                uuid: name for name, uuid in tree.uuids_by_name(nodename).items()}
            store = self.get_plugin_decisions().store
            for _attempt in range(2):
                snapshot = store.get_host(host)
                try:
                    store.publish(host, documents, 0 if snapshot is None else snapshot.generation,
                                  nodename=nodename, providers=providers)
                    return
                except store_errors.GenerationConflict:
                    continue
            LOG.warning("host %s: its plugin states changed twice while "
                        "publishing: the next periodic publishes", host)
        except Exception as err:  # noqa: BLE001 - never into nova's tracker
            LOG.error("host %s: cannot publish the plugins' host states: %s: %s",
                      host, type(err).__name__, err)

    def _plugin_static_traits(self, provider_tree: Any, nodename: str) -> None:
        """The driver's static traits on the root, as nova's
        ``LibvirtDriver.update_provider_tree`` sets them (this method
        replaces it): CPU features, storage buses, video, vif, IOMMU, TPM
        and sound models; the supported ones added, the others removed.
        A driver without ``static_traits`` sets none."""
        static = getattr(self, "static_traits", None)
        if not static:
            return
        supported = [t for t, on in static.items() if on]
        provider_tree.add_traits(nodename, *supported)
        provider_tree.remove_traits(nodename, *(set(static) - set(supported)))
