"""udev enrichment of PCI devices (pyudev, real libudev).

libvirt does not say how many VFs a PF has enabled, nor which network
interface a device is; udev (sysfs) does. Enrichment is split in two steps:

1. :func:`collect_udev_facts` reads the facts of some PCI addresses through
   ``pyudev.Context()`` into plain, JSON-friendly :class:`UdevFacts`;
2. :func:`apply_udev_facts` merges them into a :class:`HostInfo` (pure).

A live host does both in-process (:func:`enrich_with_udev`). A host
snapshot replays its recorded ``sysfs.umockdev`` through the real libudev
under ``umockdev-run``: :func:`collect_udev_facts_umockdev` runs
``umockdev-run --device sysfs.umockdev -- python -m
compute_plugins.host.udev_dump ADDRESS...`` (step 1 in a child process whose
libudev sees only the recorded devices) and parses the JSON it prints. The
preload library of umockdev must be in the process before libudev is used,
which is why this runs in a child and not in the caller's process.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping
from typing import Any, Optional

from compute_plugins.host.errors import HostDataError
from compute_plugins.host.model import HostInfo
from compute_plugins.util import jsonload

LOG = logging.getLogger(__name__)

#: Version of the JSON that ``udev_dump`` prints.
FACTS_FORMAT_VERSION = 1
#: Seconds a ``umockdev-run`` replay may take.
UMOCKDEV_TIMEOUT = 60


@dataclasses.dataclass(frozen=True)
class UdevFacts:
    """What udev knows about one PCI device; ``None`` means "did not say"."""

    max_vfs: Optional[int] = None
    num_vfs: Optional[int] = None
    numa_node: Optional[int] = None
    netdevs: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["netdevs"] = list(self.netdevs)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str) -> UdevFacts:
        try:
            netdevs = tuple(str(n) for n in data.get("netdevs") or ())
            return cls(
                max_vfs=_opt_int(data.get("max_vfs")),
                num_vfs=_opt_int(data.get("num_vfs")),
                numa_node=_opt_int(data.get("numa_node")),
                netdevs=netdevs,
            )
        except (TypeError, ValueError, AttributeError) as exc:
            raise HostDataError(
                source, f"bad udev facts {data!r}: {exc}"
            ) from None


def _opt_int(value: Any) -> Optional[int]:
    return None if value is None else int(value)


# ---------------------------------------------------------- step 1: read


def collect_udev_facts(
    addresses: Iterable[str], context: Any = None
) -> dict[str, UdevFacts]:
    """Read udev's facts about PCI ``addresses``.

    Addresses udev does not know are left out of the result.

    :param context: a ``pyudev.Context``; a new one by default.
    """
    import pyudev

    if context is None:
        context = pyudev.Context()
    facts = {}
    for address in addresses:
        try:
            device = pyudev.Devices.from_name(context, "pci", address)
        except pyudev.DeviceNotFoundError:
            continue
        facts[address] = _device_facts(device)
    return facts


def _device_facts(device: Any) -> UdevFacts:
    numa_node = _attr_int(device, "numa_node")
    netdevs = sorted(
        child.sys_name for child in device.children if child.subsystem == "net"
    )
    return UdevFacts(
        max_vfs=_attr_int(device, "sriov_totalvfs"),
        num_vfs=_attr_int(device, "sriov_numvfs"),
        # NOTE: the kernel writes -1 when the platform does not say.
        numa_node=numa_node
        if numa_node is not None and numa_node >= 0
        else None,
        netdevs=tuple(netdevs),
    )


def _attr_int(device: Any, name: str) -> Optional[int]:
    raw = device.attributes.get(name)
    if raw is None:
        return None
    text = raw.decode("ascii", "replace").strip()
    try:
        return int(text)
    except ValueError:
        LOG.warning(
            "%s: udev attribute %s is not an integer: %r",
            device.sys_path,
            name,
            text,
        )
        return None


# --------------------------------------------------------- step 2: merge


def apply_udev_facts(
    host: HostInfo, facts: Mapping[str, UdevFacts]
) -> HostInfo:
    """Return ``host`` with udev's facts merged into its PCI devices.

    ``max_vfs`` and ``numa_node`` from libvirt win when libvirt gave them
    (both come from the same sysfs files); ``num_vfs`` only udev knows;
    udev's ``netdevs`` are added to those libvirt named (udev only adds).
    Devices without facts are left as they are.
    """
    devices = []
    for device in host.pci_devices:
        fact = facts.get(device.address)
        if fact is None:
            devices.append(device)
            continue
        devices.append(
            dataclasses.replace(
                device,
                max_vfs=device.max_vfs
                if device.max_vfs is not None
                else fact.max_vfs,
                num_vfs=fact.num_vfs
                if fact.num_vfs is not None
                else device.num_vfs,
                numa_node=device.numa_node
                if device.numa_node is not None
                else fact.numa_node,
                netdevs=device.netdevs
                + tuple(n for n in fact.netdevs if n not in device.netdevs),
            )
        )
    return dataclasses.replace(host, pci_devices=tuple(devices))


def enrich_with_udev(host: HostInfo, context: Any = None) -> HostInfo:
    """Enrich ``host`` from this machine's udev (live hosts)."""
    addresses = [d.address for d in host.pci_devices]
    return apply_udev_facts(host, collect_udev_facts(addresses, context))


