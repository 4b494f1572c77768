"""The one helper for custom names and the stable provider uuids."""

from __future__ import annotations

import pytest

from compute_plugins import names


@pytest.mark.parametrize("parts, expected", [
    (("MDEV_TYPE", "nvidia-35"), "CUSTOM_MDEV_TYPE_NVIDIA_35"),
    (("physnet", "phys.net 1"), "CUSTOM_PHYSNET_PHYS_NET_1"),
    (("CUSTOM_ALREADY",), "CUSTOM_ALREADY"),
])
def test_custom_name(parts, expected):
    assert names.custom_name(*parts) == expected
    assert names.is_custom(expected)


def test_custom_name_needs_a_part():
    with pytest.raises(ValueError):
        names.custom_name("")


def test_standard_and_custom_names_are_valid():
    assert names.is_valid_resource_class("VGPU")
    assert names.is_valid_resource_class("CUSTOM_X")
    assert not names.is_valid_resource_class("custom_x")
    assert names.is_valid_trait("HW_NUMA_ROOT")
    assert not names.is_valid_trait("HW_NO_SUCH_TRAIT_EVER")


def test_provider_uuids_are_stable_and_distinct():
    first = names.provider_uuid("node1", "pci", "0000:3b:00.0")
    assert first == names.provider_uuid("node1", "pci", "0000:3b:00.0")
    assert first != names.provider_uuid("node2", "pci", "0000:3b:00.0")
    assert names.provider_uuid("node1") != first


def test_provider_names_follow_nova():
    assert names.device_provider_name("cn1", "pci", "0000:3b:00.0") == "cn1_pci_0000_3b_00_0"
    assert names.numa_provider_name("cn1", 1) == "cn1_NUMA1"
