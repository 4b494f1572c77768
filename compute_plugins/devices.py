"""Helpers the resource plugins share: PCI addresses, NUMA parents, option
errors, inventory records.

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

import re
from typing import Any, Optional

from oslo_config import cfg

from compute_plugins import exception, names
from compute_plugins.conf import plugins as plugins_conf
from compute_plugins.host.model import HostInfo

#: Name of the plugin that provides the ``<nodename>_NUMA<id>`` providers.
NUMA_PLUGIN = "numa"

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
    """``3B:0.0`` -> ``0000:3b:00.0``; ``None`` when not a PCI address."""
    match = _PCI_RE.match(address.strip())
    if match is None:
        return None
    return "{:04x}:{:02x}:{:02x}.{}".format(
        int(match.group("domain") or "0", 16), int(match.group("bus"), 16),
        int(match.group("slot"), 16), match.group("function"))


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


def inventory_record(total: int, allocation_ratio: float = 1.0,
                     reserved: Optional[int] = None) -> dict[str, Any]:
    """A Placement inventory record whose ``max_unit`` is the ``total``.

    ``reserved`` is left out unless given: a plugin sends it only when its
    configuration sets it (``[compute] reserved_host_memory_mb``, ``[disk]
    reserved_host_disk_mb``); then the configuration wins, as in nova.
    Without it the report client keeps the ``reserved`` an operator set in
    Placement (0 for a new inventory).
    """
    record: dict[str, Any] = {"total": total}
    if reserved is not None:
        record["reserved"] = reserved
    record.update(min_unit=1, max_unit=total, step_size=1,
                  allocation_ratio=allocation_ratio)
    return record


def parent_name(nodename: str, cell: Optional[int]) -> Optional[str]:
    """Provider name of the parent (``None`` = the compute root)."""
    return None if cell is None else names.numa_provider_name(nodename, cell)
