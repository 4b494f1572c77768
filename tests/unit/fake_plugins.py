"""Small plugins for the manager's tests (real ResourcePlugin subclasses)."""

from __future__ import annotations

from oslo_config import cfg

from compute_plugins.plugin.contract import ResourcePlugin
from compute_plugins.plugin.names import provider_uuid
from compute_plugins.tree.contribution import ProviderContribution


class Widgets(ResourcePlugin):
    """Puts one child ``<node>_widgets`` with CUSTOM_WIDGET = host.memory_kb."""

    name = "widgets"

    @classmethod
    def options(cls) -> list[cfg.Opt]:
        return [cfg.IntOpt("reserved", default=0, min=0, help="reserved widgets")]

    def discover(self, host):
        return host.memory_kb

    def provider_contributions(self, view, nodename):
        if not view:
            return []
        name = nodename + "_widgets"
        return [ProviderContribution(
            name=name, uuid=provider_uuid(nodename, "widgets"),
            inventory={"CUSTOM_WIDGET": {"total": view,
                                         "reserved": self.options_group.reserved}},
            traits={"CUSTOM_SHINY"})]


class RootDisk(ResourcePlugin):
    """Puts DISK_GB and a trait on the compute root."""

    name = "rootdisk"

    def discover(self, host):
        return host.disk

    def provider_contributions(self, view, nodename):
        return [ProviderContribution(
            name=nodename, inventory={"DISK_GB": {"total": view.total_gb}},
            traits={"CUSTOM_LOCAL_DISK"})]


class AlsoRootDisk(RootDisk):
    """Claims DISK_GB on the root too: a conflict with RootDisk."""

    name = "alsorootdisk"


class AlsoWidgets(Widgets):
    """Claims the same child provider as Widgets."""

    name = "alsowidgets"


class Flaky(ResourcePlugin):
    """Fails to contribute while ``fail`` is set; else one child provider."""

    name = "flaky"
    fail = False
    # NOTE: what it does depends on ``fail``, set by tests, not on its view.
    pure = False

    def discover(self, host):
        return host.hostname

    def provider_contributions(self, view, nodename):
        if self.fail:
            raise RuntimeError("flaky plugin broke")
        return [ProviderContribution(name=nodename + "_flaky",
                                     uuid=provider_uuid(nodename, "flaky"),
                                     inventory={"CUSTOM_FLAKE": {"total": 1}})]


class FailsDiscovery(Flaky):
    name = "failsdiscovery"

    def discover(self, host):
        if self.fail:
            raise RuntimeError("device vanished")
        return host.hostname

    def provider_contributions(self, view, nodename):
        return [ProviderContribution(name=nodename + "_fd",
                                     uuid=provider_uuid(nodename, "fd"),
                                     inventory={"CUSTOM_FD": {"total": len(view)}})]


class BadClass(Flaky):
    name = "badclass"

    def provider_contributions(self, view, nodename):
        return [ProviderContribution(name=nodename,
                                     inventory={"not-a-class": {"total": 1}})]


class RaisesAtInit(ResourcePlugin):
    name = "raisesatinit"

    def __init__(self, conf):
        raise RuntimeError("cannot start: no such device")

    def discover(self, host):  # pragma: no cover - never constructed
        return None

    def provider_contributions(self, view, nodename):  # pragma: no cover
        return []


class Cells(ResourcePlugin):
    """One child per NUMA cell with VCPU = its CPUs (moves VCPU off the root)."""

    name = "cells"

    def discover(self, host):
        return tuple((cell.id, len(cell.cpus)) for cell in host.cells)

    def provider_contributions(self, view, nodename):
        return [ProviderContribution(
            name="%s_cell%d" % (nodename, cell), uuid=provider_uuid(nodename, "cell", str(cell)),
            inventory={"VCPU": {"total": cpus, "max_unit": cpus}} if cpus else {})
            for cell, cpus in view]


class Parented(ResourcePlugin):
    """A device under the first cell when ``under_cell`` is set, else the root."""

    name = "parented"
    under_cell = True
    # NOTE: what it does depends on ``under_cell``, set by tests.
    pure = False

    def discover(self, host):
        return host.hostname

    def provider_contributions(self, view, nodename):
        return [ProviderContribution(
            name=nodename + "_dev", uuid=provider_uuid(nodename, "dev"),
            parent=nodename + "_cell0" if self.under_cell else None,
            inventory={"CUSTOM_DEV": {"total": 1}})]
