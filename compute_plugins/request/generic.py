"""The framework's own keys: generic granular groups and request-level keys.

Nova's granular syntax (``nova.scheduler.utils.ResourceRequest``):

- ``resources[N]:<RC>=<amount>``: ``<RC>`` a standard class or ``CUSTOM_*``;
- ``trait[N]:<TRAIT>=required|forbidden``;
- ``member_of[N]=[!]in:<agg>,<agg>`` or ``<agg>`` (Placement's syntax);
- ``group_policy=none|isolate``;
- image ``traits_required`` (a list; unsuffixed group).

``[N]`` is Placement's suffix (``[a-zA-Z0-9_-]{1,64}``). Keys of these
namespaces that a plugin claimed (e.g. ``resources:VGPU`` by ``vgpu``) are
left to the plugin. Finally :func:`unknown_keys` reports every key nobody
claimed in a namespace somebody owns, in nova's words.
"""

from __future__ import annotations

import dataclasses
import re
import uuid
from collections.abc import Iterable
from typing import Optional

from compute_plugins import names
from compute_plugins.request import rules
from compute_plugins.request.groups import KIND_GENERIC, RequestGroup
from compute_plugins.request.inputs import RequestInput
from compute_plugins.request.types import FrozenMap

GROUP_RE = re.compile(r"^(resources|trait)([a-zA-Z0-9_-]{1,64})?:(.*)$")
MEMBER_OF_RE = re.compile(r"^member_of([a-zA-Z0-9_-]{1,64})?$")
GROUP_POLICIES = ("isolate", "none")
TRAIT_VALUES = ("required", "forbidden")

#: Namespaces the framework owns (a key in them must be understood).
FRAMEWORK_NAMESPACES = frozenset({"hw", "resources", "trait", "pci_passthrough"})

#: ``hw:`` keys nova validates that no built-in plugin schedules on: accepted
#: (nova's libvirt driver reads them from the flavor) but not interpreted.
NOVA_OTHER_HW_KEYS = frozenset({
    "hw:hide_hypervisor_id", "hw:locked_memory", "hw:cpu_sockets",
    "hw:cpu_cores", "hw:cpu_threads", "hw:cpu_max_sockets",
    "hw:cpu_max_cores", "hw:cpu_max_threads", "hw:boot_menu",
    "hw:vif_multiqueue_enabled", "hw:mem_encryption",
    "hw:mem_encryption_model", "hw:pmem", "hw:pmu", "hw:serial_port_count",
    "hw:tpm_model", "hw:tpm_version", "hw:tpm_secret_security",
    "hw:watchdog_action", "hw:viommu_model", "hw:virtio_packed_ring",
    "hw:sound_model", "hw:usb_model", "hw:redirected_usb_ports",
    "hw:ephemeral_encryption", "hw:ephemeral_encryption_format",
})


@dataclasses.dataclass(frozen=True)
class GenericRequest:
    """The framework's share of the request.

    :param group_policy: ``group_policy`` as given (None when unset).
    :param groups: the generic groups, by suffix (``""`` = unsuffixed).
    """

    group_policy: Optional[str] = None
    groups: tuple[RequestGroup, ...] = ()


def namespace(key: str) -> Optional[str]:
    """``hw:foo`` -> ``hw``; ``resources1:VGPU`` -> ``resources``; else None."""
    if ":" not in key:
        return None
    match = GROUP_RE.match(key)
    if match:
        return match.group(1)
    return key.split(":", 1)[0]


