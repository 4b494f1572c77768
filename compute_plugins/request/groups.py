"""Request groups, the plugins' typed requests and the scheduler's decision.

A :class:`RequestGroup` is a plugin's (or the framework's) share of the
Placement query, with the metadata that wires groups together without
naming any plugin: which node of the guest's topology a group is
(``guest_node`` groups, e.g. the ``numa`` plugin's guest NUMA nodes), which
affinity to those nodes a device group needs (it must then be in the same
provider subtree as one of them), over how many providers a group may be
split. The scheduler asks Placement from them
(:mod:`compute_plugins.scheduler.providers`), and ``validate`` previews the
``GET /allocation_candidates`` queries they make
(:mod:`compute_plugins.scheduler.query`), so no query is assembled by hand
twice.

:class:`PluginRequest` and :class:`PluginAssignment` are the base classes of
each plugin's typed request and assignment (frozen dataclasses). A plugin
names its own on its class (``request_type``, ``assignment_type`` of
:class:`~compute_plugins.plugin.contract.ResourcePlugin`), so a serialised spec is
read back with the types of the plugins loaded.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import uuid
from collections.abc import Callable
from typing import Any, Optional, TypeVar

from compute_plugins.plugin import names
from compute_plugins.request.types import (
    Checked,
    CodecError,
    FrozenMap,
    built_by_decode,
    check_fields,
    enum_field,
    min_field,
)

#: Placement's granular group suffix syntax (microversion 1.33): the one
#: definition every key regex of the framework and the plugins is built from.
SUFFIX = r"[a-zA-Z0-9_-]{1,64}"
SUFFIX_RE = re.compile(r"^%s$" % SUFFIX)
#: Suffixes starting with this are the framework's and plugins' own
#: (``_PORT1``, ``_FPGA0``...): a user key may not use them.
RESERVED_SUFFIX_PREFIX = "_"
#: Suffix prefix of the parts of a group split over several providers
#: (``split``): ``_SPLIT0``, ``_SPLIT1``... (the framework's, so a plugin
#: that splits a group allocates its parts under these suffixes).
SPLIT_PREFIX = "_SPLIT"


def granular_key_re(prefix: str, name: str = "(.*)") -> re.Pattern[str]:
    """``^<prefix>(<suffix>)?:<name>$``: group 1 is the suffix (or None).

    ``name`` is a regex (with its own groups, numbered from 2).
    """
    return re.compile(r"^%s(%s)?:%s$" % (prefix, SUFFIX, name))


def is_reserved_suffix(suffix: str | None) -> bool:
    """True for a suffix the user may not write (see RESERVED_SUFFIX_PREFIX)."""
    return bool(suffix and suffix.startswith(RESERVED_SUFFIX_PREFIX))

# Group kinds.
KIND_GENERIC = "generic"        # from resources[N]:/trait[N]:/member_of[N]
KIND_GUEST_NODE = "guest_node"  # one node of the guest's topology (``node``)
KIND_FLOATING = "floating"      # CPUs/memory of a guest without a topology
KIND_DEVICE = "device"          # a device (VGPU, VF, PCI alias, FPGA)
KIND_DISK = "disk"              # DISK_GB
KIND_ROOT = "root"              # traits only: root_required / root forbidden
KINDS = (KIND_GENERIC, KIND_GUEST_NODE, KIND_FLOATING, KIND_DEVICE, KIND_DISK,
         KIND_ROOT)

#: Affinity policies of a device to the guest's topology nodes (nova's
#: ``PCINUMAAffinityPolicy``; see :mod:`compute_plugins.plugin.topology`).
AFFINITY_POLICIES = ("required", "preferred", "legacy", "socket")


@dataclasses.dataclass(frozen=True)
class RequestGroup(Checked):
    """One group of the allocation-candidates query.

    :param requester_id: the group suffix (``""``: the unsuffixed group).
    :param resources: resource class -> amount.
    :param required_traits: traits the provider must have.
    :param forbidden_traits: traits it must not have.
    :param member_of: each entry is an ``in:`` list of aggregate uuids.
    :param forbidden_aggregates: aggregates the provider must not be in.
    :param owner: the plugin (or ``framework``) that asked for the group.
    :param kind: one of the ``KIND_*`` constants.
    :param node: for ``guest_node`` groups: the node of the guest's
        topology (a device with ``affinity`` goes in the same provider
        subtree as one of the nodes).
    :param affinity: for ``device`` groups: the affinity policy to the
        guest's nodes (``required``, ``legacy``, ``preferred``, ``socket``;
        :mod:`compute_plugins.plugin.topology`) or None.
    :param choices: alternative extra resources, exactly one of which the
        group must also get (e.g. memory in small or in 2 MiB pages).
    :param split: the group may be split evenly over up to this many
        providers (the parts' suffixes start with :data:`SPLIT_PREFIX`).
    """

    requester_id: str
    resources: FrozenMap[str, int] = dataclasses.field(default_factory=FrozenMap)
    required_traits: frozenset[str] = frozenset()
    forbidden_traits: frozenset[str] = frozenset()
    member_of: tuple[tuple[str, ...], ...] = ()
    forbidden_aggregates: frozenset[str] = frozenset()
    owner: str = "framework"
    kind: str = enum_field(KINDS, KIND_GENERIC)
    node: Optional[int] = None
    affinity: Optional[str] = enum_field(AFFINITY_POLICIES)
    choices: tuple[FrozenMap[str, int], ...] = ()
    split: int = min_field(1, default=1)

    def __post_init__(self) -> None:
        """Normalise the containers, then check every field (the rules of
        :func:`check_group`): a group that exists is one Placement accepts
        and that reads back from JSON equal.

        :raises CodecError: (a ``ValueError``) naming the group, the field,
            the value and the rule.
        """
        # NOTE: a :class:`Checked` whose fields :func:`check_group` checks
        # (in its order, among its rules): a group held by a spec is not
        # checked again, nor one :func:`decode` built.
        fields_checked = built_by_decode(self)
        if not isinstance(self.requester_id, str) or (
                self.requester_id and not SUFFIX_RE.match(self.requester_id)):
            raise CodecError("invalid request group suffix %r: must match %s"
                             % (self.requester_id, SUFFIX))
        if not fields_checked:
            self._normalise()
        check_group(self, fields_checked)

    def _normalise(self) -> None:
        """Its containers as their hints say (a decoded group's are)."""
        for name in ("resources",):
            value = getattr(self, name)
            if not isinstance(value, FrozenMap):
                object.__setattr__(self, name, FrozenMap(value))
        for name in ("required_traits", "forbidden_traits", "forbidden_aggregates"):
            value = getattr(self, name)
            if isinstance(value, str):
                raise CodecError("request group %r: %s must be a set of "
                                 "names, got the string %r"
                                 % (self.requester_id, name, value))
            if not isinstance(value, frozenset):
                object.__setattr__(self, name, frozenset(value))
        object.__setattr__(self, "member_of",
                           tuple(tuple(m) for m in self.member_of))
        object.__setattr__(self, "choices",
                           tuple(FrozenMap(c) for c in self.choices))

    def is_empty(self) -> bool:
        return not (self.resources or self.required_traits
                    or self.forbidden_traits or self.member_of
                    or self.forbidden_aggregates or self.choices)

    def merged_with(self, other: RequestGroup) -> RequestGroup:
        """Both groups' contents in one group (same suffix: same provider).

        Amounts of the same class add up. The more specific kind (a device or
        guest node over ``generic``) and its metadata win.
        """
        resources = dict(self.resources)
        for rc, amount in other.resources.items():
            resources[rc] = resources.get(rc, 0) + amount
        main, extra = (self, other)
        if main.kind == KIND_GENERIC and other.kind != KIND_GENERIC:
            main, extra = other, self
        return dataclasses.replace(
            main,
            resources=FrozenMap(resources),
            required_traits=self.required_traits | other.required_traits,
            forbidden_traits=self.forbidden_traits | other.forbidden_traits,
            member_of=self.member_of + tuple(
                m for m in other.member_of if m not in self.member_of),
            forbidden_aggregates=(self.forbidden_aggregates
                                  | other.forbidden_aggregates),
            choices=main.choices or extra.choices,
            owner=main.owner if main.owner == extra.owner
            else "%s+%s" % (main.owner, extra.owner),
        )


def check_group(group: RequestGroup, fields_checked: bool = False) -> None:
    """The rules of a :class:`RequestGroup`, checked when it is built.

    Every field has its type (:func:`~compute_plugins.request.types.check`:
    amounts are integers 0..MAX_INT, ``kind`` and ``affinity`` are known
    values, ``split`` is 1 or more); resource classes are standard
    (os-resource-classes) or ``CUSTOM_*``; traits are standard (os-traits) or
    ``CUSTOM_*``; ``member_of`` entries are non-empty lists of aggregate
    uuids, as Placement takes them.

    :param fields_checked: every field was checked by these rules already
        (:func:`~compute_plugins.request.types.decode` built the group).
    :raises CodecError: naming the group, the field, the value and the rule.
    """
    where = "request group %r" % group.requester_id
    classes = list(group.resources)
    for choice in group.choices:
        classes.extend(choice)
    # NOTE: decode takes a mapping's keys as the document has them (a JSON
    # document's are strings; a dict built in Python may have others):
    # those are refused by check_fields, with its message.
    if not fields_checked or not all(isinstance(rc, str) for rc in classes):
        check_fields(group, where)
    for rc in classes:
        if not names.is_valid_resource_class(rc):
            raise CodecError("%s: resource class %r is not a standard "
                             "(os-resource-classes) or CUSTOM_[A-Z0-9_]+ "
                             "class" % (where, rc))
    for field in ("required_traits", "forbidden_traits"):
        for trait in sorted(getattr(group, field)):
            if not names.is_valid_trait(trait):
                raise CodecError("%s: %s: %r is not a standard (os-traits) "
                                 "or CUSTOM_[A-Z0-9_]+ trait"
                                 % (where, field, trait))
    for aggs in group.member_of:
        if not aggs:
            raise CodecError("%s: member_of has an empty list of aggregates"
                             % where)
    for agg in [a for aggs in group.member_of for a in aggs] + sorted(
            group.forbidden_aggregates):
        if not _is_uuid_like(agg):
            raise CodecError("%s: aggregate %r is not a uuid" % (where, agg))


def _is_uuid_like(text: str) -> bool:
    """Placement's ``uuidutils.is_uuid_like`` (canonical or not)."""
    if len(text) > 45:
        return False
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True


class PluginRequest(Checked):
    """Base class of a plugin's typed request (subclass as a frozen dataclass;
    the plugin names it in its ``request_type``). Its fields are checked
    when it is built (:class:`~compute_plugins.request.types.Checked`: a
    value that would not read back from JSON equal is a ``ValueError``).
    """


_Built = TypeVar("_Built")


def per_request(build: Callable[[Any], _Built]) -> Callable[[Any], _Built]:
    """``build`` (a pure function of a frozen :class:`PluginRequest`)
    computed once per request object and kept on it.

    A request is frozen, and the scheduler fits the same request object on
    every candidate host: what a plugin derives from the request alone (its
    request groups, its per-node demands) is the same on each of them, and
    rebuilding it per host was a fifth of the filter's time at 1,000 hosts
    (``bench.filter``). The value is kept in the request's ``__dict__``
    (never a field: not serialised, not compared); a ``list`` is copied
    per call, so a caller that changes its list changes no other's.
    """
    key = "_per_request_%s_%s" % (build.__module__, build.__qualname__)

    @functools.wraps(build)
    def cached(request: Any) -> _Built:
        kept = request.__dict__
        try:
            value = kept[key]
        except KeyError:
            value = kept[key] = build(request)
        return list(value) if isinstance(value, list) else value  # type: ignore[return-value]
    return cached


class PluginAssignment(Checked):
    """Base class of a plugin's assignment: what the scheduler chose for it
    on the host (pinned CPUs, the pGPU of an mdev, the VF of a port...).
    Subclass as a frozen dataclass (the plugin names it in its
    ``assignment_type``); its fields are checked when it is built, as a
    :class:`PluginRequest`'s."""


@dataclasses.dataclass(frozen=True)
class Decision:
    """The scheduler's decision, recorded in the spec for the compute host.

    :param host: the chosen compute host (service host name).
    :param nodename: its node name (the root provider's name).
    :param allocations: the allocation request: provider uuid -> resource
        class -> amount (``allocation_requests[i].allocations``).
    :param mappings: request group suffix -> provider uuids (Placement
        1.34 ``mappings``; the unsuffixed group is ``""``).
    :param assignments: plugin name -> that plugin's assignment.
    """

    host: str
    nodename: str = ""
    allocations: FrozenMap[str, FrozenMap[str, int]] = dataclasses.field(
        default_factory=FrozenMap)
    mappings: FrozenMap[str, tuple[str, ...]] = dataclasses.field(
        default_factory=FrozenMap)
    assignments: FrozenMap[str, PluginAssignment] = dataclasses.field(
        default_factory=FrozenMap, metadata={"json": False})

    def __post_init__(self) -> None:
        # NOTE: one :func:`~compute_plugins.request.types.decode` built
        # (or a reader, from decoded fields: :func:`~compute_plugins.
        # request.types.build_decoded`) holds its containers as their hints
        # say, checked by the same rules: neither copied nor checked again.
        if built_by_decode(self):
            return
        object.__setattr__(self, "allocations", FrozenMap(
            (rp, FrozenMap(res)) for rp, res in self.allocations.items()))
        object.__setattr__(self, "mappings", FrozenMap(
            (g, tuple(rps)) for g, rps in self.mappings.items()))
        object.__setattr__(self, "assignments", FrozenMap(self.assignments))
        check_fields(self, "decision")

    @classmethod
    def from_allocation_request(
        cls, host: str, allocation_request: Any, nodename: str = "",
        assignments: Optional[Any] = None,
    ) -> Decision:
        """From one ``allocation_requests`` item of Placement's answer."""
        allocations = {
            rp: dict(body.get("resources", {}))
            for rp, body in allocation_request.get("allocations", {}).items()}
        mappings = {g: tuple(rps) for g, rps in
                    allocation_request.get("mappings", {}).items()}
        return cls(host=host, nodename=nodename, allocations=FrozenMap(allocations),
                   mappings=FrozenMap(mappings),
                   assignments=FrozenMap(assignments or {}))

    def allocation_request(self) -> dict[str, Any]:
        """Back to Placement's ``allocation_requests`` item shape."""
        return {"allocations": {rp: {"resources": dict(res)}
                                for rp, res in self.allocations.items()},
                "mappings": {g: list(rps) for g, rps in self.mappings.items()}}
