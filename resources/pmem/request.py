"""The pmem plugin's request: ``hw:pmem`` as nova reads it.

``hw:pmem=$LABEL[,$LABEL...]`` (flavor only; nova's ``get_vpmems``: split
on commas, blanks dropped; the validator's pattern ``([a-zA-Z0-9_]+(,)?)+``)
asks one namespace per label, ``CUSTOM_PMEM_NAMESPACE_$LABEL`` in the
request (nova's ``_translate_vpmems_request``). nova asks them in the
unsuffixed group, from the compute root; here in a group of their own,
``_PMEM``, which only the root can serve too.

The assignment names the namespaces (which ones is this plugin's state:
Placement counts them, the host hands out specific devices), in the order
of the flavor's labels, with the guest NUMA node the device goes on.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Optional

from compute_plugins.request import rules
from compute_plugins.request.groups import (
    KIND_DEVICE,
    PluginAssignment,
    PluginRequest,
    RequestGroup,
)
from compute_plugins.request.inputs import RequestInput
from compute_plugins.request.types import FrozenMap
from resources.pmem.view import resource_class

PLUGIN = "pmem"
KEY = "hw:pmem"
GROUP = "_PMEM"
#: nova's validator for ``hw:pmem`` (named in the messages).
PATTERN = r"([a-zA-Z0-9_]+(,)?)+"
#: The same language without nested quantifiers (nova's backtracks
#: exponentially on ``aaaa...a!``): labels separated by single commas, one
#: trailing comma allowed.
MATCH = r"[a-zA-Z0-9_]+(?:,[a-zA-Z0-9_]+)*,?"


@dataclasses.dataclass(frozen=True)
class PMEMRequest(PluginRequest):
    """One namespace per label, in the flavor's order."""

    labels: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class NamespaceAssignment:
    """The namespace given for the flavor's ``index``-th label."""

    label: str
    name: str
    devpath: str
    size_kib: int
    align_kib: int


@dataclasses.dataclass(frozen=True)
class PMEMAssignment(PluginAssignment):
    """The namespaces, the provider they are counted on (the root) and the
    guest NUMA node of the devices (None: the guest has no topology)."""

    namespaces: tuple[NamespaceAssignment, ...] = ()
    provider_uuid: str = ""
    guest_node: Optional[int] = None


def parse(ri: RequestInput) -> Optional[PMEMRequest]:
    """``hw:pmem``'s labels (module doc); None when unset, without a label,
    or malformed (reported on ``ri`` in nova's validator's words)."""
    if KEY not in ri.extra_specs:
        return None
    ri.claim(KEY)
    value = rules.check_pattern(ri, KEY, ri.extra_specs[KEY], MATCH, shown=PATTERN)
    if value is None:
        return None
    labels = tuple(label.strip() for label in value.split(",") if label.strip())
    return PMEMRequest(labels=labels) if labels else None


def amounts(req: PMEMRequest) -> dict[str, int]:
    """Resource class -> namespaces asked."""
    return dict(collections.Counter(resource_class(label) for label in req.labels))


def request_groups(req: PMEMRequest) -> list[RequestGroup]:
    """``_PMEM``: one ``CUSTOM_PMEM_NAMESPACE_<LABEL>`` per label."""
    return [RequestGroup(requester_id=GROUP, resources=FrozenMap(amounts(req)),
                         owner=PLUGIN, kind=KIND_DEVICE)]


def samples() -> list[RequestInput]:
    """One small namespace; a 4GB and a small one on a guest NUMA node."""
    return [
        RequestInput.from_dicts({"name": "pmem.small", "vcpus": 2, "memory_mb": 2048,
                                 "extra_specs": {KEY: "SMALL"}}),
        RequestInput.from_dicts({"name": "pmem.two", "vcpus": 2, "memory_mb": 2048,
                                 "extra_specs": {KEY: "4GB,SMALL",
                                                 "hw:numa_nodes": "1"}}),
    ]
