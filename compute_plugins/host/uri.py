"""What a libvirt URI says about where the host is."""

from __future__ import annotations


def is_local_uri(uri: str) -> bool:
    """Whether ``uri`` is a real driver on this machine (not test://).

    Only such hosts may be enriched with, or recorded from, local udev, or
    have their disk measured with a local ``statvfs``: ``test:///...`` is a
    fake host and ``qemu+ssh://other/system`` another machine.
    """
    scheme, sep, rest = uri.partition("://")
    if not sep:
        return False
    driver, _, transport = scheme.partition("+")
    if driver == "test":
        return False
    host = rest.split("/", 1)[0]
    return host in ("", "localhost") and transport in ("", "unix")
