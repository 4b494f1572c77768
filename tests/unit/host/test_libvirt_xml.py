"""Parsers of libvirt XML, on libvirt's own test documents."""

from __future__ import annotations

import pathlib

import pytest

from compute_plugins.host import libvirt_xml
from compute_plugins.host.errors import HostDataError
from compute_plugins.host.model import (
    CPU,
    Mdev,
    MdevType,
    PagePool,
    PCIDevice,
)

FIXTURES = pathlib.Path(__file__).parents[2] / "fixtures" / "hosts"
LIBVIRT = FIXTURES / "libvirt"
# NOTE: the fixtures are a copy of the shared captures; when the shared
# directory is there, newer files in it are parsed too.
SHARED = pathlib.Path(__file__).parents[4] / "shared" / "hostdata" / "libvirt"


def _all_files() -> list[pathlib.Path]:
    files = {p.relative_to(LIBVIRT): p for p in LIBVIRT.rglob("*.xml")}
    if SHARED.is_dir():
        for path in SHARED.rglob("*.xml"):
            files.setdefault(path.relative_to(SHARED), path)
    return [files[k] for k in sorted(files)]


ALL_FILES = _all_files()


def _is_nodedev(path: pathlib.Path) -> bool:
    return "nodedev" in path.parent.name


def _caps(name: str) -> str:
    return next(p for p in ALL_FILES if p.name == name).read_text()


def _dev(name: str):
    path = next(p for p in ALL_FILES if p.name == name)
    return libvirt_xml.parse_node_device(path.read_text(), str(path))


def test_fixture_copy_is_complete():
    assert len(ALL_FILES) >= 18
    assert sum(1 for p in ALL_FILES if _is_nodedev(p)) >= 11


#: Number of NUMA cells of every capabilities file; ``None``: the file is
#: refused (one CPU listed twice). A new file must be added here.
EXPECTED_CELLS = {
    "caps-qemu-kvm.xml": 1,
    "caps-qemu-real-full.xml": 1,
    "vircaps-basic-4-4-2G.xml": None,
    "vircaps-x86_64-basic-dies.xml": 1,
    "vircaps-x86_64-basic.xml": 4,
    "vircaps-x86_64-hmat.xml": 2,
    "vircaps-x86_64-resctrl-skx.xml": 1,
}

#: What every node-device file parses to.
EXPECTED_DEVICES = {
    "computer.xml": type(None),
    "drm_renderD129.xml": type(None),
    "mdev_d069d019_36ea_4111_8f0a_8c9a70e21366.xml": Mdev,
    "net_00_13_02_b9_f9_d3.xml": libvirt_xml.NetInterface,
}


@pytest.mark.parametrize("path", ALL_FILES, ids=lambda p: p.name)
def test_every_file_parses_or_names_itself(path):
    """Each file gives its pinned result, or a HostDataError naming it."""
    if _is_nodedev(path):
        result = libvirt_xml.parse_node_device(path.read_text(), str(path))
        expected = EXPECTED_DEVICES.get(path.name, PCIDevice)
        assert type(result) is expected
        return
    assert path.name in EXPECTED_CELLS, "pin the new file in EXPECTED_CELLS"
    cells = EXPECTED_CELLS[path.name]
    if cells is None:
        with pytest.raises(HostDataError) as err:
            libvirt_xml.parse_capabilities(path.read_text(), str(path))
        assert err.value.source == str(path)
        return
    result = libvirt_xml.parse_capabilities(path.read_text(), str(path))
    assert len(result) == cells


@pytest.mark.parametrize("path", ALL_FILES, ids=lambda p: p.name)
def test_every_file_fed_to_the_wrong_parser_names_itself(path):
    parser = (
        libvirt_xml.parse_capabilities
        if _is_nodedev(path)
        else libvirt_xml.parse_node_device
    )
    with pytest.raises(HostDataError) as err:
        parser(path.read_text(), str(path))
    assert str(path) in str(err.value)
    assert "expected a <" in str(err.value)


# ------------------------------------------------------------ capabilities


