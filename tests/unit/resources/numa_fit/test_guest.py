"""The NUMA decision as libvirt domain XML."""

from __future__ import annotations

import dataclasses
from xml.etree import ElementTree as ET

import libvirt
import pytest

from compute_plugins.compute.guest import GuestConfigError
from resources.numa.fit import fit
from resources.numa.guest import check_cells, fragments
from resources.numa.request import NUMAAssignment
from tests.unit.resources.numa_fit.helpers import cell, floating, request, state


def elements(req, assignment):
    frags = fragments(req, assignment)
    assert all(f.parent == "domain" for f in frags)
    return {e.tag: e for e in (ET.fromstring(f.xml) for f in frags)}


def decide(st, req):
    got = fit(st, req, None)
    assert isinstance(got, NUMAAssignment), got
    return got


def host():
    return state(cell(0, range(4), shared=[8, 9], pages=[(2048, 1024, 0)]),
                 cell(1, range(4, 8), shared=[10, 11], pages=[(2048, 1024, 0)]))


def test_mixed_guest_on_two_cells_with_huge_pages():
    req = request([(3, 1024), (3, 1024)], policy="mixed", shared=[1, 1],
                  page="large", realtime=[2, 5], emulator="isolate")
    got = decide(host(), req)
    xml = elements(req, got)
    assert set(xml) == {"cputune", "numatune", "cpu", "memoryBacking"}
    pins = {int(p.get("vcpu")): p.get("cpuset") for p in xml["cputune"].iter("vcpupin")}
    assert pins[0] == "8-9" and pins[3] == "10-11"       # shared: the cell's
    for node in got.cells:
        for guest_cpu, host_cpu in node.pinning.items():
            assert pins[guest_cpu] == str(host_cpu)
    (emulator,) = got.emulator_threads
    assert xml["cputune"].find("emulatorpin").get("cpuset") == str(emulator)
    sched = xml["cputune"].find("vcpusched").attrib
    assert sched == {"vcpus": "2,5", "scheduler": "fifo", "priority": "1"}
    tune = xml["numatune"]
    assert tune.find("memory").attrib == {"mode": "strict", "nodeset": "0-1"}
    assert [m.attrib for m in tune.iter("memnode")] == [
        {"cellid": "0", "mode": "strict", "nodeset": "0"},
        {"cellid": "1", "mode": "strict", "nodeset": "1"}]
    cells = [c.attrib for c in xml["cpu"].find("numa")]
    assert cells == [
        {"id": "0", "cpus": "0-2", "memory": "1048576", "unit": "KiB",
         "memAccess": "shared"},
        {"id": "1", "cpus": "3-5", "memory": "1048576", "unit": "KiB",
         "memAccess": "shared"}]
    pages = [p.attrib for p in xml["memoryBacking"].iter("page")]
    assert pages == [{"size": "2048", "unit": "KiB", "nodeset": "0-1"}]


def test_small_pages_have_no_memory_backing():
    req = request([(2, 512)])
    xml = elements(req, decide(host(), req))
    assert "memoryBacking" not in xml
    assert "memAccess" not in xml["cpu"].find("numa/cell").attrib


def test_floating_guest_is_kept_on_its_cells():
    st = state(cell(0, shared=range(2), memory_mb=1024),
               cell(1, shared=[2], memory_mb=8192), cpu_ratio=1.0)
    req = floating(2, 4096)   # vCPUs on cell 0, memory on cell 1
    got = decide(st, req)
    xml = elements(req, got)
    assert set(xml) == {"cputune", "numatune", "cpu"}
    assert [e.tag for e in xml["cpu"]] == ["topology"]      # no guest cells
    assert [p.get("cpuset") for p in xml["cputune"].iter("vcpupin")] == ["0-1", "0-1"]
    assert xml["numatune"].find("memory").get("nodeset") == "1"
    assert xml["numatune"].find("memnode") is None


def test_libvirt_accepts_the_domain():
    """Define the guest on libvirt's test driver (2 cells of 8 CPUs) and read
    back the pinning and the NUMA cells."""
    st = state(cell(0, range(8), memory_mb=4096), cell(1, range(8, 16), memory_mb=4096))
    req = request([(2, 512), (2, 512)], emulator="isolate")
    got = decide(st, req)
    body = "".join(f.xml for f in fragments(req, got))
    domain = ("<domain type='test'><name>numa-fit</name><memory unit='KiB'>"
              "1048576</memory><vcpu>4</vcpu><os><type>hvm</type></os>%s"
              "</domain>" % body)
    conn = libvirt.open("test:///default")
    try:
        dom = conn.defineXML(domain)
        back = ET.fromstring(dom.XMLDesc(0))
    except libvirt.libvirtError as err:  # pragma: no cover - the failure shown
        pytest.fail("libvirt refused the domain: %s\n%s" % (err, domain))
    finally:
        conn.close()
    pins = {int(p.get("vcpu")): p.get("cpuset") for p in back.iter("vcpupin")}
    assert pins == {g: str(h) for c in got.cells for g, h in c.pinning.items()}
    assert back.find("cputune/emulatorpin").get("cpuset") == str(
        *got.emulator_threads)
    assert [c.get("cpus") for c in back.iter("cell")] == ["0-1", "2-3"]
    assert back.find("numatune/memory").get("nodeset") == "0-1"


