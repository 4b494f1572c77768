"""The SR-IOV plugin's decision: the VF of each port, the devices of aliases.

**Ports** (in the request's order): the PF is the one Placement allocated
the port's group (``_PORT<N>``) from; offline the best PF that can serve it:
NUMA-affine first (:mod:`compute_plugins.plugin.topology`), then by address, the
next ones tried when the best choices leave a later port without a PF
(:func:`compute_plugins.plugin.choice.first_fit`). A PF
serves a port when (:func:`pf_problem`) it is on the port's physnet (none:
a tunneled network), its VFs are remote-managed exactly when the port is
(``remote-managed``), it has a free VF of the port's kind (a VF bound to a
vDPA driver for a ``vdpa`` port, another VF for the others, with a network
interface for a ``macvtap`` port), the port's minimum bandwidth fits what
the PF has left per direction, and the NUMA affinity policy (the port's
own, else ``hw:pci_numa_affinity_policy``, default ``legacy``) allows it.
The VF is the PF's first usable free one in VF order; the physnet, the
bandwidth and a ``vdpa`` port's vhost-vdpa device are recorded in the
assignment (the host state sums the bandwidth).

**Aliases** (``pci_passthrough:alias``, in the request's order): ``count``
free devices the alias matches (:mod:`resources.sriov.alias`), NUMA-affine
first, then by address, never a PF together with one of its VFs (a PF
whose VFs are alias devices too comes after the other devices); the
policy is the request's, else the alias's ``numa_policy``. When the
allocation maps the alias's group (``_PCI<N>``) to providers, only their
devices are used. Each alias in turn takes its best devices; when that
leaves one short, :mod:`resources.sriov.alias_fit` finds a choice that
serves every alias if there is one (a flow, bounded). No alias device is a
VF one of the request's ports takes, nor its PF. With ``[pci]
report_in_placement`` an alias's devices are on one provider of nova's
layout (its request group is served by one provider): offline, when the
best choice spreads them, providers are tried in turn.

Every search runs on a :class:`~compute_plugins.plugin.choice.Budget` of steps;
when it runs out the rejection says the search stopped.

``fit`` builds the assignment, then returns :func:`verify` of it: the claim
runs exactly the checks the scheduler ran.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Optional, Union

from compute_plugins.plugin.choice import Budget, first_fit
from compute_plugins.plugin.contract import Earlier, Mappings, Rejection
from compute_plugins.plugin.devices import PCI_AFFINITY, summarize
from compute_plugins.plugin.topology import Affinity, guest_host_cells
from compute_plugins.request.types import FrozenMap
from resources.sriov import alias as alias_rules
from resources.sriov import alias_fit
from resources.sriov.request import (
    VDPA,
    AliasRequest,
    DeviceAssignment,
    PortRequest,
    SRIOVAssignment,
    SRIOVRequest,
    VFAssignment,
    alias_affinity_policy,
    port_affinity_policy,
)
from resources.sriov.state import DeviceState, PFState, SRIOVState
from resources.sriov.view import VFView

MACVTAP = "macvtap"
#: Sorts after every rank a policy allows (such devices are then refused).
_REFUSED = 2


def _rank(affinity: Affinity, cell: Optional[int]) -> int:
    rank = affinity.rank(cell)
    return _REFUSED if rank is None else rank


def _port_name(port: PortRequest) -> str:
    return "port %s" % port.port_id


def _network(port: PortRequest) -> str:
    """Where ``port``'s VF must be: its physnet, or a tunneled network."""
    return ("physnet %s" % port.physnet if port.physnet
            else "no physnet (a tunneled network)")


