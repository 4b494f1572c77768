"""The framework's own keys: generic granular groups and request-level keys.

Nova's granular syntax (``nova.scheduler.utils.ResourceRequest``):

- ``resources[N]:<RC>=<amount>``: ``<RC>`` a standard class or ``CUSTOM_*``;
- ``trait[N]:<TRAIT>=required|forbidden``;
- ``member_of[N]=[!]in:<agg>,<agg>`` or ``<agg>`` (Placement's syntax);
- ``group_policy=none|isolate``;
- image ``traits_required`` (a list; unsuffixed group).

``[N]`` is Placement's suffix (:data:`~compute_plugins.request.groups.SUFFIX`);
suffixes starting with ``_`` are reserved for the framework and plugins. Keys of these
namespaces that a plugin claimed (e.g. ``resources:VGPU`` by ``vgpu``) are
left to the plugin. Finally :func:`unknown_keys` reports every key nobody
claimed in a namespace somebody owns, in nova's words.

Also checked here, for every key whoever claimed it: a suffix starting with
``_`` is refused (it would merge into a plugin's group); ``member_of``
uuids are written in canonical form (Placement compares strings); a port's
``vnic_type`` must be one of neutron's. A numbered group left without
resources (``trait1:`` or ``member_of1`` alone, ``resources1:X=0``) and a
trait both required and forbidden of one provider are refused by
:mod:`compute_plugins.request.spec` once all groups are known.
"""

from __future__ import annotations

import dataclasses
import re
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, Optional

from compute_plugins.plugin import names
from compute_plugins.request import rules
from compute_plugins.request.groups import (
    KIND_GENERIC,
    SUFFIX,
    RequestGroup,
    is_reserved_suffix,
)
from compute_plugins.request.inputs import MAX_AMOUNT, VNIC_TYPES, RequestInput
from compute_plugins.request.types import FrozenMap, enum_field

GROUP_RE = re.compile(r"^(resources|trait)(%s)?:(.*)$" % SUFFIX)
MEMBER_OF_RE = re.compile(r"^member_of(%s)?$" % SUFFIX)
GROUP_POLICIES = ("isolate", "none")
TRAIT_VALUES = ("required", "forbidden")

#: Namespaces the framework owns (a key in them must be understood).
FRAMEWORK_NAMESPACES = frozenset({"hw", "resources", "trait", "pci_passthrough"})

#: ``hw:`` keys nova validates that no built-in plugin schedules on: accepted
#: (nova's libvirt driver reads them from the flavor) but not interpreted.
NOVA_OTHER_HW_KEYS = frozenset({
    "hw:hide_hypervisor_id", "hw:boot_menu",
    "hw:vif_multiqueue_enabled", "hw:mem_encryption",
    "hw:mem_encryption_model", "hw:pmem", "hw:pmu", "hw:serial_port_count",
    "hw:tpm_model", "hw:tpm_version", "hw:tpm_secret_security",
    "hw:watchdog_action", "hw:viommu_model", "hw:virtio_packed_ring",
    "hw:sound_model", "hw:usb_model", "hw:redirected_usb_ports",
    "hw:ephemeral_encryption", "hw:ephemeral_encryption_format",
})


#: Keys of :data:`NOVA_OTHER_HW_KEYS` (and their image twins) that ask nova
#: for something the guest would silently lack if no enabled plugin claims
#: them, with what they ask and the built-in plugin that gives it (opt-in
#: plugins: ``memenc``, ``pmem``): refused rather than ignored then.
ASKS_FOR = {
    "mem_encryption": ("memory encryption", "memenc"),
    "ephemeral_encryption": ("ephemeral disk encryption", "disk"),
    "pmem": ("virtual persistent memory", "pmem"),
}


def _asks(key: str, value: Any) -> bool:
    """``value`` of ``hw:<key>`` / ``hw_<key>`` asks for the thing (a true
    boolean; for ``pmem``, a label)."""
    if key == "pmem":
        return isinstance(value, str) and any(p.strip() for p in value.split(","))
    return rules.parse_bool(value) is True


