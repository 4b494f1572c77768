"""Persistent memory namespaces from ``ndctl list -X`` (JSON).

What nova's libvirt driver reads (``_get_vpmems_on_host``): each namespace
with a ``name`` (an unnamed one cannot be configured, and is skipped, as
nova skips it), its DAX character device (``daxregion.devices[0].chardev``
-> ``/dev/<chardev>``), ``size`` and the alignment (``daxregion.align``;
newer ndctl gives it on the namespace only, which is read then, where nova
would fail). A named namespace that is not in devdax mode (no
``daxregion`` device) is skipped with a warning: it cannot back a vPMEM.

Where it comes from: a host snapshot's ``ndctl.json`` (a capture of
``ndctl list -X``), or on a live local host ``ndctl list -X`` itself when
the ``ndctl`` command is installed.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
from collections.abc import Mapping
from typing import Any, Optional

from compute_plugins.host.errors import HostDataError
from compute_plugins.host.model import PMEMNamespace

LOG = logging.getLogger(__name__)

#: A snapshot's capture of ``ndctl list -X``.
NDCTL_JSON = "ndctl.json"
NDCTL_TIMEOUT = 30


def _natural(value: Any, source: str, what: str) -> int:
    """``value`` as a byte count; :raises HostDataError: it is not one."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise HostDataError(source, "%s must be a non-negative integer (bytes; "
                            "capture ndctl list -X without -u), got %r" % (what, value))
    return value


def _namespace(doc: Mapping[str, Any], source: str) -> Optional[PMEMNamespace]:
    """The namespace of one ``ndctl list -X`` object; None when it cannot
    back a vPMEM (no name, not devdax).

    :raises HostDataError: not a namespace (neither ``dev`` nor ``name``:
        another listing, e.g. ``ndctl list -R``), or a name or device that
        is not a string.
    """
    if "dev" not in doc and "name" not in doc:
        raise HostDataError(source, "%s is not a namespace object (no dev, no "
                            "name: capture ndctl list -X)" % _short(doc))
    dev = doc.get("dev", "?")
    if not isinstance(dev, str):
        raise HostDataError(source, "namespace dev must be a string, got %r" % (dev,))
    name = doc.get("name")
    if not name:
        LOG.debug("%s: namespace %s has no name: not usable as a vPMEM", source, dev)
        return None
    if not isinstance(name, str):
        raise HostDataError(source, "namespace %s: name must be a string, got %r"
                            % (dev, name))
    region = doc.get("daxregion")
    if not isinstance(region, Mapping):
        region = {}
    devices = region.get("devices")
    if (not isinstance(devices, list) or not devices or not isinstance(devices[0], Mapping)
            or not devices[0].get("chardev")):
        LOG.warning("%s: namespace %s (%s) has no DAX device (mode %s, devdax "
                    "needed): skipped", source, name, dev, doc.get("mode"))
        return None
    chardev = devices[0]["chardev"]
    if not isinstance(chardev, str) or "/" in chardev:
        raise HostDataError(source, "namespace %s: chardev must be a device name "
                            "(dax0.0), got %r" % (name, chardev))
    what = "namespace %s" % name
    align = region.get("align", doc.get("align"))
    node = doc.get("numa_node")
    return PMEMNamespace(
        name=name, dev=dev, devpath="/dev/" + chardev,
        size=_natural(doc.get("size"), source, what + " size"),
        align=_natural(align, source, what + " align"),
        numa_node=node if isinstance(node, int) and not isinstance(node, bool)
        and node >= 0 else None)


def _short(doc: Any, limit: int = 80) -> str:
    """``doc`` as JSON, cut to ``limit`` characters (for a one-line error)."""
    text = json.dumps(doc, sort_keys=True)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def parse_namespaces(text: str, source: str = NDCTL_JSON) -> tuple[PMEMNamespace, ...]:
    """The named devdax namespaces of ``ndctl list -X`` output ``text``
    (a JSON list, or one object when there is one namespace; empty text:
    none), in the order ndctl lists them.

    :raises HostDataError: not JSON, not namespaces, a size or alignment
        that is not a byte count, or a name given twice (names ``source``).
    """
    if not text.strip():
        return ()
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise HostDataError(source, "not JSON (ndctl list -X output expected): %s"
                            % exc) from None
    docs = [doc] if isinstance(doc, Mapping) else doc
    if not isinstance(docs, list) or not all(isinstance(d, Mapping) for d in docs):
        raise HostDataError(source, "expected a list of namespace objects "
                            "(ndctl list -X)")
    found: dict[str, PMEMNamespace] = {}
    for item in docs:
        namespace = _namespace(item, source)
        if namespace is None:
            continue
        if namespace.name in found:
            raise HostDataError(source, "namespace name %r is given twice (%s, %s)"
                                % (namespace.name, found[namespace.name].dev,
                                   namespace.dev))
        found[namespace.name] = namespace
    return tuple(found.values())


def live_output() -> Optional[str]:
    """``ndctl list -X``'s output on this machine; None when ndctl is not
    installed or fails (logged: a host without persistent memory is the
    rule)."""
    command = shutil.which("ndctl")
    if command is None:
        return None
    try:
        return subprocess.run([command, "list", "-X"], capture_output=True, text=True,
                              timeout=NDCTL_TIMEOUT, check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        LOG.warning("ndctl list -X failed: %s; no persistent memory namespaces", exc)
        return None


def live_namespaces() -> tuple[PMEMNamespace, ...]:
    """The namespaces of :func:`live_output` (none without ndctl)."""
    out = live_output()
    return () if out is None else parse_namespaces(out, "ndctl list -X")
