"""The plugin SDK: everything a resource plugin imports, in one module.

This module is the stable contract between compute-plugins and the resource
plugins written for it (the four built-in ones under ``resources/``,
``examples/fpga``, third-party packages). A plugin imports from
``compute_plugins.api`` only; the modules behind these names may move or
change, these names keep their meaning across minor releases, and a change
that breaks one is said in the release notes.

A plugin is a class derived from :class:`ResourcePlugin`, registered under
the ``compute_plugins.resources`` entry-point namespace. What it declares on
its class:

- ``name`` (its entry-point name and its option group), ``version`` (of its
  data formats: requests, assignments, state), ``fit_after`` (plugins whose
  ``fit`` runs before its own), ``provides`` / ``needs`` (roles such as
  :data:`TOPOLOGY`: a plugin that needs one runs after whichever plugin
  provides it), ``pure``;
- ``request_type``, ``assignment_type``, ``state_type``: its own
  :class:`PluginRequest`, :class:`PluginAssignment` and :class:`PluginState`
  subclasses (frozen dataclasses), with which the framework reads them back
  from JSON and checks what the plugin returns.

The hooks (see :class:`ResourcePlugin` for each one's contract):

- the host: ``discover(host: HostInfo)`` -> its view;
  ``provider_contributions(view, nodename)`` -> its
  :class:`ProviderContribution` list;
- the request: ``parse_request(request_input: RequestInput)`` -> its
  request (problems reported on ``request_input``; :mod:`rules` has the
  checks nova makes), ``request_groups(request)`` -> :class:`RequestGroup`
  list (``KIND_*`` kinds);
- the decision: ``host_state(view, providers, assignments)`` -> its state
  (``providers``: its own providers on the node, name -> uuid as the tree
  has them, :class:`Providers`; an :class:`AssignmentConflict` when the
  assignments in force cannot hold); ``fit(state, request, mappings, earlier)`` -> its assignment, a
  :class:`Rejection` or None (``mappings``: :data:`Mappings`; ``earlier``:
  :data:`Earlier`); ``alternatives``; ``verify``; ``allocations`` /
  ``group_providers`` (:class:`GroupAllocation`, :func:`providers_by_suffix`);
  ``utilization``; ``guest_config`` -> :class:`GuestFragment` list;
  ``describe``.

A plugin that raises, or returns what its hook does not allow, is isolated
by the framework (one reason naming it), so a bug never stops a host or the
scheduler; the exceptions a hook documents are the plugin's way to say
what went wrong.

Helpers plugins share: provider and class names (:func:`custom_name`,
:func:`provider_uuid`, :func:`device_provider_name`...), devices
(:func:`inventory_record`, :func:`parent_name`, :class:`NUMAParents`,
:class:`InvalidOptionValue`...), CPU sets (:func:`parse_cpu_spec`,
:func:`format_cpu_spec`), bounded searches (:class:`Budget`,
:func:`first_fit`), the guest's topology and devices'
affinity to it (:class:`GuestTopology`, :func:`guest_topology`,
:class:`Affinity`, :func:`cell_sockets`, :func:`guest_host_cells`), immutable containers and
checked fields (:class:`FrozenMap`, :func:`enum_field`, :func:`min_field`).
"""

from __future__ import annotations