def test_vircaps_basic_four_cells():
    cells = libvirt_xml.parse_capabilities(
        _caps("vircaps-x86_64-basic.xml"), "basic"
    )
    assert [c.id for c in cells] == [0, 1, 2, 3]
    for n, cell in enumerate(cells):
        assert cell.cpu_ids == frozenset(range(4 * n, 4 * n + 4))
        assert cell.memory_kb == 1048576 * (n + 1)
        assert cell.pages == (
            PagePool(4, 2048 * (n + 1)),
            PagePool(2048, 4096 + 2048 * n),
            PagePool(1048576, 6144 + 2048 * n),
        )
        assert cell.distances == ()
        assert all(cpu.socket_id == n for cpu in cell.cpus)
    assert cells[1].cpus[0] == CPU(
        id=4, socket_id=1, core_id=4, siblings=frozenset({4})
    )


def test_real_host_siblings_memory_pages_distances():
    (cell,) = libvirt_xml.parse_capabilities(
        _caps("caps-qemu-real-full.xml"), "real"
    )
    assert cell.id == 0
    assert cell.memory_kb == 63393224
    assert cell.cpu_ids == frozenset(range(32))
    cpus = {cpu.id: cpu for cpu in cell.cpus}
    assert cpus[0].siblings == frozenset({0, 16})
    assert cpus[31] == CPU(
        31, socket_id=0, core_id=15, siblings=frozenset({15, 31})
    )
    assert cell.pages == (
        PagePool(4, 15848306),
        PagePool(2048, 0),
        PagePool(1048576, 0),
    )
    assert cell.distances == ((0, 10),)


def test_old_kvm_caps_have_bare_cpus():
    (cell,) = libvirt_xml.parse_capabilities(_caps("caps-qemu-kvm.xml"), "kvm")
    assert cell.cpus == tuple(CPU(i) for i in range(4))
    assert cell.memory_kb is None
    assert cell.pages == ()


def test_hmat_memory_only_cell():
    cells = libvirt_xml.parse_capabilities(
        _caps("vircaps-x86_64-hmat.xml"), "hmat"
    )
    assert len(cells) == 2
    assert cells[0].cpu_ids == frozenset(range(24))
    assert [c.socket_id for c in cells[0].cpus] == list(range(24))
    assert cells[0].memory_kb == 1048576
    assert cells[1].cpus == ()
    assert cells[1].memory_kb == 2097152
    assert cells[1].pages[0] == PagePool(4, 4096)


def test_dies_and_resctrl():
    (cell,) = libvirt_xml.parse_capabilities(
        _caps("vircaps-x86_64-basic-dies.xml"), "dies"
    )
    assert len(cell.cpus) == 12
    assert [c.socket_id for c in cell.cpus] == [0] * 6 + [1] * 6
    assert [c.core_id for c in cell.cpus] == [0, 1] * 6
    (cell,) = libvirt_xml.parse_capabilities(
        _caps("vircaps-x86_64-resctrl-skx.xml"), "skx"
    )
    assert cell.cpus == (CPU(0, 0, 0, frozenset({0})),)


def test_duplicate_cpu_ids_are_refused():
    with pytest.raises(HostDataError) as err:
        libvirt_xml.parse_capabilities(
            _caps("vircaps-basic-4-4-2G.xml"), "4-4-2G.xml"
        )
    assert str(err.value).startswith("4-4-2G.xml: ")
    assert "CPU 0" in str(err.value)


@pytest.mark.parametrize(
    "text,expected",
    [
        ("0", {0}),
        ("0,16", {0, 16}),
        ("0-1", {0, 1}),
        ("0-3,^2", {0, 1, 3}),
        ("2-3,8-9", {2, 3, 8, 9}),
        ("", set()),
    ],
)
def test_cpuset(text, expected):
    assert libvirt_xml.parse_cpuset(text) == frozenset(expected)


@pytest.mark.parametrize(
    "text", ["a", "3-1", "1-x", "-1", "0-999999999999", "70000"])
def test_bad_cpuset(text):
    with pytest.raises(HostDataError, match="CPU"):
        libvirt_xml.parse_cpuset(text, "f.xml")


