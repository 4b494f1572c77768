"""The one entry point of host discovery."""

from __future__ import annotations

from typing import Optional

from compute_plugins.host.model import HostInfo

#: The URI used when neither a URI nor a snapshot is given (nova's default).
DEFAULT_URI = "qemu:///system"


def discover_host(
    libvirt_uri: Optional[str] = None,
    host_snapshot: Optional[str] = None,
    use_udev: bool = True,
) -> HostInfo:
    """Discover a host from a snapshot directory or a libvirt URI.

    The snapshot wins when both are given. udev enrichment runs for a
    snapshot with ``sysfs.umockdev`` (replayed with umockdev) and for a live
    local host (``qemu:///system``), never for ``test:///`` or remote URIs,
    whose devices are not this machine's; so does ``ndctl list -X`` (the
    persistent memory namespaces), where ndctl is installed, and the
    ``kvm_amd`` module's SEV parameters.

    :raises HostDataError: (and its subclass HostConnectionError) when the
        host cannot be read.
    """
    from compute_plugins.host import snapshot

    if host_snapshot:
        return snapshot.load_snapshot(host_snapshot, use_udev=use_udev)
    import dataclasses

    from compute_plugins.host import kernel, libvirt_host, ndctl, udev
    from compute_plugins.host.uri import is_local_uri

    uri = libvirt_uri or DEFAULT_URI
    host = libvirt_host.discover_libvirt(uri)
    if use_udev and is_local_uri(uri):
        host = udev.enrich_with_udev(host)
    if is_local_uri(uri):
        # NOTE: persistent memory is this machine's only (ndctl, as nova).
        host = dataclasses.replace(host, pmem_namespaces=ndctl.live_namespaces(),
                                   kvm_amd_sev=kernel.kvm_amd_sev())
    return host
