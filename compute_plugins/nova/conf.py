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