def _caps_doc(cell: str, num: int = 1) -> str:
    return (
        f"<capabilities><host><topology><cells num='{num}'>{cell}"
        "</cells></topology></host></capabilities>"
    )


@pytest.mark.parametrize(
    "unit,value,kib",
    [
        (None, "1024", 1024),
        ("KiB", "1024", 1024),
        ("MiB", "2", 2048),
        ("G", "1", 1048576),
        ("bytes", "4096", 4),
        ("KB", "1024", 1000),
    ],
)
def test_memory_units(unit, value, kib):
    attr = f" unit='{unit}'" if unit else ""
    (cell,) = libvirt_xml.parse_capabilities(
        _caps_doc(
            f"<cell id='0'><memory{attr}>{value}</memory>"
            f"<pages unit='MiB' size='2'>3</pages></cell>"
        )
    )
    assert cell.memory_kb == kib
    assert cell.pages == (PagePool(2048, 3),)


@pytest.mark.parametrize(
    "text,reason",
    [
        ("", "empty document"),
        ("<capabilities><host>", "not well-formed"),
        ("<device/>", "expected a <capabilities> document"),
        ("<capabilities/>", "no <host>"),
        (_caps_doc("<cell><cpus/></cell>"), "<cell> attribute id is missing"),
        (_caps_doc("<cell id='0'/>", num=2), "num='2'> but 1"),
        (
            _caps_doc("<cell id='0'/><cell id='0'/>", 2),
            "cell 0 is listed twice",
        ),
        (
            _caps_doc("<cell id='0'><memory unit='parsecs'>1</memory></cell>"),
            "unknown unit 'parsecs'",
        ),
        (
            _caps_doc("<cell id='0'><memory>lots</memory></cell>"),
            "cell 0 memory is not an integer: 'lots'",
        ),
        (
            _caps_doc("<cell id='0'><pages size='4'/></cell>"),
            "<pages> count is missing",
        ),
        (
            _caps_doc("<cell id='0'><cpus><cpu socket_id='0'/></cpus></cell>"),
            "<cpu> id is missing",
        ),
        (
            _caps_doc(
                "<cell id='0'><cpus><cpu id='1' siblings='1,x'/></cpus></cell>"
            ),
            "bad CPU list",
        ),
        (
            _caps_doc(
                "<cell id='0'><distances><sibling id='0'/></distances></cell>"
            ),
            "distance value is missing",
        ),
    ],
)
def test_malformed_capabilities(text, reason):
    with pytest.raises(HostDataError) as err:
        libvirt_xml.parse_capabilities(text, "/snap/capabilities.xml")
    assert str(err.value).startswith("/snap/capabilities.xml")
    assert reason in str(err.value)


def test_no_topology_means_no_cells():
    assert (
        libvirt_xml.parse_capabilities(
            "<capabilities><host><cpu/></host></capabilities>"
        )
        == ()
    )


# ------------------------------------------------------------ node devices


def test_mdev_types_device():
    device = _dev("pci_0000_02_10_7_mdev_types.xml")
    assert device == PCIDevice(
        address="0000:02:10.7",
        name="pci_0000_02_10_7",
        vendor_id="8086",
        product_id="10ca",
        vendor_name="Intel Corporation",
        product_name="82576 Virtual Function",
        class_code=None,
        numa_node=0,
        iommu_group=31,
        mdev_types=(
            MdevType("foo1", "bar1", 1, "vfio-pci"),
            MdevType("foo2", "bar2", 2, "vfio-pci"),
        ),
    )
    assert not device.is_pf and not device.is_vf


def test_pf_with_vfs_without_max_count():
    device = _dev("pci_0000_02_10_7_sriov_vfs.xml")
    assert device.virt_functions == (
        "0000:02:00.2",
        "0000:02:00.3",
        "0000:02:00.4",
        "0000:02:00.5",
    )
    assert device.max_vfs is None
    assert device.phys_function is None
    assert device.class_code == "ffffff"
    assert device.is_pf and not device.is_vf


