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

The plugins' configuration comes from nova's ``[compute_plugins]
config_file`` (:mod:`compute_plugins.nova.conf`), unless the driver sets
``plugin_manager`` itself.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
from typing import Any, Optional

from nova import exception as nova_exception

from compute_plugins import exception
from compute_plugins.host.model import DiskInfo, DomainCaps, HostInfo, PMEMNamespace
from compute_plugins.runtime.manager import PluginManager
from compute_plugins.tree.provider_tree import ProviderTree

__all__ = ["PluginProviderTreeMixin", "copy_tree", "write_back"]

LOG = logging.getLogger(__name__)


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

    def get_plugin_manager(self) -> PluginManager:
        if self.plugin_manager is None:
            from compute_plugins.nova import conf as nova_conf
            self.plugin_manager = PluginManager(nova_conf.plugin_conf())
        return self.plugin_manager

    def plugin_host_info(self, nodename: str) -> HostInfo:
        """The host as the plugins see it, read through nova's own libvirt
        ``Host`` (``self._host``) with the parsers a host snapshot uses:

        - the capabilities XML (cells, CPUs, page pools);
        - the online CPUs from ``getCPUMap`` (``Host.get_online_cpus``), as
          nova's driver counts them, so an offline CPU is never offered;
        - the node devices nova lists itself (``Host.list_pci_devices``,
          ``Host.list_mediated_devices``), each dumped with
          ``Host.device_lookup_by_name``: the same devices nova's PCI and
          vGPU code see;
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
        read with the snapshot's parser; none where ndctl is not installed
        (a host without persistent memory, the rule) or fails (logged)."""
        from compute_plugins.host import ndctl
        if shutil.which("ndctl") is None:
            return ()
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
        """
        manager = self.get_plugin_manager()
        manager.discover(self.plugin_host_info(nodename))
        ours = copy_tree(provider_tree)
        try:
            manager.update_provider_tree(ours, nodename, allocations)
        except exception.ReshapeNeeded as err:
            raise nova_exception.ReshapeNeeded() from err
        write_back(ours, provider_tree)
        self._plugin_static_traits(provider_tree, nodename)

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
