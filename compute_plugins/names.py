"""Names and identities every plugin needs: one helper each, no copies.

- :func:`custom_name` makes a ``CUSTOM_*`` resource class or trait name;
- :func:`provider_uuid` derives a provider's uuid from the host and the device,
  so the same host and device get the same uuid across runs and restarts and
  nothing is orphaned in Placement;
- :func:`device_provider_name` names a device's provider as nova does
  (``<nodename>_pci_0000_3b_00_0``).
"""

from __future__ import annotations

import functools
import re
import uuid

import os_resource_classes
import os_traits

#: Namespace of every uuid this project derives (uuid5 of a fixed string).
UUID_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "compute-plugins:provider")

CUSTOM_PREFIX = "CUSTOM_"
_CUSTOM_RE = re.compile(r"^CUSTOM_[A-Z0-9_]+$")
_NOT_ALLOWED = re.compile(r"[^A-Z0-9_]")


def custom_name(*parts: str) -> str:
    """Return ``CUSTOM_<PARTS>``: upper-case, anything but ``[A-Z0-9_]`` as ``_``.

    >>> custom_name("MDEV_TYPE", "nvidia-35")
    'CUSTOM_MDEV_TYPE_NVIDIA_35'
    """
    if not parts or not any(parts):
        raise ValueError("a custom name needs at least one non-empty part")
    body = "_".join(p for p in parts if p)
    body = _NOT_ALLOWED.sub("_", body.upper())
    if body.startswith(CUSTOM_PREFIX):
        return body
    return CUSTOM_PREFIX + body


def is_custom(name: str) -> bool:
    return bool(_CUSTOM_RE.match(name))


def is_valid_resource_class(name: str) -> bool:
    """True for a standard (os-resource-classes) or well-formed custom class."""
    return name in os_resource_classes.STANDARDS or is_custom(name)


_STANDARD_TRAITS = frozenset(os_traits.get_traits())


def is_valid_trait(name: str) -> bool:
    """True for a standard (os-traits) or well-formed custom trait."""
    return name in _STANDARD_TRAITS or is_custom(name)


@functools.lru_cache(maxsize=4096)
def provider_uuid(nodename: str, *device: str) -> str:
    """Stable uuid of the provider of ``device`` on ``nodename`` (the root without)."""
    key = "/".join((nodename,) + device)
    return str(uuid.uuid5(UUID_NAMESPACE, key))


def pci_address_slug(address: str) -> str:
    """``0000:3b:00.0`` -> ``0000_3b_00_0`` (nova's provider-name form)."""
    return address.replace(":", "_").replace(".", "_")


def device_provider_name(nodename: str, kind: str, address: str) -> str:
    """``<nodename>_<kind>_<address slug>``, e.g. ``host1_pci_0000_3b_00_0``."""
    return "%s_%s_%s" % (nodename, kind, pci_address_slug(address))


def numa_provider_name(nodename: str, cell_id: int) -> str:
    """``<nodename>_NUMA<id>``."""
    return "%s_NUMA%d" % (nodename, cell_id)


# -- names the providers and the requests must agree on ----------------------
# One definition each: the plugins' provider code and their request code both
# import these, so a renamed trait or class cannot drift between the tree a
# host reports and the query the scheduler sends.

#: Trait of an SR-IOV PF that serves ``vnic_type=direct`` (and macvtap) ports.
VNIC_TYPE_DIRECT = custom_name("VNIC_TYPE", "DIRECT")


def physnet_trait(physnet: str) -> str:
    """``physnet1`` -> ``CUSTOM_PHYSNET_PHYSNET1``."""
    return custom_name("PHYSNET", physnet)


def page_resource_class(size_kb: int) -> str:
    """Class of huge pages of ``size_kb``: ``CUSTOM_MEMORY_PAGE_2048KB``."""
    return custom_name("MEMORY_PAGE", f"{size_kb}KB")