def test_pf_and_vf_all():
    device = _dev("pci_0000_02_10_7_sriov_pf_vfs_all.xml")
    assert device.max_vfs == 7
    assert len(device.virt_functions) == 4
    assert device.phys_function == "0000:02:00.1"


def test_zero_vfs_max_count():
    device = _dev("pci_0000_02_10_7_sriov_zero_vfs_max_count.xml")
    assert device.virt_functions == ()
    assert device.max_vfs == 3
    assert device.is_pf


def test_vf():
    device = _dev("pci_0000_02_10_7_sriov.xml")
    assert device.phys_function == "0000:02:00.1"
    assert device.is_vf and not device.is_pf
    assert device.iommu_group == 31


def test_vpd_nic():
    device = _dev("pci_0000_42_00_0_vpd.xml")
    assert device.address == "0000:42:00.0"
    assert (device.vendor_id, device.product_id) == ("15b3", "a2d6")
    assert device.class_code == "020000"
    assert device.max_vfs == 16
    assert device.virt_functions == ()
    assert (device.numa_node, device.iommu_group) == (0, 65)
    # NOTE: libvirt's own test data: the read-only <serial_number> of its
    # <capability type='vpd'> (the read-write fields are not the card's).
    assert device.card_serial_number == "MT2113X00000"


_VPD_DEVICE = """<device><name>pci_0000_82_00_0</name>
  <capability type='pci'><domain>0</domain><bus>130</bus><slot>0</slot>
    <function>0</function><product id='0xa2d6'/><vendor id='0x15b3'/>
    <capability type='vpd'><name>MT42822 BlueField-2</name>%s</capability>
  </capability></device>"""


@pytest.mark.parametrize("fields, serial", [
    ("", None),
    ("<fields access='readwrite'><serial_number>RW1</serial_number></fields>",
     None),
    ("<fields access='readonly'><serial_number></serial_number></fields>", None),
    ("<fields access='readonly'><part_number>P</part_number></fields>", None),
    ("<fields access='readonly'><serial_number>MT0000X00002</serial_number>"
     "</fields>", "MT0000X00002"),
    # NOTE: nova's parser keeps the last one it reads
    ("<fields access='readonly'><serial_number>A</serial_number>"
     "<serial_number>B</serial_number></fields>", "B"),
])
def test_the_card_serial_number_is_the_read_only_vpd_field_as_nova_reads_it(
        fields, serial):
    device = libvirt_xml.parse_node_device(_VPD_DEVICE % fields, "vpd")
    assert device.card_serial_number == serial


def test_a_device_without_vpd_has_no_card_serial_number():
    assert _dev("pci_0000_02_10_7_sriov.xml").card_serial_number is None


def test_pf_file_without_sriov_capabilities():
    device = _dev("pci_8086_10c9_sriov_pf.xml")
    assert device.address == "0000:02:00.0"
    assert device.name == "pci_0000_02_00_0"
    assert device.iommu_group == 12
    assert device.class_code is None
    assert not device.is_pf


def test_mdev():
    assert _dev("mdev_d069d019_36ea_4111_8f0a_8c9a70e21366.xml") == Mdev(
        uuid="d069d019-36ea-4111-8f0a-8c9a70e21366",
        type="i915-GVTg_V5_8",
        parent="0000:00:02.0",
    )


@pytest.mark.parametrize(
    "name", ["computer.xml", "drm_renderD129.xml"]
)
def test_other_devices_are_ignored(name):
    assert _dev(name) is None


def test_mdev_uuid_from_name_and_unknown_parent():
    mdev = libvirt_xml.parse_node_device(
        "<device><name>mdev_d069d019_36ea_4111_8f0a_8c9a70e21366</name>"
        "<parent>css_0_0_0001</parent>"
        "<capability type='mdev'><type id='t'/></capability></device>"
    )
    assert mdev == Mdev("d069d019-36ea-4111-8f0a-8c9a70e21366", "t", None)


