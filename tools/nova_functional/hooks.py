"""What the runner changes in nova's test process before loading its tests.

Both runs (nothing of nova's files is edited; each change is a patch of a
class attribute made once per process, before the tests are loaded):

- nova's ``ConfFixture`` (every test's configuration) also sets ``[wsgi]
  api_paste_config`` to the ``api-paste.ini`` nova's wheel installs under
  ``<venv>/etc/nova``: nova's fixture looks for it next to the source tree
  (``<site-packages>/etc/nova``), where a wheel does not put it.

The plugins run (:class:`Plugins`) adds:

- the scheduler: ``HostManager._load_filters`` answers nova's
  ``[filter_scheduler] enabled_filters`` (the default, or what a test set)
  with ``NUMATopologyFilter`` and ``PciPassthroughFilter`` replaced by
  ``PluginFitFilter`` (in the first one's place, else last: nova's default
  list has neither); ``available_filters``
  gets ``compute_plugins.nova.filters.PluginFitFilter``;
- the compute: ``nova.virt.driver.load_compute_driver`` builds
  ``PluginLibvirtDriver`` (``PluginProviderTreeMixin`` first in the bases
  of nova's ``LibvirtDriver``) where nova's configuration names
  ``libvirt.LibvirtDriver``; every test's patches of ``LibvirtDriver``
  methods still apply (it is a subclass);
- the plugins' configuration: ``[compute_plugins] config_file`` names
  ``compute-plugins.conf`` (this directory: the plugins enabled) and an
  overlay written when an adapter loads it, mirroring the nova options the
  test set (``self.flags``: CPU sets and the legacy ``vcpu_pin_set``,
  ratios, reserved memory, PCI alias, mdev types, pmem namespaces, NUMA-affine networks and their
  ``[neutron_physnet_<name>] numa_nodes``) and a fresh SQLite
  host-state store per test; ``PluginFitFilter`` reloads the plugins when
  the mirrored ``[vgpu]`` / ``[mdev_<type>]`` options changed since it was
  built (nova's ``[devices]`` options are the compute's, set by a test
  after the scheduler started);
- publishing: the driver mixin publishes the host's plugin states itself
  (``PluginProviderTreeMixin.PUBLISHES_HOST_STATES``); with a mixin that
  does not, the driver publishes them after each ``update_provider_tree``
  (usage: the decisions of the instances the host runs);
- the decision: ``PluginFitFilter`` records it when nova's scheduler
  selects the host (``HostState.consume_from_request``); when the driver
  builds the guest XML in ``spawn``, :class:`Boots` reads the decision the
  mixin executes (``compute_plugins.nova.decisions.decision_for``) and
  compares the XML's pinning, cells and devices with it
  (:func:`compare`). A request no plugin asks anything of gets no
  decision: its guest must pin and pass through nothing.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any, Optional

HERE = Path(__file__).resolve().parent
#: The plugins' own configuration of the plugins run.
BASE_CONF = HERE / "compute-plugins.conf"
#: nova's filters that PluginFitFilter replaces.
REPLACED = ("NUMATopologyFilter", "PciPassthroughFilter")
FILTER = "compute_plugins.nova.filters.PluginFitFilter"
#: nova options mirrored into the plugins' overlay: (nova group, option,
#: our group, our option).
MIRRORED = (
    ("compute", "cpu_dedicated_set", "compute", "cpu_dedicated_set"),
    ("compute", "cpu_shared_set", "compute", "cpu_shared_set"),
    ("DEFAULT", "vcpu_pin_set", "compute", "vcpu_pin_set"),
    ("DEFAULT", "cpu_allocation_ratio", "compute", "cpu_allocation_ratio"),
    ("DEFAULT", "ram_allocation_ratio", "compute", "ram_allocation_ratio"),
    ("DEFAULT", "reserved_host_memory_mb", "compute", "reserved_host_memory_mb"),
    ("compute", "packing_host_numa_cells_allocation_strategy", "compute",
     "packing_host_numa_cells_allocation_strategy"),
    ("pci", "alias", "pci", "alias"),
    ("pci", "device_spec", "pci", "device_spec"),
    ("pci", "report_in_placement", "pci", "report_in_placement"),
    ("devices", "enabled_mdev_types", "vgpu", "enabled_mdev_types"),
    ("libvirt", "pmem_namespaces", "libvirt", "pmem_namespaces"),
    ("neutron", "physnets", "neutron", "physnets"),
    ("neutron_tunnel", "numa_nodes", "neutron_tunnel", "numa_nodes"),
)


def paste_config() -> str:
    """The ``api-paste.ini`` nova's wheel installed in this environment."""
    return str(Path(sys.prefix) / "etc" / "nova" / "api-paste.ini")