def _usable_vfs(pf: PFState, port: PortRequest,
                taken: frozenset[str]) -> tuple[VFView, ...]:
    """The free VFs of ``pf`` that can serve ``port``: a vDPA VF for a
    ``vdpa`` port, another VF for the others (with a network interface for
    a ``macvtap`` port), as nova's PCI stats keep ``vdpa`` devices for
    ``vdpa`` requests only."""
    free = pf.free_vfs(taken)
    if port.vnic_type == VDPA:
        return tuple(vf for vf in free if vf.vdpa_dev)
    free = tuple(vf for vf in free if not vf.vdpa_dev)
    if port.vnic_type == MACVTAP:
        return tuple(vf for vf in free if vf.netdev)
    return free


def _unusable(pf_name: str, pf: PFState, port: PortRequest,
              taken: frozenset[str]) -> str:
    """Why none of the free VFs of ``pf`` can serve ``port``."""
    free = pf.free_vfs(taken)
    if port.vnic_type == VDPA:
        return ("%s has %d free VFs and none is a vDPA device, vdpa %s needs "
                "one" % (pf_name, len(free), _port_name(port)))
    plain = [vf for vf in free if not vf.vdpa_dev]
    if not plain:
        return ("%s has %d free VFs, all vDPA devices (for vdpa ports), %s %s "
                "needs another" % (pf_name, len(free), port.vnic_type,
                                   _port_name(port)))
    if len(plain) < len(free):
        return ("%s has %d free VFs, %d of them vDPA devices (for vdpa ports), "
                "and none of the others has a network interface, macvtap %s "
                "needs one" % (pf_name, len(free), len(free) - len(plain),
                               _port_name(port)))
    return ("%s has %d free VFs and none has a network interface, "
            "macvtap %s needs one" % (pf_name, len(free), _port_name(port)))


def pf_problem(pf: PFState, port: PortRequest, affinity: Affinity,
               taken: frozenset[str], egress: int = 0, ingress: int = 0
               ) -> Optional[str]:
    """Why ``pf`` cannot serve ``port`` once the request's earlier ports
    took the VFs ``taken`` and ``egress``/``ingress`` kbps of it."""
    name = "PF %s on %s" % (pf.address, "physnet %s" % pf.physnet
                            if pf.physnet else "no physnet")
    if pf.physnet != port.physnet:
        return "%s, %s needs %s" % (name, _port_name(port), _network(port))
    if pf.remote_managed != port.remote_managed:
        return "%s %s, %s (vnic_type %s) %s" % (
            name, "has remote-managed VFs ([pci] device_spec remote_managed)"
            if pf.remote_managed else "has no remote-managed VF",
            _port_name(port), port.vnic_type,
            "needs one" if port.remote_managed else "cannot use them")
    free = pf.free_vfs(taken)
    if not free:
        return "%s has 0 of %d VFs free, %s needs 1" % (
            name, len(pf.vfs), _port_name(port))
    if not _usable_vfs(pf, port, taken):
        return _unusable(name, pf, port, taken)
    for what, need, capacity, used in (
            ("egress", port.min_kbps_egress, pf.egress_kbps,
             pf.used_egress_kbps + egress),
            ("ingress", port.min_kbps_ingress, pf.ingress_kbps,
             pf.used_ingress_kbps + ingress)):
        if not need:
            continue
        if capacity is None:
            return "%s reports no %s bandwidth, %s needs %d kbps" % (
                name, what, _port_name(port), need)
        if capacity - used < need:
            return "%s has %d kbps %s free, %s needs %d" % (
                name, max(capacity - used, 0), what, _port_name(port), need)
    problem = affinity.problem(pf.cell)
    if problem is not None:
        return "%s %s" % (name, problem)
    return None


