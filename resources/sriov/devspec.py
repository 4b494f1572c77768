"""nova's ``[pci] device_spec``: which PCI devices a guest may be given.

Each value of the option is a JSON object, or a list of them (nova's
``nova.pci.devspec``, same syntax, same rules, same messages). A device
matches a spec when every field the spec gives matches (a missing field
matches anything):

- ``vendor_id`` / ``product_id``: hex, at most ``ffff``, or ``*``;
- ``address``: a string in glob style (``[[[domain:]bus:]slot][.func]``,
  each part hex or ``*``, a part left out is ``*``), or an object of
  regular expressions (``domain``, ``bus``, ``slot``, ``function``, each
  matched at the start of the device's part, lower-case hex);
- ``devname``: a network interface name (not together with ``address``).

A spec naming one address (every part given in hex), or a ``devname``, that
is an SR-IOV PF on the host also matches the PF's VFs (nova: "the PCI
address of a PF in the device_spec matches any of its VFs"). The first
spec a device matches gives its *tags*: ``physical_network``,
``remote_managed``, ``resource_class``, ``traits``, ``managed``,
``live_migratable``, ``one_time_use``, ``trusted``; the boolean ones are
normalised to ``"true"``/``"false"`` and a value that is not boolean is an
error. A spec saying ``remote_managed`` matches only a device with a card
serial number in its PCI VPD (:func:`card_serial_number`: the device's, a
VF's PF's when the VF has none), as nova's ``_ensure_remote_managed_dev_vpd_serial``:
a networking backend identifies the card that programs the VF by it; a
``remote_managed`` spec naming a PF is an error.

:func:`load` parses the option; :meth:`DeviceSpec.match` matches one
device of a :class:`~compute_plugins.host.model.HostInfo`. Bad values raise
:class:`PciConfigInvalidSpec` with nova's reason and the entry.
"""

from __future__ import annotations

import dataclasses
import re
import string
from collections.abc import Mapping, Sequence
from typing import Any, Optional, Union

from oslo_config import cfg

from compute_plugins.conf import pci as pci_conf
from compute_plugins.host.model import HostInfo, PCIDevice
from compute_plugins.plugin.devices import InvalidOptionValue
from compute_plugins.util import jsonload

OPTION = "[pci] device_spec"
ANY = "*"
REGEX_ANY = ".*"
MAX_VENDOR_ID = 0xFFFF
MAX_PRODUCT_ID = 0xFFFF
MAX_DOMAIN = 0xFFFF
MAX_BUS = 0xFF
MAX_SLOT = 0x1F
MAX_FUNC = 0x7
#: Tags nova normalises to "true"/"false" (``_normalize_device_spec_tag``).
BOOL_TAGS = ("managed", "live_migratable", "one_time_use")
_TRUE = ("1", "t", "true", "on", "y", "yes")
_FALSE = ("0", "f", "false", "off", "n", "no")


class PciConfigInvalidSpec(InvalidOptionValue):
    """A ``[pci] device_spec`` entry is wrong (nova's reason)."""

    def __init__(self, entry: str, reason: str) -> None:
        super().__init__(OPTION, entry, reason)
        self.args = ("Invalid [pci]device_spec config: %s (entry %s)"
                     % (reason, entry),)

    def __str__(self) -> str:
        return str(self.args[0])


class PlacementPciError(InvalidOptionValue):
    """The device_spec cannot be reported to Placement as nova does (nova's
    ``PlacementPciException`` message; ``prefixed`` False: the message of
    one of its subclasses, which have their own whole text)."""

    def __init__(self, value: str, reason: str, prefixed: bool = True) -> None:
        super().__init__(OPTION, value, reason)
        self.args = ("Failed to gather or report PCI resources to Placement: "
                     "%s" % reason if prefixed else reason,)

    def __str__(self) -> str:
        return str(self.args[0])


def _bool(value: Optional[str], strict: bool = False) -> bool:
    """oslo's ``bool_from_string`` (nova's parsing of boolean tags)."""
    text = str(value).strip().lower() if value is not None else ""
    if text in _TRUE:
        return True
    if strict and text not in _FALSE:
        raise ValueError("Unrecognized value '%s', acceptable values are: %s"
                         % (value, ", ".join("'%s'" % v for v in
                                             sorted(_TRUE + _FALSE))))
    return False


