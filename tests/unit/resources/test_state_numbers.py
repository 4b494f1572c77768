"""Host states with numbers no host has are refused when read back.

The scheduler reads the states hosts publish (JSON, another process):
a NaN, an infinity or a negative allocation ratio there would turn every
capacity the fit computes into nonsense (or an exception), so
:meth:`compute_plugins.runtime.PluginSet.decode_state` refuses it, naming the field.
"""

from __future__ import annotations

import json
import math

import pytest

from compute_plugins.plugin.state import StateFormatError
from resources.disk import DiskPlugin
from resources.numa import NUMAPlugin
from tests.unit.resources.helpers import DiskInfo, cell, decoded, encoded, host, state_of

INFO = host([cell(0, range(4))], disk=DiskInfo(total_gb=100, free_gb=100))


def published(plugin):
    doc = encoded(plugin, state_of(plugin, plugin.discover(INFO), ()))
    # NOTE: Python's json keeps NaN and Infinity (as the scheduler's
    # reader might): the check must not rely on the loader.
    return json.loads(json.dumps(doc))


@pytest.mark.parametrize("plugin_class,field", [
    (NUMAPlugin, "cpu_allocation_ratio"), (NUMAPlugin, "ram_allocation_ratio"),
    (DiskPlugin, "allocation_ratio")])
@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, -1.0])
def test_bad_ratios_are_refused(conf, plugin_class, field, value):
    plugin = plugin_class(conf)
    doc = published(plugin)
    assert decoded(plugin, doc) is not None
    doc["state"][field] = value
    with pytest.raises(StateFormatError) as err:
        decoded(plugin, doc)
    assert "%s.state.%s" % (plugin.name, field) in str(err.value)
    assert str(err.value).count("\n") == 0


@pytest.mark.parametrize("value", [-1, 2 ** 63, 1.5, math.nan])
def test_bad_capacities_are_refused(conf, value):
    plugin = DiskPlugin(conf)
    doc = published(plugin)
    doc["state"]["total_gb"] = value
    with pytest.raises(StateFormatError, match="disk.state.total_gb"):
        decoded(plugin, doc)
