"""The one helper for custom names and the stable provider uuids."""

from __future__ import annotations

import pytest

from compute_plugins.plugin import names


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


# -------------------------------------------- provider names, file names


def test_the_provider_name_limit_is_placements():
    from placement.schemas import resource_provider

    schema = resource_provider.POST_RP_SCHEMA_V1_14["properties"]["name"]
    assert names.MAX_PROVIDER_NAME == schema["maxLength"] == 200


@pytest.mark.parametrize("name, problem", [
    ("", "must not be empty"),
    ("x" * 201, "is 201 characters long; Placement allows at most 200"),
    ("a\x00", "contains a NUL character (at position 1), which Placement on "
     "PostgreSQL cannot store"),
    ("\udcff", "is not valid Unicode (a lone surrogate at position 0), which "
     "Placement cannot store"),
    (None, "must be a string, not NoneType"),
])
def test_names_placement_refuses(name, problem):
    assert names.provider_name_problem(name) == problem


@pytest.mark.parametrize("name", [
    "x" * 200, "é" * 200, "../../x", "/etc/passwd", "a b\tc\n", "host:agent",
])
def test_names_placement_takes(name):
    assert names.provider_name_problem(name) is None


SAMPLES = ["compute-1.example.org", "../../x", "/abs/path", ".", "..", ".hidden",
           "a%2Fb", "a/b", "é" * 200, "x" * 200, "x" * 201, "x" * 300,
           "x" * 300 + "y", "%_" + "0" * 32, "\U0001f600" * 60, "a\x00b", ""]


@pytest.mark.parametrize("name", SAMPLES)
def test_a_safe_file_name_stays_in_its_directory(tmp_path, name):
    stem = names.safe_file_name(name)
    assert "/" not in stem and "\x00" not in stem
    assert not stem.startswith(".")
    assert 0 < len(stem.encode()) <= names.MAX_FILE_STEM
    # The file can be created, in the directory itself.
    path = tmp_path / (stem + ".contributions.json")
    path.write_text("{}")
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def test_safe_file_names_are_distinct_and_ordinary_names_unchanged():
    assert len({names.safe_file_name(n) for n in SAMPLES}) == len(SAMPLES)
    assert names.safe_file_name("compute-1.example.org") == "compute-1.example.org"
    assert names.safe_file_name("cmp_1~x") == "cmp_1~x"


# ------------------------------------- names a user gives (flavor, image, guest)


@pytest.mark.parametrize("name", ["", "m1.small", "Gäst 客 \U0001f600", "x" * 255])
def test_a_printable_name_of_255_characters_is_taken(name):
    from compute_plugins.util.text import name_problem

    assert name_problem(name) is None


@pytest.mark.parametrize("name, problem", [
    ("a\nb", "character 1 is not printable (\\n)"),
    ("\x1b[31m", "character 0 is not printable (\\x1b)"),
    ("lone \ud800", "character 5 is not printable (\\ud800)"),
    ("rtl \u202e", "character 4 is not printable (\\u202e)"),
    ("x" * 256, "longer than 255 characters"),
])
def test_any_other_name_is_refused_with_the_reason(name, problem):
    from compute_plugins.util.text import name_problem

    assert name_problem(name) == problem


def test_a_long_list_is_capped_with_a_count_of_the_rest():
    from compute_plugins.util.text import capped

    assert capped(["a"] * 20) == ["a"] * 20
    assert capped(["a"] * 23) == ["a"] * 20 + [
        "  ... and 3 more (validate --format json lists them all)"]