def device_problem(state: SRIOVState, device: DeviceState, alias: AliasRequest,
                   affinity: Affinity, taken: frozenset[str],
                   port_vfs: frozenset[str] = frozenset()) -> Optional[str]:
    """Why ``device`` cannot serve ``alias`` once the request took the
    devices ``taken`` and its ports the VFs ``port_vfs`` (with ``[pci]
    device_spec`` a port's VF or its PF may be an alias device too); None
    when it can."""
    name = "PCI device %s" % device.address
    mismatch = alias_rules.mismatch(alias, device.vendor_id, device.product_id,
                                    device.device_type, device.resource_class,
                                    device.traits, device.live_migratable)
    if mismatch is not None:
        return "%s does not match alias %s: %s" % (name, alias.name, mismatch)
    if device.address in port_vfs:
        return "%s (alias %s) serves a port of this request" % (name, alias.name)
    if device.used or device.address in taken:
        return "%s (alias %s) is used by another guest" % (name, alias.name)
    for other in state.related(device):
        peer = state.device(other)
        if other in taken or (peer is not None and peer.used):
            return "%s (alias %s) cannot be given: %s %s is used" % (
                name, alias.name, "its PF" if device.parent else "its VF", other)
    nic = state.pf(device.address)
    if nic is not None:
        busy = nic.used_vfs | {f.address for f in nic.vfs if f.address in port_vfs}
        if busy:
            return "%s (alias %s) cannot be given: its VF %s serves a port" % (
                name, alias.name, min(busy))
    problem = affinity.problem(device.cell)
    if problem is not None:
        return "%s %s" % (name, problem)
    return None


def _affinities(request: SRIOVRequest, host_cells: frozenset[int],
                state: SRIOVState) -> tuple[dict[str, Affinity], dict[str, Affinity]]:
    """The affinity of each port and of each alias, by requester id."""
    ports = {p.requester_id: Affinity(port_affinity_policy(request, p), host_cells,
                                      state.sockets, key=PCI_AFFINITY)
             for p in request.ports}
    aliases = {a.requester_id: Affinity(alias_affinity_policy(request, a),
                                        host_cells, state.sockets, key=PCI_AFFINITY)
               for a in request.aliases}
    return ports, aliases


@dataclasses.dataclass(frozen=True)
class _PortUsage:
    """What the request's earlier ports took: VFs, and kbps per PF."""

    vfs: frozenset[str] = frozenset()
    bandwidth: FrozenMap[str, tuple[int, int]] = dataclasses.field(
        default_factory=FrozenMap)

    def problem(self, pf: PFState, port: PortRequest,
                affinity: Affinity) -> Optional[str]:
        egress, ingress = self.bandwidth.get(pf.address, (0, 0))
        return pf_problem(pf, port, affinity, self.vfs, egress, ingress)

    def vf(self, pf: PFState, port: PortRequest) -> VFView:
        """The VF ``port`` gets on ``pf``: its first usable free one."""
        return _usable_vfs(pf, port, self.vfs)[0]

    def taking(self, pf: PFState, port: PortRequest) -> _PortUsage:
        egress, ingress = self.bandwidth.get(pf.address, (0, 0))
        bandwidth = dict(self.bandwidth)
        bandwidth[pf.address] = (egress + port.min_kbps_egress,
                                 ingress + port.min_kbps_ingress)
        return _PortUsage(self.vfs | {self.vf(pf, port).address},
                          FrozenMap(sorted(bandwidth.items())))


def _pf_candidates(state: SRIOVState, port: PortRequest, affinity: Affinity,
                   placement: Mappings, usage: _PortUsage
                   ) -> tuple[list[PFState], Optional[Rejection]]:
    """The PFs that can serve ``port`` after ``usage``, best first: the
    mapped one, or offline every one, NUMA-affine first, then by address;
    when none, why not."""
    if placement is not None:
        mapped = tuple(placement.get(port.requester_id, ()))
        if not mapped:
            return [], Rejection("the allocation maps no provider to %s (group "
                                 "%s)" % (_port_name(port), port.requester_id))
        for pf in state.pfs:
            if pf.provider_uuid in mapped:
                why = usage.problem(pf, port, affinity)
                if why is not None:
                    return [], Rejection(why, pf.provider_uuid)
                return [pf], None
        return [], Rejection("%s is allocated from provider %s, which is not an "
                             "SR-IOV PF of this host"
                             % (_port_name(port), ", ".join(mapped)), mapped[0])
    fits, problems = [], []
    for pf in state.pfs:
        why = usage.problem(pf, port, affinity)
        if why is None:
            fits.append(pf)
        else:
            problems.append(why)
    if fits:
        fits.sort(key=lambda pf: (_rank(affinity, pf.cell), pf.address))
        return fits, None
    if not problems:
        return [], Rejection("this host has no SR-IOV PF; %s needs a VF on "
                             "%s" % (_port_name(port), _network(port)))
    return [], Rejection("no PF can serve %s: %s" % (_port_name(port),
                                                     summarize(problems)))


