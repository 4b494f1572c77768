"""The contract every resource plugin implements.

A plugin is a class registered under the ``compute_plugins.resources``
entry-point namespace. The :class:`~compute_plugins.manager.PluginManager`
constructs it with the service's ``ConfigOpts`` (never a global), then, every
periodic:

1. ``discover(host)`` turns the host's facts into the plugin's own immutable
   *view* (only what it needs, already filtered by its configuration);
2. ``provider_contributions(view, nodename)`` says which providers, inventory,
   traits and aggregates the plugin owns in the tree. The manager merges all
   plugins' contributions into the provider tree (nova's
   ``update_provider_tree`` semantics) and keeps what others own.

Both are pure functions of their arguments, so the same code runs on a live
host, on a recorded snapshot and in the scheduler's copy of a host.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Any, ClassVar

from oslo_config import cfg

from compute_plugins import conf as conf_areas
from compute_plugins.contribution import ProviderContribution
from compute_plugins.host.model import HostInfo


class ResourcePlugin(abc.ABC):
    """Base class of resource plugins.

    :param conf: the service's configuration; the plugin's own options are
        registered on it in the group named after the plugin.
    """

    #: Entry-point name; also the name of the plugin's option group.
    name: ClassVar[str]
    #: Version of the plugin's data formats (requests, assignments).
    version: ClassVar[str] = "1.0"

    def __init__(self, conf: cfg.ConfigOpts) -> None:
        # NOTE: plugins read framework options ([compute], [compute_plugins]).
        conf_areas.register_all(conf)
        self.conf = conf
        for group, opts in self.list_opts():
            conf.register_opts(opts, group=group)

    @classmethod
    def options(cls) -> list[cfg.Opt]:
        """The plugin's options, registered in the group ``[<name>]``."""
        return []

    @classmethod
    def list_opts(cls) -> list[tuple[str, list[cfg.Opt]]]:
        """``(group, opts)`` pairs for registration and the sample config."""
        opts = cls.options()
        return [(cls.name, opts)] if opts else []

    @property
    def options_group(self) -> Any:
        """This plugin's option group on ``self.conf``."""
        return self.conf[self.name]

    @abc.abstractmethod
    def discover(self, host: HostInfo) -> Any:
        """Return this plugin's immutable view of ``host``.

        Raise :class:`compute_plugins.exception.ComputePluginsError` with a
        clear message when the host cannot be used (e.g. a configured device
        is missing); the manager then keeps the previous view.
        """

    @abc.abstractmethod
    def provider_contributions(
        self, view: Any, nodename: str
    ) -> Sequence[ProviderContribution]:
        """Return the providers, inventory and traits this plugin owns.

        The compute root is named ``nodename``; contribute to it with a
        :class:`ProviderContribution` whose ``name`` is ``nodename``.
        """

    # -- the request side (RequestSpec); optional for plugins without keys --

    def parse_request(self, request_input: Any) -> Any:
        """Parse this plugin's keys of a request into its typed request.

        Return ``None`` when the request asks nothing of this plugin. Raise
        the request-spec validation error listing every problem otherwise.
        """
        return None

    def request_groups(self, plugin_request: Any) -> list[Any]:
        """This plugin's share of the Placement query for ``plugin_request``."""
        return []
