"""``compute-plugins fit`` with the test-only plugins of tests/unit/fit_plugins.py.

In-process ``main()`` (the plugins are not installed as entry points), on
real host snapshots and on libvirt's test driver: the command's own
behaviour (usage replay, JSON shape, exit codes, bad input) independently of
the built-in plugins' fit.

numa4 has 4 host cells of 4 CPUs (0-3, 4-7, 8-11, 12-15) and two PCI
devices on cell 0 (0000:02:00.0, 0000:42:00.0).
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import libvirt
import pytest
from stevedore import extension

from compute_plugins import exception
from compute_plugins.cmd import common
from compute_plugins.cmd.main import main
from compute_plugins.plugin.contract import GuestFragment
from compute_plugins.runtime.manager import PluginManager
from tests.unit import fake_plugins, fit_plugins

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "hosts"
NUMA4 = str(FIXTURES / "numa4")

FIT_KEYS = ["fits", "assignments", "reasons", "guest_xml"]


@pytest.fixture(autouse=True)
def test_plugins(monkeypatch):
    """The command loads slots, gadget and widgets (which decides nothing)."""

    def plugin_manager(conf):
        extensions = [extension.Extension(cls.name, None, cls, cls(conf))
                      for cls in (fit_plugins.Slots, fit_plugins.Gadget,
                                  fake_plugins.Widgets)]
        return PluginManager(conf, extension_manager=(
            extension.ExtensionManager.make_test_instance(extensions)))

    monkeypatch.setattr(common, "plugin_manager", plugin_manager)


def write(tmp_path, name, doc):
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(path)


def flavor(tmp_path, vcpus=3, memory_mb=1024, **extra_specs):
    return write(tmp_path, "flavor.json", {
        "name": "m1.test", "vcpus": vcpus, "memory_mb": memory_mb,
        "extra_specs": {k.replace("_", ":", 1): v for k, v in extra_specs.items()}})


def fit(capsys, *args, code):
    assert main(["fit", *args]) == code
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    return out


def fit_json(capsys, *args, code=0):
    out = fit(capsys, *args, "--format", "json", code=code)
    doc = json.loads(out.out)
    assert list(doc) == FIT_KEYS
    return doc


def test_fits_text(tmp_path, capsys):
    out = fit(capsys, "--host-snapshot", NUMA4,
              "--flavor", flavor(tmp_path, slots_pin="true", gadget_count="1"), code=0)
    assert out.out.splitlines() == [
        "fits on host numa4 (flavor m1.test: 3 vCPUs, 1024 MiB)",
        "  slots: guest node 0 -> host cell 0: CPUs 0-2 -> 0,1,2",
        '  gadget: addresses=["0000:02:00.0"]',
        "guest XML (--format json prints it whole):",
        "  domain m1.test (kvm): 3 vCPUs, 1024 MiB",
        "  vcpupin: 0->0 1->1 2->2",
        "  guest cell 0: vCPUs 0-2, 1024 MiB, memory on host node 0",
        "  devices: hostdev pci 0000:02:00.0",
    ]


def test_fits_json_shape(tmp_path, capsys):
    doc = fit_json(capsys, "--host-snapshot", NUMA4, "--flavor",
                   flavor(tmp_path, slots_pin="true", gadget_count="2"))
    assert doc["fits"] is True
    assert doc["reasons"] == []
    assert doc["assignments"] == {
        "slots": {"host_cell": 0, "pinning": {"0": 0, "1": 1, "2": 2}},
        "gadget": {"addresses": ["0000:02:00.0", "0000:42:00.0"]},
    }
    root = ET.fromstring(doc["guest_xml"])
    assert root.get("type") == "kvm" and root.findtext("name") == "m1.test"
    assert [a.get("bus") for a in root.findall("devices/hostdev/source/address")] \
        == ["0x02", "0x42"]


def test_name_option(tmp_path, capsys):
    doc = fit_json(capsys, "--host-snapshot", NUMA4, "--name", "web-1",
                   "--flavor", flavor(tmp_path, slots_pin="true"))
    assert ET.fromstring(doc["guest_xml"]).findtext("name") == "web-1"


def test_usage_replays_the_printed_assignments_until_full(tmp_path, capsys):
    usage: list = []
    args = ["--host-snapshot", NUMA4, "--flavor", flavor(tmp_path, slots_pin="true")]
    cells = []
    for _ in range(4):
        doc = fit_json(capsys, *args, "--usage", write(tmp_path, "u.json", usage))
        cells.append(doc["assignments"]["slots"]["host_cell"])
        usage.append(doc["assignments"])
    # 3 of each cell's 4 CPUs are taken: a cell per guest.
    assert cells == [0, 1, 2, 3]
    pinned = [cpu for a in usage for cpu in a["slots"]["pinning"].values()]
    assert len(pinned) == len(set(pinned)) == 12
    doc = fit_json(capsys, *args, "--usage", write(tmp_path, "u.json", usage), code=1)
    assert doc == {
        "fits": False, "assignments": {}, "guest_xml": None,
        "reasons": [{"plugin": "slots", "provider": "",
                     "reason": "no host cell has 3 free CPUs (cell 0: 1, cell 1: 1, "
                               "cell 2: 1, cell 3: 1)"}]}
    out = fit(capsys, *args, "--usage", write(tmp_path, "u.json", usage), code=1)
    assert out.out.splitlines() == [
        "does not fit on host numa4 (flavor m1.test: 3 vCPUs, 1024 MiB):",
        "  slots: no host cell has 3 free CPUs (cell 0: 1, cell 1: 1, cell 2: 1, "
        "cell 3: 1)",
    ]


def test_every_plugin_says_why_not(tmp_path, capsys):
    usage = write(tmp_path, "u.json", [{"gadget": {"addresses": ["0000:02:00.0"]}}])
    doc = fit_json(capsys, "--host-snapshot", NUMA4, "--usage", usage, "--flavor",
                   flavor(tmp_path, vcpus=5, slots_pin="true", gadget_count="2"),
                   code=1)
    assert [(r["plugin"], r["provider"]) for r in doc["reasons"]] == [
        ("slots", ""), ("gadget", "cell")]
    assert doc["reasons"][1]["reason"] == "1 free PCI devices, the guest needs 2"
    out = fit(capsys, "--host-snapshot", NUMA4, "--usage", usage, "--flavor",
              flavor(tmp_path, vcpus=5, slots_pin="true", gadget_count="2"), code=1)
    assert "  gadget: 1 free PCI devices, the guest needs 2 [cell]" in out.out


def test_on_the_libvirt_test_driver_the_domain_defines(tmp_path, capsys):
    doc = fit_json(capsys, "--libvirt-uri", "test:///default",
                   "--flavor", flavor(tmp_path, vcpus=8, slots_pin="true"))
    assert doc["assignments"]["slots"]["host_cell"] == 0
    conn = libvirt.open("test:///default")
    try:
        domain = conn.defineXMLFlags(doc["guest_xml"], libvirt.VIR_DOMAIN_DEFINE_VALIDATE)
        try:
            back = ET.fromstring(domain.XMLDesc())
        finally:
            domain.undefine()
    finally:
        conn.close()
    assert back.get("type") == "test"
    assert {p.get("vcpu"): p.get("cpuset") for p in back.findall("cputune/vcpupin")} \
        == {str(k): str(v) for k, v in doc["assignments"]["slots"]["pinning"].items()}


# -- bad input: exit 2, one line on stderr, nothing on stdout --------------------


def bad(capsys, tmp_path, usage, flavor_path=None):
    args = ["--host-snapshot", NUMA4,
            "--flavor", flavor_path or flavor(tmp_path, slots_pin="true")]
    if usage is not None:
        args += ["--usage", write(tmp_path, "u.json", usage)]
    out = fit(capsys, *args, code=2)
    assert out.out == ""
    lines = [line for line in out.err.splitlines() if " WARNING " not in line]
    assert len(lines) == 1, out.err
    assert lines[0].startswith("compute-plugins: error: ")
    return lines[0]


@pytest.mark.parametrize("usage, message", [
    ([{"slots": {"host_cell": 0, "pinning": {"0": 99}}}],
     "does not hold on host numa4: slots: host CPU 99 is not on host cell 0"),
    ([{"slots": {"host_cell": 7, "pinning": {"0": 1}}}],
     "does not hold on host numa4: slots: host cell 7 does not exist"),
    ([{"slots": {"host_cell": 1, "pinning": {"0": 4, "1": 5}}},
      {"slots": {"host_cell": 1, "pinning": {"0": 5}}}],
     "does not hold on host numa4: slots: host CPU 5 is pinned twice"),
    ([{"gadget": {"addresses": ["0000:99:00.0"]}}],
     "gadget: PCI device 0000:99:00.0 is not free on this host"),
    ("[{]", "the usage file .* is not JSON"),
    ({"slots": {}}, "expected a JSON list of assignments objects .* got an object"),
    (["slots"], r"usage\[0\]: expected an object of plugin name -> assignment, "
                "got a string"),
    ([{"nosuch": {}}], r"usage\[0\] names plugin 'nosuch', which is not enabled "
                       r"\(enabled: slots, gadget, widgets\)"),
    ([{"widgets": {}}], r"usage\[0\]: plugin widgets makes no assignments"),
    ([{"slots": {"host_cell": "zero"}}],
     r"usage\[0\].slots.host_cell: expected an integer"),
    ([{"slots": {"host_cell": 0, "pinning": {"a": 1}}}],
     r"usage\[0\].slots.pinning: key 'a' is not an integer"),
    ([{"slots": {"host_cell": 0, "cpus": [1]}}], r"unknown field\(s\) cpus"),
    ([{"fits": True, "assignments": {}, "reasons": [], "guest_xml": None}],
     r"usage\[0\] is a whole fit output; list its 'assignments' object"),
])
def test_bad_usage(tmp_path, capsys, usage, message):
    line = bad(capsys, tmp_path, usage)
    assert re.search(message, line), line


def test_missing_usage_file(tmp_path, capsys):
    out = fit(capsys, "--host-snapshot", NUMA4, "--flavor",
              flavor(tmp_path, slots_pin="true"), "--usage",
              str(tmp_path / "nope.json"), code=2)
    assert "cannot read the usage file" in out.err and "nope.json" in out.err
    assert out.out == ""


def test_bad_flavor_file(tmp_path, capsys):
    line = bad(capsys, tmp_path, None, write(tmp_path, "f.json", "{not json"))
    assert "the flavor file" in line and "is not JSON" in line


def test_invalid_request_is_bad_input_listing_every_problem(tmp_path, capsys):
    out = fit(capsys, "--host-snapshot", NUMA4, "--flavor",
              flavor(tmp_path, slots_pin="maybe", gadget_count="-1"), code=2)
    assert out.out == ""
    assert "compute-plugins: error: invalid request: 2 problem(s)" in out.err
    assert "slots:pin='maybe': must be true" in out.err
    assert "gadget:count='-1': must be a positive integer" in out.err


def test_malformed_guest_fragment_is_a_failure_naming_the_plugin(
        tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(fit_plugins.Gadget, "guest_config", lambda self, r, a: [
        GuestFragment("devices", "<hostdev mode='subsystem'")])
    out = fit(capsys, "--host-snapshot", NUMA4, "--flavor",
              flavor(tmp_path, slots_pin="true", gadget_count="1"), code=1)
    assert out.out == ""
    assert ("compute-plugins: error: guest XML of plugin gadget: fragment 0 "
            "(under <devices>) is not one well-formed XML element") in out.err


def test_a_plugin_that_cannot_discover_the_host_is_a_reason(
        tmp_path, capsys, monkeypatch):
    def broken(self, host):
        # NOTE: the contract's failure (an unexpected exception is logged
        # with its traceback by the manager, on purpose).
        raise exception.ComputePluginsError("no PCI bus")

    monkeypatch.setattr(fit_plugins.Gadget, "discover", broken)
    doc = fit_json(capsys, "--host-snapshot", NUMA4, "--flavor",
                   flavor(tmp_path, slots_pin="true", gadget_count="1"), code=1)
    assert doc["reasons"] == [{
        "plugin": "gadget", "provider": "",
        "reason": "the plugin could not discover the host: no PCI bus"}]
    # Without a request for it, the others decide (the host is degraded).
    out = fit(capsys, "--host-snapshot", NUMA4, "--flavor",
              flavor(tmp_path, slots_pin="true"), code=0)
    assert "host degraded: plugin gadget failed to discover: no PCI bus" in out.err
