"""Names and identities every plugin needs: one helper each, no copies.

- :func:`custom_name` makes a ``CUSTOM_*`` resource class or trait name;
- :func:`provider_uuid` derives a provider's uuid from the host and the device,
  so the same host and device get the same uuid across runs and restarts and
  nothing is orphaned in Placement;
- :func:`device_provider_name` names a device's provider as nova does
  (``<nodename>_pci_0000_3b_00_0``);
- :func:`provider_name_problem` says why Placement would refuse a provider
  name, before any call is made;
- :func:`safe_file_name` maps a node name to a file name that stays in its
  directory (the agent's checkpoint is ``<file name>.contributions.json``).
"""

from __future__ import annotations

import functools
import hashlib
import re
import urllib.parse
import uuid
from typing import Any, Optional

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


#: Placement's longest provider name: ``"maxLength": 200`` in
#: ``placement/schemas/resource_provider.py`` (the column is
#: ``Unicode(200)``); a longer one is a 400 on every create.
MAX_PROVIDER_NAME = 200


def provider_name_problem(name: Any) -> Optional[str]:
    """Why Placement would refuse ``name`` as a provider name, or None.

    Placement refuses an empty name (``name is required``), a name over
    :data:`MAX_PROVIDER_NAME` characters (its JSON schema) and a lone
    surrogate, which cannot be encoded as UTF-8 for its database (a 500).
    A NUL is refused too: Placement on PostgreSQL cannot store one, and a
    name must work on every database Placement runs on. Anything else
    (``../x``, spaces, any script) is a valid provider name.
    """
    if not isinstance(name, str):
        return "must be a string, not %s" % type(name).__name__
    if not name:
        return "must not be empty"
    if len(name) > MAX_PROVIDER_NAME:
        return ("is %d characters long; Placement allows at most %d"
                % (len(name), MAX_PROVIDER_NAME))
    if "\0" in name:
        return ("contains a NUL character (at position %d), which Placement "
                "on PostgreSQL cannot store" % name.index("\0"))
    try:
        name.encode("utf-8")
    except UnicodeEncodeError as err:
        return ("is not valid Unicode (a lone surrogate at position %d), "
                "which Placement cannot store" % err.start)
    return None


#: Longest :func:`safe_file_name`: with ``.contributions.json`` and a
#: temporary file's prefix and suffix it stays below NAME_MAX (255 bytes).
MAX_FILE_STEM = 200
_HASH_MARK = "%_"


def safe_file_name(name: str) -> str:
    """A file name for ``name`` that cannot leave its directory.

    Letters, digits, ``-``, ``_``, ``.`` and ``~`` are kept, so an ordinary
    host name is its own file name (``compute-1.example.org``); every other
    character is percent-encoded as UTF-8 (``../../x`` ->
    ``%2E.%2F..%2Fx``: no ``/`` is left, and a leading ``.`` is encoded so
    the result is never ``.``, ``..`` or hidden). A name whose encoding is
    longer than :data:`MAX_FILE_STEM` keeps its first 160 characters and
    ends with ``%_`` and 32 hex digits of its SHA-256, a form no encoded
    name has (``%`` itself is encoded), so two names never share a file.
    """
    encoded = urllib.parse.quote(name, safe="", errors="surrogatepass")
    if encoded.startswith("."):
        encoded = "%2E" + encoded[1:]
    if len(encoded) <= MAX_FILE_STEM and encoded:
        return encoded
    head = encoded[:160]
    cut = head.rfind("%", len(head) - 2)
    if cut >= 0:
        head = head[:cut]  # NOTE: no escape cut in half
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()
    return head + _HASH_MARK + digest[:32]


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

#: Trait of the providers that are nodes of the host's topology (nova's
#: NUMA node providers): a guest's topology nodes are allocated from them,
#: devices sit under them, and the compute node is none of them.
TOPOLOGY_NODE_TRAIT = os_traits.HW_NUMA_ROOT

#: Trait of an SR-IOV PF that serves ``vnic_type=direct`` (and macvtap) ports.
VNIC_TYPE_DIRECT = custom_name("VNIC_TYPE", "DIRECT")
#: Trait of an SR-IOV PF with VFs bound to a vDPA driver: it serves
#: ``vnic_type=vdpa`` ports.
VNIC_TYPE_VDPA = custom_name("VNIC_TYPE", "VDPA")
#: Trait of an SR-IOV PF whose VFs serve ``vnic_type=remote-managed`` ports
#: (a SmartNIC DPU's) and no other.
VNIC_TYPE_REMOTE_MANAGED = custom_name("VNIC_TYPE", "REMOTE_MANAGED")
#: neutron's trait of a device on tunneled networks (neutron-lib's
#: ``TRAIT_NETWORK_TUNNEL``): a PF whose VFs serve ports without a physnet.
NETWORK_TUNNEL_PROVIDER = custom_name("NETWORK", "TUNNEL_PROVIDER")


def physnet_trait(physnet: str) -> str:
    """``physnet1`` -> ``CUSTOM_PHYSNET_PHYSNET1``."""
    return custom_name("PHYSNET", physnet)


def page_resource_class(size_kb: int) -> str:
    """Class of huge pages of ``size_kb``: ``CUSTOM_MEMORY_PAGE_2048KB``."""
    return custom_name("MEMORY_PAGE", f"{size_kb}KB")
