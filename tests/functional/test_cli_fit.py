"""``compute-plugins fit`` end to end with the built-in plugins, as a user
runs it (in-process, :mod:`tests.cli`: its output and exit code, fd 1 and
2 captured as a subprocess's pipes would be): host snapshots and libvirt's
test driver.

Host facts used (tests/fixtures/hosts/SOURCES.md):

- numa4: 4 cells of 4 CPUs (cell c: CPUs 4c..4c+3); with
  ``cpu_dedicated_set`` below, 3 dedicated CPUs per cell (CPUs 4c+1..4c+3)
  and CPU 4c shared; thousands of 2 MiB pages per cell;
- mdev: the pGPU 0000:02:10.7 offers ``foo2`` with 2 instances;
- sriov: the PF 0000:02:10.7 (``ens1f0``, physnet1) has 4 VFs,
  0000:02:00.2 to 0000:02:00.5.

The guest XML a snapshot gives is a ``kvm`` domain; it is defined on the
test driver as ``test`` (the driver defines only its own type), schema
validated, and read back.
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import libvirt
import pytest

from tests.cli import run

HOSTS = Path(__file__).resolve().parent.parent / "fixtures" / "hosts"
FIT_KEYS = ["fits", "assignments", "reasons", "guest_xml"]
NUMA_CELL_KEYS = {"guest_cell", "host_cell", "provider_uuid", "pinning",
                  "shared_cpus", "page_size_kb"}

NUMA4_CONF = """\
[compute_plugins]
enabled_plugins = numa
[compute]
cpu_dedicated_set = 1-3,5-7,9-11,13-15
cpu_shared_set = 0,4,8,12
reserved_host_memory_mb = 0
"""


def cli(*args, code=None):
    result = run(*args)
    if code is not None:
        assert result.returncode == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    return result


def write(tmp_path, name, doc):
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(path)


class Host:
    """``fit`` (and ``inventory``) on one host with one config."""

    def __init__(self, tmp_path, selection, config):
        self.tmp_path = tmp_path
        self.args = ["--config-file", write(tmp_path, "cp.conf", config), *selection]

    def fit(self, flavor, *extra, code=0, usage=None, fmt="json"):
        args = ["fit", *self.args, "--flavor", write(self.tmp_path, "f.json", flavor),
                "--format", fmt, *extra]
        if usage is not None:
            args += ["--usage", write(self.tmp_path, "usage.json", usage)]
        result = cli(*args, code=code)
        if fmt == "text" or code == 2:
            return result
        doc = json.loads(result.stdout)
        assert list(doc) == FIT_KEYS
        assert doc["fits"] is (code == 0)
        if code == 0:
            assert doc["reasons"] == [] and doc["guest_xml"].startswith("<domain ")
        else:
            assert doc["assignments"] == {} and doc["guest_xml"] is None
            assert doc["reasons"]
            for reason in doc["reasons"]:
                assert set(reason) == {"plugin", "provider", "reason"}
                assert reason["reason"]
        return doc

    def providers(self):
        doc = json.loads(cli("inventory", *self.args, "--format", "json",
                             code=0).stdout)
        return {p["name"]: p["uuid"] for p in doc["providers"]}


def define_on_test_driver(xml):
    """The domain as libvirt's test driver reads it back (schema-validated)."""
    root = ET.fromstring(xml)
    root.set("type", "test")
    conn = libvirt.open("test:///default")
    try:
        domain = conn.defineXMLFlags(ET.tostring(root, encoding="unicode"),
                                     libvirt.VIR_DOMAIN_DEFINE_VALIDATE)
        try:
            return ET.fromstring(domain.XMLDesc())
        finally:
            domain.undefine()
    finally:
        conn.close()


def pinning_of(numa):
    return {int(g): h for cell in numa["cells"] for g, h in cell["pinning"].items()}


# -- NUMA -------------------------------------------------------------------------


@pytest.fixture
def numa4(tmp_path):
    return Host(tmp_path, ["--host-snapshot", str(HOSTS / "numa4")], NUMA4_CONF)


TWO_NODES = {"name": "numa.2n", "vcpus": 4, "memory_mb": 2048, "extra_specs": {
    "hw:cpu_policy": "dedicated", "hw:numa_nodes": "2", "hw:mem_page_size": "2048"}}