class Boots:
    """Every boot of the plugins run: the decision the scheduler kept for
    the instance and host, and whether the guest XML equals it."""

    def __init__(self) -> None:
        #: Instances whose request no plugin asks anything of.
        self.unasked: set[str] = set()
        self.boots: list[dict[str, Any]] = []
        #: Requests PluginFitFilter passed no host for: every host's reasons.
        self.rejections: list[dict[str, Any]] = []
        self.test = ""

    def asked_nothing(self, instance_uuid: str) -> None:
        """No plugin asks anything of the instance's request."""
        self.unasked.add(instance_uuid)

    def booted(self, instance_uuid: str, host: str, xml: str,
               decision: Optional[Any]) -> None:
        """The guest XML of a boot and the decision the compute executed
        (None: none recorded)."""
        if decision is None and instance_uuid in self.unasked:
            from compute_plugins.request.groups import Decision
            decision = Decision(host=host, nodename="")
        if decision is None:
            problems = ["no decision recorded for this instance and host"]
        else:
            problems = compare(decision, xml)
        self.boots.append({"test": self.test, "instance": instance_uuid,
                           "host": host, "matched": not problems,
                           "problems": problems})

    def rejected(self, hosts: Any) -> None:
        self.rejections.append({"test": self.test, "hosts": {
            h.host: ["%s: %s" % (r.plugin, r.reason)
                     for r in getattr(h, "plugin_rejections", ())] for h in hosts}})


def _cpus(text: Optional[str]) -> set[int]:
    """A libvirt cpuset (``0-3,^2,8``) as a set."""
    from compute_plugins.plugin.cpuset import parse_cpu_spec
    return set(parse_cpu_spec(text or ""))


def _pci(address: ET.Element) -> str:
    parts = [int(address.get(k, "0"), 0) for k in ("domain", "bus", "slot", "function")]
    return "%04x:%02x:%02x.%x" % tuple(parts)


