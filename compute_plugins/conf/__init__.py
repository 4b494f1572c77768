"""oslo.config options, one module per area.

Each area module has ``register_opts(conf)`` and ``list_opts()``. Nothing here
touches a global ``CONF``: callers build their own ``cfg.ConfigOpts()`` and
pass it explicitly (``register_all(conf)``).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from oslo_config import cfg

#: Framework areas, in the order they appear in the sample config.
AREAS = ("plugins", "compute", "libvirt", "placement")


def area_modules() -> list[ModuleType]:
    return [importlib.import_module("compute_plugins.conf." + a) for a in AREAS]


def register_all(conf: cfg.ConfigOpts) -> cfg.ConfigOpts:
    """Register every framework option group on ``conf`` and return it."""
    for module in area_modules():
        module.register_opts(conf)
    return conf