def _alias_text(alias: AliasRequest) -> str:
    said = [("vendor_id", alias.vendor_id), ("product_id", alias.product_id),
            ("device_type", alias.device_type),
            ("live_migratable", alias.live_migratable)]
    fields = ["%s %s" % (k, v) for k, v in said if v is not None]
    return ", ".join(fields) or "resource class %s" % alias.resource_class


def _choose_devices(state: SRIOVState, alias: AliasRequest, affinity: Affinity,
                    placement: Mappings, taken: set[str],
                    port_vfs: frozenset[str] = frozenset()
                    ) -> Union[tuple[DeviceState, ...], Rejection]:
    """``alias.count`` devices for ``alias``, best first (module doc)."""
    mapped = None if placement is None else placement.get(alias.requester_id)
    matching = _matching(state, alias, affinity, placement)
    chosen: list[DeviceState] = []
    problems: list[str] = []
    for device in matching:
        if len(chosen) == alias.count:
            break
        why = device_problem(state, device, alias, affinity,
                             frozenset(taken) | {d.address for d in chosen},
                             port_vfs)
        if why is None:
            chosen.append(device)
        else:
            problems.append(why)
    if len(chosen) == alias.count:
        return tuple(chosen)
    where = "of provider(s) %s" % ", ".join(mapped) if mapped else "on this host"
    provider = mapped[0] if mapped else ""
    if not matching:
        carry = ("no device of this host's [pci] device_spec carries all"
                 if any(d.traits is not None for d in state.devices)
                 else "which PCI devices do not carry")
        traits = ("; it requires traits %s, %s"
                  % (", ".join(sorted(alias.traits)), carry) if alias.traits else "")
        return Rejection("alias %s needs %d device(s) (%s): no PCI device %s "
                         "matches it%s" % (alias.name, alias.count,
                                           _alias_text(alias), where, traits),
                         provider)
    return Rejection("alias %s needs %d device(s), %d of the %d matching %s can "
                     "be given: %s" % (alias.name, alias.count, len(chosen),
                                       len(matching), where, summarize(problems)),
                     provider)


def _matching(state: SRIOVState, alias: AliasRequest, affinity: Affinity,
              placement: Mappings) -> list[DeviceState]:
    """The devices of ``alias``'s mapped providers (all offline) that match
    it, best first: NUMA-affine, a PF with VFs last, then by address."""
    mapped = None if placement is None else placement.get(alias.requester_id)
    matching = [d for d in state.devices
                if (mapped is None or d.provider_uuid in mapped)
                and alias_rules.mismatch(alias, d.vendor_id, d.product_id,
                                         d.device_type, d.resource_class,
                                         d.traits, d.live_migratable) is None]
    # NOTE: a PF last: taking it makes its VFs unavailable.
    matching.sort(key=lambda d: (_rank(affinity, d.cell),
                                 d.parent is None and bool(state.related(d)),
                                 d.address))
    return matching


