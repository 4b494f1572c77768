"""The vgpu plugin: nova's [devices]/[mdev_<type>] rules, totals, parents."""

from __future__ import annotations

import pytest
from oslo_config import cfg

from compute_plugins import conf as conf_areas
from compute_plugins.exception import ConfigError
from resources.vgpu import InvalidMdevConfig, VGPUPlugin, mdev_type_trait
from tests.unit.resources.helpers import (
    NODE,
    Mdev,
    cell,
    dump,
    gpu,
    host,
    manager,
    record,
    totals,
    update,
)

CELLS = [cell(0, range(4)), cell(1, range(4, 8))]
GPU_A = "0000:84:00.0"
GPU_B = "0000:85:00.0"
GPU_C = "0000:86:00.0"


def view(conf, info):
    return VGPUPlugin(conf).discover(info)


def names_of(conf, info):
    plugin = VGPUPlugin(conf)
    return {c.name: c for c in plugin.provider_contributions(
        plugin.discover(info), NODE)}


def set_types(conf, *types, **addresses):
    conf.set_override("enabled_mdev_types", list(types), "vgpu")
    VGPUPlugin(conf).discover(host())  # registers the [mdev_*] groups
    for mdev_type, addrs in addresses.items():
        conf.set_override("device_addresses", addrs,
                          "mdev_" + mdev_type.replace("_", "-"))


def test_no_enabled_type_no_provider(conf):
    info = host(CELLS, [gpu(GPU_A, nvidia_35=16)])
    assert view(conf, info).gpus == ()


def test_single_type_gpu_under_its_numa_cell(conf):
    set_types(conf, "nvidia-35")
    info = host(CELLS, [gpu(GPU_A, 1, nvidia_35=16, nvidia_36=8)])
    tree = update(manager(conf, ["numa", "vgpu"]), info)
    data = tree.data("node1_pci_0000_84_00_0")
    assert tree.data(data.parent_uuid).name == "node1_NUMA1"
    assert data.inventory == {"VGPU": record(16)}
    assert data.traits == {"CUSTOM_MDEV_TYPE_NVIDIA_35"}
    assert mdev_type_trait("nvidia-35") == "CUSTOM_MDEV_TYPE_NVIDIA_35"


def test_existing_mdevs_of_the_type_count_in_total(conf):
    set_types(conf, "nvidia-35")
    mdevs = [Mdev("u1", "nvidia-35", GPU_A), Mdev("u2", "nvidia-35", GPU_A),
             Mdev("u3", "nvidia-36", GPU_A), Mdev("u4", "nvidia-35", None)]
    info = host(CELLS, [gpu(GPU_A, nvidia_35=14)], mdevs)
    assert view(conf, info).gpus[0].total == 16


def test_gpu_with_zero_total_or_without_the_type_has_no_provider(conf):
    set_types(conf, "nvidia-35")
    info = host(CELLS, [gpu(GPU_A, nvidia_35=0), gpu(GPU_B, nvidia_36=4),
                        gpu(GPU_C, nvidia_35=2)])
    assert list(names_of(conf, info)) == ["node1_pci_0000_86_00_0"]


def test_gpu_exhausted_by_its_mdevs_keeps_its_provider(conf):
    set_types(conf, "nvidia-35")
    info = host(CELLS, [gpu(GPU_A, nvidia_35=0)],
                [Mdev("u1", "nvidia-35", GPU_A)])
    assert view(conf, info).gpus[0].total == 1


def test_types_per_device_addresses_and_default(conf):
    set_types(conf, "nvidia-35", "nvidia-36", "nvidia-37",
              nvidia_35=[GPU_A.upper()], nvidia_36=[], nvidia_37=[])
    info = host(CELLS, [gpu(GPU_A, nvidia_35=16, nvidia_36=8),
                        gpu(GPU_B, nvidia_35=16, nvidia_36=8, nvidia_37=4),
                        gpu(GPU_C, nvidia_37=4)])
    got = {g.address: (g.mdev_type, g.total) for g in view(conf, info).gpus}
    # NOTE: nova: nvidia-36 is the default type (first without addresses);
    # nvidia-37 is ignored with a warning, so GPU_C offers nothing.
    assert got == {GPU_A: ("nvidia-35", 16), GPU_B: ("nvidia-36", 8)}