def parse(ri: RequestInput, claimed: frozenset[tuple[str, str]]) -> GenericRequest:
    """The generic keys of ``ri`` not claimed by a plugin (problems on ``ri``)."""
    resources: dict[str, dict[str, int]] = {}
    required: dict[str, set[str]] = {}
    forbidden: dict[str, set[str]] = {}
    member_of: dict[str, list[tuple[str, ...]]] = {}
    not_member_of: dict[str, set[str]] = {}
    policy = None
    for key, value in sorted(ri.extra_specs.items()):
        if ("flavor", key) in claimed:
            continue
        if key == "group_policy":
            ri.claim(key)
            policy = rules.check_enum(ri, key, value, GROUP_POLICIES)
            continue
        match = MEMBER_OF_RE.match(key)
        if match:
            ri.claim(key)
            parsed = _member_of(ri, key, value)
            if parsed is not None:
                suffix = match.group(1) or ""
                negative, aggs = parsed
                if negative:
                    not_member_of.setdefault(suffix, set()).update(aggs)
                else:
                    member_of.setdefault(suffix, []).append(aggs)
            continue
        match = GROUP_RE.match(key)
        if not match:
            continue
        prefix, suffix, name = match.group(1), match.group(2) or "", match.group(3)
        if prefix == "resources":
            if not names.is_valid_resource_class(name):
                continue  # left to unknown_keys(): nova's message
            ri.claim(key)
            amount = rules.check_int(ri, key, value, minimum=0)
            if amount:
                resources.setdefault(suffix, {})[name] = amount
        else:
            if not names.is_valid_trait(name):
                continue
            ri.claim(key)
            kind = rules.check_enum(ri, key, value, TRAIT_VALUES)
            if kind == "required":
                required.setdefault(suffix, set()).add(name)
            elif kind == "forbidden":
                forbidden.setdefault(suffix, set()).add(name)
    image_traits = ri.image_properties.get("traits_required")
    if image_traits is not None:
        ri.claim("traits_required", source="image")
        if isinstance(image_traits, str):
            image_traits = tuple(t.strip() for t in image_traits.split(",") if t.strip())
        if not isinstance(image_traits, tuple):
            ri.report("traits_required", image_traits, "must be a list of trait "
                      "names", source="image")
        else:
            for trait in image_traits:
                if not isinstance(trait, str) or not names.is_valid_trait(trait):
                    ri.report("traits_required", trait, "not a standard "
                              "(os-traits) or CUSTOM_* trait", source="image")
                else:
                    required.setdefault("", set()).add(trait)
    suffixes = sorted(set(resources) | set(required) | set(forbidden)
                      | set(member_of) | set(not_member_of))
    groups = tuple(
        RequestGroup(
            requester_id=s, resources=FrozenMap(sorted(resources.get(s, {}).items())),
            required_traits=frozenset(required.get(s, ())),
            forbidden_traits=frozenset(forbidden.get(s, ())),
            member_of=tuple(member_of.get(s, ())),
            forbidden_aggregates=frozenset(not_member_of.get(s, ())),
            owner="framework", kind=KIND_GENERIC)
        for s in suffixes)
    return GenericRequest(group_policy=policy, groups=groups)


def _member_of(ri: RequestInput, key: str, value: str) -> Optional[tuple[bool, tuple[str, ...]]]:
    """Placement's ``member_of`` syntax: ``[!]in:a,b`` or ``[!]a``."""
    text = value.strip()
    negative = text.startswith("!")
    if negative:
        text = text[1:]
    if text.startswith("in:"):
        text = text[3:]
    elif "," in text:
        ri.report(key, value, "several aggregates need the 'in:' prefix: "
                  "member_of=in:<uuid>,<uuid>")
        return None
    aggs = tuple(a.strip() for a in text.split(","))
    bad = [a for a in aggs if not _is_uuid(a)]
    if bad or not aggs:
        ri.report(key, value, "Expected 'member_of' parameter to contain valid "
                  "UUID(s). Got: %s" % value)
        return None
    return negative, tuple(sorted(set(aggs)))


def _is_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


def unknown_keys(ri: RequestInput, claimed: Iterable[tuple[str, str]]) -> None:
    """Report flavor keys nobody claimed in a namespace the framework or a
    plugin owns (nova's "does not appear to be a valid extra spec")."""
    claimed = set(claimed)
    known = set(FRAMEWORK_NAMESPACES)
    for source, key in claimed:
        if source == "flavor":
            ns = namespace(key)
            if ns:
                known.add(ns)
    for key, value in sorted(ri.extra_specs.items()):
        if ("flavor", key) in claimed or key in NOVA_OTHER_HW_KEYS:
            continue
        if namespace(key) in known:
            ri.report(key, value, rules.unknown_key_rule(key))

