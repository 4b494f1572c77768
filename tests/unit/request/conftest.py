"""Shared fixtures: the real plugins, loaded once per module."""

from __future__ import annotations

import json

import pytest
from oslo_config import cfg

from compute_plugins.conf import pci as pci_conf
from compute_plugins.request.errors import RequestValidationError
from compute_plugins.request.spec import build_request_spec
from compute_plugins.runtime.manager import PluginManager

ALIASES = [
    {"name": "qat", "vendor_id": "8086", "product_id": "0443",
     "device_type": "type-PCI", "numa_policy": "required"},
    {"name": "a16", "device_type": "type-VF", "resource_class": "GPU_VF",
     "traits": "blue, big"},
]


def make_manager(aliases=ALIASES, shared_aggregate=None) -> PluginManager:
    conf = cfg.ConfigOpts()
    conf([], default_config_files=[], default_config_dirs=[])
    manager = PluginManager(conf)
    pci_conf.register_opts(conf)
    conf.set_override("alias", [json.dumps(a) for a in aliases], group="pci")
    if shared_aggregate:
        conf.set_override("shared_storage_aggregate", shared_aggregate, group="disk")
    return manager


@pytest.fixture(scope="session")
def manager() -> PluginManager:
    return make_manager()


def flavor(vcpus=4, memory_mb=4096, **specs):
    return {"name": "f", "vcpus": vcpus, "memory_mb": memory_mb, "root_gb": 0,
            "extra_specs": {k.replace("__", ":"): v for k, v in specs.items()}}


def build(manager, extra_specs=None, vcpus=4, memory_mb=4096, image=None,
          ports=(), **flavor_fields):
    """The spec of a flavor, by a manager's plugins (or a scheduler's set)."""
    plugins = manager.plugins if isinstance(manager, PluginManager) else manager
    doc = {"name": "f", "vcpus": vcpus, "memory_mb": memory_mb,
           "extra_specs": extra_specs or {}, **flavor_fields}
    return build_request_spec(plugins, doc, image=image, ports=ports)


def problems(manager, extra_specs=None, **kwargs):
    """The problems of an invalid request, as ``{(key, rule-substring)}``."""
    with pytest.raises(RequestValidationError) as info:
        build(manager, extra_specs, **kwargs)
    return info.value.problems