# ------------------------------------------------ replay under umockdev


def collect_udev_facts_umockdev(
    umockdev_file: str, addresses: Iterable[str]
) -> Optional[dict[str, UdevFacts]]:
    """Read udev facts from a recorded ``sysfs.umockdev`` via real libudev.

    :returns: the facts, or ``None`` (with a warning) when ``umockdev-run``
        is not installed.
    :raises HostDataError: the replay failed or printed garbage; the
        message names ``umockdev_file``.
    """
    runner = shutil.which("umockdev-run")
    if runner is None:
        LOG.warning(
            "%s: umockdev-run is not installed; udev facts of the "
            "snapshot are not used",
            umockdev_file,
        )
        return None
    command = [
        runner,
        "--device",
        os.path.abspath(umockdev_file),
        "--",
        sys.executable,
        "-m",
        "compute_plugins.host.udev_dump",
        "--require-testbed",
        *addresses,
    ]
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            check=False,
            timeout=UMOCKDEV_TIMEOUT,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise HostDataError(
            umockdev_file, f"umockdev-run failed: {exc}"
        ) from None
    if done.returncode != 0:
        detail = (done.stderr.strip() or done.stdout.strip())[-2000:]
        raise HostDataError(
            umockdev_file,
            f"umockdev-run exited with {done.returncode}: {detail}",
        )
    return parse_facts_json(done.stdout, umockdev_file)


def parse_facts_json(text: str, source: str) -> dict[str, UdevFacts]:
    """Parse ``udev_dump``'s output."""
    try:
        data = jsonload.loads(text)
    except ValueError as exc:
        raise HostDataError(
            source, f"udev_dump printed no JSON: {exc}"
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("devices"), dict):
        raise HostDataError(source, "udev_dump JSON has no 'devices' object")
    version = data.get("format_version")
    if version != FACTS_FORMAT_VERSION:
        raise HostDataError(
            source,
            f"udev_dump format_version {version!r} is not "
            f"{FACTS_FORMAT_VERSION}",
        )
    return {
        str(address): UdevFacts.from_dict(fact, source)
        for address, fact in data["devices"].items()
    }


def dump_facts_json(facts: Mapping[str, UdevFacts]) -> str:
    """The JSON ``udev_dump`` prints (inverse of :func:`parse_facts_json`)."""
    return json.dumps(
        {
            "format_version": FACTS_FORMAT_VERSION,
            "devices": {a: f.to_dict() for a, f in sorted(facts.items())},
        },
        indent=2,
        sort_keys=True,
    )
