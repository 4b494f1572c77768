"""Our RequestSpec from nova's, and the decision carried in nova's spec.

:func:`request_input` reads what a request is built from out of nova's
``objects.RequestSpec``: the flavor (sizes and extra specs), the image's
properties (``ImageMetaProps`` back to glance's names: ``hw_numa_cpus`` as
``hw_numa_cpus.N``, ``traits_required`` as a list), the ports (neutron
ports nova turned into PCI requests: ``requester_id`` is the port,
``physical_network`` its physnet, ``dev_type`` (or ``remote_managed``) its
vnic type, ``numa_policy`` its NUMA affinity policy; and the
bandwidth request groups nova made per port) and the scheduler hints.
:func:`from_nova` parses it once with every plugin
(:meth:`~compute_plugins.request.spec.RequestSpec.build`).

The decision travels in nova's spec as one scheduler hint, :data:`HINT`,
whose single value is our spec's JSON (``RequestSpec.to_json``, decision
included). ``scheduler_hints`` is a versioned field of nova's RequestSpec
(``DictOfListOfStringsField``) that every RPC version since 1.0 carries and
the database keeps, so the hint survives ``obj_to_primitive`` /
``obj_from_primitive`` unchanged. :func:`from_nova` returns the recorded
spec when the hint is there and was made for the flavor, image and ports
nova's spec holds now (else it parses again: a resize, a forged hint):
the compute side reads the decision back and does not re-parse the
flavor with its own configuration. The
scheduler side (``PluginFitFilter``) never reads the record: a resize keeps
nova's hints (the old flavor's record) and users can send any hint.
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Mapping
from typing import Any, Optional

from oslo_log import log as logging
from oslo_utils import strutils

from compute_plugins.request.groups import Decision
from compute_plugins.request.inputs import Flavor, Port, RequestInput
from compute_plugins.request.spec import RequestSpec
from compute_plugins.runtime import PluginSet

LOG = logging.getLogger(__name__)

__all__ = ["COMPUTE", "HINT", "PARSES", "SCHEDULER", "from_nova",
           "image_properties", "parse", "ports", "record", "recorded",
           "request_input"]

#: The scheduler hint carrying our spec (with the decision) in nova's spec.
HINT = "compute_plugins:spec"

#: nova's ``dev_type`` of a port's PCI request -> neutron's vnic type
#: (``nova.pci.request.DEVICE_TYPE_FOR_VNIC_TYPE`` read backwards; a port
#: without one is a VF: ``direct``, or ``macvtap``, which nova treats alike).
_VNIC_OF_DEV_TYPE = {"type-PF": "direct-physical", "vdpa": "vdpa"}
#: The tag of a ``remote-managed`` port's PCI request (nova's
#: ``PCI_REMOTE_MANAGED_TAG``, ``"True"``/``"False"``), and its vnic type.
_REMOTE_MANAGED_TAG = "remote_managed"
_REMOTE_MANAGED = "remote-managed"
#: nova's flavor (``hw:``) and image (``hw_``) key of the PCI NUMA affinity
#: policy, the default of each port's.
_PCI_POLICY = "pci_numa_affinity_policy"
#: Bandwidth resource classes of a port's request group.
_EGRESS = "NET_BW_EGR_KILOBIT_PER_SEC"
_INGRESS = "NET_BW_IGR_KILOBIT_PER_SEC"
#: The sides that parse a nova request (:data:`PARSES`).
SCHEDULER = "scheduler"
COMPUTE = "compute"
#: side -> how many times this process parsed a nova request's flavor and
#: image with every plugin (:func:`parse`): the scheduler once per request
#: (``PluginFitFilter``), the compute never when the scheduler's decision
#: was recorded. Read by the tests and ``make nova-functional``.
PARSES: collections.Counter[str] = collections.Counter()
_PARSES_LOCK = threading.Lock()
#: Hints nova adds for itself (not the user's).
_NOVA_HINTS = ("_nova_check_type",)


def _is_set(obj: Any, field: str) -> bool:
    return obj is not None and obj.obj_attr_is_set(field)


def _get(obj: Any, field: str, default: Any = None) -> Any:
    return getattr(obj, field) if _is_set(obj, field) else default


def _cpus(cpus: Any) -> str:
    return ",".join(str(cpu) for cpu in sorted(cpus))


def image_properties(image: Any) -> dict[str, Any]:
    """nova's ``ImageMeta`` properties with glance's names and JSON values.

    ``hw_numa_cpus`` / ``hw_numa_mem`` (lists per guest node in nova's
    object) become ``hw_numa_cpus.N`` / ``hw_numa_mem.N`` again; sets and
    tuples become lists; every other value is kept as nova typed it (our
    parsers accept glance's strings and typed values alike).
    """
    props = _get(image, "properties")
    if props is None:
        return {}
    out: dict[str, Any] = {}
    for field in props.fields:
        if not props.obj_attr_is_set(field):
            continue
        value = getattr(props, field)
        if field == "hw_numa_cpus":
            out.update(("hw_numa_cpus.%d" % i, _cpus(c)) for i, c in enumerate(value))
        elif field == "hw_numa_mem":
            out.update(("hw_numa_mem.%d" % i, str(m)) for i, m in enumerate(value))
        elif isinstance(value, (set, frozenset, tuple, list)):
            out[field] = sorted(value) if isinstance(value, (set, frozenset)) else list(value)
        else:
            out[field] = value
    return out


def ports(spec_obj: Any) -> list[Port]:
    """The ports of nova's spec that ask anything of a host.

    A neutron port of an SR-IOV vnic type is one PCI request of nova's
    (``requester_id`` the port id, ``spec[0]`` its physnet and device
    type, or ``remote_managed`` for a ``remote-managed`` port; the
    request's ``numa_policy`` the port's ``numa_affinity_policy``, else
    the flavor's or image's, as nova's ``create_resource_requests`` sets
    it: the port's own policy only where it differs, :func:`_own_policy`);
    a port with a minimum bandwidth rule is a request group of nova's
    (``requester_id`` the port id); nova's ``network_metadata`` (the
    physnets and tunnel of every port) adds a normal port
    ``network:<physnet>`` per physnet no port above names and a tunneled
    ``network:tunneled`` (the networks' NUMA affinity). Other requested
    networks ask nothing of the host and are left out. (nova does not
    persist ``network_metadata``: a spec nova loads again lacks them, and a
    record made with them is then parsed again.)
    """
    bandwidth: dict[str, dict[str, int]] = {}
    for group in _get(spec_obj, "requested_resources") or ():
        resources = dict(_get(group, "resources") or {})
        if _EGRESS in resources or _INGRESS in resources:
            bandwidth[str(group.requester_id)] = resources
    found: dict[str, dict[str, Any]] = {}
    default = _flavor_image_policy(spec_obj)
    pci = _get(spec_obj, "pci_requests")
    for req in (_get(pci, "requests") or ()):
        if _get(req, "alias_name") is not None:
            continue  # a flavor alias: our sriov plugin parses the flavor's key
        tags = (_get(req, "spec") or [{}])[0]
        port_id = str(_get(req, "requester_id") or _get(req, "request_id"))
        vnic = _VNIC_OF_DEV_TYPE.get(tags.get("dev_type") or "", "direct")
        if strutils.bool_from_string(tags.get(_REMOTE_MANAGED_TAG)):
            vnic = _REMOTE_MANAGED
        found[port_id] = {
            "id": port_id, "vnic_type": vnic,
            "physnet": tags.get("physical_network"),
            "affinity_policy": _own_policy(_get(req, "numa_policy"), default)}
    for port_id in bandwidth:
        found.setdefault(port_id, {"id": port_id, "vnic_type": "normal"})
    # NOTE: nova's network_metadata: the physnets and tunnel of every port
    # (normal ones too), for the networks' NUMA affinity. A physnet no port
    # above names, and the tunnel, become a normal port each.
    meta = _get(spec_obj, "network_metadata")
    named = {doc.get("physnet") for doc in found.values()}
    for physnet in sorted(set(_get(meta, "physnets") or ()) - named):
        found.setdefault("network:" + physnet, {
            "id": "network:" + physnet, "vnic_type": "normal", "physnet": physnet})
    if _get(meta, "tunneled", False):
        found.setdefault("network:tunneled", {
            "id": "network:tunneled", "vnic_type": "normal", "tunneled": True})
    result = []
    for index, (port_id, doc) in enumerate(sorted(found.items())):
        rates = bandwidth.get(port_id, {})
        doc.update(min_kbps_egress=rates.get(_EGRESS, 0),
                   min_kbps_ingress=rates.get(_INGRESS, 0))
        result.append(Port.from_dict(doc, index))
    return result


def _flavor_image_policy(spec_obj: Any) -> Optional[str]:
    """The PCI NUMA affinity policy of nova's flavor, else image
    (``get_pci_numa_policy_constraint``; nova's API refuses the two given
    and different), which nova copies into each port's PCI request."""
    extra_specs = _get(_get(spec_obj, "flavor"), "extra_specs") or {}
    flavor_policy = extra_specs.get("hw:" + _PCI_POLICY)
    if flavor_policy:
        return str(flavor_policy)
    image_policy = _get(_get(_get(spec_obj, "image"), "properties"),
                        "hw_" + _PCI_POLICY)
    return str(image_policy) if image_policy else None


def _own_policy(numa_policy: Optional[str], default: Optional[str]) -> Optional[str]:
    """A port's own policy: its PCI request's ``numa_policy`` where it is
    not the flavor's or image's ``default``, which nova set there too (the
    sriov plugin reads that one from the flavor and image): a spec recorded
    before ports had their own policy then still matches nova's ports
    (:func:`recorded`), and a port's recorded shape does not change."""
    return None if numa_policy == default else numa_policy


def _hints(spec_obj: Any) -> dict[str, Any]:
    hints = dict(_get(spec_obj, "scheduler_hints") or {})
    for key in (HINT, *_NOVA_HINTS):
        hints.pop(key, None)
    return {k: list(v) for k, v in hints.items()}


def request_input(spec_obj: Any) -> RequestInput:
    """What our spec is built from, read from nova's ``RequestSpec``
    (``is_bfv``: no root disk, as nova asks Placement).

    :raises RequestInputError: the flavor or a port cannot be used.
    """
    flavor = spec_obj.flavor
    # NOTE: as nova's resources_from_request_spec: a boot-from-volume guest
    # asks no local disk for its root.
    bfv = bool(_get(spec_obj, "is_bfv", False))
    doc = {"name": _get(flavor, "name") or "", "vcpus": flavor.vcpus,
           "memory_mb": flavor.memory_mb,
           "root_gb": 0 if bfv else _get(flavor, "root_gb", 0),
           "ephemeral_gb": _get(flavor, "ephemeral_gb", 0),
           "swap": _get(flavor, "swap", 0),
           "extra_specs": dict(_get(flavor, "extra_specs") or {})}
    image = _get(spec_obj, "image")
    return RequestInput.from_dicts(
        Flavor.from_dict(doc),
        {"name": _get(image, "name") or "", "properties": image_properties(image)},
        ports(spec_obj), _hints(spec_obj))


def recorded(spec_obj: Any, plugins: PluginSet) -> Optional[RequestSpec]:
    """Our spec recorded in nova's spec (:func:`record`), or None.

    None too (logged) when the record was made for another flavor, image
    or ports than nova's spec now holds: a resize keeps nova's hints (the
    old flavor's record, with the old host's decision), and a user can send
    any hint through nova's API. The compute then re-derives.

    :raises RequestFormatError: the hint is there but cannot be read (a
        newer format, a plugin not loaded...): never silently re-derived.
    :raises RequestInputError: nova's flavor or a port cannot be used.
    """
    hints = _get(spec_obj, "scheduler_hints") or {}
    values = hints.get(HINT)
    if not values:
        return None
    spec = RequestSpec.from_json(values[0], plugins)
    now = request_input(spec_obj)
    if ((spec.flavor, spec.image_properties, spec.ports)
            != (now.flavor, now.image_properties, now.ports)):
        LOG.warning("scheduler hint %s was recorded for another flavor, image "
                    "or ports than this request's (flavor %s): ignored, the "
                    "spec is parsed again", HINT, now.flavor.name)
        return None
    return spec


def from_nova(spec_obj: Any, plugins: PluginSet) -> RequestSpec:
    """Our spec for nova's ``spec_obj``: the one recorded in it (with the
    scheduler's decision) when there is one, else parsed once now.

    :raises RequestValidationError: every problem of every plugin.
    :raises RequestInputError: the flavor or a port cannot be used.
    :raises RequestFormatError: a recorded spec that cannot be read.
    """
    spec = recorded(spec_obj, plugins)
    if spec is not None:
        return spec
    return parse(plugins, request_input(spec_obj), COMPUTE)


def parse(plugins: PluginSet, inputs: RequestInput, side: str) -> RequestSpec:
    """Our spec parsed from ``inputs`` with every plugin, counted in
    :data:`PARSES` under ``side`` (:data:`SCHEDULER` or :data:`COMPUTE`).

    :raises RequestValidationError: every problem of every plugin.
    """
    with _PARSES_LOCK:
        PARSES[side] += 1
    return RequestSpec.build(plugins, inputs)


def record(spec_obj: Any, spec: RequestSpec,
           decision: Optional[Decision] = None) -> None:
    """Carry ``spec`` (with ``decision`` when given) in nova's ``spec_obj``.

    Replaces an earlier record (a reschedule records the new host's).
    """
    if decision is not None:
        spec = spec.with_decision(decision)
    hints: Mapping[str, Any] = _get(spec_obj, "scheduler_hints") or {}
    updated = dict(hints)
    updated[HINT] = [spec.to_json()]
    spec_obj.scheduler_hints = updated