def _alias_devices(state: SRIOVState, request: SRIOVRequest,
                   affinity: dict[str, Affinity], placement: Mappings,
                   budget: Budget, port_vfs: frozenset[str] = frozenset()
                   ) -> Union[alias_fit.Choice, Rejection]:
    """The devices of every alias (:mod:`resources.sriov.alias_fit`), none
    of them a VF ``port_vfs`` names (the request's ports') nor its PF."""
    aliases = request.aliases

    def greedy() -> Union[alias_fit.Choice, Rejection]:
        taken: set[str] = set()
        result: alias_fit.Choice = []
        for alias in aliases:
            chosen = _choose_devices(state, alias, affinity[alias.requester_id],
                                     placement, taken, port_vfs)
            if isinstance(chosen, Rejection):
                return chosen
            taken.update(d.address for d in chosen)
            result.append((alias, chosen))
        return result

    def problem(device: DeviceState, alias: AliasRequest,
                taken: frozenset[str]) -> Optional[str]:
        return device_problem(state, device, alias,
                              affinity[alias.requester_id], taken, port_vfs)

    candidates = {alias.requester_id: [
        d for d in _matching(state, alias, affinity[alias.requester_id], placement)
        if problem(d, alias, frozenset()) is None] for alias in aliases}
    return alias_fit.choose(state, aliases, candidates, greedy, problem, budget)


#: Most provider choices :func:`_one_provider_each` tries.
_PROVIDER_CHOICES = 64


def _spread(chosen: alias_fit.Choice) -> bool:
    """Whether an alias's devices are on more than one provider of nova's
    layout (a device without is on its own provider, in no Placement)."""
    return any(len({d.provider_uuid for d in given}) > 1
               and all(d.placed for d in given) for _, given in chosen)


def _one_provider_each(state: SRIOVState, request: SRIOVRequest,
                       affinity: dict[str, Affinity], budget: Budget,
                       port_vfs: frozenset[str]
                       ) -> Union[alias_fit.Choice, Rejection]:
    """The devices of every alias, each alias's on one provider: its
    request group (``{resource class: count}``) is served by one Placement
    provider, and with ``[pci] report_in_placement`` a PF's VFs share their
    PF's. Offline only (an allocation's mapping already names one); the
    providers are tried best first, at most :data:`_PROVIDER_CHOICES`
    choices."""
    options = []
    for alias in request.aliases:
        providers: list[str] = []
        for device in _matching(state, alias, affinity[alias.requester_id], None):
            if device.provider_uuid not in providers:
                providers.append(device.provider_uuid)
        options.append(providers)
    for tried, choice in enumerate(itertools.product(*options)):
        if tried == _PROVIDER_CHOICES:
            break
        mapping = {a.requester_id: (p,) for a, p in
                   zip(request.aliases, choice, strict=True)}
        got = _alias_devices(state, request, affinity, mapping, budget, port_vfs)
        if not isinstance(got, Rejection):
            return got
    spread = [a for a in request.aliases if a.count > 1]
    alias = spread[0] if spread else request.aliases[0]
    return Rejection("alias %s needs %d device(s) on one provider (its request "
                     "group is served by one Placement provider): no provider "
                     "of this host has them" % (alias.name, alias.count))


