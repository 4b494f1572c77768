"""The parts of the Placement client that need no Placement."""

from __future__ import annotations

import io

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


def test_placements_500_for_a_generation_race_is_a_conflict():
    """Placement answers a race between two API workers on one provider's
    generation with a 500 from some handlers (seen in test_postgresql)."""
    body = {"errors": [{"status": 500, "code": "placement.undefined_code",
                        "title": "Internal Server Error",
                        "detail": "The server has either erred or is incapable of "
                        "performing the requested operation.\n\n Another thread "
                        "concurrently updated the resource provider data. Please "
                        "retry your update  "}]}
    err = pexc.from_response("PUT", "/resource_providers/%s/traits" % U, 500, body,
                             provider=U, generation=4)
    assert type(err) is pexc.GenerationConflict
    other = dict(body, errors=[dict(body["errors"][0], detail="database is down")])
    assert type(pexc.from_response("PUT", "/x", 500, other)) is pexc.PlacementHTTPError


def test_error_without_json_body():
    err = pexc.from_response("GET", "/x", 404, None)
    assert type(err) is pexc.NotFound and err.status == 404


def test_normalize_inventory_keeps_the_operators_reserved():
    theirs = {"total": 8, "reserved": 2, "min_unit": 1, "max_unit": 8,
              "step_size": 1, "allocation_ratio": 1.0}
    # left out by the plugin (not configured): Placement's stays
    assert report.normalize_inventory({"total": 16}, theirs)["reserved"] == 2
    # sent by the plugin (its configuration): the configuration wins, also
    # when it is 0
    assert report.normalize_inventory(
        {"total": 16, "reserved": 4}, theirs)["reserved"] == 4
    assert report.normalize_inventory(
        {"total": 16, "reserved": 0}, theirs)["reserved"] == 0
    # a new inventory without reserved: 0
    assert report.normalize_inventory({"total": 16}, None)["reserved"] == 0
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


class _Resp:
    def __init__(self, status, content, ctype="text/html"):
        self.status_code = status
        self.content = content
        self.text = content.decode()
        self.headers = {"Content-Type": ctype}

    def json(self):
        import json
        return json.loads(self.content)


class _Adapter:
    def __init__(self, resp):
        self.resp = resp

    def request(self, path, method, **kw):
        return self.resp


def _client(resp):
    from compute_plugins.placement import client as pclient
    return pclient.PlacementClient(_Adapter(resp), "http://proxy")


def test_a_2xx_that_is_not_json_is_a_clear_error():
    c = _client(_Resp(200, b"<html>login</html>"))
    with pytest.raises(pexc.PlacementError) as info:
        c._send("GET", "/resource_providers?in_tree=x", None, "1.39")
    assert "not JSON" in str(info.value) and "http://proxy" in str(info.value)
    assert "GET /resource_providers?in_tree" in str(info.value)


def test_a_get_without_body_is_a_clear_error_a_put_is_not():
    c = _client(_Resp(200, b""))
    with pytest.raises(pexc.PlacementError, match="no body"):
        c._send("GET", "/resource_providers", None, "1.39")
    assert _client(_Resp(204, b""))._send("PUT", "/traits/CUSTOM_X", None,
                                          "1.39") is None


@pytest.mark.parametrize("text", ["-1", "nan", "inf", "x"])
def test_report_interval_rejects(text):
    import argparse

    from compute_plugins.cmd import arguments
    with pytest.raises(argparse.ArgumentTypeError):
        arguments.seconds(text)


def test_report_interval_and_serve_port_accept():
    from compute_plugins.cmd import arguments
    from compute_plugins.cmd import placement as placement_cmd
    assert arguments.seconds("0") == 0.0
    assert arguments.seconds("1.5") == 1.5
    assert placement_cmd._port("65535") == 65535
    assert placement_cmd._port("0") == 0


def test_normalize_inventory_clamps_a_kept_reserved_to_a_shrunk_total():
    """Placement refuses reserved > total: an operator's reserved kept
    across a shrink (a device lost VFs) becomes the whole total."""
    out = report.normalize_inventory({"total": 4}, {"total": 8, "reserved": 6})
    assert out["total"] == 4 and out["reserved"] == 4
    # a reserved that fits is kept as is
    assert report.normalize_inventory(
        {"total": 8}, {"total": 16, "reserved": 6})["reserved"] == 6


class _NoPlacement:
    calls = pclient.CallLog()


def _loop(step, interval=0.0, count=None):
    from compute_plugins.cmd import report as report_cmd

    rc = report.ReportClient(_NoPlacement(), refresh_interval=0)
    return report_cmd.Loop(rc, step, interval, count, out=io.StringIO())