def test_address_in_two_types_is_refused(conf):
    set_types(conf, "nvidia-35", "nvidia-36",
              nvidia_35=[GPU_A], nvidia_36=[GPU_B, "0000:84:00.0"])
    with pytest.raises(InvalidMdevConfig) as err:
        view(conf, host(CELLS, [gpu(GPU_A, nvidia_35=1)]))
    assert isinstance(err.value, ConfigError)
    assert err.value.option == "[mdev_nvidia-36] device_addresses"
    assert "[mdev_nvidia-35] device_addresses" in str(err.value)
    assert "one mdev type only" in str(err.value)


def test_malformed_address_is_refused(conf):
    set_types(conf, "nvidia-35", nvidia_35=["84:00"])
    with pytest.raises(InvalidMdevConfig, match="'84:00': a PCI address"):
        view(conf, host(CELLS))


def test_parent_is_root_without_numa_plugin_or_cell(conf):
    set_types(conf, "nvidia-35")
    info = host(CELLS, [gpu(GPU_A, 0, nvidia_35=1), gpu(GPU_B, 7, nvidia_35=1),
                        gpu(GPU_C, None, nvidia_35=1)])
    parents = {c.name: c.parent for c in names_of(conf, info).values()}
    assert parents == {"node1_pci_0000_84_00_0": "node1_NUMA0",
                       "node1_pci_0000_85_00_0": None,
                       "node1_pci_0000_86_00_0": None}
    conf.set_override("enabled_plugins", ["vgpu"], "compute_plugins")
    tree = update(manager(conf, ["vgpu"]), info)
    assert {p["parent"] for n, p in dump(tree).items() if n != NODE} == {NODE}


def test_mdev_groups_registered_from_a_config_file(tmp_path):
    path = tmp_path / "cp.conf"
    path.write_text(
        "[vgpu]\nenabled_mdev_types = nvidia-35, nvidia-36\n"
        "[mdev_nvidia-35]\ndevice_addresses = 0000:84:00.0\n"
        "[mdev_nvidia-36]\ndevice_addresses = 0000:85:00.0\n")
    conf = cfg.ConfigOpts()
    conf_areas.register_all(conf)
    plugin = VGPUPlugin(conf)
    conf(["--config-file", str(path)])
    info = host(CELLS, [gpu(GPU_A, nvidia_35=2, nvidia_36=1),
                        gpu(GPU_B, nvidia_35=2, nvidia_36=1)])
    got = {g.address: g.mdev_type for g in plugin.discover(info).gpus}
    assert got == {GPU_A: "nvidia-35", GPU_B: "nvidia-36"}
    assert totals(update(manager(conf, ["numa", "vgpu"]), info))[
        "node1_pci_0000_85_00_0"] == {"VGPU": 1}


def test_max_instances_caps_the_type_as_nova(conf):
    """Existing mdevs count first; a GPU that would pass the cap is dropped."""
    set_types(conf, "nvidia-35")
    conf.set_override("max_instances", 10, "mdev_nvidia-35")
    info = host(CELLS, [gpu(GPU_A, 0, nvidia_35=4), gpu(GPU_B, 0, nvidia_35=8),
                        gpu(GPU_C, 1, nvidia_35=4)],
                mdevs=[Mdev("a" * 8, "nvidia-35", GPU_A)])
    got = {g.address: g.total for g in view(conf, info).gpus}
    # 1 existing + 4 (A) = 5; B's 8 would make 13 > 10: no B; C: 9.
    assert got == {GPU_A: 5, GPU_C: 4}


def test_mdev_class_names_the_inventory(conf):
    set_types(conf, "nvidia-35")
    conf.set_override("mdev_class", "CUSTOM_NVIDIA_35", "mdev_nvidia-35")
    got = names_of(conf, host(CELLS, [gpu(GPU_A, 0, nvidia_35=4)]))
    assert got["node1_pci_0000_84_00_0"].inventory == {
        "CUSTOM_NVIDIA_35": record(4)}


def test_mdev_class_must_be_vgpu_or_custom(conf):
    set_types(conf, "nvidia-35")
    VGPUPlugin(conf).discover(host(CELLS))  # registers [mdev_nvidia-35]
    with pytest.raises(ValueError):
        conf.set_override("mdev_class", "PCPU", "mdev_nvidia-35")
