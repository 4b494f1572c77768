"""The parts of the Placement client that need no Placement."""

from __future__ import annotations

import pytest
from oslo_config import cfg
from oslo_config import fixture as config_fixture

from compute_plugins.conf import placement as placement_conf
from compute_plugins.placement import client as pclient
from compute_plugins.placement import exception as pexc
from compute_plugins.placement import report

U = "0e7d9a4c-6f0e-4e5b-9d0a-5b1f0b9f3f11"


@pytest.mark.parametrize("path, template", [
    ("/", "/"),
    ("/resource_providers?in_tree=%s" % U, "/resource_providers?in_tree"),
    ("/resource_providers/%s/traits" % U, "/resource_providers/{uuid}/traits"),
    ("/resource_classes/CUSTOM_X", "/resource_classes/{name}"),
    ("/traits/CUSTOM_Y", "/traits/{name}"),
    ("/allocations/%s" % U, "/allocations/{uuid}"),
    ("/resource_providers?name=a&in_tree=b", "/resource_providers?in_tree&name"),
])
def test_path_template(path, template):
    assert pclient.path_template(path) == template


@pytest.mark.parametrize("code, cls", [
    ("placement.concurrent_update", pexc.GenerationConflict),
    ("placement.inventory.inuse", pexc.InventoryInUse),
    ("placement.duplicate_name", pexc.DuplicateName),
    ("placement.resource_provider.inuse", pexc.ProviderInUse),
    ("placement.undefined_code", pexc.Conflict),
])
def test_error_codes_become_typed_errors(code, cls):
    body = {"errors": [{"status": 409, "code": code, "title": "Conflict",
                        "detail": "There was a conflict.\n\n  gen 3 != 2 ",
                        "request_id": "req-1"}]}
    err = pexc.from_response("PUT", "/resource_providers/%s/traits" % U, 409,
                             body, provider=U, generation=2)
    assert type(err) is cls
    assert (err.provider, err.generation, err.code) == (U, 2, code)
    assert err.detail == "There was a conflict. gen 3 != 2"
    assert err.request_id == "req-1"
    assert "\n" not in str(err) and code in str(err)


def test_error_without_json_body():
    err = pexc.from_response("GET", "/x", 404, None)
    assert type(err) is pexc.NotFound and err.status == 404


def test_normalize_inventory_keeps_the_operators_reserved():
    theirs = {"total": 8, "reserved": 2, "min_unit": 1, "max_unit": 8,
              "step_size": 1, "allocation_ratio": 1.0}
    # left out by the plugin, or handed back unchanged: Placement's stays
    assert report.normalize_inventory({"total": 16}, theirs, theirs)[
        "reserved"] == 2
    assert report.normalize_inventory(
        {"total": 16, "reserved": 0}, {"reserved": 0}, theirs)["reserved"] == 2
    # changed by the plugin: the plugin's
    assert report.normalize_inventory(
        {"total": 16, "reserved": 4}, {"reserved": 0}, theirs)["reserved"] == 4
    full = report.normalize_inventory({"total": 16})
    assert full == {"total": 16, "reserved": 0, "min_unit": 1,
                    "max_unit": 2147483647, "step_size": 1,
                    "allocation_ratio": 1.0}


def test_three_way_merge_of_traits():
    base = {"A", "B", "OP1"}
    ours = {"A", "C", "OP1"}       # plugin removed B, added C
    theirs = {"A", "B", "OP1", "OP2"}  # operator added OP2 meanwhile
    assert report._merge_set(base, ours, theirs) == {"A", "C", "OP1", "OP2"}
    assert report._merge_set(None, ours, theirs) == ours


def test_placement_options_register_and_list():
    conf = config_fixture.Config(cfg.ConfigOpts())
    conf.setUp()
    try:
        placement_conf.register_opts(conf.conf)
        placement_conf.register_opts(conf.conf)  # idempotent
        conf.conf([])
        group = conf.conf.placement
        assert group.service_type == "placement"
        assert group.valid_interfaces == ["internal", "public"]
        assert group.auth_type is None and group.version is None
        listed = {o.dest for _, opts in placement_conf.list_opts()
                  for o in opts}
        assert {"auth_type", "auth_url", "endpoint_override", "cafile",
                "embedded_state_dir"} <= listed
        assert "version" not in listed
    finally:
        conf.cleanUp()