#: A device address split as nova compares it: domain, bus, slot, function
#: in lower-case hex of their widths (``0000``, ``81``, ``00``, ``1``).
Parts = tuple[str, str, str, str]


def address_parts(address: str) -> Parts:
    """``0000:81:00.1`` -> ``("0000", "81", "00", "1")``."""
    dbs, _sep, func = address.partition(".")
    domain, bus, slot = dbs.split(":")
    return (domain.lower(), bus.lower(), slot.lower(), func.lower())


def _hex_field(entry: str, prop: str, value: str, maximum: int, width: int) -> str:
    if value == ANY:
        return value
    try:
        number = int(value, 16)
    except ValueError:
        raise PciConfigInvalidSpec(
            entry, "property %s ('%s') does not parse as a hex number."
            % (prop, value)) from None
    if number > maximum:
        raise PciConfigInvalidSpec(
            entry, "property %s (%s) is greater than the maximum allowable "
            "value (%X)." % (prop, value, maximum))
    return "%0*x" % (width, number)


def _wrong_address(entry: str, address: object) -> PciConfigInvalidSpec:
    return PciConfigInvalidSpec(
        entry, "The PCI address %s has an incorrect format." % (address,))


@dataclasses.dataclass(frozen=True)
class GlobAddress:
    """An ``address`` string: each part hex or ``*``."""

    domain: str = ANY
    bus: str = ANY
    slot: str = ANY
    func: str = ANY

    @classmethod
    def parse(cls, entry: str, text: str) -> GlobAddress:
        dbs, _sep, func = text.partition(".")
        fields = dbs.split(":") if dbs else []
        if len(fields) > 3:
            raise _wrong_address(entry, text)
        padded = [ANY] * (3 - len(fields)) + fields
        domain, bus, slot = (f.strip() or ANY for f in padded)
        func = func.strip() or ANY
        return cls(_hex_field(entry, "domain", domain, MAX_DOMAIN, 4),
                   _hex_field(entry, "bus", bus, MAX_BUS, 2),
                   _hex_field(entry, "slot", slot, MAX_SLOT, 2),
                   _hex_field(entry, "func", func, MAX_FUNC, 1))

    def single(self) -> Optional[str]:
        """The one address this names (every part given), else None."""
        parts = (self.domain, self.bus, self.slot, self.func)
        if any(p == ANY or not all(c in string.hexdigits for c in p) for p in parts):
            return None
        return "%s:%s:%s.%s" % parts

    def match(self, parts: Parts) -> bool:
        return all(mine in (ANY, theirs) for mine, theirs in
                   zip((self.domain, self.bus, self.slot, self.func), parts,
                       strict=True))


@dataclasses.dataclass(frozen=True)
class RegexAddress:
    """An ``address`` object: a regular expression per part."""

    patterns: tuple[re.Pattern[str], re.Pattern[str], re.Pattern[str], re.Pattern[str]]

    @classmethod
    def parse(cls, entry: str, value: Mapping[str, Any]) -> RegexAddress:
        parts = [value.get(key, REGEX_ANY)
                 for key in ("domain", "bus", "slot", "function")]
        if not all(isinstance(p, str) for p in parts):
            # NOTE: nova fails with a traceback here
            raise _wrong_address(entry, dict(value))
        try:
            compiled = tuple(re.compile(p) for p in parts)
        except re.error:
            raise _wrong_address(entry, dict(value)) from None
        return cls(compiled)  # type: ignore[arg-type]

    def single(self) -> Optional[str]:
        parts = [p.pattern for p in self.patterns]
        if all(p and all(c in string.hexdigits for c in p) for p in parts):
            return "%s:%s:%s.%s" % tuple(parts)
        return None

    def match(self, parts: Parts) -> bool:
        return all(bool(p.match(part)) for p, part in
                   zip(self.patterns, parts, strict=True))


Address = Union[GlobAddress, RegexAddress]


