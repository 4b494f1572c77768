"""The ``oslo.config.opts`` entry point ``compute_plugins``.

Lists the framework's options and those of every installed resource plugin
(each in the group named after the plugin), so that
``oslo-config-generator --namespace compute_plugins`` documents them all.
"""

from __future__ import annotations

from oslo_config import cfg
from stevedore import extension

from compute_plugins import conf as conf_areas
from compute_plugins.runtime import AnyPlugin
from compute_plugins.runtime.manager import NAMESPACE


def list_opts() -> list[tuple[cfg.OptGroup | str, list[cfg.Opt]]]:
    result: list[tuple[cfg.OptGroup | str, list[cfg.Opt]]] = []
    for module in conf_areas.area_modules():
        result.extend(module.list_opts())
    plugins: extension.ExtensionManager[AnyPlugin] = extension.ExtensionManager(
        NAMESPACE, invoke_on_load=False)
    for ext in sorted(plugins, key=lambda e: e.name):
        result.extend(ext.plugin.list_opts())
    return result