def compare(decision: Any, xml: str) -> list[str]:
    """What differs between the guest XML and the decision (nothing: [])."""
    root = ET.fromstring(xml)
    problems: list[str] = []
    assignments = decision.assignments
    vcpupin = {int(e.get("vcpu", "-1")): _cpus(e.get("cpuset"))
               for e in root.findall("./cputune/vcpupin")}
    emulator = root.find("./cputune/emulatorpin")
    memnodes = {int(e.get("cellid", "-1")): _cpus(e.get("nodeset"))
                for e in root.findall("./numatune/memnode")}
    guest_cells = {int(e.get("id", "-1")): _cpus(e.get("cpus"))
                   for e in root.findall("./cpu/numa/cell")}
    numa = assignments.get("numa")
    cells = {} if numa is None else {c.guest_cell: c for c in numa.cells}
    pinned = any(c.pinning for c in cells.values())
    if numa is None or numa.floating:
        if vcpupin and any(len(v) == 1 for v in vcpupin.values()):
            problems.append("the XML pins vCPUs, the decision has no "
                            "NUMA placement")
    else:
        if set(guest_cells) != set(cells):
            problems.append("guest cells %s in the XML, %s in the decision"
                            % (sorted(guest_cells), sorted(cells)))
        for cell_id, cell in sorted(cells.items()):
            if memnodes.get(cell_id, {cell.host_cell}) != {cell.host_cell}:
                problems.append("guest cell %d: memory on host cell(s) %s, "
                                "decision %d" % (cell_id, sorted(memnodes[cell_id]),
                                                 cell.host_cell))
            for vcpu in sorted(guest_cells.get(cell_id, ())):
                want = ({cell.pinning[vcpu]} if vcpu in cell.pinning
                        else set(cell.shared_cpus))
                if want and vcpupin.get(vcpu) != want:
                    problems.append("vCPU %d on host CPU(s) %s, decision %s"
                                    % (vcpu, sorted(vcpupin.get(vcpu, ())),
                                       sorted(want)))
        if numa.emulator_threads and (
                emulator is None
                or _cpus(emulator.get("cpuset")) != set(numa.emulator_threads)):
            problems.append("emulator threads on %s, decision %s" % (
                None if emulator is None else emulator.get("cpuset"),
                sorted(numa.emulator_threads)))
    if pinned and not vcpupin:
        problems.append("the decision pins vCPUs, the XML does not")
    xml_pci = sorted(
        _pci(a) for a in root.findall("./devices/hostdev[@type='pci']/source/address")
    ) + sorted(_pci(a) for a in root.findall(
        "./devices/interface[@type='hostdev']/source/address"))
    xml_vdpa = [e.get("dev") for e in root.findall(
        "./devices/interface[@type='vdpa']/source")]
    sriov = assignments.get("sriov")
    if sriov is not None:
        # a macvtap port's VF is a direct interface on the VF's netdev
        netdevs = {vf.vf_netdev: vf.vf_address for vf in sriov.vfs if vf.vf_netdev}
        xml_pci += sorted(netdevs[dev] for dev in (
            e.get("dev") for e in root.findall(
                "./devices/interface[@type='direct']/source")) if dev in netdevs)
        # a vdpa port's VF is a vdpa interface on the VF's vhost-vdpa device
        vdpa = {vf.vdpa_dev: vf.vf_address for vf in sriov.vfs if vf.vdpa_dev}
        xml_pci += sorted(vdpa.get(dev or "", "vdpa:%s" % dev) for dev in xml_vdpa)
        wanted = [vf.vf_address for vf in sriov.vfs if vf.vf_address]
        wanted += [d.address for d in sriov.devices]
        missing = sorted(set(wanted) - set(xml_pci))
        if missing or len(xml_pci) != len(sriov.vfs) + len(sriov.devices):
            problems.append("PCI devices %s in the XML, decision %s (%d)" % (
                xml_pci, sorted(wanted), len(sriov.vfs) + len(sriov.devices)))
    elif xml_pci or xml_vdpa:
        problems.append("PCI devices %s in the XML, none in the decision"
                        % (xml_pci + ["vdpa:%s" % dev for dev in xml_vdpa]))
    mdevs = root.findall("./devices/hostdev[@type='mdev']")
    vgpu = assignments.get("vgpu")
    wanted_mdevs = 0 if vgpu is None else sum(
        max(1, len(d.mdev_uuids)) for d in vgpu.devices)
    if len(mdevs) != wanted_mdevs:
        problems.append("%d mdevs in the XML, %d in the decision"
                        % (len(mdevs), wanted_mdevs))
    nvdimms = sorted(e.text or "" for e in root.findall(
        "./devices/memory[@model='nvdimm']/source/path"))
    pmem = assignments.get("pmem")
    wanted_paths = sorted(n.devpath for n in pmem.namespaces) if pmem else []
    if nvdimms != wanted_paths:
        problems.append("NVDIMMs %s in the XML, decision %s" % (nvdimms, wanted_paths))
    secure = root.find("./launchSecurity")
    memenc = assignments.get("memenc")
    if (secure is None) != (memenc is None):
        problems.append("memory encryption %s in the XML, %s in the decision" % (
            "none" if secure is None else secure.get("type"),
            "none" if memenc is None else memenc.model))
    return problems


def install(mode: str, work: Path) -> Boots:
    """Patch nova's test process for ``mode`` (see the module doc)."""
    work.mkdir(parents=True, exist_ok=True)
    boots = Boots()
    from nova.tests.fixtures import conf as conf_fixture
    plugins = Plugins(work, boots) if mode == "plugins" else None
    original = conf_fixture.ConfFixture.setUp

    def set_up(fixture: Any) -> None:
        original(fixture)
        fixture.conf.set_default("api_paste_config", paste_config(), group="wsgi")
        if plugins is not None:
            plugins.configure(fixture.conf)

    conf_fixture.ConfFixture.setUp = set_up
    if plugins is not None:
        plugins.install()
    return boots