ONE_CELL = {"name": "numa.3c", "vcpus": 3, "memory_mb": 1024, "extra_specs": {
    "hw:cpu_policy": "dedicated", "hw:mem_page_size": "2048"}}


def test_numa_two_guest_nodes_json(numa4):
    doc = numa4.fit(TWO_NODES)
    assert list(doc["assignments"]) == ["numa"]
    numa = doc["assignments"]["numa"]
    # No emulator policy: the emulator threads float over the guest's
    # pinned CPUs (nova's default).
    assert sorted(numa["emulator_threads"]) == sorted(pinning_of(numa).values())
    cells = sorted(numa["cells"], key=lambda c: c["guest_cell"])
    assert [c["guest_cell"] for c in cells] == [0, 1]
    assert cells[0]["host_cell"] != cells[1]["host_cell"]
    providers = numa4.providers()
    for cell in cells:
        assert NUMA_CELL_KEYS <= set(cell)
        host = cell["host_cell"]
        assert cell["provider_uuid"] == providers["numa4_NUMA%d" % host]
        assert cell["page_size_kb"] == 2048
        assert cell["shared_cpus"] == []
        assert len(cell["pinning"]) == 2
        assert set(cell["pinning"].values()) <= {4 * host + 1, 4 * host + 2, 4 * host + 3}
    pins = pinning_of(numa)
    assert sorted(pins) == [0, 1, 2, 3] and len(set(pins.values())) == 4
    back = define_on_test_driver(doc["guest_xml"])
    assert {int(p.get("vcpu")): int(p.get("cpuset"))
            for p in back.findall("cputune/vcpupin")} == pins
    assert {int(m.get("cellid")): m.get("nodeset")
            for m in back.findall("numatune/memnode")} == {
        c["guest_cell"]: str(c["host_cell"]) for c in cells}
    assert [(c.get("id"), c.get("cpus")) for c in back.findall("cpu/numa/cell")] \
        == [("0", "0-1"), ("1", "2-3")]
    assert {p.get("size") for p in back.findall("memoryBacking/hugepages/page")} \
        == {"2048"}


def test_numa_text_a_line_per_guest_node(numa4):
    out = numa4.fit(TWO_NODES, fmt="text").stdout.splitlines()
    assert out[0] == "fits on host numa4 (flavor numa.2n: 4 vCPUs, 2048 MiB)"
    assert re.fullmatch(r"  numa: guest node 0 -> host cell \d: CPUs 0-1 -> "
                        r"\d+,\d+; 1024 MiB in 2048 KiB pages", out[1]), out
    assert re.fullmatch(r"  numa: guest node 1 -> host cell \d: CPUs 2-3 -> "
                        r"\d+,\d+; 1024 MiB in 2048 KiB pages", out[2]), out
    # No emulator policy: the emulator threads float over the pinned CPUs.
    assert re.fullmatch(r"  numa: emulator threads -> host CPUs [\d,-]+", out[3]), out
    assert out[4] == "guest XML (--format json prints it whole):"
    assert out[5] == "  domain numa.2n (kvm): 4 vCPUs, 2048 MiB"


def test_numa_usage_replay_fills_the_host(numa4):
    usage = []
    for _ in range(4):
        doc = numa4.fit(ONE_CELL, usage=usage)
        usage.append(doc["assignments"])
    # 3 dedicated CPUs per cell: a cell per guest, every dedicated CPU once.
    assert sorted(a["numa"]["cells"][0]["host_cell"] for a in usage) == [0, 1, 2, 3]
    pinned = sorted(cpu for a in usage for cpu in pinning_of(a["numa"]).values())
    assert pinned == [1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 14, 15]
    doc = numa4.fit(ONE_CELL, usage=usage, code=1)
    assert {r["plugin"] for r in doc["reasons"]} == {"numa"}
    text = numa4.fit(ONE_CELL, usage=usage, code=1, fmt="text").stdout
    assert text.startswith("does not fit on host numa4 (flavor numa.3c: 3 vCPUs, "
                           "1024 MiB):\n  numa: ")


def test_numa_does_not_fit(numa4):
    too_big = {**ONE_CELL, "vcpus": 4}
    doc = numa4.fit(too_big, code=1)
    assert {r["plugin"] for r in doc["reasons"]} == {"numa"}


