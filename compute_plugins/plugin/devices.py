"""Helpers the resource plugins share: PCI addresses, NUMA parents, nova's
PCI NUMA affinity policy key, option errors, inventory records.

Device plugins (``vgpu``, ``sriov``, third-party ones) put a device's provider
under the provider of the NUMA cell the device is attached to, so that
Placement can answer ``same_subtree`` queries. A plugin must never name a
parent no plugin provides, hence one rule for all of them
(:class:`NUMAParents`):

- the ``numa`` plugin is enabled (``[compute_plugins] enabled_plugins``), and
- the host reports the device's NUMA node as one of its cells
  (``HostInfo.cells``; the ``numa`` plugin makes one provider per such cell);

otherwise the device's provider goes under the compute root.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any, Optional

from oslo_config import cfg

from compute_plugins import exception
from compute_plugins.conf import plugins as plugins_conf
from compute_plugins.host.model import HostInfo
from compute_plugins.plugin import names
from compute_plugins.plugin.topology import AffinityKey
from compute_plugins.request import rules
from compute_plugins.request.inputs import RequestInput

LOG = logging.getLogger(__name__)

#: Name of the plugin that provides the ``<nodename>_NUMA<id>`` providers.
NUMA_PLUGIN = "numa"

#: nova's device affinity key: flavor ``hw:pci_numa_affinity_policy``,
#: image ``hw_pci_numa_affinity_policy``.
PCI_AFFINITY_POLICY_KEY = "pci_numa_affinity_policy"
#: How device plugins' rejections name it (nova's policy, NUMA cells).
PCI_AFFINITY = AffinityKey(name="hw:" + PCI_AFFINITY_POLICY_KEY, cells="NUMA")
#: Root trait nova asks for the ``socket`` policy (the host can tell which
#: socket a device is on); the same-socket check itself is the fit's job.
SOCKET_TRAIT = "COMPUTE_SOCKET_PCI_NUMA_AFFINITY"

#: The request's ``group_policy`` (the framework's key: parsed and checked by
#: :mod:`compute_plugins.request.generic`, read here by device plugins).
GROUP_POLICY_KEY = "group_policy"

_PCI_RE = re.compile(
    r"^(?:(?P<domain>[0-9a-fA-F]{1,4}):)?(?P<bus>[0-9a-fA-F]{1,2}):"
    r"(?P<slot>[0-9a-fA-F]{1,2})\.(?P<function>[0-7])$")


class InvalidOptionValue(exception.ConfigError):
    """An option's value breaks a rule: names the option, value and rule.

    :param option: ``[group] name`` of the option.
    :param value: the offending value (or the part of it that is wrong).
    :param rule: what is expected, in words.
    """

    def __init__(self, option: str, value: Any, rule: str) -> None:
        self.option = option
        self.value = value
        self.rule = rule
        super().__init__(f"invalid {option} value {value!r}: {rule}")


def normalize_pci_address(address: str) -> Optional[str]:
    """``3B:0.0`` -> ``0000:3b:00.0``; ``None`` when not a PCI address
    (a slot above 0x1f, PCI's 5 bits, included)."""
    match = _PCI_RE.match(address.strip())
    if match is None or int(match.group("slot"), 16) > 0x1F:
        return None
    return "{:04x}:{:02x}:{:02x}.{}".format(
        int(match.group("domain") or "0", 16), int(match.group("bus"), 16),
        int(match.group("slot"), 16), match.group("function"))


def pci_affinity_policy(ri: RequestInput) -> Optional[str]:
    """``hw:pci_numa_affinity_policy`` / its image twin by nova's rules
    (:func:`compute_plugins.request.rules.affinity_policy`); None when
    unset or wrong (the problem is reported on ``ri``)."""
    return rules.affinity_policy(ri, PCI_AFFINITY_POLICY_KEY)


def isolates_groups(ri: RequestInput) -> bool:
    """Whether the request says ``group_policy=isolate``.

    Placement then serves each numbered (suffixed) group from a provider no
    other numbered group uses (the unsuffixed group may share); a device
    plugin that chooses providers itself (offline, or nova's own query whose
    candidates it cannot map to its groups) must keep that rule, or nova's
    claim of its decision breaks it. An invalid value is reported by the
    framework's parse, and reads here as not ``isolate``.
    """
    return ri.extra_specs.get(GROUP_POLICY_KEY) == "isolate"


def isolation_problem(unit: str, group: str, holder: Optional[str]) -> Optional[str]:
    """Why ``unit`` (a device provider, named for users) cannot serve numbered
    group ``group`` under ``group_policy=isolate`` when numbered group
    ``holder`` already has it; None when no numbered group has it."""
    if holder is None:
        return None
    return ("%s serves group %s already, group %s needs another one "
            "(group_policy=isolate)" % (unit, holder, group))


def enabled_plugins(conf: cfg.ConfigOpts) -> list[str]:
    """``[compute_plugins] enabled_plugins`` (registers it if needed)."""
    plugins_conf.register_opts(conf)
    return list(conf.compute_plugins.enabled_plugins)


class NUMAParents:
    """Which NUMA cell's provider parents a device (the rule of this module).

    Built once per discovery: ``NUMAParents(conf, host).cell(numa_node)``.

    :param conf: the service configuration (``[compute_plugins]``).
    :param host: the host being discovered.
    """

    def __init__(self, conf: cfg.ConfigOpts, host: HostInfo) -> None:
        enabled = NUMA_PLUGIN in enabled_plugins(conf)
        cells = frozenset(c.id for c in host.cells)
        self._cells = cells if enabled else frozenset()

    def cell(self, numa_node: Optional[int]) -> Optional[int]:
        """Id of the cell whose provider parents the device, or ``None``."""
        if numa_node is None or numa_node not in self._cells:
            return None
        return numa_node


#: Placement's largest integer for an inventory field (its JSON schema's
#: maximum, a signed 32-bit int); a larger one makes the PUT a 400.
MAX_INVENTORY = 2147483647


def inventory_record(total: int, allocation_ratio: float = 1.0,
                     reserved: Optional[int] = None,
                     what: str = "inventory",
                     max_unit: Optional[int] = None) -> dict[str, Any]:
    """A Placement inventory record whose ``max_unit`` is the ``total``
    (or ``max_unit``, at most the total: one guest takes at most that many,
    e.g. one memory encryption slot).

    ``reserved``: classes whose reservation the configuration owns
    (``MEMORY_MB`` from ``[compute] reserved_host_memory_mb``, ``DISK_GB``
    from ``[disk] reserved_host_disk_mb``) always pass it, 0 included, so
    that lowering the option clears it in Placement (the configuration wins,
    as in nova). Device classes (``VGPU``, ``SRIOV_NET_VF``, bandwidth,
    ``PCPU``, ``VCPU``, huge pages) leave it out (``None``): the report
    client then keeps the ``reserved`` an operator set in Placement (0 for
    a new inventory).

    A ``total`` (or ``reserved``) above :data:`MAX_INVENTORY` is clamped to
    it with a warning naming ``what``: Placement refuses the whole inventory
    otherwise, and a periodic update must not fail every time on one odd
    host fact (a huge page count, memory from odd capabilities).
    """
    total = _bounded(total, what, "total")
    record: dict[str, Any] = {"total": total}
    if reserved is not None:
        record["reserved"] = _bounded(reserved, what, "reserved")
    record.update(min_unit=1, max_unit=total if max_unit is None else min(max_unit, total),
                  step_size=1,
                  allocation_ratio=allocation_ratio)
    return record


def _bounded(value: int, what: str, field: str) -> int:
    if value > MAX_INVENTORY:
        LOG.warning("%s: %s %d is above Placement's maximum %d; %d is "
                    "reported", what, field, value, MAX_INVENTORY,
                    MAX_INVENTORY)
        return MAX_INVENTORY
    return value


def parent_name(nodename: str, cell: Optional[int]) -> Optional[str]:
    """Provider name of the parent (``None`` = the compute root)."""
    return None if cell is None else names.numa_provider_name(nodename, cell)


#: At most this many reasons are listed in one rejection.
MAX_REASONS = 4


def summarize(reasons: Sequence[str], limit: int = MAX_REASONS) -> str:
    """The first ``limit`` of ``reasons`` joined with ``;``, and how many
    more there are (a host with 64 busy devices gives a readable reason)."""
    shown = "; ".join(reasons[:limit])
    if len(reasons) > limit:
        shown += "; and %d more" % (len(reasons) - limit)
    return shown