def fit(state: SRIOVState, request: SRIOVRequest, placement: Mappings,
        earlier: Earlier, budget: Optional[Budget] = None
        ) -> Union[SRIOVAssignment, Rejection]:
    """The VF of every port and the devices of every alias (module doc);
    the searches run on ``budget`` (a default :class:`Budget`)."""
    budget = budget if budget is not None else Budget()
    host_cells = guest_host_cells(earlier)
    port_affinity, alias_affinity = _affinities(request, host_cells, state)
    outcome, usage = first_fit(
        request.ports, _PortUsage(),
        lambda port, used: _pf_candidates(state, port,
                                          port_affinity[port.requester_id],
                                          placement, used)[0],
        lambda port, pf, used: used.taking(pf, port), budget)
    if outcome.exhausted:
        return Rejection(budget.stopped("PFs for %d ports" % len(request.ports)))
    if outcome.choices is None:
        port = request.ports[outcome.failed_at]
        rejection = _pf_candidates(state, port, port_affinity[port.requester_id],
                                   placement, usage)[1]
        # NOTE: the deepest failing port has no PF left (search module).
        return rejection or Rejection("no PF can serve %s" % _port_name(port))
    vfs = []
    used = _PortUsage()
    for port, pf in zip(request.ports, outcome.choices, strict=True):
        vf = used.vf(pf, port)
        used = used.taking(pf, port)
        vfs.append(VFAssignment(
            requester_id=port.requester_id, provider_uuid=pf.provider_uuid,
            pf_address=pf.address, vf_address=vf.address, port_id=port.port_id,
            physnet=port.physnet or "", egress_kbps=port.min_kbps_egress,
            ingress_kbps=port.min_kbps_ingress, vf_netdev=vf.netdev or "",
            vdpa_dev=(vf.vdpa_dev or "") if port.vnic_type == VDPA else ""))
    port_vfs = frozenset(vf.vf_address for vf in vfs)
    chosen = _alias_devices(state, request, alias_affinity, placement, budget,
                            port_vfs)
    if isinstance(chosen, Rejection):
        return chosen
    if placement is None and _spread(chosen):
        chosen = _one_provider_each(state, request, alias_affinity, budget,
                                    port_vfs)
        if isinstance(chosen, Rejection):
            return chosen
    devices = [DeviceAssignment(requester_id=alias.requester_id, alias=alias.name,
                                address=device.address,
                                provider_uuid=device.provider_uuid)
               for alias, given in chosen for device in given]
    assignment = SRIOVAssignment(vfs=tuple(vfs), devices=tuple(devices),
                                 host_cells=tuple(sorted(host_cells)))
    return verify(state, request, assignment) or assignment


def _verify_port(state: SRIOVState, port: PortRequest, vf: VFAssignment,
                 affinity: Affinity, taken: frozenset[str],
                 bandwidth: dict[str, tuple[int, int]]) -> Optional[Rejection]:
    pf = state.pf(vf.pf_address)
    if pf is None:
        return Rejection("PF %s of %s is not an SR-IOV PF of this host"
                         % (vf.pf_address, _port_name(port)), vf.provider_uuid)
    if vf.provider_uuid != pf.provider_uuid:
        return Rejection("%s names provider %s for PF %s, whose provider is %s"
                         % (_port_name(port), vf.provider_uuid, pf.address,
                            pf.provider_uuid), pf.provider_uuid)
    recorded = (vf.physnet, vf.egress_kbps, vf.ingress_kbps)
    if recorded != (port.physnet or "", port.min_kbps_egress, port.min_kbps_ingress):
        return Rejection("the assignment of %s records physnet %s, %d/%d kbps; "
                         "the port asks physnet %s, %d/%d kbps"
                         % ((_port_name(port),) + recorded
                            + (port.physnet, port.min_kbps_egress,
                               port.min_kbps_ingress)), pf.provider_uuid)
    egress, ingress = bandwidth.get(pf.address, (0, 0))
    why = pf_problem(pf, port, affinity, taken, egress, ingress)
    if why is None:
        free = {f.address: f for f in pf.free_vfs(taken)}
        function = free.get(vf.vf_address)
        if not pf.has_vf(vf.vf_address):
            why = "VF %s of %s is not a VF of PF %s" % (
                vf.vf_address, _port_name(port), pf.address)
        elif function is None:
            why = "VF %s of PF %s (%s) is used by another guest" % (
                vf.vf_address, pf.address, _port_name(port))
        elif function not in _usable_vfs(pf, port, taken):
            if port.vnic_type == VDPA:
                why = "VF %s of PF %s is not a vDPA device, vdpa %s needs one" % (
                    vf.vf_address, pf.address, _port_name(port))
            elif function.vdpa_dev:
                why = "VF %s of PF %s is a vDPA device (%s), %s %s needs another" % (
                    vf.vf_address, pf.address, function.vdpa_dev,
                    port.vnic_type, _port_name(port))
            else:
                why = "VF %s of PF %s has no network interface, macvtap %s needs one" % (
                    vf.vf_address, pf.address, _port_name(port))
        elif (function.netdev or "") != vf.vf_netdev:
            why = "VF %s of %s has network interface %s, the assignment says %s" % (
                vf.vf_address, _port_name(port), function.netdev or "none",
                vf.vf_netdev or "none")
        elif port.vnic_type == VDPA and function.vdpa_dev != vf.vdpa_dev:
            why = "VF %s of %s has vDPA device %s, the assignment says %s" % (
                vf.vf_address, _port_name(port), function.vdpa_dev,
                vf.vdpa_dev or "none")
        elif port.vnic_type != VDPA and vf.vdpa_dev:
            why = "the assignment gives %s %s vDPA device %s" % (
                port.vnic_type, _port_name(port), vf.vdpa_dev)
    return None if why is None else Rejection(why, pf.provider_uuid)