class Plugins:
    """The plugins run's patches (see the module doc)."""

    def __init__(self, work: Path, boots: Boots) -> None:
        self.work = work
        self.boots = boots
        self.count = 0
        self.test_dir = work
        self.conf: Any = None
        self.generations: dict[str, int] = {}

    def configure(self, conf: Any) -> None:
        """Per test: nova's CONF names our filter and configuration."""
        from compute_plugins.nova import conf as nova_conf
        self.count += 1
        self.test_dir = self.work / ("test-%d" % self.count)
        self.test_dir.mkdir(parents=True, exist_ok=True)
        self.conf = conf
        self.generations = {}
        nova_conf.register_nova_opts(conf)
        conf.set_default("available_filters",
                         ["nova.scheduler.filters.all_filters", FILTER],
                         group="filter_scheduler")

    def store_url(self) -> str:
        return "sqlite:///%s" % (self.test_dir / "hoststate.sqlite")

    def overlay(self) -> Path:
        """The nova options the test set, in our configuration's groups."""
        lines = self.overlay_lines()
        path = self.test_dir / "overlay.conf"
        path.write_text("".join(
            "[%s]\n%s\n" % (group, "\n".join(body)) for group, body in lines.items()))
        return path

    def mdev_options(self) -> dict[str, list[str]]:
        """The overlay's ``[vgpu]`` and ``[mdev_<type>]`` groups now."""
        return {group: body for group, body in self.overlay_lines().items()
                if group == "vgpu" or group.startswith("mdev_")}

    def overlay_lines(self) -> dict[str, list[str]]:
        """The overlay's lines by group (:meth:`overlay`)."""
        conf = self.conf
        lines: dict[str, list[str]] = {"host_state": [
            "connection = %s" % self.store_url()]}
        for group, name, ours, our_name in MIRRORED:
            try:
                value = (conf[name] if group == "DEFAULT" else conf[group][name])
            except Exception:  # noqa: BLE001 - an option this nova lacks
                continue
            if value is None or value == []:
                continue
            if isinstance(value, bool):
                text = [str(value).lower()]
            elif isinstance(value, (list, tuple)):
                text = (list(value) if name in ("alias", "device_spec")
                        else [",".join(map(str, value))])
            else:
                text = [str(value)]
            lines.setdefault(ours, []).extend("%s = %s" % (our_name, t) for t in text)
        for mdev_type in conf.devices.enabled_mdev_types or ():
            try:
                group = conf["mdev_%s" % mdev_type]
            except Exception:  # noqa: BLE001 - not registered by nova yet
                continue
            for option in ("device_addresses", "mdev_class", "max_instances"):
                value = getattr(group, option, None)
                if value:
                    lines.setdefault("mdev_%s" % mdev_type, []).append("%s = %s" % (
                        option, ",".join(value) if isinstance(value, list) else value))
        for physnet in conf.neutron.physnets or ():
            try:
                nodes = conf["neutron_physnet_%s" % physnet].numa_nodes
            except Exception:  # noqa: BLE001 - not registered by nova yet
                continue
            lines.setdefault("neutron_physnet_%s" % physnet, []).append(
                "numa_nodes = %s" % ",".join(map(str, nodes or ())))
        return lines

    def install(self) -> None:
        from nova.scheduler import host_manager
        from nova.scheduler import manager as scheduler_manager
        from nova.virt import driver as virt_driver

        from compute_plugins.nova import conf as nova_conf
        from compute_plugins.nova import filters as plugin_filters

        plugin_conf = nova_conf.plugin_conf

        def load_conf(nova_config: Any = None) -> Any:
            # NOTE: each adapter loads its configuration when built (the
            # filter with the scheduler, the driver's manager on its first
            # update_provider_tree): the overlay is what the test set then.
            self.conf.set_override("config_file", [str(BASE_CONF), str(self.overlay())],
                                   group="compute_plugins")
            return plugin_conf(nova_config)

        nova_conf.plugin_conf = load_conf  # type: ignore[assignment]

        load_filters = host_manager.HostManager._load_filters

        def filters(manager: Any) -> list[str]:
            out: list[str] = []
            for name in load_filters(manager):
                name = "PluginFitFilter" if name in REPLACED else name
                if name not in out:
                    out.append(name)
            # NOTE: nova's default list has neither NUMA nor PCI filter
            # (vPMEM, vGPU and SEV tests keep it): the plugins still fit
            # every request, as in an operator's nova.conf.
            return out if "PluginFitFilter" in out else [*out, "PluginFitFilter"]

        host_manager.HostManager._load_filters = filters

        # NOTE: a staticmethod of nova's (selected_host, spec_obj, instance_uuid).
        consume = scheduler_manager.SchedulerManager._consume_selected_host

        def consumed(selected_host: Any, spec_obj: Any, instance_uuid: Any = None) -> Any:
            spec = getattr(selected_host, "plugin_spec", None)
            if instance_uuid and spec is not None and not spec.requests:
                self.boots.asked_nothing(instance_uuid)
            return consume(selected_host, spec_obj, instance_uuid=instance_uuid)

        scheduler_manager.SchedulerManager._consume_selected_host = staticmethod(consumed)

        filter_all = plugin_filters.PluginFitFilter.filter_all
        build_filter = plugin_filters.PluginFitFilter.__init__

        def built(fit_filter: Any, *args: Any, **kwargs: Any) -> None:
            build_filter(fit_filter, *args, **kwargs)
            fit_filter._nf_mdev = self.mdev_options()

        def filtered(fit_filter: Any, hosts: Any, spec_obj: Any) -> Any:
            # NOTE: nova's [devices] options are the compute's: a test sets
            # them (mdev types, [mdev_<type>] mdev_class) after nova's
            # scheduler started, then (re)starts its compute. The plugins'
            # filter needs them too (a custom mdev class is the vgpu
            # plugin's request): it reloads the plugins when they changed,
            # as an operator configures both services alike.
            mdev = self.mdev_options()
            if getattr(fit_filter, "_nf_mdev", mdev) != mdev:
                from compute_plugins.runtime.manager import PluginManager
                fit_filter.plugins = PluginManager(load_conf()).plugins
                fit_filter.states = plugin_filters.StoreStates(
                    fit_filter.states.store, fit_filter.plugins)
                fit_filter._nf_mdev = mdev
            hosts = list(hosts)
            passed = filter_all(fit_filter, hosts, spec_obj)
            if hosts and not passed:
                self.boots.rejected(hosts)
            return passed

        setattr(plugin_filters.PluginFitFilter, "filter_all", filtered)  # noqa: B010 - mypy: a method
        setattr(plugin_filters.PluginFitFilter, "__init__", built)  # noqa: B010 - mypy: a method

        driver_class = self.driver_class()
        load_driver = virt_driver.load_compute_driver

        def load(virtapi: Any, compute_driver: Any = None) -> Any:
            name = compute_driver or self.conf.compute_driver
            if name == "libvirt.LibvirtDriver":
                return driver_class(virtapi)
            return load_driver(virtapi, compute_driver)

        virt_driver.load_compute_driver = load

    def driver_class(self) -> Any:
        from nova.virt.libvirt import driver as libvirt_driver

        from compute_plugins.nova.driver import PluginProviderTreeMixin
        plugins = self

        base: Any = libvirt_driver.LibvirtDriver  # nova is untyped

        class PluginLibvirtDriver(PluginProviderTreeMixin, base):  # type: ignore[misc]
            """nova's libvirt driver with the plugins' provider tree."""

            _plugin_booting: Optional[str] = None

            def update_provider_tree(self, provider_tree: Any, nodename: str,
                                     allocations: Any = None) -> None:
                super().update_provider_tree(provider_tree, nodename, allocations)
                if not getattr(PluginProviderTreeMixin, "PUBLISHES_HOST_STATES", False):
                    plugins.publish(self, nodename)

            def spawn(self, context: Any, instance: Any, *args: Any, **kwargs: Any) -> Any:
                self._plugin_booting = instance.uuid
                try:
                    return super().spawn(context, instance, *args, **kwargs)
                finally:
                    self._plugin_booting = None

            def _get_guest_xml(self, context: Any, instance: Any, *args: Any,
                               **kwargs: Any) -> Any:
                xml = super()._get_guest_xml(context, instance, *args, **kwargs)
                if self._plugin_booting == instance.uuid:
                    plugins.boots.booted(instance.uuid, instance.host, xml,
                                         plugins.decision(self, instance.uuid))
                return xml

        return PluginLibvirtDriver

    @staticmethod
    def decision(driver: Any, instance_uuid: str) -> Optional[Any]:
        """The decision the driver mixin executes for the instance on the
        driver's host (``decision_for``; None: none recorded)."""
        from compute_plugins.nova.decisions import decision_for
        spec = decision_for(driver.get_plugin_decisions(), instance_uuid,
                            driver._plugin_service_host(),
                            driver.get_plugin_manager().plugins)
        return None if spec is None else spec.decision

    def publish(self, driver: Any, nodename: str) -> None:
        """The host's plugin states, under the decisions of the instances
        it runs, into the test's store (a mixin that does not publish)."""
        from compute_plugins.hoststate.store import HostStateStore
        host = driver._plugin_service_host()
        manager = driver.get_plugin_manager()
        usage: dict[str, list[Any]] = {}
        for uuid in driver.list_instance_uuids():
            decision = self.decision(driver, uuid)
            for name, assignment in (decision.assignments.items() if decision else ()):
                usage.setdefault(name, []).append(assignment)
        states, _broken = manager.host_states(nodename, usage, host=host)
        documents = {n: manager.plugins.encode_state(n, s) for n, s in states.items()}
        with HostStateStore(self.store_url()) as store:
            snapshot = store.get_host(host)
            generation = 0 if snapshot is None else snapshot.generation
            store.publish(host, documents, generation, nodename=nodename)
