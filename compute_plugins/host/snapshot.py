"""Host snapshots: record a libvirt host to a directory and load it back.

Layout of a snapshot directory::

    capabilities.xml      virsh capabilities                     (required)
    nodedev/<name>.xml    virsh nodedev-dumpxml, one per device  (optional)
    host.json             hostname, memory_kb, disk, online_cpus,
                          cpu_count, format_version            (optional)
    sysfs.umockdev        umockdev-record of /sys/bus/pci/devices/* (optional)

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

import glob
import json
import logging
import os
import re
import shutil
import subprocess
from typing import Any, Optional

from compute_plugins.cpuset import MAX_CPU_ID
from compute_plugins.host import libvirt_xml, udev
from compute_plugins.host.errors import HostDataError
from compute_plugins.host.model import DiskInfo, HostInfo
from compute_plugins.host.uri import is_local_uri

LOG = logging.getLogger(__name__)

#: Version of ``host.json``; a newer one is refused.
FORMAT_VERSION = 1
CAPABILITIES = "capabilities.xml"
NODEDEV_DIR = "nodedev"
HOST_JSON = "host.json"
SYSFS_UMOCKDEV = "sysfs.umockdev"

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
    nodedev_dir = os.path.join(output_dir, NODEDEV_DIR)
    try:
        os.makedirs(nodedev_dir, exist_ok=True)
        _write(os.path.join(output_dir, CAPABILITIES), raw.capabilities_xml)
        for name, xml in sorted(raw.nodedevs.items()):
            filename = _SAFE_NAME.sub("_", name) + ".xml"
            _write(os.path.join(nodedev_dir, filename), xml)
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
            "disk": None
            if disk is None
            else {
                "total_gb": disk.total_gb,
                "free_gb": disk.free_gb,
                "path": disk.path,
            },
        }
        _write(
            os.path.join(output_dir, HOST_JSON),
            json.dumps(host, indent=2, sort_keys=True) + "\n",
        )
    except OSError as exc:
        raise HostDataError(
            exc.filename or output_dir,
            f"cannot write snapshot: {exc.strerror}",
        ) from None
    if record_sysfs is None:
        record_sysfs = is_local_uri(uri)
    if record_sysfs:
        record_pci_sysfs(os.path.join(output_dir, SYSFS_UMOCKDEV))
    return output_dir


def record_pci_sysfs(target: str) -> bool:
    """``umockdev-record /sys/bus/pci/devices/* > target``; warn on failure.

    :returns: whether the file was written.
    """
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
    try:
        with open(target, "w", encoding="utf-8") as out:
            done = subprocess.run(
                [recorder, *devices],
                stdout=out,
                stderr=subprocess.PIPE,
                text=True,
                check=False,
                timeout=120,
            )
        failure = done.stderr.strip() if done.returncode else None
    except (OSError, subprocess.TimeoutExpired) as exc:
        failure = str(exc)
    if failure is not None:
        LOG.warning(
            "%s not recorded: umockdev-record failed: %s",
            target,
            failure[-1000:],
        )
        try:
            os.unlink(target)
        except OSError:
            pass
        return False
    return True


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="utf-8") as out:
        out.write(text)


# --------------------------------------------------------------- load


def load_snapshot(path: str, use_udev: bool = True) -> HostInfo:
    """Load the snapshot in directory ``path``.

    :param use_udev: replay ``sysfs.umockdev`` (when present) to enrich the
        PCI devices.
    :raises HostDataError: missing ``capabilities.xml``, an unreadable
        directory or a malformed file; the message names the path.
    """
    directory = os.path.abspath(path)
    if not os.path.isdir(directory):
        raise HostDataError(
            path, "not a host snapshot directory (missing or not a directory)"
        )
    caps_path = os.path.join(directory, CAPABILITIES)
    if not os.path.isfile(caps_path):
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
                nodedevs[file_path] = _read(file_path)
    meta = _load_host_json(os.path.join(directory, HOST_JSON))
    host = libvirt_xml.host_info_from_xml(
        hostname=meta.get("hostname") or os.path.basename(directory),
        source=directory,
        capabilities_xml=capabilities,
        capabilities_source=caps_path,
        nodedev_xmls=nodedevs,
        memory_kb=meta.get("memory_kb"),
        disk=meta.get("disk"),
        online_cpus=meta.get("online_cpus"),
        cpu_count=meta.get("cpu_count"),
    )
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
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        raise HostDataError(path, f"cannot read: {reason}") from None


def _load_host_json(path: str) -> dict[str, Any]:
    """Return ``{hostname, memory_kb, disk}`` from ``host.json``, if any."""
    if not os.path.exists(path):
        return {}
    try:
        data = json.loads(_read(path))
    except ValueError as exc:
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
    if cpu_count is not None and not _natural(cpu_count):
        raise HostDataError(
            path,
            f"cpu_count must be a non-negative integer, not {cpu_count!r}",
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
    return {
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
