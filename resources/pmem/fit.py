"""The pmem plugin's host state and decision: which namespaces a guest gets.

The state lists every configured namespace, used or free, counted on the
compute root (the provider of its ``CUSTOM_PMEM_NAMESPACE_*`` class).
``fit`` gives each of the request's labels the first free namespace of its
class, in configuration order (nova's ``_get_ordered_vpmem_resources``
pairs labels with the namespaces the resource tracker claimed); the guest
NUMA node of the devices is the guest's first node (nova: a vPMEM guest
always has a NUMA topology, node 0 holds them). A guest without one is
refused: libvirt refuses memory devices (``<maxMemory>``) in a guest
without NUMA nodes.
``verify`` checks the same on a recorded assignment: each namespace is this
host's, of the label's class, free, and given once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Optional, Union

from compute_plugins.plugin.contract import Earlier, Mappings, Rejection
from compute_plugins.plugin.state import AssignmentConflict, PluginState
from compute_plugins.plugin.topology import guest_topology
from compute_plugins.tree.contribution import Providers
from resources.pmem.request import (
    GROUP,
    PLUGIN,
    NamespaceAssignment,
    PMEMAssignment,
    PMEMRequest,
)
from resources.pmem.view import PMEMView, resource_class


@dataclasses.dataclass(frozen=True)
class NamespaceState:
    """One configured namespace as the state counts it (the view's facts
    the guest XML needs, and whether a guest holds it)."""

    name: str
    label: str
    resource_class: str
    devpath: str
    size_kib: int
    align_kib: int
    used: bool = False


@dataclasses.dataclass(frozen=True)
class PMEMState(PluginState):
    """The configured namespaces (configuration order) on the root."""

    provider_uuid: str
    namespaces: tuple[NamespaceState, ...] = ()

    def namespace(self, name: str) -> Optional[NamespaceState]:
        """The configured namespace called ``name``, if any."""
        return next((n for n in self.namespaces if n.name == name), None)


def build_state(view: PMEMView, providers: Providers,
                assignments: Sequence[PMEMAssignment]) -> PMEMState:
    """:raises AssignmentConflict: a namespace given twice or not this
    host's."""
    known = {n.name for n in view.namespaces}
    used: set[str] = set()
    for assignment in assignments:
        for given in assignment.namespaces:
            if given.name not in known:
                raise AssignmentConflict(PLUGIN, "a guest holds namespace %s, which "
                                         "this host does not offer" % given.name)
            if given.name in used:
                raise AssignmentConflict(PLUGIN, "namespace %s is given to two guests"
                                         % given.name)
            used.add(given.name)
    return PMEMState(provider_uuid=providers.root, namespaces=tuple(
        NamespaceState(n.name, n.label, n.resource_class, n.devpath, n.size_kib,
                       n.align_kib,
                       n.name in used) for n in view.namespaces))


def _guest_node(earlier: Earlier) -> Optional[int]:
    """The guest's first NUMA node (None: no topology, or a floating one)."""
    topology = guest_topology(earlier)
    if topology is None or topology.floating or not topology.nodes:
        return None
    return min(topology.nodes)


def fit(state: PMEMState, request: PMEMRequest, mappings: Mappings,
        earlier: Earlier) -> Union[PMEMAssignment, Rejection]:
    """Each label's first free namespace (module doc)."""
    if mappings is not None and state.provider_uuid not in mappings.get(GROUP, ()):
        return Rejection("group %s is allocated from %s, not from this host's root %s"
                         % (GROUP, ", ".join(mappings.get(GROUP, ())) or "no provider",
                            state.provider_uuid), state.provider_uuid)
    node = _guest_node(earlier)
    if node is None:
        # NOTE: libvirt refuses memory devices (and <maxMemory>) in a guest
        # without NUMA nodes; nova gives every vPMEM guest one.
        return Rejection("an NVDIMM needs a guest NUMA node and this guest has "
                         "no NUMA topology (the numa plugin gives a hw:pmem guest "
                         "one, as nova; enable it)", state.provider_uuid)
    chosen: list[NamespaceAssignment] = []
    taken: set[str] = set()
    for label in request.labels:
        wanted = resource_class(label)
        free = next((n for n in state.namespaces if n.resource_class == wanted
                     and not n.used and n.name not in taken), None)
        if free is None:
            have = [n for n in state.namespaces if n.resource_class == wanted]
            return Rejection(
                "no free %s namespace for label %s: %d of %d in use%s"
                % (wanted, label, sum(n.used or n.name in taken for n in have),
                   len(have), "" if have else " (none configured on this host)"),
                state.provider_uuid)
        taken.add(free.name)
        chosen.append(NamespaceAssignment(label, free.name, free.devpath, free.size_kib,
                                          free.align_kib))
    assignment = PMEMAssignment(namespaces=tuple(chosen),
                                provider_uuid=state.provider_uuid,
                                guest_node=node)
    return verify(state, request, assignment) or assignment


def verify(state: PMEMState, request: PMEMRequest,
           assignment: PMEMAssignment) -> Optional[Rejection]:
    """None when ``assignment`` still holds on ``state``."""
    if assignment.provider_uuid != state.provider_uuid:
        return Rejection("the namespaces are counted on provider %s, this host's "
                         "root is %s" % (assignment.provider_uuid, state.provider_uuid),
                         state.provider_uuid)
    if assignment.guest_node is None:
        return Rejection("the NVDIMMs have no guest NUMA node (libvirt refuses "
                         "memory devices in a guest without NUMA nodes)",
                         state.provider_uuid)
    labels = tuple(given.label for given in assignment.namespaces)
    if labels != request.labels:
        return Rejection("the assignment gives namespaces for labels %s, the "
                         "request asks %s" % (",".join(labels) or "none",
                                              ",".join(request.labels)))
    seen: set[str] = set()
    for given in assignment.namespaces:
        have = state.namespace(given.name)
        if have is None:
            return Rejection("namespace %s is not configured on this host" % given.name)
        if have.resource_class != resource_class(given.label):
            return Rejection("namespace %s is %s, label %s asks %s"
                             % (given.name, have.resource_class, given.label,
                                resource_class(given.label)))
        if (have.devpath, have.size_kib, have.align_kib) != (
                given.devpath, given.size_kib, given.align_kib):
            return Rejection("namespace %s is %s (%d KiB, align %d KiB) on this host, "
                             "the assignment says %s (%d KiB, align %d KiB)"
                             % (given.name, have.devpath, have.size_kib, have.align_kib,
                                given.devpath, given.size_kib, given.align_kib))
        if have.used:
            return Rejection("namespace %s (%s) is in use" % (given.name, have.devpath),
                             state.provider_uuid)
        if given.name in seen:
            return Rejection("namespace %s is given twice" % given.name)
        seen.add(given.name)
    return None
