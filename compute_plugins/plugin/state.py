"""The types of a plugin's decision on one host: its host state and its
failures.

A plugin's host state is a frozen dataclass subclassing :class:`PluginState`
(the plugin names it in its ``state_type``), carried as JSON with the
plugin's data version
(:meth:`compute_plugins.runtime.PluginSet.encode_state` /
:meth:`~compute_plugins.runtime.PluginSet.decode_state`). The decision
itself, every plugin's ``fit`` on a host and ``verify`` of a recorded one,
is the runtime's (:meth:`compute_plugins.runtime.PluginSet.fit`,
:meth:`~compute_plugins.runtime.PluginSet.verify`).
"""

from __future__ import annotations

from compute_plugins import exception

__all__ = ["AssignmentConflict", "PluginState", "StateFormatError"]


class PluginState:
    """Base class of a plugin's host state (subclass as a frozen dataclass;
    the plugin names it in its ``state_type``)."""


class AssignmentConflict(exception.ComputePluginsError):
    """Assignments in force cannot all hold on the host: a unit (CPU, page,
    mdev, VF) given twice, or one the host does not have.

    :param plugin: the plugin whose state could not be built.
    :param reason: what is wrong, naming the unit.
    """

    def __init__(self, plugin: str, reason: str) -> None:
        self.plugin = plugin
        self.reason = reason
        super().__init__("%s: %s" % (plugin, reason))


class StateFormatError(exception.ComputePluginsError):
    """A serialised host state cannot be read (shape, plugin, version)."""