def unprovided(ri: RequestInput, claimed: Iterable[tuple[str, str]]) -> None:
    """Report the :data:`ASKS_FOR` keys that ask while no plugin claimed
    them (call it when every plugin parsed: one that failed may be the one
    that gives it, and its own problem is the one to show)."""
    claimed = set(claimed)
    for key, (what, plugin) in sorted(ASKS_FOR.items()):
        for source, name, value in (("flavor", "hw:" + key, ri.extra_specs.get("hw:" + key)),
                                    ("image", "hw_" + key,
                                     ri.image_properties.get("hw_" + key))):
            if (source, name) in claimed or not _asks(key, value):
                continue
            ri.report(name, value, "asks for %s, which no enabled plugin provides "
                      "(the %s plugin does: add it to [compute_plugins] "
                      "enabled_plugins); nova would give it, the guest would "
                      "silently lack it" % (what, plugin), source=source)


@dataclasses.dataclass(frozen=True)
class GenericRequest:
    """The framework's share of the request.

    :param group_policy: ``group_policy`` as given (None when unset).
    :param groups: the generic groups, by suffix (``""`` = unsuffixed).
    """

    group_policy: Optional[str] = enum_field(GROUP_POLICIES)
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
    refused = _reserved_suffixes(ri)
    _vnic_types(ri)
    for key, value in sorted(ri.extra_specs.items()):
        if ("flavor", key) in claimed or key in refused:
            ri.claim(key)
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
            amount = rules.check_int(ri, key, value, minimum=0,
                                     maximum=MAX_AMOUNT)
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


def _reserved_suffixes(ri: RequestInput) -> set[str]:
    """Refuse user keys with a suffix of the framework's (``_PORT0``...):
    they would merge into a plugin's group, whoever claimed the key.
    Returns the refused keys (not parsed further)."""
    refused = set()
    for key, value in sorted(ri.extra_specs.items()):
        match = GROUP_RE.match(key) or MEMBER_OF_RE.match(key)
        suffix = match.group(2) if match and match.re is GROUP_RE else (
            match.group(1) if match else None)
        if is_reserved_suffix(suffix):
            refused.add(key)
            ri.report(key, value, "request group suffixes starting with '_' "
                      "are reserved for the framework and its plugins "
                      "(_PORT0, _SPLIT0...): use one that does not start "
                      "with '_', such as 1")
    return refused


def _vnic_types(ri: RequestInput) -> None:
    """A port's ``vnic_type`` must be one neutron knows."""
    for index, port in enumerate(ri.ports):
        if port.vnic_type not in VNIC_TYPES:
            ri.report("vnic_type", port.vnic_type,
                      rules.enum_rule(port.vnic_type, VNIC_TYPES),
                      "port[%d]" % index)


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
    aggs = tuple(_uuid(a) for a in text.split(","))
    if not aggs or None in aggs:
        ri.report(key, value, "Expected 'member_of' parameter to contain valid "
                  "UUID(s). Got: %s" % value)
        return None
    return negative, tuple(sorted({a for a in aggs if a}))


def _uuid(text: str) -> Optional[str]:
    """``text`` in the canonical form (Placement compares strings), or None.

    Only the 36-character forms are accepted (``{...}`` / ``urn:uuid:``
    forms are not Placement's syntax)."""
    text = text.strip()
    if len(text) != 36:
        return None
    try:
        return str(uuid.UUID(text))
    except ValueError:
        return None


def owner(key: str, owned: Mapping[str, Iterable[str]]) -> Optional[str]:
    """The plugin of ``owned`` (name -> its ``owned_keys``) that owns
    ``key`` (a pattern's trailing ``*`` matches any rest), else None."""
    for plugin, patterns in sorted(owned.items()):
        for pattern in patterns:
            if key == pattern or (pattern.endswith("*")
                                  and key.startswith(pattern[:-1])):
                return plugin
    return None


def unknown_keys(ri: RequestInput, claimed: Iterable[tuple[str, str]],
                 disabled: Optional[Mapping[str, Iterable[str]]] = None) -> None:
    """Report flavor keys nobody claimed in a namespace the framework or a
    plugin owns: a key an installed but not enabled plugin owns
    (``disabled``: name -> its ``owned_keys``) as one no enabled plugin
    provides, naming that plugin; any other in nova's words ("does not
    appear to be a valid extra spec")."""
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
        plugin = owner(key, disabled or {})
        if plugin is not None:
            ri.report(key, value, "is the %s plugin's key, which no enabled "
                      "plugin provides (add %s to [compute_plugins] "
                      "enabled_plugins)" % (plugin, plugin))
        elif namespace(key) in known:
            ri.report(key, value, rules.unknown_key_rule(key))

