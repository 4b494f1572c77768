"""Exceptions shared by the framework, its plugins and its command line.

One class per failure a caller handles differently; each carries the data a
user needs to act on it.
"""

from __future__ import annotations


class ComputePluginsError(Exception):
    """Base class of every error this project raises on purpose."""


class ConfigError(ComputePluginsError):
    """A configuration value is wrong (names the option and the rule)."""


class InputError(ComputePluginsError):
    """An input is unusable: a file, a host fact or a value a user gave.

    The command line exits 2 (bad usage), as for a configuration error; the
    message names the file, key or value and the rule it breaks.
    """


class UnknownPluginError(ConfigError):
    """``[compute_plugins] enabled_plugins`` names a plugin that is not installed."""

    def __init__(self, unknown: list[str], available: list[str]) -> None:
        self.unknown = sorted(unknown)
        self.available = sorted(available)
        super().__init__(
            "unknown plugin(s) in [compute_plugins] enabled_plugins: %s; "
            "available plugins: %s"
            % (", ".join(self.unknown), ", ".join(self.available) or "none")
        )


class PluginConflict(ComputePluginsError):
    """Two plugins claim the same provider or resource class on it."""

    def __init__(self, plugin: str, owner: str, what: str) -> None:
        self.plugin = plugin
        self.owner = owner
        self.what = what
        super().__init__(
            "plugin %r refused: %s is owned by plugin %r" % (plugin, what, owner)
        )


class ReshapeNeeded(ComputePluginsError):
    """A plugin must move inventory that has allocations.

    Raised by ``update_provider_tree`` when called without allocations; the
    caller retries with the allocations and sends the result through
    ``POST /reshaper``.
    """
