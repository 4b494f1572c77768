"""Discovery from a live libvirt connection (libvirt-python).

:func:`fetch_libvirt` reads the raw documents (what ``record-host`` saves);
:func:`discover_libvirt` turns them into a :class:`HostInfo` with the same
parsers a snapshot uses.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Optional

import libvirt

from compute_plugins.host import libvirt_xml
from compute_plugins.host.errors import HostConnectionError
from compute_plugins.host.model import HostInfo

LOG = logging.getLogger(__name__)


#: Said when libvirt cannot be reached: where a host's facts can come from
#: without a libvirt daemon.
NO_DAEMON_HINT = ("; without a libvirt daemon, try --libvirt-uri test:///default "
                  "(libvirt's test driver) or --host-snapshot DIR (a recorded "
                  "host, e.g. compute_plugins/demo/hosts/numa)")

def _silence(_ctx: object, _error: object) -> None:
    """Drop libvirt's default print-to-stderr; errors come as exceptions."""


# NOTE: libvirt prints every error to stderr unless a handler is set; we turn
# each into a HostConnectionError instead, so the print is only noise.
libvirt.registerErrorHandler(_silence, None)


@dataclasses.dataclass(frozen=True)
class RawHost:
    """The documents libvirt gave, before parsing."""

    uri: str
    hostname: str
    #: ``getInfo()`` memory, converted from MiB to KiB.
    memory_kb: int
    capabilities_xml: str
    #: ``{node-device name: nodedev XML}``.
    nodedevs: dict[str, str]
    #: CPUs online now (``getCPUMap()``), ``None`` when libvirt cannot say.
    online_cpus: Optional[frozenset[int]] = None
    #: ``getInfo()`` CPU count.
    cpu_count: Optional[int] = None
    #: ``getDomainCapabilities`` of the q35 machine type, None when the
    #: driver has none (the test driver, a host without q35).
    domain_capabilities_xml: Optional[str] = None


def fetch_libvirt(uri: str) -> RawHost:
    """Read capabilities, node devices, hostname and memory from ``uri``.

    A read-only connection is enough and is used.

    :raises HostConnectionError: libvirt cannot connect or a call fails.
    """
    try:
        conn = libvirt.openReadOnly(uri)
    except libvirt.libvirtError as exc:
        raise HostConnectionError(uri, _message(exc) + NO_DAEMON_HINT) from None
    if conn is None:  # old bindings returned None instead of raising
        raise HostConnectionError(uri, "connection failed" + NO_DAEMON_HINT)
    try:
        hostname = conn.getHostname()
        info = conn.getInfo()
        capabilities = conn.getCapabilities()
        online_cpus = _online_cpus(conn, uri, int(info[2]))
        domcaps = _domain_capabilities(conn, uri)
        nodedevs: dict[str, str] = {}
        for device in conn.listAllDevices(0):
            try:
                nodedevs[device.name()] = device.XMLDesc(0)
            except libvirt.libvirtError as exc:
                if exc.get_error_code() == libvirt.VIR_ERR_NO_NODE_DEVICE:
                    # NOTE: unplugged between the listing and the read.
                    LOG.debug("%s: node device vanished: %s", uri, exc)
                    continue
                raise
    except libvirt.libvirtError as exc:
        raise HostConnectionError(uri, _message(exc)) from None
    finally:
        conn.close()
    return RawHost(
        uri=uri,
        hostname=hostname,
        memory_kb=int(info[1]) * 1024,
        capabilities_xml=capabilities,
        nodedevs=nodedevs,
        online_cpus=online_cpus,
        cpu_count=int(info[2]),
        domain_capabilities_xml=domcaps,
    )


def _domain_capabilities(conn: libvirt.virConnect, uri: str) -> Optional[str]:
    """The q35 machine type's domain capabilities (where nova looks for
    memory encryption), None where libvirt has none to give."""
    try:
        return str(conn.getDomainCapabilities(None, None, "q35", None, 0))
    except libvirt.libvirtError as exc:
        LOG.debug("%s: no domain capabilities for q35: %s", uri, exc)
        return None


def _online_cpus(conn: libvirt.virConnect, uri: str, cpu_count: int) -> Optional[frozenset[int]]:
    """``getCPUMap()``'s online CPUs (nova's ``get_online_cpus``).

    ``None`` where the driver lacks the call, or where the map covers fewer
    CPUs than ``getInfo()`` counts online (the test driver's canned 8-CPU
    map on its 16-CPU host): such a map cannot be the host's.
    """
    try:
        count, online, _n_online = conn.getCPUMap(0)
    except libvirt.libvirtError as exc:
        if exc.get_error_code() == libvirt.VIR_ERR_NO_SUPPORT:
            LOG.debug("%s: no getCPUMap: %s", uri, exc)
            return None
        raise
    if count < cpu_count:
        LOG.debug("%s: getCPUMap covers %d CPUs but getInfo counts %d; "
                  "online CPUs unknown", uri, count, cpu_count)
        return None
    return frozenset(cpu for cpu, up in enumerate(online) if up)


def host_info_from_raw(raw: RawHost) -> HostInfo:
    """Parse a :class:`RawHost` into a :class:`HostInfo` (no udev)."""
    host = libvirt_xml.host_info_from_xml(
        hostname=raw.hostname,
        source=raw.uri,
        capabilities_xml=raw.capabilities_xml,
        capabilities_source=f"{raw.uri} capabilities",
        nodedev_xmls={
            f"{raw.uri} nodedev {name}": xml
            for name, xml in raw.nodedevs.items()
        },
        memory_kb=raw.memory_kb,
        online_cpus=raw.online_cpus,
        cpu_count=raw.cpu_count,
    )
    if raw.domain_capabilities_xml is None:
        return host
    return dataclasses.replace(host, domain_caps=libvirt_xml.parse_domain_capabilities(
        raw.domain_capabilities_xml, f"{raw.uri} domain capabilities"))


def discover_libvirt(uri: str) -> HostInfo:
    """Discover the host behind libvirt ``uri`` (no udev enrichment).

    :raises HostConnectionError: libvirt cannot connect or a call fails.
    :raises HostDataError: libvirt returned a document we cannot parse.
    """
    return host_info_from_raw(fetch_libvirt(uri))


def _message(exc: libvirt.libvirtError) -> str:
    return exc.get_error_message() or str(exc)