@dataclasses.dataclass(frozen=True)
class DeviceSpec:
    """One ``device_spec`` object: its matchers and tags."""

    entry: str
    vendor_id: str = ANY
    product_id: str = ANY
    address: Optional[Address] = None
    devname: Optional[str] = None
    #: Every other key, the boolean ones as ``"true"``/``"false"``.
    tags: tuple[tuple[str, str], ...] = ()
    #: The object as given (Python's text of it, as nova's messages show it).
    source: str = ""

    def tag(self, name: str) -> Optional[str]:
        for key, value in self.tags:
            if key == name:
                return value
        return None

    @property
    def physical_network(self) -> Optional[str]:
        return self.tag("physical_network")

    @property
    def remote_managed(self) -> bool:
        return _bool(self.tag("remote_managed"))

    @property
    def resource_class(self) -> Optional[str]:
        return self.tag("resource_class")

    @property
    def traits(self) -> str:
        return self.tag("traits") or ""

    @property
    def managed(self) -> Optional[str]:
        """``"true"``/``"false"``, None when the spec does not say."""
        return self.tag("managed")

    @property
    def live_migratable(self) -> bool:
        return _bool(self.tag("live_migratable"))

    @property
    def one_time_use(self) -> Optional[str]:
        """``"true"``/``"false"``, None when the spec does not say."""
        return self.tag("one_time_use")

    def _pf_address(self, host: HostInfo) -> Optional[str]:
        """The PF whose VFs this spec matches too (see the module)."""
        if self.devname is not None:
            named = _by_netdev(host, self.devname)
            return named.address if named is not None and named.is_pf else None
        if self.address is None:
            return None
        single = self.address.single()
        if single is None:
            return None
        device = host.pci_device(single)
        return single if device is not None and device.is_pf else None

    def match(self, device: PCIDevice, host: HostInfo) -> bool:
        """Whether ``device`` of ``host`` is one this spec names."""
        if self.vendor_id not in (ANY, (device.vendor_id or "").lower()):
            return False
        if self.product_id not in (ANY, (device.product_id or "").lower()):
            return False
        if self.remote_managed and not card_serial_number(device, host):
            return False
        pf = self._pf_address(host)
        if pf is not None and device.phys_function == pf:
            return True
        if self.devname is not None:
            named = _by_netdev(host, self.devname)
            return named is not None and named.address == device.address
        assert self.address is not None
        return self.address.match(address_parts(device.address))


def card_serial_number(device: PCIDevice, host: HostInfo) -> Optional[str]:
    """The card serial number nova reads for ``device`` (libvirt's
    ``_get_vpd_details``): its own VPD's, else, for a VF, its PF's (whether
    a VF exposes its VPD is a firmware setting); None when neither has one."""
    if device.card_serial_number:
        return device.card_serial_number
    if device.phys_function is None:
        return None
    pf = host.pci_device(device.phys_function)
    return pf.card_serial_number or None if pf is not None else None


def _by_netdev(host: HostInfo, name: str) -> Optional[PCIDevice]:
    for device in host.pci_devices:
        if name in device.netdevs:
            return device
    return None


def parse_spec(entry: str, value: Mapping[str, Any],
               report_in_placement: bool = False) -> DeviceSpec:
    """One ``device_spec`` object (nova's ``PciDeviceSpec``);
    ``one_time_use`` true needs ``report_in_placement`` (nova)."""
    source = repr(dict(value))
    tags = dict(value)
    vendor = str(tags.pop("vendor_id", ANY)).strip()
    product = str(tags.pop("product_id", ANY)).strip()
    devname = tags.pop("devname", None)
    address = tags.pop("address", None)
    vendor = _hex_field(entry, "vendor_id", vendor, MAX_VENDOR_ID, 4)
    product = _hex_field(entry, "product_id", product, MAX_PRODUCT_ID, 4)
    if address and devname:
        raise PciConfigInvalidSpec(
            entry, "Invalid PCI Whitelist: The PCI whitelist can specify "
            "devname or address, but not both")
    matcher: Optional[Address] = None
    if not devname:
        if address is None or address == "":
            matcher = GlobAddress()
        elif isinstance(address, str):
            matcher = GlobAddress.parse(entry, address)
        elif isinstance(address, dict):
            matcher = RegexAddress.parse(entry, address)
        else:
            raise _wrong_address(entry, address)
    for tag in BOOL_TAGS:
        if tags.get(tag) is not None:
            try:
                tags[tag] = "true" if _bool(tags[tag], strict=True) else "false"
            except ValueError as err:
                raise PciConfigInvalidSpec(
                    entry, "Cannot parse tag '%s': %s" % (tag, err)) from None
    if tags.get("one_time_use") == "true" and not report_in_placement:
        raise PciConfigInvalidSpec(
            entry, "one_time_use=true requires pci.report_in_placement to be "
            "enabled")
    return DeviceSpec(entry=entry, vendor_id=vendor, product_id=product,
                      address=matcher, devname=str(devname) if devname else None,
                      tags=tuple(sorted((str(k), str(v))
                                        for k, v in tags.items() if v is not None)),
                      source=source)