@pytest.mark.parametrize("page,expected", [
    # nova's LibvirtConfigGuestMemoryBacking for a realtime guest: locked
    # and unshared memory, after the huge pages when there are some.
    (None, ["nosharepages", "locked"]),
    ("large", ["hugepages", "nosharepages", "locked"]),
])
def test_realtime_memory_is_locked_and_not_shared(page, expected):
    req = request([(2, 512)], page=page, realtime=[1])
    xml = elements(req, decide(host(), req))
    assert [e.tag for e in xml["memoryBacking"]] == expected
    assert all(not len(e) and not e.attrib for e in xml["memoryBacking"]
               if e.tag != "hugepages")
    # libvirt keeps them.
    body = "".join(f.xml for f in fragments(req, decide(host(), req)))
    conn = libvirt.open("test:///default")
    try:
        dom = conn.defineXML(
            "<domain type='test'><name>rt-backing</name><memory unit='KiB'>"
            "524288</memory><vcpu>2</vcpu><os><type>hvm</type></os>%s"
            "</domain>" % body)
        back = ET.fromstring(dom.XMLDesc(0))
        dom.undefine()
    finally:
        conn.close()
    assert [e.tag for e in back.find("memoryBacking")] == expected


def test_a_guest_that_is_not_realtime_keeps_shared_pages():
    req = request([(2, 512)], page="large")
    xml = elements(req, decide(host(), req))
    assert [e.tag for e in xml["memoryBacking"]] == ["hugepages"]


# -- the guest cells against the flavor (libvirt takes the cells' sum) --------


@pytest.mark.parametrize("xml, message", [
    ("<cpu><numa><cell id='0' cpus='0-2' memory='2048' unit='MiB'/></numa></cpu>",
     "hold vCPUs 0-2; the flavor has 4"),
    ("<cpu><numa><cell id='0' cpus='0-3' memory='1024' unit='MiB'/></numa></cpu>",
     "1048576 KiB of memory; the flavor has 2048 MiB"),
    ("<cpu><numa><cell id='0' cpus='0-1' memory='1' unit='GiB'/>"
     "<cell id='0' cpus='2-3' memory='1' unit='GiB'/></numa></cpu>", "given twice"),
    ("<cpu><numa><cell id='0' cpus='0-2' memory='1' unit='GiB'/>"
     "<cell id='1' cpus='2-3' memory='1' unit='GiB'/></numa></cpu>",
     "vCPUs 2 are in another cell"),
    ("<cpu><numa><cell id='0' cpus='0-3' memory='2' unit='furlongs'/></numa></cpu>",
     "not a libvirt memory size"),
    ("<cpu><numa><cell id='x' cpus='0-3' memory='2' unit='GiB'/></numa></cpu>",
     "id='x' is not a number"),
])
def test_guest_cells_that_do_not_cover_the_flavor_name_the_plugin(xml, message):
    with pytest.raises(GuestConfigError, match=message) as err:
        check_cells(ET.fromstring(xml), vcpus=4, memory_mb=2048)
    assert err.value.plugin == "numa"
    assert str(err.value).startswith("guest XML of plugin numa: ")


def test_guest_cells_in_any_unit_add_up():
    check_cells(ET.fromstring(
        "<cpu><numa><cell id='0' cpus='0-1' memory='1' unit='GiB'/>"
        "<cell id='1' cpus='2-3' memory='1048576'/></numa></cpu>"), vcpus=4, memory_mb=2048)


def test_the_plugins_own_fragment_is_checked():
    req = request([(2, 1024), (2, 1024)], policy="dedicated")
    got = decide(host(), req)
    assert elements(req, got)["cpu"].find("numa") is not None
    wrong = dataclasses.replace(req, memory_mb=4096)  # cells of another flavor
    with pytest.raises(GuestConfigError, match="2097152 KiB of memory; the "
                       "flavor has 4096 MiB"):
        fragments(wrong, got)


# -- hw:locked_memory and the guest CPU topology (resources.numa.options) ------