def test_signal_handlers_take_no_lock(monkeypatch):
    """A handler runs in the main thread, which may be inside
    Event.wait()/clear() holding the Event's lock: handlers only set plain
    attributes."""
    import signal
    import threading

    def no_lock(*a, **kw):
        raise AssertionError("a signal handler took a lock")

    loop = _loop(lambda: None)
    for cls, name in ((threading.Event, "set"), (threading.Event, "clear"),
                      (threading.Condition, "__enter__")):
        monkeypatch.setattr(cls, name, no_lock)
    old = signal.getsignal(signal.SIGINT)
    try:
        loop.on_sighup(signal.SIGHUP, None)
        loop.on_stop(signal.SIGTERM, None)
        loop.on_stop(signal.SIGINT, None)
    finally:
        signal.signal(signal.SIGINT, old)
    assert loop.reload_requested and loop.stop_requested
    assert loop.client._clear_requested is True


def test_stop_during_the_wait_between_periodics_ends_it():
    """SIGTERM while the loop waits for the next periodic (here a wait that
    would never end by itself) ends the loop: no further periodic, exit 0."""
    import os
    import signal
    import threading

    from compute_plugins.cmd import report as report_cmd

    waiting = threading.Event()

    class Loop(report_cmd.Loop):
        def _wait(self, seconds):
            waiting.set()
            super()._wait(seconds)

    results = []

    def step():
        results.append(report.PeriodicResult(len(results) + 1, {}, []))
        return results[-1]

    def stop_once_waiting():
        waiting.wait()
        os.kill(os.getpid(), signal.SIGTERM)

    def hung(signum, frame):
        raise AssertionError("the loop kept waiting after SIGTERM")

    loop = Loop(report.ReportClient(_NoPlacement(), refresh_interval=0), step,
                interval=1e9, count=None, out=io.StringIO())
    sigs = (signal.SIGHUP, signal.SIGTERM, signal.SIGINT, signal.SIGALRM)
    old = {s: signal.getsignal(s) for s in sigs}
    sender = threading.Thread(target=stop_once_waiting)
    try:
        loop.install_signals()
        # NOTE: a guard, not a measure: a loop that ignores the stop would
        # otherwise hang the test run.
        signal.signal(signal.SIGALRM, hung)
        signal.alarm(60)
        sender.start()
        assert loop.run() == 0
    finally:
        signal.alarm(0)
        for s, handler in old.items():
            signal.signal(s, handler)
        waiting.set()
        sender.join()
    assert [r.periodic for r in results] == [1]
    assert loop.stop_requested


@pytest.mark.parametrize("text", [
    "[compute]\nresource_provider_association_refresh = abc\n",
    "[compute\nbroken = \n",
])
def test_a_bad_reload_keeps_the_old_values(tmp_path, caplog, text):
    import logging

    from compute_plugins.cmd import report as report_cmd
    from compute_plugins.conf import compute as compute_conf

    path = tmp_path / "c.conf"
    path.write_text("[compute]\nresource_provider_association_refresh = 7\n")
    conf = cfg.ConfigOpts()
    compute_conf.register_opts(conf)
    conf([], default_config_files=[str(path)])
    rc = report.ReportClient(_NoPlacement(), refresh_interval=7)
    path.write_text(text)
    caplog.set_level(logging.ERROR)
    assert report_cmd.reload_mutable(conf, rc) is False
    errors = [r.getMessage() for r in caplog.records
              if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "not reloaded" in errors[0], errors
    assert rc.refresh_interval == 7
    assert conf.compute.resource_provider_association_refresh == 7
    path.write_text("[compute]\nresource_provider_association_refresh = 9\n")
    assert report_cmd.reload_mutable(conf, rc) is True
    assert rc.refresh_interval == 9


def test_a_pushed_change_is_polled_at_once():
    """Between periodics the loop polls as soon as the agent is woken (a
    change the store pushed), not at its next poll interval (here never)."""
    import time

    from compute_plugins.cmd import report as report_cmd

    polls = []
    woken = [True]
    give_up = time.monotonic() + 10

    def wake(seconds):
        if woken:
            return woken.pop()
        loop.stop_requested = time.monotonic() > give_up  # NOTE: a guard
        time.sleep(seconds)
        return False

    def poll():
        polls.append(time.monotonic())
        loop.stop_requested = True

    loop = report_cmd.Loop(report.ReportClient(_NoPlacement(), refresh_interval=0),
                           lambda: report.PeriodicResult(1, {}, []), interval=1e9,
                           count=None, out=io.StringIO(), poll=poll, poll_interval=1e9,
                           wake=wake)
    loop.run()
    assert len(polls) == 1 and polls[0] < give_up