def parse(values: Sequence[str],
          report_in_placement: bool = False) -> tuple[DeviceSpec, ...]:
    """Every spec of the option's ``values``, in order (nova's ``Whitelist``;
    ``report_in_placement``: nova's option of that name).

    :raises PciConfigInvalidSpec: not JSON, not an object or a list of
        objects, or a spec nova refuses (the reason names the key and value).
    """
    specs: list[DeviceSpec] = []
    for text in values:
        try:
            value = jsonload.loads(text)
        except ValueError:
            raise PciConfigInvalidSpec(text, "Invalid entry: '%s'" % text) from None
        if isinstance(value, dict):
            value = [value]
        elif not isinstance(value, list):
            raise PciConfigInvalidSpec(
                text, "Invalid entry: '%s'; Expecting list or dict" % text)
        for item in value:
            if not isinstance(item, dict):
                raise PciConfigInvalidSpec(
                    text, "Invalid entry: '%s'; Expecting dict" % (item,))
            specs.append(parse_spec(text, item, report_in_placement))
    return tuple(specs)


def check_host(specs: Sequence[DeviceSpec], host: HostInfo) -> None:
    """nova's checks that need the host: a ``remote_managed`` spec whose
    ``devname`` is not on the host, or that names a PF.

    :raises PciConfigInvalidSpec: such a spec.
    """
    for spec in specs:
        if not spec.remote_managed:
            continue
        if spec.devname is not None and _by_netdev(host, spec.devname) is None:
            raise PciConfigInvalidSpec(
                spec.entry, 'Invalid PCI Whitelist: A device specified as '
                '"remote_managed" is not actually present on the host')
        pf = spec._pf_address(host)
        device = host.pci_device(pf) if pf is not None else None
        if device is None:
            continue
        # NOTE: nova's checks, the VF's ids read from the PF's first VF
        vf = next((d for d in map(host.pci_device, device.virt_functions)
                   if d is not None), None)
        pf_vendor = (device.vendor_id or "").lower()
        vf_product = (vf.product_id or "").lower() if vf is not None else None
        vendor_ok = spec.vendor_id in (pf_vendor, ANY)
        if spec.product_id == vf_product and vendor_ok:
            continue
        if spec.product_id in ((device.product_id or "").lower(), ANY) and vendor_ok:
            raise PciConfigInvalidSpec(
                spec.entry, 'Invalid PCI Whitelist: PFs must not have the '
                '"remote_managed"tag, device address: %s' % pf)
        raise PciConfigInvalidSpec(
            spec.entry, "the specified VF vendor ID %s and product ID %s do "
            "not match the expected VF IDs based on the corresponding PF "
            "identified by PCI address %s" % (spec.vendor_id, spec.product_id, pf))


def check_placement(specs: Sequence[DeviceSpec]) -> None:
    """nova's refusal of ``devname`` with ``[pci] report_in_placement``
    (``ensure_no_dev_spec_with_devname``).

    :raises PlacementPciError: a spec naming a ``devname``.
    """
    for spec in specs:
        if spec.devname is not None:
            raise PlacementPciError(
                spec.entry, "Invalid [pci]device_spec configuration. PCI "
                "Placement reporting does not support 'devname' based device "
                "specification but we got %s. Please use PCI address in the "
                "configuration instead." % spec.source)


def load(conf: cfg.ConfigOpts) -> tuple[DeviceSpec, ...]:
    """``[pci] device_spec`` of ``conf`` (registered if needed), parsed,
    with nova's checks of ``[pci] report_in_placement``."""
    pci_conf.register_opts(conf)
    in_placement = bool(conf.pci.report_in_placement)
    specs = parse(conf.pci.device_spec, in_placement)
    if in_placement:
        check_placement(specs)
    return specs


def first_match(specs: Sequence[DeviceSpec], device: PCIDevice,
                host: HostInfo) -> Optional[DeviceSpec]:
    """The first spec naming ``device`` (its tags are the device's)."""
    for spec in specs:
        if spec.match(device, host):
            return spec
    return None