def test_numa_minus_one_and_hex_address():
    device = libvirt_xml.parse_node_device(
        "<device><name>pci_0001_3b_00_0</name><capability type='pci'>"
        "<domain>0x1</domain><bus>0x3b</bus><slot>0</slot>"
        "<function>0</function><numa node='-1'/></capability></device>"
    )
    assert device.address == "0001:3b:00.0"
    assert device.numa_node is None


def _pci(body: str) -> str:
    return (
        "<device><name>pci_x</name><capability type='pci'>"
        f"{body}</capability></device>"
    )


_ADDR = "<domain>0</domain><bus>2</bus><slot>16</slot><function>7</function>"


@pytest.mark.parametrize(
    "text,reason",
    [
        ("", "empty document"),
        ("<device><name>x</name>", "not well-formed"),
        ("<capabilities/>", "expected a <device> document"),
        ("<device><capability type='pci'/></device>", "has no <name>"),
        (
            _pci("<domain>0</domain><bus>2</bus><slot>1</slot>"),
            "PCI capability has no <function>",
        ),
        (
            _pci(
                "<domain>0</domain><bus>two</bus><slot>1</slot>"
                "<function>0</function>"
            ),
            "<bus> is not an integer: 'two'",
        ),
        (_pci(_ADDR + "<iommuGroup/>"), "<iommuGroup> number is missing"),
        (_pci(_ADDR + "<vendor id='0xzz'/>"), "<vendor> id is not an integer"),
        (
            _pci(_ADDR + "<capability type='virt_functions' maxCount='x'/>"),
            "maxCount is not an integer",
        ),
        (
            _pci(
                _ADDR + "<capability type='virt_functions'><address "
                "domain='0' bus='0x2' slot='0'/></capability>"
            ),
            "virt_functions address function is missing",
        ),
        (
            _pci(_ADDR + "<capability type='phys_function'/>"),
            "phys_function has 0 addresses",
        ),
        (
            _pci(
                _ADDR + "<capability type='mdev_types'><type><name>x</name>"
                "</type></capability>"
            ),
            "mdev_types <type> has no id",
        ),
        (
            _pci(
                _ADDR + "<capability type='mdev_types'><type id='a'>"
                "<availableInstances>many</availableInstances></type>"
                "</capability>"
            ),
            "mdev type a availableInstances",
        ),
        (
            "<device><name>mdev_x</name><capability type='mdev'>"
            "<uuid>u</uuid></capability></device>",
            "has no <type id=...>",
        ),
        (
            "<device><name>mdev_x</name><capability type='mdev'>"
            "<type id='t'/></capability></device>",
            "has no <uuid>",
        ),
    ],
)
def test_malformed_node_devices(text, reason):
    with pytest.raises(HostDataError) as err:
        libvirt_xml.parse_node_device(text, "/snap/nodedev/x.xml")
    assert str(err.value).startswith("/snap/nodedev/x.xml")
    assert reason in str(err.value)


# ----------------------------------------------------------------- assembly


def test_host_info_from_xml():
    host = libvirt_xml.host_info_from_xml(
        hostname="h",
        source="s",
        capabilities_xml=_caps("vircaps-x86_64-basic.xml"),
        nodedev_xmls={
            str(p): p.read_text()
            for p in ALL_FILES
            if p.name
            in (
                "pci_0000_42_00_0_vpd.xml",
                "computer.xml",
                "mdev_d069d019_36ea_4111_8f0a_8c9a70e21366.xml",
            )
        },
    )
    assert host.memory_kb == 10 * 1048576
    assert [d.address for d in host.pci_devices] == ["0000:42:00.0"]
    assert host.pci_device("0000:42:00.0").max_vfs == 16
    assert [m.type for m in host.mdevs] == ["i915-GVTg_V5_8"]


def test_host_info_skips_a_second_document_for_one_address(caplog):
    files = [p for p in ALL_FILES if p.name.startswith("pci_0000_02_10_7")]
    xmls = {str(p): p.read_text() for p in files}
    with pytest.raises(HostDataError, match="0000:02:10.7 is described twice"):
        libvirt_xml.host_info_from_xml(
            hostname="h",
            source="s",
            capabilities_xml=_caps("vircaps-x86_64-basic.xml"),
            nodedev_xmls=xmls,
            skip_bad_devices=False,
        )
    host = libvirt_xml.host_info_from_xml(
        hostname="h",
        source="s",
        capabilities_xml=_caps("vircaps-x86_64-basic.xml"),
        nodedev_xmls=xmls,
    )
    assert [d.address for d in host.pci_devices] == ["0000:02:10.7"]
    assert "described twice" in caplog.text and "skipped" in caplog.text


