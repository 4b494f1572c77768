"""oslo.config options, one module per area.

Each area module has ``register_opts(conf)`` and ``list_opts()``. Nothing here
touches a global ``CONF``: callers build their own ``cfg.ConfigOpts()`` and
pass it explicitly (``register_all(conf)``).
"""

from __future__ import annotations

import importlib
import math
import weakref
from collections.abc import Sequence
from types import ModuleType
from typing import Any

from oslo_config import cfg, types

from compute_plugins.util import urls

#: Framework areas, in the order they appear in the sample config.
AREAS = ("plugins", "compute", "libvirt", "placement", "pci", "host_state",
         "scheduler")


class FiniteFloat(types.Float):
    """A float option that refuses ``nan`` and ``inf`` (``min``/``max`` do not)."""

    def __call__(self, value: object) -> float:
        parsed = super().__call__(value)
        if parsed is None:
            # types.Float turns an empty value into None; a ratio has no
            # "unset", and float(None) was a TypeError (a traceback).
            raise ValueError("Should be a finite number, got %r" % value)
        number = float(parsed)
        if not math.isfinite(number):
            raise ValueError("Should be a finite number, got %r" % value)
        return number


class FiniteFloatOpt(cfg.Opt):
    """``cfg.FloatOpt`` that refuses ``nan``, ``inf`` and an empty value.

    Every float option of the framework and of the plugins is one of these:
    oslo.config's ``FloatOpt`` accepts ``nan`` and ``inf`` (``min`` does not
    stop them: ``nan < 0`` is false), and a timeout of ``inf`` or a
    multiplier of ``nan`` is never what an operator meant. A bad value
    fails when the command starts (``check_values``), by group and option.
    """

    def __init__(self, name: str, min: float | None = None,
                 max: float | None = None, **kwargs: Any) -> None:
        super().__init__(name, type=FiniteFloat(min=min, max=max), **kwargs)


class DatabaseURL(types.String):
    """An SQLAlchemy URL of a database the project runs on, its driver
    installed (:func:`compute_plugins.util.urls.check_database_url`):
    ``nonsense`` or ``postgresql+nodriver://`` fails when the command
    starts, naming the option, instead of as a driver's traceback later.
    The message masks the password."""

    def __call__(self, value: object) -> str:
        text = str(super().__call__(value))
        if text:
            urls.check_database_url(text)
        return text


def database_url_opt(name: str, help: str) -> cfg.Opt:
    """A secret option holding a :class:`DatabaseURL` (no default)."""
    return cfg.Opt(name, type=DatabaseURL(), secret=True, help=help)


#: Placement's largest allocation ratio: ``placement.db.constants.
#: SQL_SP_FLOAT_MAX``, the maximum of its inventory schema (the column is a
#: single-precision float). A larger ratio is a 400 on every inventory PUT.
MAX_ALLOCATION_RATIO = 3.40282e38


def ratio_opt(name: str, default: float, help: str) -> cfg.Opt:
    """An allocation ratio: a finite float from 0 to Placement's maximum
    (:data:`MAX_ALLOCATION_RATIO`), checked when the service starts."""
    return FiniteFloatOpt(name, min=0.0, max=MAX_ALLOCATION_RATIO,
                          default=default, help=help)


def register_group_opts(
    conf: cfg.ConfigOpts, group: cfg.OptGroup, opts: Sequence[cfg.Opt]
) -> None:
    """Register ``opts`` in a private copy of ``group`` on ``conf``.

    NOTE: ``ConfigOpts.register_group`` copies an OptGroup shallowly, so two
    ConfigOpts registered with one module-level OptGroup share its options'
    state: an override set on one shows on the other. A fresh group per
    ConfigOpts keeps them apart.
    """
    if group.name not in conf:
        conf.register_group(cfg.OptGroup(group.name, title=group.title, help=group.help))
    conf.register_opts(opts, group=group.name)


def area_modules() -> list[ModuleType]:
    return [importlib.import_module("compute_plugins.conf." + a) for a in AREAS]


#: The ConfigOpts :func:`register_all` registered everything on (by id;
#: an entry goes with its ConfigOpts).
_REGISTERED: weakref.WeakValueDictionary[int, cfg.ConfigOpts] = weakref.WeakValueDictionary()


def register_all(conf: cfg.ConfigOpts) -> cfg.ConfigOpts:
    """Register every framework option group on ``conf`` and return it.

    Once per ``conf``: the plugin manager and each plugin call it on the
    same one (six times per manager), and registering the same options
    again changes nothing but costs oslo.config its checks (about 40 ms per
    manager: most of the start of each of ``bench.scale``'s 10,000
    simulated agents)."""
    if _REGISTERED.get(id(conf)) is conf:
        return conf
    for module in area_modules():
        module.register_opts(conf)
    _REGISTERED[id(conf)] = conf
    return conf
