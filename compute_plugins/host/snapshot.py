"""Host snapshots: record a libvirt host to a directory and load it back.

Layout of a snapshot directory::

    capabilities.xml      virsh capabilities                     (required)
    nodedev/<name>.xml    virsh nodedev-dumpxml, one per device  (optional)
    host.json             hostname, memory_kb, disk, online_cpus,
                          cpu_count, kvm_amd_sev, format_version (optional)
    sysfs.umockdev        umockdev-record of /sys/bus/pci/devices/* (optional)
    domaincapabilities.xml  virsh domcapabilities --machine q35   (optional)
    ndctl.json            ndctl list -X (persistent memory)      (optional)

Without ``host.json`` the hostname is the directory's name, memory is the
sum of the cells' memory and there is no disk data. With ``sysfs.umockdev``
the PCI devices are enriched through the real libudev under ``umockdev-run``
(see :mod:`.udev`), exactly as a live host is enriched from its own udev.

Errors: a missing or malformed ``capabilities.xml``, ``host.json`` or
``sysfs.umockdev`` is a :class:`HostDataError` naming the file. A node-device
file that does not parse is skipped with a warning naming it and the reason,
as on a live host (:func:`.libvirt_xml.host_info_from_xml`), so a snapshot
gives what the live host gave.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import logging
import os
import re
import secrets
import shutil
import subprocess
from typing import Any, Optional

from compute_plugins.host import kernel, libvirt_xml, ndctl, udev
from compute_plugins.host.errors import HostDataError, HostInputError
from compute_plugins.host.model import DiskInfo, HostInfo
from compute_plugins.host.uri import is_local_uri
from compute_plugins.plugin.cpuset import MAX_CPU_ID
from compute_plugins.util import files, jsonload
from compute_plugins.util.text import printable

LOG = logging.getLogger(__name__)

#: Version of ``host.json``; a newer one is refused.
FORMAT_VERSION = 1
CAPABILITIES = "capabilities.xml"
NODEDEV_DIR = "nodedev"
HOST_JSON = "host.json"
SYSFS_UMOCKDEV = "sysfs.umockdev"
DOMAIN_CAPABILITIES = "domaincapabilities.xml"

_GIB = 1024**3
_SAFE_NAME = re.compile(r"[^A-Za-z0-9_.:-]")


def disk_info(path: str) -> DiskInfo:
    """Measure the file system that holds ``path`` (``os.statvfs``)."""
    try:
        stat = os.statvfs(path)
    except OSError as exc:
        raise HostDataError(
            path, f"cannot measure disk: {exc.strerror}"
        ) from None
    return DiskInfo(
        total_gb=stat.f_blocks * stat.f_frsize // _GIB,
        free_gb=stat.f_bavail * stat.f_frsize // _GIB,
        path=path,
    )


# ------------------------------------------------------------- record


def record_host(
    uri: str,
    output_dir: str,
    instances_path: Optional[str] = None,
    record_sysfs: Optional[bool] = None,
) -> str:
    """Save the host behind libvirt ``uri`` as a snapshot in ``output_dir``.

    ``output_dir`` is created if missing (a symlink naming it is followed:
    it is the user's choice); inside it nothing is written through a
    symlink. Each file is written to a temporary name and renamed into
    place (:func:`compute_plugins.util.files.write_atomic`), so a symlink
    planted at ``capabilities.xml`` or ``host.json`` is replaced, never
    followed. ``nodedev/`` is recorded into a fresh directory that then
    replaces the old one, so no device of an earlier recording stays
    behind, and a ``sysfs.umockdev`` this recording does not write is
    removed: it would replay another host's devices; so are a
    ``domaincapabilities.xml`` and an ``ndctl.json`` (``ndctl list -X`` on
    a local host, where ndctl is installed) it does not write. Other files
    in ``output_dir`` are left alone.

    :param instances_path: measure this path's file system into
        ``host.json`` ``disk``.
    :param record_sysfs: record ``sysfs.umockdev``; by default only for a
        local real host (:func:`is_local_uri`) when ``umockdev-record`` is
        installed. A failed recording is a warning, not an error.
    :returns: ``output_dir``.
    :raises HostConnectionError: libvirt cannot be reached.
    :raises HostDataError: the directory cannot be written.
    """
    from compute_plugins.host import libvirt_host

    raw = libvirt_host.fetch_libvirt(uri)
    # NOTE: parse before writing, so an unreadable host leaves no snapshot
    # that would fail later.
    libvirt_host.host_info_from_raw(raw)
    disk = disk_info(instances_path) if instances_path else None
    # NOTE: this machine's namespaces only, as discovery reads them; parsed
    # before writing, like the rest.
    ndctl_out = ndctl.live_output() if is_local_uri(uri) else None
    if ndctl_out is not None:
        ndctl.parse_namespaces(ndctl_out, "ndctl list -X")
    host = {
        "format_version": FORMAT_VERSION,
        "hostname": raw.hostname,
        "memory_kb": raw.memory_kb,
        "libvirt_uri": uri,
        # NOTE: optional in format 1: older snapshots lack them.
        "online_cpus": None
        if raw.online_cpus is None
        else sorted(raw.online_cpus),
        "cpu_count": raw.cpu_count,
        # NOTE: this machine's kernel only: a remote host's is not ours.
        "kvm_amd_sev": sorted(kernel.kvm_amd_sev()) if is_local_uri(uri) else None,
        "disk": None
        if disk is None
        else {
            "total_gb": disk.total_gb,
            "free_gb": disk.free_gb,
            "path": disk.path,
        },
    }
    if record_sysfs is None:
        record_sysfs = is_local_uri(uri)
    try:
        os.makedirs(output_dir, exist_ok=True)
        out_fd = files.open_dir(output_dir)
    except OSError as exc:
        raise HostDataError(
            output_dir, f"cannot write snapshot: {exc.strerror or exc}"
        ) from None
    try:
        _record_nodedevs(out_fd, raw.nodedevs)
        files.write_atomic(out_fd, CAPABILITIES, raw.capabilities_xml)
        files.write_atomic(
            out_fd, HOST_JSON, json.dumps(host, indent=2, sort_keys=True) + "\n"
        )
        # NOTE: written when libvirt gave it, removed otherwise: another
        # host's domain capabilities would give this one its SEV slots.
        if raw.domain_capabilities_xml is not None:
            files.write_atomic(out_fd, DOMAIN_CAPABILITIES, raw.domain_capabilities_xml)
        else:
            files.remove(out_fd, DOMAIN_CAPABILITIES)
        # NOTE: likewise: an earlier recording's namespaces are not this host's.
        if ndctl_out is not None and ndctl_out.strip():
            files.write_atomic(out_fd, ndctl.NDCTL_JSON, ndctl_out)
        else:
            files.remove(out_fd, ndctl.NDCTL_JSON)
        recorded = record_sysfs and _record_pci_sysfs_at(
            out_fd, os.path.join(output_dir, SYSFS_UMOCKDEV))
        if not recorded:
            files.remove(out_fd, SYSFS_UMOCKDEV)
    except OSError as exc:
        where = os.path.join(output_dir, exc.filename) if isinstance(
            exc.filename, str) else output_dir
        raise HostDataError(
            where, f"cannot write snapshot: {exc.strerror or exc}"
        ) from None
    finally:
        os.close(out_fd)
    return output_dir


def _record_nodedevs(out_fd: int, nodedevs: dict[str, str]) -> None:
    """Write ``nodedev/`` afresh: into a new hidden directory, swapped in.

    NOTE: the old ``nodedev`` (a directory, or whatever was planted there)
    is renamed away before the new one takes its name, then removed
    without following any symlink in it.
    """
    fresh = ".%s.%s.new" % (NODEDEV_DIR, secrets.token_hex(6))
    os.mkdir(fresh, 0o777, dir_fd=out_fd)
    swapped = False
    try:
        fresh_fd = files.open_dir(fresh, dir_fd=out_fd, follow=False)
        try:
            for name, xml in sorted(nodedevs.items()):
                filename = _SAFE_NAME.sub("_", name) + ".xml"
                files.write_atomic(fresh_fd, filename, xml)
        finally:
            os.close(fresh_fd)
        old = ".%s.%s.old" % (NODEDEV_DIR, secrets.token_hex(6))
        try:
            os.rename(NODEDEV_DIR, old, src_dir_fd=out_fd, dst_dir_fd=out_fd)
        except FileNotFoundError:
            old = ""
        os.rename(fresh, NODEDEV_DIR, src_dir_fd=out_fd, dst_dir_fd=out_fd)
        swapped = True
        if old:
            files.remove(out_fd, old)
    finally:
        if not swapped:
            files.remove(out_fd, fresh)


def record_pci_sysfs(target: str) -> bool:
    """``umockdev-record /sys/bus/pci/devices/* > target``; warn on failure.

    The file is written atomically in its directory (never through a
    symlink at ``target``).

    :returns: whether the file was written.
    """
    dir_fd = files.open_dir(os.path.dirname(os.path.abspath(target)))
    try:
        return _record_pci_sysfs_at(dir_fd, target)
    finally:
        os.close(dir_fd)


def _record_pci_sysfs_at(dir_fd: int, target: str) -> bool:
    recorder = shutil.which("umockdev-record")
    devices = sorted(glob.glob("/sys/bus/pci/devices/*"))
    if recorder is None or not devices:
        LOG.warning(
            "%s not recorded: %s",
            target,
            "umockdev-record is not installed"
            if recorder is None
            else "no PCI devices in /sys",
        )
        return False
    failure = None
    try:
        with files.atomic_file(dir_fd, os.path.basename(target)) as out:
            done = subprocess.run(
                [recorder, *devices],
                stdout=out,
                stderr=subprocess.PIPE,
                text=True,
                check=False,
                timeout=120,
            )
            if done.returncode:
                failure = done.stderr.strip()
                # NOTE: leaves the block by an exception: nothing renamed.
                raise _NotRecorded()
    except _NotRecorded:
        pass
    except (OSError, subprocess.TimeoutExpired) as exc:
        failure = str(exc)
    if failure is not None:
        LOG.warning(
            "%s not recorded: umockdev-record failed: %s",
            target,
            failure[-1000:],
        )
        return False
    return True


class _NotRecorded(Exception):
    """umockdev-record failed: the temporary file must not be renamed."""


# --------------------------------------------------------------- load


def load_snapshot(path: str, use_udev: bool = True) -> HostInfo:
    """Load the snapshot in directory ``path``.

    Files are read with :func:`compute_plugins.util.files.read_text`: a FIFO, a
    device or a directory is never opened for reading. A node-device file
    that cannot be read (not UTF-8, a directory or FIFO named ``*.xml``) is
    skipped with a warning, as one that does not parse.

    :param use_udev: replay ``sysfs.umockdev`` (when present) to enrich the
        PCI devices.
    :raises HostInputError: missing ``capabilities.xml``, an unreadable
        directory or a malformed file; the message names the path.
    """
    try:
        return _load_snapshot(path, use_udev)
    except HostInputError:
        raise
    except HostDataError as err:
        # NOTE: a snapshot is a user's input: a problem in it is exit 2.
        raise HostInputError(err.source, err.reason) from None


def _load_snapshot(path: str, use_udev: bool) -> HostInfo:
    directory = os.path.abspath(path)
    if not os.path.isdir(directory):
        raise HostDataError(
            path, "not a host snapshot directory (missing or not a directory)"
        )
    caps_path = os.path.join(directory, CAPABILITIES)
    if not os.path.lexists(caps_path):
        raise HostDataError(
            caps_path, f"missing: a host snapshot needs {CAPABILITIES}"
        )
    capabilities = _read(caps_path)
    nodedevs = {}
    nodedev_dir = os.path.join(directory, NODEDEV_DIR)
    if os.path.exists(nodedev_dir):
        try:
            names = sorted(os.listdir(nodedev_dir))
        except OSError as exc:
            raise HostDataError(
                nodedev_dir, f"cannot list: {exc.strerror}"
            ) from None
        for name in names:
            if name.endswith(".xml"):
                file_path = os.path.join(nodedev_dir, name)
                try:
                    nodedevs[file_path] = files.read_text(file_path)
                except files.UnreadableFile as exc:
                    LOG.warning("%s; node device skipped", printable(exc))
    json_path = os.path.join(directory, HOST_JSON)
    meta = _load_host_json(json_path)
    hostname = meta.get("hostname")
    host = _with_udev(libvirt_xml.host_info_from_xml(
        hostname=hostname or os.path.basename(directory),
        hostname_source=json_path if hostname else directory,
        source=directory,
        capabilities_xml=capabilities,
        capabilities_source=caps_path,
        nodedev_xmls=nodedevs,
        memory_kb=meta.get("memory_kb"),
        disk=meta.get("disk"),
        online_cpus=meta.get("online_cpus"),
        cpu_count=meta.get("cpu_count"),
    ), directory, use_udev)
    if meta.get("kvm_amd_sev") is not None:
        host = dataclasses.replace(host, kvm_amd_sev=meta["kvm_amd_sev"])
    domcaps_path = os.path.join(directory, DOMAIN_CAPABILITIES)
    if os.path.lexists(domcaps_path):
        host = dataclasses.replace(host, domain_caps=libvirt_xml.parse_domain_capabilities(
            _read(domcaps_path), domcaps_path))
    ndctl_path = os.path.join(directory, ndctl.NDCTL_JSON)
    if os.path.lexists(ndctl_path):
        host = dataclasses.replace(host, pmem_namespaces=ndctl.parse_namespaces(
            _read(ndctl_path), ndctl_path))
    return host


def _with_udev(host: HostInfo, directory: str, use_udev: bool) -> HostInfo:
    umockdev_file = os.path.join(directory, SYSFS_UMOCKDEV)
    if use_udev and host.pci_devices and os.path.isfile(umockdev_file):
        facts = udev.collect_udev_facts_umockdev(
            umockdev_file, [d.address for d in host.pci_devices]
        )
        if facts is not None:
            host = udev.apply_udev_facts(host, facts)
    return host


def _read(path: str) -> str:
    try:
        return files.read_text(path)
    except files.UnreadableFile as exc:
        raise HostDataError(path, exc.reason) from None


def _load_host_json(path: str) -> dict[str, Any]:
    """Return ``{hostname, memory_kb, disk}`` from ``host.json``, if any."""
    if not os.path.lexists(path):
        return {}
    try:
        data = jsonload.loads(_read(path))
    except jsonload.JSONInputError as exc:
        raise HostDataError(path, f"not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise HostDataError(path, "must hold a JSON object")
    version = data.get("format_version", FORMAT_VERSION)
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise HostDataError(
            path,
            f"format_version {version!r} is newer than this reader "
            f"understands ({FORMAT_VERSION}); upgrade compute-plugins",
        )
    hostname = data.get("hostname")
    if hostname is not None and (
        not isinstance(hostname, str) or not hostname.strip()
    ):
        raise HostDataError(
            path, f"hostname must be a non-empty string, not {hostname!r}"
        )
    memory_kb = data.get("memory_kb")
    if memory_kb is not None and (
        not isinstance(memory_kb, int)
        or isinstance(memory_kb, bool)
        or memory_kb < 0
    ):
        raise HostDataError(
            path,
            f"memory_kb must be a non-negative integer, not {memory_kb!r}",
        )
    cpu_count = data.get("cpu_count")
    if cpu_count is not None and not (
            _natural(cpu_count) and cpu_count <= MAX_CPU_ID + 1):
        raise HostDataError(
            path,
            f"cpu_count must be an integer from 0 to {MAX_CPU_ID + 1}, not "
            f"{cpu_count!r}",
        )
    online = data.get("online_cpus")
    if online is not None:
        if not isinstance(online, list) or not all(
            _natural(cpu) and cpu <= MAX_CPU_ID for cpu in online
        ):
            raise HostDataError(
                path,
                "online_cpus must be a list of CPU ids (integers from 0 to "
                f"{MAX_CPU_ID}), not {online!r}",
            )
        online = frozenset(online)
    sev = data.get("kvm_amd_sev")
    if sev is not None:
        if not isinstance(sev, list) or not all(
                isinstance(f, str) and f in kernel.SEV_FLAVOURS for f in sev):
            raise HostDataError(
                path, "kvm_amd_sev must be a list of the SEV flavours the kernel "
                f"enables ({', '.join(kernel.SEV_FLAVOURS)}), not {sev!r}")
        sev = frozenset(sev)
    return {
        "kvm_amd_sev": sev,
        "hostname": hostname,
        "memory_kb": memory_kb,
        "disk": _disk(data.get("disk"), path),
        "online_cpus": online,
        "cpu_count": cpu_count,
    }


def _natural(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _disk(data: Any, path: str) -> Optional[DiskInfo]:
    if data is None:
        return None
    if not isinstance(data, dict):
        raise HostDataError(path, f"disk must be an object, not {data!r}")
    values = {}
    for key in ("total_gb", "free_gb"):
        value = data.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise HostDataError(
                path,
                f"disk.{key} must be a non-negative integer, not {value!r}",
            )
        values[key] = value
    if values["free_gb"] > values["total_gb"]:
        raise HostDataError(path, "disk.free_gb is larger than disk.total_gb")
    disk_path = data.get("path", "")
    if not isinstance(disk_path, str):
        raise HostDataError(
            path, f"disk.path must be a string, not {disk_path!r}"
        )
    return DiskInfo(path=disk_path, **values)
