"""The plugin runtime: the loaded plugins and every call into them.

:class:`PluginSet` is what the rest of the framework holds of the plugins
(the :class:`~compute_plugins.runtime.manager.PluginManager`'s ``plugins``): parse
a request, build, encode and decode host states, fit, verify, allocations,
guest XML fragments, descriptions and weights all go through it, with one
isolation policy and one place for timing and logging (:mod:`.calls`): a
plugin that raises or returns garbage is one reason naming it, never an
exception into the scheduler, the agent or nova. :mod:`.search` is the fit
search over the plugins' decisions and alternatives.
"""

from compute_plugins.runtime.calls import PluginFailed
from compute_plugins.runtime.plugin_set import (
    AnyPlugin,
    LoadedPlugin,
    ParsedRequest,
    PluginSet,
    SpecLike,
    as_any,
)
from compute_plugins.runtime.search import FIT_BUDGET, FitResult

__all__ = ["FIT_BUDGET", "AnyPlugin", "FitResult", "LoadedPlugin",
           "ParsedRequest", "PluginFailed", "PluginSet", "SpecLike", "as_any"]