def test_one_bad_node_device_is_skipped_and_named(caplog):
    host = libvirt_xml.host_info_from_xml(
        hostname="h",
        source="s",
        capabilities_xml=_caps("vircaps-x86_64-basic.xml"),
        nodedev_xmls={
            "uri nodedev pci_bad": "<device><name>x",
            "uri nodedev pci_ok": _PF.format(vfs=""),
        },
    )
    assert [d.address for d in host.pci_devices] == ["0000:3b:00.0"]
    assert "uri nodedev pci_bad: not well-formed XML" in caplog.text


_PF = (
    "<device><name>pci_0000_3b_00_0</name><capability type='pci'>"
    "<class>0x020000</class><domain>0</domain><bus>0x3b</bus><slot>0</slot>"
    "<function>0</function>{vfs}</capability></device>"
)
_NET = (
    "<device><name>net_{ifname}_00</name><parent>{parent}</parent>"
    "<capability type='net'><interface>{ifname}</interface></capability>"
    "</device>"
)


def test_net_devices_name_their_parent_pci_netdevs():
    host = libvirt_xml.host_info_from_xml(
        hostname="h",
        source="s",
        capabilities_xml=_caps("vircaps-x86_64-basic.xml"),
        nodedev_xmls={
            "a": _PF.format(vfs=""),
            "b": _NET.format(ifname="ens1f0", parent="pci_0000_3b_00_0"),
            "c": _NET.format(ifname="ens1f0", parent="pci_0000_3b_00_0"),
            "d": _NET.format(ifname="eth9", parent="computer"),
        },
    )
    assert host.pci_devices[0].netdevs == ("ens1f0",)


def test_net_device_without_interface_is_refused():
    with pytest.raises(HostDataError, match="no <interface>"):
        libvirt_xml.parse_node_device(
            "<device><name>n</name><capability type='net'/></device>", "f")


def test_virt_functions_are_deduplicated_without_the_pf_itself():
    vfs = (
        "<capability type='virt_functions' maxCount='8'>"
        "<address domain='0' bus='0x3b' slot='0' function='0'/>"
        "<address domain='0' bus='0x3b' slot='2' function='0'/>"
        "<address domain='0' bus='0x3b' slot='2' function='0'/>"
        "</capability>"
    )
    device = libvirt_xml.parse_node_device(_PF.format(vfs=vfs), "f")
    assert device.virt_functions == ("0000:3b:02.0",)


def test_mdevs_with_one_uuid_on_two_parents_are_two():
    mdev = (
        "<device><name>mdev_{n}</name><parent>{parent}</parent>"
        "<capability type='mdev'><type id='nvidia-35'/>"
        "<uuid>d069d019-36ea-4111-8f0a-8c9a70e21366</uuid></capability>"
        "</device>"
    )
    host = libvirt_xml.host_info_from_xml(
        hostname="h",
        source="s",
        capabilities_xml=_caps("vircaps-x86_64-basic.xml"),
        nodedev_xmls={
            "a": mdev.format(n=1, parent="pci_0000_3b_00_0"),
            "b": mdev.format(n=2, parent="pci_0000_3c_00_0"),
        },
    )
    assert [m.parent for m in host.mdevs] == ["0000:3b:00.0", "0000:3c:00.0"]


