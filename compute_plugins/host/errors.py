"""Errors of host discovery.

Every failure to learn a host's facts is a :class:`HostDataError`, so a caller
that only wants "discovery failed, say why" catches one class. The message
always names where the data came from (a file, a libvirt URI, a device) and
what was missing or wrong; no bare ``KeyError``/``ValueError`` escapes.
"""

from __future__ import annotations

from compute_plugins.exception import ComputePluginsError, InputError


class HostDataError(ComputePluginsError):
    """Host data is missing, unreadable or malformed.

    :param source: where the data came from: a file path, a libvirt URI or
        ``"<uri> nodedev <name>"``.
    :param reason: what is missing or wrong, in words.
    """

    def __init__(self, source: str, reason: str) -> None:
        self.source = str(source)
        self.reason = reason
        super().__init__(f"{self.source}: {reason}")


class HostConnectionError(HostDataError):
    """libvirt could not be reached or refused a call.

    :param uri: the libvirt connection URI.
    :param message: libvirt's own error message.
    """

    def __init__(self, uri: str, message: str) -> None:
        self.uri = uri
        self.libvirt_message = message
        super().__init__(uri, f"libvirt error: {message}")


class HostInputError(HostDataError, InputError):
    """Host data a user gave is unusable (exit 2): a snapshot file, or a
    host name that cannot be a Placement provider name."""
