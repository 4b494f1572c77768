"""The disk plugin's ephemeral encryption: nova's ephemeral_encryption_filter
traits on the root, and the check on the host state."""

from __future__ import annotations

import pytest

from compute_plugins.exception import ConfigError
from compute_plugins.plugin.contract import Rejection
from compute_plugins.request.groups import KIND_ROOT
from compute_plugins.request.inputs import RequestInput
from resources.disk import DiskAssignment, DiskPlugin
from tests.unit.resources.helpers import NODE, DiskInfo, host, manager, parse, state_of, update

ENC = {"hw:ephemeral_encryption": "true"}


def test_no_format_configured_no_trait_as_nova_34(conf):
    tree = update(manager(conf, ["disk"]), host(disk=DiskInfo(total_gb=100, free_gb=50)))
    assert not {t for t in tree.data(NODE).traits if "EPHEMERAL" in t}


def test_formats_become_root_traits(conf):
    conf.set_override("ephemeral_encryption_formats", ["luks", "plain"], "disk")
    tree = update(manager(conf, ["disk"]), host(disk=DiskInfo(total_gb=100, free_gb=50)))
    assert tree.data(NODE).traits >= {"COMPUTE_EPHEMERAL_ENCRYPTION",
                                      "COMPUTE_EPHEMERAL_ENCRYPTION_LUKS",
                                      "COMPUTE_EPHEMERAL_ENCRYPTION_PLAIN"}


def test_an_unknown_format_is_refused_at_start(conf):
    with pytest.raises((ConfigError, ValueError)):
        conf.set_override("ephemeral_encryption_formats", ["rot13"], "disk")
        DiskPlugin(conf).discover(host())


@pytest.mark.parametrize("specs, image, traits", [
    (ENC, None, {"COMPUTE_EPHEMERAL_ENCRYPTION"}),
    ({**ENC, "hw:ephemeral_encryption_format": "luks"}, None,
     {"COMPUTE_EPHEMERAL_ENCRYPTION", "COMPUTE_EPHEMERAL_ENCRYPTION_LUKS"}),
    ({}, {"hw_ephemeral_encryption": True, "hw_ephemeral_encryption_format": "luksv2"},
     {"COMPUTE_EPHEMERAL_ENCRYPTION", "COMPUTE_EPHEMERAL_ENCRYPTION_LUKSV2"}),
    ({"hw:ephemeral_encryption_format": "luks"}, None, None),
])
def test_root_traits_as_novas_filter(conf, specs, image, traits):
    plugin = DiskPlugin(conf)
    request = parse(plugin, specs, image=image, root_gb=10)
    roots = [g for g in plugin.request_groups(request) if g.kind == KIND_ROOT]
    assert (roots[0].required_traits if roots else None) == traits


def test_conflicts_in_novas_words(conf):
    ri = RequestInput.from_dicts(
        {"name": "f", "vcpus": 1, "memory_mb": 512, "root_gb": 1,
         "extra_specs": {"hw:ephemeral_encryption": "true",
                         "hw:ephemeral_encryption_format": "luks"}},
        {"name": "img", "properties": {"hw_ephemeral_encryption": False,
                                       "hw_ephemeral_encryption_format": "plain"}}
    ).for_plugin("disk")
    DiskPlugin(conf).parse_request(ri)
    rules = {p.key: p.rule for p in ri.problems}
    assert "conflicting with image img" in rules["hw_ephemeral_encryption"]
    assert "conflicting with image img" in rules["hw_ephemeral_encryption_format"]


def test_fit_and_verify_check_the_host_supports_the_format(conf):
    plugin = DiskPlugin(conf)
    info = host(disk=DiskInfo(total_gb=100, free_gb=50))
    request = parse(plugin, {**ENC, "hw:ephemeral_encryption_format": "luks"}, root_gb=10)
    plain_host = state_of(plugin, plugin.discover(info))
    why = plugin.fit(plain_host, request, None, {})
    assert isinstance(why, Rejection)
    assert "ephemeral encryption in luks; this host supports none" in why.reason
    conf.set_override("ephemeral_encryption_formats", ["luks"], "disk")
    luks_host = state_of(plugin, plugin.discover(info))
    decided = plugin.fit(luks_host, request, None, {})
    assert isinstance(decided, DiskAssignment)
    assert plugin.verify(plain_host, request, decided) is not None
    # boot from volume with encryption: nothing to allocate, still checked
    bfv = parse(plugin, {**ENC, "resources:DISK_GB": "0"}, root_gb=10)
    assert plugin.fit(luks_host, bfv, None, {}) is None
    assert isinstance(plugin.fit(plain_host, bfv, None, {}), Rejection)


def test_formats_without_encryption_are_not_compared_as_nova(conf):
    # nova's _update_ephemeral_encryption_bdms reads the format only once
    # hw:ephemeral_encryption asks for encryption
    ri = RequestInput.from_dicts(
        {"name": "f", "vcpus": 1, "memory_mb": 512, "root_gb": 1,
         "extra_specs": {"hw:ephemeral_encryption_format": "luks"}},
        {"name": "img", "properties": {"hw_ephemeral_encryption_format": "plain"}}
    ).for_plugin("disk")
    request = DiskPlugin(conf).parse_request(ri)
    assert ri.problems == () and not request.ephemeral_encryption
