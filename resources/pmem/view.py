"""The pmem plugin's view: the configured vPMEM namespaces of the host.

nova's ``[libvirt] pmem_namespaces`` (same group, name and format, so a
nova.conf value carries over)::

    pmem_namespaces = 128G:ns0|ns1|ns2|ns3,262144MB:ns4|ns5,MEDIUM:ns6|ns7

Each ``$LABEL:$NSNAME[|$NSNAME]`` entry gives the namespaces of one
resource class, ``CUSTOM_PMEM_NAMESPACE_$LABEL`` (``orc.normalize_name``,
as nova). The namespaces are found by name among the host's
(``HostInfo.pmem_namespaces``: ``ndctl list -X``, or a snapshot's
``ndctl.json``), as nova's ``_discover_vpmems``:

- an entry without ``:``, a label ``hw:pmem`` cannot name (nova accepts
  ``a-b`` or ``Ä``, whose namespaces its driver never attaches: its
  flavor's labels are ``[a-zA-Z0-9_]+`` and matched to the configured
  label as written), or a namespace configured twice, is the operator's
  error (:class:`InvalidPMEMConfig`, exit 2);
- a configured namespace the host does not have is
  :class:`PMEMNamespaceMissing` (the host is degraded, as nova refuses to
  start).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from typing import Optional

import os_resource_classes as orc

from compute_plugins.exception import ComputePluginsError
from compute_plugins.host.model import HostInfo
from compute_plugins.plugin.devices import InvalidOptionValue

OPTION = "[libvirt] pmem_namespaces"
#: Sizes are kept in KiB (the guest XML's unit, and JSON's integers reach
#: 2**31: a namespace of up to 2 TiB).
KIB = 1024


#: A label ``hw:pmem`` can name (nova's validator: ``[a-zA-Z0-9_]+``, ASCII).
LABEL = re.compile(r"[a-zA-Z0-9_]+", re.ASCII)


class InvalidPMEMConfig(InvalidOptionValue):
    """``[libvirt] pmem_namespaces`` is malformed."""


class PMEMNamespaceMissing(ComputePluginsError):
    """A configured namespace is not on the host."""


@dataclasses.dataclass(frozen=True)
class NamespaceView:
    """One configured namespace: its label and what the guest XML needs."""

    name: str
    label: str
    resource_class: str
    devpath: str
    size_kib: int
    align_kib: int
    numa_node: Optional[int] = None


@dataclasses.dataclass(frozen=True)
class PMEMView:
    """The configured namespaces, in configuration order."""

    namespaces: tuple[NamespaceView, ...] = ()

    def by_class(self) -> dict[str, list[NamespaceView]]:
        """Resource class -> its namespaces (configuration order)."""
        out: dict[str, list[NamespaceView]] = {}
        for namespace in self.namespaces:
            out.setdefault(namespace.resource_class, []).append(namespace)
        return out


def resource_class(label: str) -> str:
    """``CUSTOM_PMEM_NAMESPACE_<LABEL>`` (nova's ``normalize_name``)."""
    return str(orc.normalize_name("PMEM_NAMESPACE_" + label))


def parse_config(entries: Sequence[str]) -> list[tuple[str, list[str]]]:
    """``[(label, [namespace names])]`` of the option's entries.

    :raises InvalidPMEMConfig: an entry is not ``LABEL:NS[|NS]``, a label
        is not one ``hw:pmem`` can name, or a namespace is configured twice.
    """
    value = ",".join(entries)
    seen: set[str] = set()
    out: list[tuple[str, list[str]]] = []
    for entry in entries:
        label, sep, names_text = entry.partition(":")
        names = names_text.split("|")
        if not sep or not label.strip() or not all(n.strip() for n in names):
            raise InvalidPMEMConfig(
                OPTION, value, "each entry is $LABEL:$NSNAME[|$NSNAME] "
                "(nova's format), %r is not" % entry)
        if not LABEL.fullmatch(label.strip()):
            raise InvalidPMEMConfig(
                OPTION, value, "label %r is not one hw:pmem can name "
                "(letters, digits, _: nova's flavor validator), so its "
                "namespaces could never be given" % label.strip())
        for name in names:
            if name in seen:
                raise InvalidPMEMConfig(OPTION, value,
                                        "namespace %s is configured twice" % name)
            seen.add(name)
        out.append((label.strip(), names))
    return out


def build_view(entries: Sequence[str], host: HostInfo) -> PMEMView:
    """The configured namespaces of ``host`` (module rules)."""
    config = parse_config(entries)
    on_host = {ns.name: ns for ns in host.pmem_namespaces}
    namespaces = []
    for label, names in config:
        for name in names:
            found = on_host.get(name)
            if found is None:
                raise PMEMNamespaceMissing(
                    "%s names namespace %s, which host %s does not have (its "
                    "named devdax namespaces: %s)"
                    % (OPTION, name, host.hostname, ", ".join(sorted(on_host)) or "none"))
            namespaces.append(NamespaceView(
                name=name, label=label, resource_class=resource_class(label),
                devpath=found.devpath, size_kib=found.size // KIB,
                align_kib=found.align // KIB,
                numa_node=found.numa_node))
    return PMEMView(namespaces=tuple(namespaces))
