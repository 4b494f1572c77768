"""Order the hosts that fit: pack or spread, per plugin.

A host's weight is the sum, over the plugins with a state on it, of the
plugin's ``utilization(state)`` (0.0 idle to 1.0 full) times its
multiplier (``[scheduler] weigher_multipliers``, else
``default_weigher_multiplier``): positive packs (fuller hosts first),
negative spreads. Ties go to the host name, so the order is deterministic.

A weight is a pure function of the fitted host's states (and of the
multipliers): it is kept with the fit (:attr:`.fitting.HostFit.weights`),
whose states are those of one host generation, so that a plan on kept
fits weighs each host by a lookup, not by every plugin's ``utilization``
again (a plan weighs hundreds of hosts).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from oslo_config import cfg

from compute_plugins import exception
from compute_plugins.runtime import PluginSet
from compute_plugins.scheduler.fitting import HostFit


def multipliers(conf: cfg.ConfigOpts, plugin_names: Sequence[str]) -> dict[str, float]:
    """Plugin -> multiplier, from ``[scheduler]``.

    :raises ConfigError: a multiplier that is not a number.
    """
    group = conf.scheduler
    given = dict(group.weigher_multipliers or {})
    result = {}
    for name in plugin_names:
        text = given.get(name)
        if text is None:
            result[name] = float(group.default_weigher_multiplier)
            continue
        try:
            result[name] = float(text)
        except ValueError:
            raise exception.ConfigError(
                "[scheduler] weigher_multipliers: %s:%s is not a number"
                % (name, text)) from None
    return result


def host_weight(plugins: PluginSet, fit: HostFit,
                factors: Mapping[str, float]) -> float:
    """The sum of each plugin's multiplier times its ``utilization`` of the
    fitted host's state (computed, never kept: :func:`weigh` keeps it)."""
    weight = 0.0
    for name, state in fit.states.items():
        factor = factors.get(name, 0.0)
        if not factor or state is None:
            continue
        used = plugins.utilization(name, state)
        if used is not None:
            weight += factor * used
    return weight


def weigh(plugins: PluginSet, fits: Sequence[HostFit],
          factors: Mapping[str, float]) -> list[tuple[float, HostFit]]:
    """``(weight, fit)`` of each host, best first; each fit's weight
    computed once per multipliers and plugins (kept with the fit)."""
    key = tuple(sorted(factors.items()))
    weighted = []
    for fit in fits:
        kept = fit.weights.get(key)
        if kept is not None and kept[0] is plugins:
            weight = kept[1]
        else:
            weight = host_weight(plugins, fit, factors)
            fit.weights[key] = (plugins, weight)
        weighted.append((weight, fit))
    return sorted(weighted, key=lambda pair: (-pair[0], pair[1].host))