def bad_usage(host, flavor, usage):
    result = host.fit(flavor, usage=usage, code=2)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("compute-plugins: error: ")
    return lines[0]


def test_numa_usage_with_a_cpu_the_host_lacks(numa4):
    assignment = numa4.fit(ONE_CELL)["assignments"]
    cell = assignment["numa"]["cells"][0]
    cell["pinning"]["0"] = 99
    line = bad_usage(numa4, ONE_CELL, [assignment])
    assert "numa" in line and re.search(r"\b99\b", line), line


def test_numa_usage_pinning_a_cpu_twice(numa4):
    assignment = numa4.fit(ONE_CELL)["assignments"]
    cpu = assignment["numa"]["cells"][0]["pinning"]["0"]
    line = bad_usage(numa4, ONE_CELL, [assignment, assignment])
    assert "numa" in line and re.search(r"\b%d\b" % cpu, line), line


def test_usage_of_a_plugin_not_enabled(numa4):
    line = bad_usage(numa4, ONE_CELL, [{"vgpu": {"devices": []}}])
    assert line == ("compute-plugins: error: usage file %s: usage[0] names "
                    "plugin 'vgpu', which is not enabled (enabled: numa)"
                    % (numa4.tmp_path / "usage.json"))


def test_usage_of_the_wrong_shape(numa4):
    line = bad_usage(numa4, ONE_CELL, [{"numa": {"cells": [{"guest_cell": 0}]}}])
    assert "usage[0].numa.cells[0]: missing field 'host_cell'" in line


def test_on_the_libvirt_test_driver(tmp_path):
    host = Host(tmp_path, ["--libvirt-uri", "test:///default"], """\
[compute_plugins]
enabled_plugins = numa
[compute]
cpu_dedicated_set = 2-7,10-15
cpu_shared_set = 0-1,8-9
reserved_host_memory_mb = 0
""")
    doc = host.fit({"name": "tiny", "vcpus": 2, "memory_mb": 512,
                    "extra_specs": {"hw:cpu_policy": "dedicated"}})
    pins = pinning_of(doc["assignments"]["numa"])
    assert sorted(pins) == [0, 1]
    assert set(pins.values()) <= {2, 3, 4, 5, 6, 7, 10, 11, 12, 13, 14, 15}
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
    assert {int(p.get("vcpu")): int(p.get("cpuset"))
            for p in back.findall("cputune/vcpupin")} == pins


# -- devices ---------------------------------------------------------------------------


def test_vgpu_on_the_mdev_snapshot(tmp_path):
    host = Host(tmp_path, ["--host-snapshot", str(HOSTS / "mdev")], """\
[compute_plugins]
enabled_plugins = numa,vgpu
[compute]
reserved_host_memory_mb = 0
[vgpu]
enabled_mdev_types = foo2
""")
    # NOTE: the snapshot's cells have 8 and 16 MiB of small pages: the
    # guest's memory is in 2 MiB pages (a guest NUMA node on host cell 0,
    # the pGPU's cell).
    flavor = {"name": "vgpu1", "vcpus": 1, "memory_mb": 512,
              "extra_specs": {"resources:VGPU": "1", "hw:mem_page_size": "2048"}}
    usage = []
    for _ in range(2):
        doc = host.fit(flavor, usage=usage)
        devices = doc["assignments"]["vgpu"]["devices"]
        assert len(devices) == 1
        assert devices[0]["parent_address"] == "0000:02:10.7"
        assert devices[0]["provider_uuid"] == host.providers()["mdev_pci_0000_02_10_7"]
        assert devices[0]["mdev_type"] == "foo2"
        assert [c["host_cell"] for c in doc["assignments"]["numa"]["cells"]] == [0]
        mdevs = define_on_test_driver(doc["guest_xml"]).findall(
            "devices/hostdev[@type='mdev']/source/address")
        assert [m.get("uuid") for m in mdevs] == devices[0]["mdev_uuids"]
        usage.append(doc["assignments"])
    uuids = [a["vgpu"]["devices"][0]["mdev_uuids"][0] for a in usage]
    assert len(set(uuids)) == 2
    doc = host.fit(flavor, usage=usage, code=1)
    assert "vgpu" in {r["plugin"] for r in doc["reasons"]}