@pytest.mark.parametrize("page, realtime, expected", [
    ("small", (), ["locked"]),
    ("large", (), ["hugepages", "locked"]),
    ("large", (1,), ["hugepages", "nosharepages", "locked"]),
])
def test_locked_memory_is_locked_in_the_memory_backing(page, realtime, expected):
    """nova's driver: ``membacking.locked`` for hw:locked_memory (once, also
    for a realtime guest); compat: test_locked_memory_is_novas_..."""
    req = dataclasses.replace(request([(2, 512)], page=page, realtime=realtime),
                              locked_memory=True)
    xml = elements(req, decide(host(), req))
    assert [e.tag for e in xml["memoryBacking"]] == expected


def test_cpu_topology_goes_before_the_guest_cells_and_libvirt_keeps_it():
    req = dataclasses.replace(request([(2, 512), (2, 512)]),
                              cpu_topology=(2, 2, 1))
    got = decide(host(), req)
    xml = elements(req, got)
    assert [e.tag for e in xml["cpu"]] == ["topology", "numa"]
    assert xml["cpu"].find("topology").attrib == {
        "sockets": "2", "cores": "2", "threads": "1"}
    body = "".join(f.xml for f in fragments(req, got))
    conn = libvirt.open("test:///default")
    try:
        dom = conn.defineXML(
            "<domain type='test'><name>topology</name><memory unit='KiB'>"
            "1048576</memory><vcpu>4</vcpu><os><type>hvm</type></os>%s"
            "</domain>" % body)
        back = ET.fromstring(dom.XMLDesc(0))
        dom.undefine()
    finally:
        conn.close()
    kept = back.find("cpu/topology")
    assert (kept.get("sockets"), kept.get("cores"), kept.get("threads")) == (
        "2", "2", "1")


def test_a_floating_guest_gets_its_cpu_topology_and_a_recorded_one_nova_default():
    req = dataclasses.replace(floating(4, 1024), cpu_topology=(1, 2, 2))
    st = state(cell(0, shared=range(4), memory_mb=4096))
    xml = elements(req, decide(st, req))
    assert [e.tag for e in xml["cpu"]] == ["topology"]
    assert xml["cpu"].find("topology").attrib == {
        "sockets": "1", "cores": "2", "threads": "2"}
    # a request recorded before the topology was read: nova's default
    xml = elements(floating(4, 1024), decide(st, floating(4, 1024)))
    assert xml["cpu"].find("topology").attrib == {
        "sockets": "4", "cores": "1", "threads": "1"}


def test_a_topology_that_does_not_multiply_to_the_vcpus_names_the_plugin():
    req = dataclasses.replace(request([(2, 512)]), cpu_topology=(3, 1, 1))
    with pytest.raises(GuestConfigError, match="topology 3 sockets x 1 cores "
                       "x 1 threads is not the flavor's 2 vCPUs"):
        fragments(req, decide(host(), req))


@pytest.mark.parametrize("locked, realtime", [(True, ()), (False, (1,))])
def test_locked_memory_with_sev_is_one_locked_element(conf, locked, realtime):
    """nova's ``get_locked_memory_constraint`` is True once for
    ``hw:locked_memory`` and SEV's ``needs_locked_memory`` alike (and a
    realtime guest's memory is locked too): one ``<locked/>``. The numa and
    memenc plugins both lock the memory; the domain has it once and libvirt
    takes it (it was a GuestConfigError: '<memoryBacking><locked> is allowed
    once')."""
    from compute_plugins.compute.guest import assemble
    from resources.memenc import MemEncAssignment, MemEncPlugin, MemEncRequest

    req = dataclasses.replace(request([(2, 512)], page="large", realtime=realtime),
                              locked_memory=locked)
    sev = MemEncPlugin(conf).guest_config(
        MemEncRequest(model="amd-sev"),
        MemEncAssignment(model="amd-sev", provider_uuid="u"))
    xml = assemble([("numa", fragments(req, decide(host(), req))), ("memenc", sev)],
                   name="sev-locked", vcpus=2, memory_mb=512, domain_type="test")
    backing = ET.fromstring(xml).find("memoryBacking")
    assert [e.tag for e in backing].count("locked") == 1
    conn = libvirt.open("test:///default")
    try:
        dom = conn.defineXML(xml.replace("<launchSecurity", "<!--").replace(
            "</launchSecurity>", "-->"))   # NOTE: the test driver has no SEV
        back = ET.fromstring(dom.XMLDesc(0))
        dom.undefine()
    finally:
        conn.close()
    assert [e.tag for e in back.find("memoryBacking")].count("locked") == 1