@pytest.mark.parametrize(
    "cell,reason",
    [
        ("<cell id='-1'><cpus num='0'/></cell>",
         "<cell> attribute id '-1' is out of range 0..1023"),
        ("<cell id='0'><cpus num='1'><cpu id='-2'/></cpus></cell>",
         "cell 0 <cpu> id '-2' is out of range 0..65535"),
        ("<cell id='0'><pages size='0'>1</pages></cell>",
         "size must be at least 1 KiB"),
        ("<cell id='0'><pages size='4'>-1</pages></cell>",
         "count is negative"),
        ("<cell id='0'><cpus num='1'><cpu id='0' siblings='0-999999999999'/>"
         "</cpus></cell>", "bad CPU list"),
    ],
)
def test_odd_capabilities_values_are_refused(cell, reason):
    with pytest.raises(HostDataError) as err:
        libvirt_xml.parse_capabilities(_caps_doc(cell), "caps.xml")
    assert err.value.source.startswith("caps.xml")
    assert reason in str(err.value)


@pytest.mark.parametrize(
    "cpu,expected",
    [
        ("", 4),
        ("<cpu><pages unit='KiB' size='64'/><pages size='2048'/></cpu>", 64),
        ("<cpu><pages unit='KiB' size='4'/><pages size='2048'/></cpu>", 4),
    ],
)
def test_base_page_size(cpu, expected):
    doc = f"<capabilities><host>{cpu}</host></capabilities>"
    assert libvirt_xml.parse_base_page_kb(doc, "caps.xml") == expected


# ------------------------------------------- ids bounded by the kernel's limits


@pytest.mark.parametrize(
    "cell,reason",
    [
        ("<cell id='100000000000000000000'><cpus num='0'/></cell>",
         "<cell> attribute id '100000000000000000000' is out of range 0..1023"),
        ("<cell id='1024'><cpus num='0'/></cell>",
         "<cell> attribute id '1024' is out of range 0..1023"),
        # Python's int() reads these as 1024 and 3.
        ("<cell id='\uff11\uff10\uff12\uff14'><cpus num='0'/></cell>",
         "<cell> attribute id is not an integer: '\uff11\uff10\uff12\uff14'"
         " (ASCII digits only)"),
        ("<cell id='0'><cpus num='1'><cpu id='\u0663'/></cpus></cell>",
         "cell 0 <cpu> id is not an integer: '\u0663'"),
        ("<cell id='0'><cpus num='1'><cpu id='100000000000000000000'/>"
         "</cpus></cell>", "cell 0 <cpu> id '100000000000000000000' is out of "
         "range 0..65535"),
        ("<cell id='0'><cpus num='1'><cpu id='1_0'/></cpus></cell>",
         "cell 0 <cpu> id is not an integer: '1_0'"),
        # \u0660-\u0663 is what int() and str.isdigit read as 0-3.
        ("<cell id='0'><cpus num='1'><cpu id='0' "
         "siblings='\u0660-\u0663'/></cpus></cell>", "bad CPU list"),
        ("<cell id='0'><distances><sibling id='5000' value='10'/></distances>"
         "</cell>", "distance sibling id '5000' is out of range 0..1023"),
    ],
)
def test_cell_and_cpu_ids_beyond_the_kernels_limits_are_refused(cell, reason):
    with pytest.raises(HostDataError) as err:
        libvirt_xml.parse_capabilities(_caps_doc(cell), "caps.xml")
    assert reason in str(err.value)


def test_the_highest_ids_the_kernel_allows_are_accepted():
    (cell,) = libvirt_xml.parse_capabilities(_caps_doc(
        "<cell id='1023'><cpus num='1'><cpu id='65535'/></cpus></cell>"),
        "caps.xml")
    assert cell.id == 1023 and cell.cpu_ids == {65535}


def _pci_at(domain: str, bus: str, slot: str, function: str, extra: str = "") -> str:
    return _pci(f"<domain>{domain}</domain><bus>{bus}</bus><slot>{slot}</slot>"
                f"<function>{function}</function>{extra}")