def test_sriov_ports_on_the_sriov_snapshot(tmp_path):
    host = Host(tmp_path, ["--host-snapshot", str(HOSTS / "sriov")], """\
[compute_plugins]
enabled_plugins = numa,sriov
[sriov]
physical_device_mappings = physnet1:ens1f0
""")
    flavor = {"name": "nfv", "vcpus": 2, "memory_mb": 1024}
    port = {"vnic_type": "direct", "physnet": "physnet1"}
    ports = [write(tmp_path, "p%d.json" % i, {**port, "id": "port-%d" % i})
             for i in range(5)]
    doc = host.fit(flavor, *(a for p in ports[:4] for a in ("--port", p)))
    vfs = doc["assignments"]["sriov"]["vfs"]
    assert sorted(vf["port_id"] for vf in vfs) == ["port-0", "port-1", "port-2", "port-3"]
    assert {vf["pf_address"] for vf in vfs} == {"0000:02:10.7"}
    assert sorted(vf["vf_address"] for vf in vfs) == [
        "0000:02:00.2", "0000:02:00.3", "0000:02:00.4", "0000:02:00.5"]
    back = define_on_test_driver(doc["guest_xml"])
    addresses = sorted(
        "0000:%02x:%02x.%x" % (int(a.get("bus"), 16), int(a.get("slot"), 16),
                               int(a.get("function"), 16))
        for a in back.findall("devices/interface[@type='hostdev']/source/address"))
    assert addresses == sorted(vf["vf_address"] for vf in vfs)
    doc = host.fit(flavor, *(a for p in ports for a in ("--port", p)), code=1)
    assert "sriov" in {r["plugin"] for r in doc["reasons"]}


# -- bad input: one line, exit 2 ---------------------------------------------------

NAN_FLAVOR = '{"name": "f", "vcpus": NaN, "memory_mb": 512}'
SHARED_99 = [{"numa": {"cells": [{"guest_cell": 0, "host_cell": 0,
                                  "shared_cpus": [99], "shared_vcpus": 1}]}}]
EMULATOR_99 = [{"numa": {"cells": [], "emulator_threads": [99]}}]


@pytest.mark.parametrize("option,doc,expected", [
    ("--flavor", "{not json", r"the flavor file \S+ is not JSON"),
    ("--flavor", NAN_FLAVOR, r"the flavor file \S+ is not JSON: NaN is not a JSON number"),
    ("--flavor", {"name": "f", "vcpus": -2, "memory_mb": 512},
     r"flavor 'vcpus' must be an integer from 1 to 2147483647, got -2"),
    ("--flavor", {"name": "f", "vcpus": 2, "memory_mb": 10 ** 30},
     r"flavor 'memory_mb' must be an integer from 1 to 2147483647"),
    ("--image", [], r"an image must be a JSON object"),
    ("--port", {"id": "p", "vnic_type": "direct", "min_kbps_egress": -1},
     r"port 0 field 'min_kbps_egress' must be an integer from 0"),
    ("--usage", '[{"numa": {"cells": [{"guest_cell": 0, "host_cell": Infinity}]}}]',
     r"the usage file \S+ is not JSON: Infinity is not a JSON number"),
    ("--usage", SHARED_99, r"usage file \S+ does not hold on host numa4: numa: "
     r"assignment 0, guest node 0 floats on CPU 99, which host cell 0 lacks"),
    ("--usage", EMULATOR_99, r"numa: assignment 0 pins emulator threads to CPU "
     r"99, which the host lacks \(its CPUs: 0-15\)"),
])
def test_bad_input_is_one_line_and_exit_2(numa4, option, doc, expected):
    files = {"--flavor": ONE_CELL}
    files[option] = doc
    args = ["fit", *numa4.args, "--format", "json"]
    for flag, content in files.items():
        args += [flag, write(numa4.tmp_path, flag.strip("-") + ".json", content)]
    result = cli(*args, code=2)
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("compute-plugins: error: ")
    assert re.search(expected, lines[0]), lines[0]


def test_a_missing_file_is_named(numa4):
    missing = str(numa4.tmp_path / "nope.json")
    result = cli("fit", *numa4.args, "--flavor", missing, code=2)
    assert result.stderr.splitlines() == [
        "compute-plugins: error: cannot read the flavor file %s: No such file "
        "or directory" % missing]
