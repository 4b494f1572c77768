"""Two small plugins with the whole request side (test-only, real
ResourcePlugin subclasses): they prove the framework's fit, guest XML and
``compute-plugins fit`` independently of the built-in plugins.

- ``slots`` (flavor ``slots:pin=true``): pins every vCPU of the flavor to
  free host CPUs of one host NUMA cell (the first with room), puts the
  guest's memory on that cell; guest XML ``<cputune>``, ``<numatune>``,
  ``<cpu><numa>``.
- ``gadget`` (flavor ``gadget:count=N``): N PCI devices of the host, on the
  host cell ``slots`` chose when it ran (``fit_after``); guest XML
  ``<hostdev type='pci'>``. It keeps the default ``describe``.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from compute_plugins.plugin.contract import GuestFragment, Rejection, ResourcePlugin
from compute_plugins.plugin.cpuset import format_cpu_spec
from compute_plugins.plugin.state import AssignmentConflict, PluginState
from compute_plugins.request.groups import PluginAssignment, PluginRequest
from compute_plugins.request.types import FrozenMap


@dataclasses.dataclass(frozen=True)
class SlotsRequest(PluginRequest):
    vcpus: int
    memory_mb: int


@dataclasses.dataclass(frozen=True)
class SlotsAssignment(PluginAssignment):
    host_cell: int
    pinning: FrozenMap[int, int] = dataclasses.field(default_factory=FrozenMap)


@dataclasses.dataclass(frozen=True)
class SlotsState(PluginState):
    #: host cell -> its free CPUs.
    free: FrozenMap[int, frozenset[int]] = dataclasses.field(
        default_factory=FrozenMap)


class Slots(ResourcePlugin):
    name = "slots"
    request_type = SlotsRequest
    assignment_type = SlotsAssignment
    state_type = SlotsState

    def discover(self, host):
        return tuple((cell.id, cell.cpu_ids) for cell in host.cells)

    def provider_contributions(self, view, nodename):
        return []

    def parse_request(self, request_input):
        value = request_input.extra_specs.get("slots:pin")
        request_input.claim("slots:pin")
        if value is None:
            return None
        if value != "true":
            request_input.report("slots:pin", value, "must be true")
            return None
        return SlotsRequest(vcpus=request_input.flavor.vcpus,
                            memory_mb=request_input.flavor.memory_mb)

    def host_state(self, view, nodename, assignments):
        free = {cell: set(cpus) for cell, cpus in view}
        for assignment in assignments:
            if assignment.host_cell not in free:
                raise AssignmentConflict(
                    self.name, "host cell %d does not exist" % assignment.host_cell)
            cpus = dict(view)[assignment.host_cell]
            for cpu in assignment.pinning.values():
                if cpu not in cpus:
                    raise AssignmentConflict(
                        self.name, "host CPU %d is not on host cell %d"
                        % (cpu, assignment.host_cell))
                if cpu not in free[assignment.host_cell]:
                    raise AssignmentConflict(
                        self.name, "host CPU %d is pinned twice" % cpu)
                free[assignment.host_cell].discard(cpu)
        return SlotsState(free=FrozenMap(
            (cell, frozenset(cpus)) for cell, cpus in sorted(free.items())))

    def fit(self, state, request, placement, earlier):
        for cell, cpus in state.free.items():
            if len(cpus) >= request.vcpus:
                return SlotsAssignment(host_cell=cell, pinning=FrozenMap(
                    enumerate(sorted(cpus)[:request.vcpus])))
        return Rejection("no host cell has %d free CPUs (%s)" % (
            request.vcpus, ", ".join("cell %d: %d" % (cell, len(cpus))
                                     for cell, cpus in state.free.items())))

    def verify(self, state, request, assignment):
        free = state.free.get(assignment.host_cell, frozenset())
        taken = sorted(set(assignment.pinning.values()) - free)
        if taken:
            return Rejection("host CPUs %s are no longer free"
                             % format_cpu_spec(taken))
        return None

    def guest_config(self, request, assignment):
        pins = "".join("<vcpupin vcpu='%d' cpuset='%d'/>" % pin
                       for pin in sorted(assignment.pinning.items()))
        return [
            GuestFragment("domain", "<cputune>%s</cputune>" % pins),
            GuestFragment("domain",
                          "<numatune><memory mode='strict' nodeset='%d'/>"
                          "<memnode cellid='0' mode='strict' nodeset='%d'/>"
                          "</numatune>" % (assignment.host_cell, assignment.host_cell)),
            GuestFragment("domain",
                          "<cpu><numa><cell id='0' cpus='0-%d' memory='%d' "
                          "unit='MiB'/></numa></cpu>"
                          % (request.vcpus - 1, request.memory_mb)),
        ]

    def describe(self, request, assignment):
        return ["guest node 0 -> host cell %d: CPUs %s -> %s" % (
            assignment.host_cell, format_cpu_spec(assignment.pinning),
            ",".join(str(cpu) for _, cpu in sorted(assignment.pinning.items())))]


@dataclasses.dataclass(frozen=True)
class GadgetRequest(PluginRequest):
    count: int


@dataclasses.dataclass(frozen=True)
class GadgetAssignment(PluginAssignment):
    addresses: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class GadgetState(PluginState):
    #: free PCI address -> its host NUMA cell (None: unknown).
    free: FrozenMap[str, Optional[int]] = dataclasses.field(
        default_factory=FrozenMap)


class Gadget(ResourcePlugin):
    name = "gadget"
    fit_after = ("slots",)
    request_type = GadgetRequest
    assignment_type = GadgetAssignment
    state_type = GadgetState

    def discover(self, host):
        return tuple((dev.address, dev.numa_node) for dev in host.pci_devices)

    def provider_contributions(self, view, nodename):
        return []

    def parse_request(self, request_input):
        value = request_input.extra_specs.get("gadget:count")
        request_input.claim("gadget:count")
        if value is None:
            return None
        if not value.isdigit() or int(value) < 1:
            request_input.report("gadget:count", value, "must be a positive integer")
            return None
        return GadgetRequest(count=int(value))

    def host_state(self, view, nodename, assignments):
        free = dict(view)
        for assignment in assignments:
            for address in assignment.addresses:
                if address not in free:
                    raise AssignmentConflict(
                        self.name, "PCI device %s is not free on this host" % address)
                del free[address]
        return GadgetState(free=FrozenMap(sorted(free.items())))

    def fit(self, state, request, placement, earlier):
        slots = earlier.get("slots")
        cell = slots.host_cell if slots is not None else None
        near = [address for address, node in state.free.items()
                if cell is None or node == cell]
        if len(near) < request.count:
            where = "" if cell is None else " on host cell %d" % cell
            return Rejection("%d free PCI devices%s, the guest needs %d"
                             % (len(near), where, request.count),
                             provider="cell%s" % ("" if cell is None else cell))
        return GadgetAssignment(addresses=tuple(near[:request.count]))

    def verify(self, state, request, assignment):
        gone = [a for a in assignment.addresses if a not in state.free]
        return Rejection("PCI devices %s are taken" % ", ".join(gone)) if gone else None

    def guest_config(self, request, assignment):
        fragments = []
        for address in assignment.addresses:
            domain, bus, slot_function = address.split(":")
            slot, function = slot_function.split(".")
            fragments.append(GuestFragment(
                "devices",
                "<hostdev mode='subsystem' type='pci' managed='yes'><source>"
                "<address domain='0x%s' bus='0x%s' slot='0x%s' function='0x%s'/>"
                "</source></hostdev>" % (domain, bus, slot, function)))
        return fragments
