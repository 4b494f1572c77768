"""What a request is built from: flavor, image properties, ports, hints.

:class:`RequestInput` is what each plugin's ``parse_request`` hook receives.
Besides the (immutable) data it carries a per-plugin *parse record*: a plugin
:meth:`~RequestInput.claim`\\ s the keys it understands and
:meth:`~RequestInput.report`\\ s every problem it finds (or raises
:class:`~compute_plugins.request.errors.RequestValidationError`). The
framework then reports keys that nobody claimed in a namespace somebody owns
and raises one error that lists every plugin's problems.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from compute_plugins.request.errors import Problem, RequestInputError
from compute_plugins.request.groups import AFFINITY_POLICIES
from compute_plugins.request.types import (
    FrozenMap,
    enum_field,
    freeze_json,
    min_field,
    thaw_json,
)
from compute_plugins.util.text import name_problem, printable

#: Vnic types as neutron names them.
VNIC_NORMAL = "normal"
VNIC_DIRECT = "direct"
#: neutron's ``portbindings.VNIC_TYPES``: anything else is a mistake.
VNIC_TYPES = ("normal", "direct", "macvtap", "baremetal", "direct-physical",
              "virtio-forwarder", "smart-nic", "vdpa", "remote-managed",
              "accelerator-direct", "accelerator-direct-physical")
#: Placement's largest amount (``placement.db.constants.MAX_INT``): a larger
#: vcpus, memory_mb, disk size or bandwidth can never be allocated, and
#: refusing it early keeps huge numbers out of every later computation.
MAX_AMOUNT = 0x7FFFFFFF


def check_name(name: str, what: str) -> None:
    """Refuse a name :func:`~compute_plugins.util.text.name_problem` refuses.

    :raises RequestInputError: ``what``, the name (escaped) and why.
    """
    problem = name_problem(name)
    if problem is not None:
        raise RequestInputError("%s %s: %s" % (what, printable(repr(name)), problem))


def check_amount(value: Any, what: str, minimum: int = 0) -> int:
    """``value`` as an integer in ``[minimum, MAX_AMOUNT]``.

    :raises RequestInputError: naming ``what``, the value and the bounds.
    """
    if (isinstance(value, bool) or not isinstance(value, int)
            or not minimum <= value <= MAX_AMOUNT):
        raise RequestInputError("%s must be an integer from %d to %d, got %r"
                                % (what, minimum, MAX_AMOUNT, value))
    return value


@dataclasses.dataclass(frozen=True)
class Flavor:
    """The flavor fields a request needs (nova's names and units).

    ``swap`` is in MiB, ``root_gb``/``ephemeral_gb`` in GiB, as in nova.
    """

    vcpus: int = min_field(1)
    memory_mb: int = min_field(1)
    name: str = ""
    root_gb: int = 0
    ephemeral_gb: int = 0
    swap: int = 0
    extra_specs: FrozenMap[str, str] = dataclasses.field(default_factory=FrozenMap)

    @classmethod
    def from_dict(cls, doc: Any) -> Flavor:
        """A flavor from a nova-style document (e.g. ``openstack flavor show -f json``).

        :raises RequestInputError: not an object, ``vcpus``/``memory_mb``
            missing or not positive integers, a size field not an integer,
            ``extra_specs`` not an object of strings.
        """
        if not isinstance(doc, Mapping):
            raise RequestInputError("a flavor must be a JSON object")
        if "flavor" in doc and isinstance(doc["flavor"], Mapping):
            doc = doc["flavor"]
        missing = [k for k in ("vcpus", "memory_mb") if k not in doc]
        if missing:
            raise RequestInputError(
                "the flavor lacks %s" % " and ".join(repr(k) for k in missing))
        sizes = {}
        for key, minimum in (("vcpus", 1), ("memory_mb", 1), ("root_gb", 0),
                             ("ephemeral_gb", 0), ("swap", 0)):
            value = doc.get(key, 0)
            if key == "swap" and value == "":
                value = 0  # nova's API shows no swap as ""
            sizes[key] = check_amount(value, "flavor %r" % key, minimum)
        specs = doc.get("extra_specs", doc.get("properties"))
        specs = {} if specs is None else specs
        if not isinstance(specs, Mapping):
            raise RequestInputError("flavor 'extra_specs' must be a JSON object")
        extra_specs = {}
        for key, value in specs.items():
            if isinstance(value, bool) or not isinstance(value, (str, int, float)):
                raise RequestInputError(
                    "flavor extra spec %r must be a string, got %r" % (key, value))
            extra_specs[str(key)] = str(value)
        name = doc.get("name") or ""
        if not isinstance(name, str):
            raise RequestInputError("flavor 'name' must be a string, got %r"
                                    % (thaw_json(name),))
        check_name(name, "flavor 'name'")
        return cls(name=name, extra_specs=FrozenMap(extra_specs), **sizes)


@dataclasses.dataclass(frozen=True)
class Port:
    """A requested network port (what the scheduler needs of a neutron port).

    :param id: the port id (or any unique label); defaults to ``port<N>``.
    :param vnic_type: neutron's ``binding:vnic_type`` (``normal``, ``direct``...).
    :param physnet: the physical network of the port's network.
    :param min_kbps_egress: minimum bandwidth rule, egress (kbps), or 0.
    :param min_kbps_ingress: minimum bandwidth rule, ingress (kbps), or 0.
    :param tunneled: the port's network is a tunnel (neutron's
        ``provider:network_type`` vxlan, gre or geneve: nova's
        ``NetworkMetadata.tunneled``).
    :param affinity_policy: the port's own affinity policy for its device
        (neutron's port attribute ``numa_affinity_policy``: ``required``,
        ``preferred``, ``legacy`` or ``socket``), None when it has none;
        it overrides the flavor's and image's for this port, as in nova.
    """

    id: str
    vnic_type: str = enum_field(VNIC_TYPES, VNIC_NORMAL)
    physnet: Optional[str] = None
    min_kbps_egress: int = 0
    min_kbps_ingress: int = 0
    tunneled: bool = False
    affinity_policy: Optional[str] = enum_field(AFFINITY_POLICIES)

    @classmethod
    def from_dict(cls, doc: Any, index: int) -> Port:
        """:raises RequestInputError: not an object or a field of the wrong type."""
        if not isinstance(doc, Mapping):
            raise RequestInputError("port %d must be a JSON object" % index)
        known = {f.name for f in dataclasses.fields(cls)} | {"binding:vnic_type"}
        unknown = sorted(set(doc) - known)
        if unknown:
            raise RequestInputError(
                "port %d has unknown field(s) %s; known: %s"
                % (index, ", ".join(unknown), ", ".join(sorted(known))))
        vnic = doc.get("vnic_type", doc.get("binding:vnic_type", VNIC_NORMAL))
        kwargs: dict[str, Any] = {"id": doc.get("id") or "port%d" % index,
                                  "vnic_type": vnic,
                                  "physnet": doc.get("physnet")}
        for key in ("id", "vnic_type"):
            if not isinstance(kwargs[key], str):
                raise RequestInputError(
                    "port %d field %r must be a string" % (index, key))
        if kwargs["physnet"] is not None and not isinstance(kwargs["physnet"], str):
            raise RequestInputError("port %d field 'physnet' must be a string" % index)
        for key in ("min_kbps_egress", "min_kbps_ingress"):
            kwargs[key] = check_amount(doc.get(key) or 0,
                                       "port %d field %r" % (index, key))
        tunneled = doc.get("tunneled", False)
        if not isinstance(tunneled, bool):
            raise RequestInputError("port %d field 'tunneled' must be true or "
                                    "false" % index)
        kwargs["tunneled"] = tunneled
        policy = doc.get("affinity_policy")
        if policy is not None and policy not in AFFINITY_POLICIES:
            raise RequestInputError(
                "port %d field 'affinity_policy' must be one of %s, got %r"
                % (index, ", ".join(AFFINITY_POLICIES), thaw_json(policy)))
        kwargs["affinity_policy"] = policy
        return cls(**kwargs)


class _ParseRecord:
    """Keys claimed and problems reported while one plugin parses."""

    def __init__(self, plugin: str) -> None:
        self.plugin = plugin
        self.claimed: set[tuple[str, str]] = set()
        self.problems: list[Problem] = []


@dataclasses.dataclass(frozen=True)
class RequestInput:
    """Everything a request is built from, as each plugin sees it.

    :param flavor: the flavor.
    :param image_properties: the image's properties (glance's names,
        ``hw_*``); values as glance gives them (strings, or typed).
    :param image_name: for messages (nova names the image in conflicts).
    :param ports: the requested ports.
    :param hints: scheduler hints (JSON values).
    """

    flavor: Flavor
    image_properties: FrozenMap[str, Any] = dataclasses.field(
        default_factory=FrozenMap)
    image_name: str = ""
    ports: tuple[Port, ...] = ()
    hints: FrozenMap[str, Any] = dataclasses.field(default_factory=FrozenMap)
    _record: Optional[_ParseRecord] = dataclasses.field(
        default=None, compare=False, repr=False)

    @classmethod
    def from_dicts(
        cls,
        flavor: Any,
        image: Any = None,
        ports: Sequence[Any] = (),
        hints: Optional[Mapping[str, Any]] = None,
    ) -> RequestInput:
        """Build from JSON-like documents (or ready :class:`Flavor`/:class:`Port`).

        ``image`` is either the properties themselves or an image document
        with ``properties`` (and ``name``).

        :raises RequestInputError: a document is unusable.
        """
        if not isinstance(flavor, Flavor):
            flavor = Flavor.from_dict(flavor)
        image_name = ""
        properties: Any = {} if image is None else image
        if not isinstance(properties, Mapping):
            raise RequestInputError("an image must be a JSON object")
        if "properties" in properties:
            # NOTE: an image document (glance's ``image show``); a
            # "properties" that is not an object would otherwise be taken
            # as one more property and the real ones silently ignored.
            if not isinstance(properties["properties"], Mapping):
                raise RequestInputError(
                    "image 'properties' must be a JSON object, got %r"
                    % (thaw_json(properties["properties"]),))
            name = properties.get("name") or ""
            if not isinstance(name, str):
                raise RequestInputError("image 'name' must be a string, got %r"
                                        % (thaw_json(name),))
            check_name(name, "image 'name'")
            image_name = name
            properties = properties["properties"]
        if hints is not None and not isinstance(hints, Mapping):
            raise RequestInputError("scheduler hints must be a JSON object")
        port_objs = tuple(p if isinstance(p, Port) else Port.from_dict(p, i)
                          for i, p in enumerate(ports))
        ids = [p.id for p in port_objs]
        if len(set(ids)) != len(ids):
            raise RequestInputError("port ids must be unique: %s" % ", ".join(ids))
        return cls(flavor=flavor, image_properties=freeze_json(properties),
                   image_name=image_name, ports=port_objs,
                   hints=freeze_json(hints or {}))

    # -- what plugins read ------------------------------------------------

    @property
    def extra_specs(self) -> Mapping[str, str]:
        return self.flavor.extra_specs

    def flavor_image(self, key: str, prefix: str = "hw") -> tuple[Any, Any]:
        """``(flavor's <prefix>:<key>, image's <prefix>_<key>)``, claimed (nova's
        ``_get_flavor_image_meta``)."""
        flavor_key, image_key = "%s:%s" % (prefix, key), "%s_%s" % (prefix, key)
        self.claim(flavor_key)
        self.claim(image_key, source="image")
        return (self.extra_specs.get(flavor_key),
                self.image_properties.get(image_key))

    # -- the parse record ---------------------------------------------------------

    def for_plugin(self, plugin: str) -> RequestInput:
        """A copy of this input with a fresh parse record for ``plugin``."""
        return dataclasses.replace(self, _record=_ParseRecord(plugin))

    @property
    def plugin(self) -> str:
        return self._record.plugin if self._record else "framework"

    def claim(self, *keys: str, source: str = "flavor") -> None:
        """Mark ``keys`` (extra specs, or image properties with
        ``source="image"``) as understood by the parsing plugin."""
        if self._record is not None:
            self._record.claimed.update((source, k) for k in keys)

    def report(self, key: str, value: Any, rule: str,
               source: str = "flavor") -> None:
        """Record a problem; the framework raises them all at the end."""
        problem = Problem(source, key, value, rule, self.plugin)
        if self._record is None:
            from compute_plugins.request.errors import RequestValidationError
            raise RequestValidationError([problem])
        self._record.problems.append(problem)

    @property
    def claimed(self) -> frozenset[tuple[str, str]]:
        return frozenset(self._record.claimed) if self._record else frozenset()

    @property
    def problems(self) -> tuple[Problem, ...]:
        return tuple(self._record.problems) if self._record else ()

    def has_problems(self) -> bool:
        return bool(self._record and self._record.problems)