from compute_plugins.conf import ratio_opt
from compute_plugins.exception import ComputePluginsError, ConfigError
from compute_plugins.host.errors import HostDataError
from compute_plugins.host.model import (
    CPU,
    DiskInfo,
    DomainCaps,
    HostInfo,
    Mdev,
    MdevType,
    NUMACell,
    PagePool,
    PCIDevice,
    PMEMNamespace,
    SEVCaps,
)
from compute_plugins.plugin.choice import DEFAULT_STEPS, Budget, Outcome, first_fit
from compute_plugins.plugin.contract import (
    FRAGMENT_PARENTS,
    Earlier,
    GroupAllocation,
    GuestFragment,
    Mappings,
    Rejection,
    ResourcePlugin,
    describe_fields,
    providers_by_suffix,
)
from compute_plugins.plugin.cpuset import (
    MAX_CPU_ID,
    InvalidCPUSpec,
    format_cpu_spec,
    parse_cpu_spec,
)
from compute_plugins.plugin.devices import (
    MAX_INVENTORY,
    PCI_AFFINITY,
    PCI_AFFINITY_POLICY_KEY,
    SOCKET_TRAIT,
    InvalidOptionValue,
    NUMAParents,
    inventory_record,
    normalize_pci_address,
    parent_name,
    pci_affinity_policy,
    summarize,
)
from compute_plugins.plugin.names import (
    TOPOLOGY_NODE_TRAIT,
    VNIC_TYPE_DIRECT,
    custom_name,
    device_provider_name,
    is_valid_resource_class,
    is_valid_trait,
    numa_provider_name,
    page_resource_class,
    pci_address_slug,
    physnet_trait,
    provider_uuid,
)
from compute_plugins.plugin.state import AssignmentConflict, PluginState
from compute_plugins.plugin.topology import (
    AFFINE,
    FALLBACK,
    TOPOLOGY,
    Affinity,
    AffinityKey,
    CellSockets,
    GuestTopology,
    HoldsCellDevices,
    OrdersByCellDevices,
    PlacesGuest,
    RecordsGuestCells,
    cell_sockets,
    guest_host_cells,
    guest_topology,
    recorded_cells_problem,
    topology_provider,
)
from compute_plugins.request import rules
from compute_plugins.request.errors import Problem, RequestValidationError
from compute_plugins.request.groups import (
    AFFINITY_POLICIES,
    KIND_DEVICE,
    KIND_DISK,
    KIND_FLOATING,
    KIND_GENERIC,
    KIND_GUEST_NODE,
    KIND_ROOT,
    KINDS,
    RESERVED_SUFFIX_PREFIX,
    SPLIT_PREFIX,
    SUFFIX,
    PluginAssignment,
    PluginRequest,
    RequestGroup,
    granular_key_re,
    is_reserved_suffix,
)
from compute_plugins.request.inputs import MAX_AMOUNT, Flavor, Port, RequestInput
from compute_plugins.request.types import MAX_INT, CodecError, FrozenMap, enum_field, min_field
from compute_plugins.tree.contribution import ProviderContribution, Providers

__all__ = [
    # the contract
    "Earlier", "FRAGMENT_PARENTS", "GroupAllocation", "GuestFragment", "Mappings",
    "Rejection", "ResourcePlugin", "describe_fields", "providers_by_suffix",
    # the host
    "CPU", "DiskInfo", "HostDataError", "HostInfo", "Mdev", "MdevType", "NUMACell",
    "PCIDevice", "PagePool", "ProviderContribution", "Providers",
    "DomainCaps", "PMEMNamespace", "SEVCaps",
    # the request
    "AFFINITY_POLICIES", "Flavor", "KINDS", "KIND_DEVICE", "KIND_DISK",
    "KIND_FLOATING", "KIND_GENERIC", "KIND_GUEST_NODE", "KIND_ROOT", "MAX_AMOUNT",
    "PluginRequest", "Port", "Problem", "RESERVED_SUFFIX_PREFIX", "RequestGroup",
    "RequestInput", "RequestValidationError", "SPLIT_PREFIX", "SUFFIX", "granular_key_re",
    "is_reserved_suffix", "rules",
    # the decision
    "AssignmentConflict", "PluginAssignment", "PluginState",
    # immutable values and checked fields
    "CodecError", "FrozenMap", "MAX_INT", "enum_field", "min_field",
    # names
    "VNIC_TYPE_DIRECT", "custom_name", "device_provider_name",
    "is_valid_resource_class", "is_valid_trait", "numa_provider_name",
    "page_resource_class", "pci_address_slug", "physnet_trait", "provider_uuid",
    "TOPOLOGY_NODE_TRAIT",
    # devices
    "InvalidOptionValue", "MAX_INVENTORY", "NUMAParents", "inventory_record",
    "normalize_pci_address", "parent_name", "summarize",
    "PCI_AFFINITY", "PCI_AFFINITY_POLICY_KEY", "SOCKET_TRAIT", "pci_affinity_policy",
    # CPU sets
    "InvalidCPUSpec", "MAX_CPU_ID", "format_cpu_spec", "parse_cpu_spec",
    # searches
    "Budget", "DEFAULT_STEPS", "Outcome", "first_fit",
    # topology: where the guest sits, and devices' affinity to it
    "AFFINE", "Affinity", "AffinityKey", "CellSockets", "FALLBACK", "GuestTopology",
    "HoldsCellDevices", "OrdersByCellDevices",
    "PlacesGuest", "RecordsGuestCells", "TOPOLOGY", "cell_sockets", "guest_host_cells",
    "guest_topology", "recorded_cells_problem", "topology_provider",
    # errors and options
    "ComputePluginsError", "ConfigError", "ratio_opt",
]
