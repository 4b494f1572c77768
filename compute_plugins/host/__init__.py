"""Host discovery: libvirt, udev and recorded host snapshots.

``discover_host(libvirt_uri=None, host_snapshot=None, use_udev=True)`` is the
entry point; every backend produces an immutable
:class:`~compute_plugins.host.model.HostInfo`.
"""

from compute_plugins.host.discovery import discover_host
from compute_plugins.host.errors import HostConnectionError, HostDataError

__all__ = ["HostConnectionError", "HostDataError", "discover_host"]
