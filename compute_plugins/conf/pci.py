"""``[pci]``: PCI passthrough aliases and device specs, in nova's JSON format.

``[pci] device_spec`` (nova's whitelist of assignable devices) is parsed by
:mod:`resources.sriov.devspec`; this module registers it.

``[pci] alias`` is a multi-valued option; each value is a JSON object as in
nova (``nova.pci.request``)::

    [pci]
    alias = {"name": "QuickAssist", "product_id": "0443", "vendor_id": "8086",
             "device_type": "type-PCI", "numa_policy": "required"}
    alias = {"name": "A16_16A", "device_type": "type-VF",
             "resource_class": "GPU_VF", "traits": "blue, big"}

The ``pci_passthrough:alias=<name>:<count>`` extra spec requests devices by
alias. In Placement a device of an alias is the alias's ``resource_class``
(normalised as nova does: upper case, ``CUSTOM_`` prefix unless standard) or
``CUSTOM_PCI_<VENDOR_ID>_<PRODUCT_ID>``, with the alias's ``traits``
(normalised the same way), as nova's ``[filter_scheduler]
pci_in_placement`` does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Optional

import jsonschema
import os_resource_classes
import os_traits
from oslo_config import cfg

from compute_plugins import exception
from compute_plugins.conf import register_group_opts
from compute_plugins.plugin import names
from compute_plugins.util import jsonload

GROUP = cfg.OptGroup("pci", title="PCI passthrough",
                     help="PCI passthrough aliases (nova's ``[pci]`` group).")

OPTS = [
    cfg.MultiStrOpt(
        "alias",
        default=[],
        help="An alias for a PCI passthrough device requirement, as a JSON "
        "object (nova's format): ``name`` (required), ``product_id``, "
        "``vendor_id`` (4 hex digits), ``device_type`` (``type-PCI``, "
        "``type-PF``, ``type-VF``), ``numa_policy`` (``legacy``, "
        "``preferred``, ``required``, ``socket``), ``resource_class``, "
        "``traits`` (comma-separated), ``live_migratable``. Each alias needs "
        "``vendor_id`` and ``product_id`` or a ``resource_class``. Repeat the "
        "option for several aliases.",
    ),
    cfg.MultiStrOpt(
        "device_spec",
        default=[],
        help="""Specify the PCI devices available to VMs (nova's option, same
syntax; parsed by ``resources.sriov.devspec``).

Possible values:

* A JSON dictionary which describe a PCI device. It should take
  the following format::

    ["vendor_id": "<id>",] ["product_id": "<id>",]
    ["address": "[[[[<domain>]:]<bus>]:][<slot>][.[<function>]]" |
     "devname": "<name>",]
    {"<tag>": "<tag_value>",}

  Where ``[`` indicates zero or one occurrences, ``{`` indicates zero or
  multiple occurrences, and ``|`` mutually exclusive options. Note that any
  missing fields are automatically wildcarded. ``address`` may also be a
  JSON object of regular expressions (``domain``, ``bus``, ``slot``,
  ``function``). The address fields are restricted to these maximum
  values: domain 0xFFFF, bus 0xFF, slot 0x1F, function 0x7. A single
  address or ``devname`` of an SR-IOV PF also matches its VFs.

  Tags: ``physical_network`` (the VF serves SR-IOV ports of that physical
  network), ``remote_managed`` ("true"/"false"; remote-managed devices are
  not offered), ``managed`` ("yes"/"no": libvirt detaches the device),
  ``live_migratable``, ``resource_class`` (a Placement resource class,
  normalised as nova does; default ``CUSTOM_PCI_<vendor_id>_<product_id>``),
  ``traits`` (comma-separated Placement traits), ``trusted``,
  ``one_time_use``.

* A JSON list of JSON dictionaries corresponding to the above format.

Examples::

    device_spec = {"devname":"eth0", "physical_network":"physnet"}
    device_spec = {"address":"*:0a:00.*"}
    device_spec = {"vendor_id":"1137", "product_id":"0071"}
    device_spec = {"address":{"domain": ".*", "bus": "02", "slot": "01",
                              "function": "[2-7]"},
                   "physical_network":"physnet1"}

With the ``sriov`` plugin: when this option is empty, the devices a
``[pci] alias`` may name are every device an alias matches (less the SR-IOV
NICs and their VFs) and every VF of an SR-IOV NIC serves ports on the PF's
``[sriov] physical_device_mappings`` physnet (as before this option
existed). When it is set, only the devices it matches are given for
aliases (a NIC's PF and VFs included) and, for ports, a PF named in
``[sriov] physical_device_mappings`` keeps that physnet and all its VFs,
while another PF serves ports with those of its VFs that a spec with
``physical_network`` matches, on that physnet.""",
    ),
    cfg.BoolOpt(
        "report_in_placement",
        default=False,
        help="""Enable PCI resource inventory reporting to Placement (nova's
option). If it is enabled then the PCI devices of ``[pci] device_spec``
that have no ``physical_network`` are reported as nova reports them: one
provider ``<nodename>_<ADDRESS>`` under the compute node per PF or plain
device, a PF's VFs counted on their PF's provider, resource class the
spec's ``resource_class`` or ``CUSTOM_PCI_<VENDOR_ID>_<PRODUCT_ID>``,
traits the spec's ``traits`` plus ``COMPUTE_MANAGED_PCI_DEVICE`` (and
``HW_PCI_LIVE_MIGRATABLE``, ``HW_PCI_ONE_TIME_USE``); nova's compute then
finds them already there. As in nova, a ``devname`` spec is then an error,
and ``one_time_use=true`` is an error without this option.
Only these devices serve ``[pci] alias`` requests (nova's ``[filter_scheduler]
pci_in_placement``); devices with a ``physical_network`` serve SR-IOV ports
through the sriov plugin's ``<nodename>_pf_<address>`` providers.

Related options:

* [pci]device_spec: to define which PCI devices nova are allowed to track and
  assign to guests.""",
    ),
]

# NOTE: [0-9], not \d: jsonschema's \d also matches other scripts' digits.
_PCI_VENDOR_PATTERN = "^([0-9a-fA-F]{4})$"
NUMA_POLICIES = ("legacy", "preferred", "required", "socket")
DEVICE_TYPES = ("type-PCI", "type-PF", "type-VF")
#: oslo's boolean strings (nova's ``bool_from_string(strict=True)``).
_TRUE = ("1", "t", "true", "on", "y", "yes")
_FALSE = ("0", "f", "false", "off", "n", "no")

ALIAS_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "minLength": 1, "maxLength": 256},
        "capability_type": {"type": "string", "enum": ["pci"]},
        "product_id": {"type": "string", "pattern": _PCI_VENDOR_PATTERN},
        "vendor_id": {"type": "string", "pattern": _PCI_VENDOR_PATTERN},
        "device_type": {"type": "string", "enum": list(DEVICE_TYPES)},
        "numa_policy": {"type": "string", "enum": list(NUMA_POLICIES)},
        "resource_class": {"type": "string"},
        "traits": {"type": "string"},
        "live_migratable": {"type": "string"},
    },
    "required": ["name"],
}
#: ``ALIAS_SCHEMA``'s validator, the schema checked against its meta-schema
#: once, here: ``jsonschema.validate`` checked it again for every alias, a
#: fifth of an agent's start with the suite's eleven aliases
#: (doc/source/benchmarks.md). The same errors (``best_match``).
_ALIAS_VALIDATOR_CLASS = jsonschema.validators.validator_for(ALIAS_SCHEMA)
_ALIAS_VALIDATOR_CLASS.check_schema(ALIAS_SCHEMA)
_ALIAS_VALIDATOR = _ALIAS_VALIDATOR_CLASS(ALIAS_SCHEMA)


class PciInvalidAlias(exception.ConfigError):
    """``[pci] alias`` is malformed (nova's message)."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__("Invalid PCI alias definition: %s" % reason)


@dataclasses.dataclass(frozen=True)
class PciAlias:
    """One alias: what Placement is asked for per device."""

    name: str
    numa_policy: str
    resource_class: str
    traits: frozenset[str]
    device_type: Optional[str] = None
    vendor_id: Optional[str] = None
    product_id: Optional[str] = None
    #: ``"true"``/``"false"`` (nova's normalised ``live_migratable``), None
    #: when the alias does not say.
    live_migratable: Optional[str] = None


def register_opts(conf: cfg.ConfigOpts) -> None:
    register_group_opts(conf, GROUP, OPTS)


def list_opts() -> list[tuple[cfg.OptGroup, Sequence[cfg.Opt]]]:
    return [(GROUP, OPTS)]


def normalize_rc(name: str) -> str:
    """A resource class as nova normalises ``resource_class``
    (``pci_placement_translator``): upper case, kept when standard or
    custom, else ``CUSTOM_`` and non-alphanumerics as ``_`` (spaces
    included: nova strips nothing, ``" pgpu"`` is ``CUSTOM__PGPU``)."""
    name = name.upper()
    if name in os_resource_classes.STANDARDS or os_resource_classes.is_custom(name):
        return name
    return str(os_resource_classes.normalize_name(name))


def normalize_trait(name: str) -> str:
    """A trait as nova normalises each ``traits`` entry
    (``pci_placement_translator``): kept when standard, else upper case,
    kept when custom, else ``CUSTOM_`` and non-alphanumerics as ``_``
    (``"blue, red"`` gives ``CUSTOM__RED``, as in nova)."""
    if name in os_traits.get_traits():
        return name
    name = name.upper()
    if os_traits.is_custom(name):
        return name
    return str(os_traits.normalize_name(name))


def load_aliases(conf: cfg.ConfigOpts) -> dict[str, PciAlias]:
    """Parse ``[pci] alias`` (registered on ``conf`` if needed).

    :raises PciInvalidAlias: bad JSON, schema violation, an alias defined twice
        with different NUMA policies or device types, or without
        ``vendor_id``/``product_id`` nor ``resource_class``.
    """
    register_opts(conf)
    aliases: dict[str, PciAlias] = {}
    for text in conf.pci.alias:
        try:
            spec = jsonload.loads(text)
        except ValueError as err:
            raise PciInvalidAlias(str(err)) from None
        invalid = jsonschema.exceptions.best_match(_ALIAS_VALIDATOR.iter_errors(spec))
        if invalid is not None:
            raise PciInvalidAlias(invalid.message)
        name = spec["name"].strip()
        policy = spec.get("numa_policy") or "legacy"
        vendor, product = spec.get("vendor_id"), spec.get("product_id")
        if spec.get("resource_class"):
            rc = normalize_rc(spec["resource_class"])
        elif vendor and product:
            rc = names.custom_name("PCI", vendor.upper(), product.upper())
        else:
            raise PciInvalidAlias(
                "The PCI alias(es) %s does not have vendor_id and product_id "
                "fields set or resource_class field set." % name)
        traits = frozenset(normalize_trait(t) for t in
                           (spec.get("traits") or "").split(",") if t.strip())
        alias = PciAlias(name=name, numa_policy=policy, resource_class=rc,
                         traits=traits, device_type=spec.get("device_type"),
                         vendor_id=vendor, product_id=product)
        live = spec.get("live_migratable")
        if live is not None:
            flag = live.strip().lower()
            if flag not in _TRUE + _FALSE:
                raise PciInvalidAlias(
                    "live_migratable of alias %s is %r: expected one of %s"
                    % (name, live, ", ".join(_TRUE + _FALSE)))
            alias = dataclasses.replace(
                alias, live_migratable="true" if flag in _TRUE else "false")
        previous = aliases.get(name)
        if previous is not None:
            if previous.numa_policy != policy:
                raise PciInvalidAlias("NUMA policy mismatch for alias '%s'" % name)
            if previous.device_type != alias.device_type:
                raise PciInvalidAlias("Device type mismatch for alias '%s'" % name)
            raise PciInvalidAlias(
                "The PCI alias(es) %s have multiple specs but Placement "
                "supports only one spec per alias." % name)
        aliases[name] = alias
    return aliases