@pytest.mark.parametrize(
    "text,reason",
    [
        (_pci_at("0", "-2", "0", "0"), "<bus> '-2' is out of range 0..255"),
        (_pci_at("0", "0x100", "0", "0"), "<bus> '0x100' is out of range 0..255"),
        (_pci_at("0", "0", "0x20", "0"), "<slot> '0x20' is out of range 0..31"),
        (_pci_at("0", "0", "0", "99"), "<function> '99' is out of range 0..7"),
        (_pci_at("1" * 30, "0", "0", "0"),
         "<domain> '%s' is out of range 0..65535" % ("1" * 30)),
        (_pci_at("0x10000", "0", "0", "0"),
         "<domain> '0x10000' is out of range 0..65535"),
        (_pci_at("0", "\uff12", "0", "0"), "<bus> is not an integer"),
        (_pci_at("0", "0", "0", "0", "<numa node='100000000000000000000'/>"),
         "<numa> node '100000000000000000000' is out of range ..1023"),
        (_pci_at("0", "0", "0", "0",
                 "<capability type='virt_functions'><address domain='0' "
                 "bus='0x2' slot='0' function='9'/></capability>"),
         "virt_functions address function '9' is out of range 0..7"),
        (_pci_at("0", "0", "0", "0",
                 "<capability type='virt_functions' maxCount='70000'/>"),
         "maxCount '70000' is out of range 0..65535"),
        (_pci_at("0", "0", "0", "0", "<vendor id='0x18086'/>"),
         "<vendor> id '0x18086' is out of range 0..65535"),
    ],
)
def test_pci_addresses_beyond_pcis_limits_are_refused(text, reason):
    with pytest.raises(HostDataError) as err:
        libvirt_xml.parse_node_device(text, "/snap/nodedev/x.xml")
    assert reason in str(err.value)


def test_the_highest_pci_address_is_accepted():
    device = libvirt_xml.parse_node_device(
        _pci_at("0xffff", "0xff", "0x1f", "7", "<numa node='1023'/>"))
    assert device.address == "ffff:ff:1f.7"
    assert device.numa_node == 1023


def test_a_device_out_of_range_is_skipped_and_never_becomes_a_provider(caplog):
    """A node device with function 99 is skipped with a warning, as any bad
    device; the host's other devices stay."""
    host = libvirt_xml.host_info_from_xml(
        hostname="h", source="s",
        capabilities_xml=_caps("vircaps-x86_64-basic.xml"),
        nodedev_xmls={"bad": _pci_at("0", "0x3b", "0", "99"),
                      "good": _pci_at("0", "0x3c", "0", "0")})
    assert [d.address for d in host.pci_devices] == ["0000:3c:00.0"]
    assert "bad (pci_x): <function> '99' is out of range 0..7; node device skipped" \
        in caplog.text


# ------------------------------------------------- the host's name, checked


@pytest.mark.parametrize("hostname, rule", [
    ("", "must not be empty"),
    ("h" * 201, "is 201 characters long; Placement allows at most 200"),
    ("a\x00b", "contains a NUL character"),
    ("\udcc3", "is not valid Unicode (a lone surrogate at position 0)"),
])
def test_a_libvirt_host_name_placement_refuses_is_an_input_error(hostname, rule):
    """getHostname's answer becomes the root provider's name: one Placement
    refuses is refused at discovery, naming the URI it came from."""
    from compute_plugins.exception import InputError
    from compute_plugins.host import libvirt_host

    raw = libvirt_host.RawHost(
        uri="qemu:///system", hostname=hostname, memory_kb=1024,
        capabilities_xml=_caps("vircaps-x86_64-basic.xml"), nodedevs={})
    with pytest.raises(InputError) as err:
        libvirt_host.host_info_from_raw(raw)
    assert str(err.value).startswith(
        "qemu:///system: host name %r cannot be the compute node's Placement "
        "provider name: it %s" % (hostname, rule))


def test_a_host_name_that_is_a_path_is_a_valid_provider_name():
    host = libvirt_xml.host_info_from_xml(
        hostname="../../etc/x", source="s",
        capabilities_xml=_caps("vircaps-x86_64-basic.xml"), nodedev_xmls={})
    assert host.hostname == "../../etc/x"


def test_pci_names_with_a_slot_beyond_0x1f_name_no_parent():
    assert libvirt_xml.address_from_name("pci_0000_3b_1f_7") == "0000:3b:1f.7"
    assert libvirt_xml.address_from_name("pci_0000_3b_20_0") is None
