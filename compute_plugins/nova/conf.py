"""Where the adapters find our configuration inside a nova service.

nova's ``CONF`` is global and already has a ``[compute]`` group whose
options share names with ours (``cpu_dedicated_set``...), so the plugins
never read nova's ``CONF``: nova's configuration names our configuration
files (``[compute_plugins] config_file``, repeatable) and the adapters load
them into a private ``ConfigOpts``, as every other entry point of this
project does.
"""

from __future__ import annotations

from typing import Any, Optional

from oslo_config import cfg

from compute_plugins import conf as conf_areas

GROUP = "compute_plugins"

NOVA_OPTS = [
    cfg.MultiStrOpt(
        "config_file",
        default=[],
        help="compute-plugins configuration files the nova adapters "
        "(PluginFitFilter, PluginProviderTreeMixin) load into their own "
        "configuration ([compute_plugins] enabled_plugins, [host_state] "
        "connection, each plugin's group). Repeatable; later files win.",
    ),
]


def register_nova_opts(nova_conf: Any) -> None:
    """Register :data:`NOVA_OPTS` on nova's ``CONF`` (once)."""
    if GROUP not in nova_conf or "config_file" not in nova_conf[GROUP]:
        nova_conf.register_opts(NOVA_OPTS, group=GROUP)


def plugin_conf(nova_conf: Optional[Any] = None) -> cfg.ConfigOpts:
    """A private ``ConfigOpts`` loaded from the files nova's configuration
    names (none: the defaults)."""
    if nova_conf is None:
        import nova.conf
        nova_conf = nova.conf.CONF
    register_nova_opts(nova_conf)
    conf = conf_areas.register_all(cfg.ConfigOpts())
    conf([], project="compute-plugins",
         default_config_files=list(nova_conf[GROUP].config_file))
    return conf


class NovaAliases:
    """nova's ``[pci] alias`` read on each request into the plugins'
    configuration (nova's scheduler reads its aliases on every request, so
    an alias added to nova's configuration is known without a restart).

    nova's value, when set, wins over the plugins' own ``[pci] alias``; the
    override changes only when nova's value does (one tuple comparison per
    request).

    :param nova_config: nova's ``CONF``.
    :param conf: the plugins' configuration (``[pci]`` registered on it).
    """

    def __init__(self, nova_config: Any, conf: cfg.ConfigOpts) -> None:
        self.nova_config = nova_config
        self.conf = conf
        self._seen: Optional[tuple[str, ...]] = None
        #: Counts the changes applied: a parse made under an older
        #: generation is stale (another request may have applied the change).
        self.generation = 0

    def refresh(self) -> bool:
        """Apply nova's current value; True when it changed."""
        try:
            value = tuple(self.nova_config.pci.alias or ())
        except (cfg.NoSuchOptError, cfg.NoSuchGroupError, AttributeError):
            return False
        if value == self._seen:
            return False
        self._seen = value
        self.generation += 1
        from compute_plugins.conf import pci as pci_conf
        pci_conf.register_opts(self.conf)
        if value:
            self.conf.set_override("alias", list(value), group="pci")
        else:
            self.conf.clear_override("alias", group="pci")
        return True