def verify(state: SRIOVState, request: SRIOVRequest,
           assignment: SRIOVAssignment) -> Optional[Rejection]:
    """None when ``assignment`` still holds on ``state`` (module doc)."""
    port_affinity, alias_affinity = _affinities(
        request, frozenset(assignment.host_cells), state)
    given = [(vf.requester_id, vf.port_id) for vf in assignment.vfs]
    wanted = [(p.requester_id, p.port_id) for p in request.ports]
    if given != wanted:
        return Rejection("the assignment serves ports %s, the request asks %s"
                         % (", ".join(p for _, p in given) or "none",
                            ", ".join(p for _, p in wanted) or "none"))
    taken: set[str] = set()
    bandwidth: dict[str, tuple[int, int]] = {}
    for port, vf in zip(request.ports, assignment.vfs, strict=True):
        problem = _verify_port(state, port, vf, port_affinity[port.requester_id],
                               frozenset(taken), bandwidth)
        if problem is not None:
            return problem
        taken.add(vf.vf_address)
        egress, ingress = bandwidth.get(vf.pf_address, (0, 0))
        bandwidth[vf.pf_address] = (egress + port.min_kbps_egress,
                                    ingress + port.min_kbps_ingress)
    aliases = {a.requester_id: a for a in request.aliases}
    counts = {a.requester_id: 0 for a in request.aliases}
    taken_devices: set[str] = set()
    for given_device in assignment.devices:
        alias = aliases.get(given_device.requester_id)
        if alias is None or alias.name != given_device.alias:
            return Rejection("the assignment gives PCI device %s to alias %s "
                             "(group %s), which the request does not ask"
                             % (given_device.address, given_device.alias,
                                given_device.requester_id))
        counts[alias.requester_id] += 1
        device = state.device(given_device.address)
        if device is None:
            return Rejection("PCI device %s of alias %s is not offered for "
                             "aliases on this host" % (given_device.address,
                                                       alias.name),
                             given_device.provider_uuid)
        if given_device.provider_uuid != device.provider_uuid:
            return Rejection("alias %s names provider %s for PCI device %s, "
                             "whose provider is %s"
                             % (alias.name, given_device.provider_uuid,
                                device.address, device.provider_uuid),
                             device.provider_uuid)
        why = device_problem(state, device, alias,
                             alias_affinity[alias.requester_id],
                             frozenset(taken_devices), frozenset(taken))
        if why is not None:
            return Rejection(why, device.provider_uuid)
        taken_devices.add(device.address)
    for alias in request.aliases:
        if counts[alias.requester_id] != alias.count:
            return Rejection("alias %s gets %d device(s), it asks %d"
                             % (alias.name, counts[alias.requester_id], alias.count))
    return None
