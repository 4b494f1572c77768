"""``numa``: a provider per host NUMA cell: its CPUs, memory, huge pages.

The tree gets a ``<nodename>_NUMA<id>`` child of the compute root per cell
(trait ``HW_NUMA_ROOT``); see :mod:`resources.numa.view` for how the
``[compute]`` options split CPUs and memory, and :mod:`resources.numa.provider`
for the inventory records. The plugin has no options of its own: it reads
the framework's ``[compute]`` group, named as in nova.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

from compute_plugins.contribution import ProviderContribution
from compute_plugins.host.model import HostInfo
from compute_plugins.plugin import ResourcePlugin
from compute_plugins.request.groups import RequestGroup
from resources.numa import provider, summary
from resources.numa import request as numa_request
from resources.numa.view import (
    InvalidCPUSet,
    NUMAView,
    build_view,
    page_resource_class,
)

__all__ = ["InvalidCPUSet", "NUMAPlugin", "NUMAView", "page_resource_class"]


class NUMAPlugin(ResourcePlugin):
    """NUMA cells as ``HW_NUMA_ROOT`` providers with PCPU/VCPU/MEMORY_MB/pages.

    :param conf: the service configuration (reads ``[compute]``).
    """

    name = "numa"
    version = "1.0"

    def discover(self, host: HostInfo) -> NUMAView:
        """The cells of ``host``; :class:`InvalidCPUSet` on bad CPU sets."""
        return build_view(self.conf, host)

    def provider_contributions(
        self, view: NUMAView, nodename: str
    ) -> Sequence[ProviderContribution]:
        """One ``<nodename>_NUMA<id>`` provider per cell."""
        return provider.contributions(view, nodename)

    def parse_request(self, request_input: Any) -> Optional[numa_request.NUMARequest]:
        """CPU policies, guest NUMA topology and page size (``hw:`` keys)."""
        return numa_request.parse(request_input)

    def request_groups(
        self, plugin_request: numa_request.NUMARequest
    ) -> list[RequestGroup]:
        """One group per guest NUMA node, or one floating group."""
        return numa_request.request_groups(plugin_request)

    def describe(self, plugin_request: numa_request.NUMARequest,
                 assignment: numa_request.NUMAAssignment) -> list[str]:
        """A line per guest node: its host cell, pinned CPUs, memory and page size."""
        return summary.describe(plugin_request, assignment)
