"""Generic granular keys, vgpu, sriov (ports, aliases, affinity) and disk."""

from __future__ import annotations

import pytest

from compute_plugins.conf import pci as pci_conf
from compute_plugins.exception import ConfigError
from compute_plugins.request.errors import RequestInputError
from compute_plugins.request.spec import build_request_spec
from compute_plugins.scheduler.query import preview
from tests.unit.request.conftest import build, make_manager, problems

AGG = "7a9bd3a0-3a3c-4a5e-9f7c-6a1f1e5b1c2d"
AGG2 = "0b3b6c1e-7f7a-4a8b-9a5e-1c2d3e4f5a6b"


def assert_problem(found, key, text):
    assert any(p.key == key and text in p.rule for p in found), found


def groups(spec):
    return {g.requester_id: g for g in preview(spec).alternatives[0].groups}


# -- generic -----------------------------------------------------------------------

def test_generic_resources_and_traits(manager):
    spec = build(manager, {"resources1:CUSTOM_FPGA": "2", "trait1:CUSTOM_BLUE": "required",
                           "trait:HW_CPU_X86_AVX2": "required",
                           "trait1:CUSTOM_RED": "forbidden", "group_policy": "none",
                           "member_of1": "in:%s,%s" % (AGG, AGG2),
                           "member_of": "!%s" % AGG2})
    got = groups(spec)
    assert got["1"].resources == {"CUSTOM_FPGA": 2}
    assert got["1"].required_traits == {"CUSTOM_BLUE"}
    assert got["1"].forbidden_traits == {"CUSTOM_RED"}
    assert got["1"].member_of == (tuple(sorted((AGG, AGG2))),)
    # unsuffixed traits describe the host: root_required (see query module)
    assert "HW_CPU_X86_AVX2" in preview(spec).alternatives[0].root_required
    assert not got[""].required_traits
    assert got[""].forbidden_aggregates == {AGG2}
    assert spec.generic.group_policy == "none"
    qs = preview(spec).alternatives[0].to_querystring()
    assert "member_of1=in%3A" in qs and "member_of=%21in%3A" in qs


def test_unsuffixed_traits_are_root_traits(manager):
    alt = preview(build(manager, {"trait:CUSTOM_X": "required",
                                  "trait:CUSTOM_Y": "forbidden"})).alternatives[-1]
    assert "CUSTOM_X" in alt.root_required and "CUSTOM_Y" in alt.root_forbidden
    assert not any(g.required_traits for g in alt.groups if not g.requester_id)


def test_image_traits_required(manager):
    spec = build(manager, image={"traits_required": ["HW_CPU_X86_AVX2"]})
    assert "HW_CPU_X86_AVX2" in preview(spec).alternatives[0].root_required


@pytest.mark.parametrize("specs,key,text", [
    ({"resources:FOO": "1"}, "resources:FOO", "does not appear to be a valid extra spec"),
    ({"resources1:CUSTOM_X": "many"}, "resources1:CUSTOM_X", "not a valid integer value"),
    ({"resources1:CUSTOM_X": "-1"}, "resources1:CUSTOM_X", "less than the min value"),
    ({"trait:CUSTOM_X": "wanted"}, "trait:CUSTOM_X",
     "Validation failed; 'wanted' is not one of: required, forbidden."),
    ({"trait:lower": "required"}, "trait:lower", "does not appear to be a valid"),
    ({"group_policy": "all"}, "group_policy", "is not one of: isolate, none"),
    ({"member_of": "not-a-uuid"}, "member_of", "valid UUID(s)"),
    ({"member_of": "%s,%s" % (AGG, AGG2)}, "member_of", "'in:' prefix"),
    ({"pci_passthrough:foo": "1"}, "pci_passthrough:foo", "does not appear"),
    ({"resources_NUMA0:VGPU": "1", "hw:numa_nodes": "1"}, "resources_NUMA0:VGPU",
     "reserved for the framework"),
    ({"resources_NUMA0:CUSTOM_X": "1"}, "resources_NUMA0:CUSTOM_X",
     "reserved for the framework"),
    ({"trait_NUMA0:HW_NUMA_ROOT": "forbidden", "hw:numa_nodes": "1"},
     "trait_NUMA0:HW_NUMA_ROOT", "reserved for the framework"),
    ({"member_of_x": "!" + AGG}, "member_of_x", "reserved for the framework"),
    ({"resources1:CUSTOM_Z": "0", "trait1:CUSTOM_X": "required"}, "resources1",
     "but no resources"),
    ({"member_of2": AGG}, "resources2", "but no resources"),
    ({"trait:CUSTOM_X": "required"}, None, None),
    ({"trait1:CUSTOM_X": "required", "trait1:CUSTOM_Y": "forbidden",
      "resources1:CUSTOM_Z": "1"}, None, None),
    ({"hw:cpu_policy": "dedicated", "hw:cpu_thread_policy": "require",
      "trait:HW_CPU_HYPERTHREADING": "forbidden"}, "trait:HW_CPU_HYPERTHREADING",
     "not possible"),

])
def test_generic_invalid(manager, specs, key, text):
    if key is None:  # valid: the control case of the row above
        build(manager, specs)
        return
    assert_problem(problems(manager, specs), key, text)


def test_required_and_forbidden_on_the_host_is_refused(manager):
    found = problems(manager, {"trait:HW_CPU_X86_AVX2": "forbidden"},
                     image={"traits_required": ["HW_CPU_X86_AVX2"]})
    assert_problem(found, "trait:HW_CPU_X86_AVX2", "both required and forbidden")


def test_group_policy_none_is_accepted_with_guest_nodes(manager):
    spec = build(manager, {"hw:numa_nodes": "2", "group_policy": "none"})
    alt = preview(spec).alternatives[0]
    assert alt.group_policy == "none" and alt.distinct == ("_NUMA0", "_NUMA1")


def test_user_group_policy_is_honoured(manager):
    spec = build(manager, {"hw:numa_nodes": "2", "group_policy": "isolate"})
    assert preview(spec).alternatives[0].group_policy == "isolate"


@pytest.mark.parametrize("key", ["resources1:CUSTOM_X", "resources:VGPU",
                                 "resources:DISK_GB", "resources:PCPU"])
def test_resource_amounts_bounded(manager, key):
    assert_problem(problems(manager, {key: str(2**31)}), key, "greater than the max")


def test_member_of_is_normalised(manager):
    spec = build(manager, {"member_of": "in:" + AGG.upper()})
    assert groups(spec)[""].member_of == ((AGG,),)


@pytest.mark.parametrize("vnic", ["bogus", "Direct", ""])
def test_unknown_vnic_type(manager, vnic):
    found = problems(manager, ports=[{"vnic_type": vnic, "physnet": "p"}])
    assert_problem(found, "vnic_type", "is not one of: normal, direct")


def test_other_namespaces_are_left_alone(manager):
    """Keys of other services' namespaces are kept in the flavor, unjudged,
    and change nothing the scheduler asks for."""
    others = {"quota:cpu_shares": "10", "aggregate_instance_extra_specs:ssd": "true",
              "capabilities:cpu_info": "x"}
    spec = build(manager, others)
    plain = build(manager, {})
    assert dict(spec.flavor.extra_specs) == others
    assert spec.requests == plain.requests
    assert preview(spec) == preview(plain)


# -- vgpu ---------------------------------------------------------------------------

def test_vgpu_unsuffixed_and_numbered(manager):
    spec = build(manager, {"resources:VGPU": "1",
                           "trait:CUSTOM_MDEV_TYPE_NVIDIA_35": "required",
                           "resources2:VGPU": "2",
                           "trait2:CUSTOM_MDEV_TYPE_NVIDIA_36": "required",
                           "resources2:CUSTOM_EXTRA": "1"})
    got = groups(spec)
    assert got["_VGPU"].resources == {"VGPU": 1}
    assert got["_VGPU"].required_traits == {"CUSTOM_MDEV_TYPE_NVIDIA_35"}
    # the generic class of the same suffix lands in the same group
    assert got["2"].resources == {"VGPU": 2, "CUSTOM_EXTRA": 1}
    assert spec.request("vgpu").groups[1].mdev_types == {"CUSTOM_MDEV_TYPE_NVIDIA_36"}


@pytest.mark.parametrize("specs,key,text", [
    ({"resources:VGPU": "x"}, "resources:VGPU", "not a valid integer value"),
    ({"trait1:CUSTOM_MDEV_TYPE_A": "required"}, "trait1:CUSTOM_MDEV_TYPE_A",
     "needs a VGPU request in the same group"),
    ({"resources:VGPU": "1", "trait:CUSTOM_MDEV_TYPE_A": "yes"},
     "trait:CUSTOM_MDEV_TYPE_A", "is not one of: required, forbidden"),
    ({"resources:VGPU": "1", "trait:CUSTOM_MDEV_TYPE_A": "required",
      "trait:CUSTOM_MDEV_TYPE_B": "required"}, "trait:CUSTOM_MDEV_TYPE_*",
     "at most one"),
])
def test_vgpu_invalid(manager, specs, key, text):
    assert_problem(problems(manager, specs), key, text)


def test_vgpu_socket_affinity_adds_the_root_trait(manager):
    spec = build(manager, {"resources:VGPU": "1", "hw:numa_nodes": "1",
                           "hw:pci_numa_affinity_policy": "socket"})
    assert "COMPUTE_SOCKET_PCI_NUMA_AFFINITY" in (
        preview(spec).alternatives[0].root_required)


# -- sriov ----------------------------------------------------------------------------

PORT = {"vnic_type": "direct", "physnet": "physnet1", "min_kbps_egress": 1000,
        "min_kbps_ingress": 2000}


def test_direct_port(manager):
    spec = build(manager, ports=[PORT, {"vnic_type": "normal"}])
    group = groups(spec)["_PORT0"]
    assert group.resources == {"SRIOV_NET_VF": 1, "NET_BW_EGR_KILOBIT_PER_SEC": 1000,
                               "NET_BW_IGR_KILOBIT_PER_SEC": 2000}
    assert group.required_traits == {"CUSTOM_PHYSNET_PHYSNET1", "CUSTOM_VNIC_TYPE_DIRECT"}
    assert group.affinity == "legacy"
    assert len(spec.request("sriov").ports) == 1


def test_alias(manager):
    spec = build(manager, {"pci_passthrough:alias": "qat:2, a16:1"})
    got = groups(spec)
    assert got["_PCI0"].resources == {"CUSTOM_PCI_8086_0443": 2}
    assert got["_PCI0"].affinity == "required"
    assert got["_PCI1"].resources == {"CUSTOM_GPU_VF": 1}
    # "blue, big": nova's get_traits strips nothing, " big" is CUSTOM__BIG
    assert got["_PCI1"].required_traits == {"CUSTOM_BLUE", "CUSTOM__BIG"}


@pytest.mark.parametrize("policy", ["required", "preferred", "legacy", "socket"])
def test_pci_numa_affinity_policy(manager, policy):
    spec = build(manager, {"hw:pci_numa_affinity_policy": policy,
                           "hw:numa_nodes": "1"}, ports=[PORT])
    alt = preview(spec).alternatives[0]
    assert next(g for g in alt.groups if g.requester_id == "_PORT0").affinity == policy
    if policy in ("required", "legacy"):
        assert alt.same_subtree == (("_NUMA0", "_PORT0"),)
    else:
        assert alt.same_subtree == ()
    assert ("COMPUTE_SOCKET_PCI_NUMA_AFFINITY" in alt.root_required) == (policy == "socket")


def test_image_policy_twin(manager):
    spec = build(manager, image={"hw_pci_numa_affinity_policy": "preferred"},
                 ports=[PORT])
    assert spec.request("sriov").affinity_policy == "preferred"


@pytest.mark.parametrize("specs,image,ports,key,text", [
    ({"hw:pci_numa_affinity_policy": "strict"}, None, [PORT],
     "hw:pci_numa_affinity_policy", "is not one of: required, preferred, legacy, socket"),
    ({"hw:pci_numa_affinity_policy": "required"}, {"hw_pci_numa_affinity_policy": "legacy"},
     [PORT], "hw_pci_numa_affinity_policy",
     "Image property 'hw_pci_numa_affinity_policy' is not permitted to override the "
     "'hw:pci_numa_affinity_policy' flavor extra spec."),
    ({"pci_passthrough:alias": "nope:1"}, None, (), "pci_passthrough:alias",
     "PCI alias nope is not defined"),
    ({"pci_passthrough:alias": "qat"}, None, (), "pci_passthrough:alias",
     "is not of the format"),
    ({}, None, [{"vnic_type": "direct"}], "physnet", "needs the physical network"),
    ({}, None, [{"vnic_type": "direct-physical", "physnet": "p"}], "vnic_type", "not supported"),
])
def test_sriov_invalid(manager, specs, image, ports, key, text):
    assert_problem(problems(manager, specs, image=image, ports=ports), key, text)


def test_one_problem_for_a_policy_two_plugins_read(manager):
    found = problems(manager, {"resources:VGPU": "1", "hw:pci_numa_affinity_policy": "x"},
                     ports=[{"vnic_type": "direct", "physnet": "p"}])
    assert len([p for p in found if p.key == "hw:pci_numa_affinity_policy"]) == 1


def test_thousands_of_digits_in_an_alias_count_are_a_problem(manager):
    assert_problem(problems(manager, {"pci_passthrough:alias": "qat:" + "1" * 5000}),
                   "pci_passthrough:alias", "")


@pytest.mark.parametrize("alias,text", [
    ('{"name": "x"}', "does not have vendor_id and product_id"),
    ('{"name": "x", "vendor_id": "zz"}', "does not match"),
    ("not json", "Invalid PCI alias definition"),
    ('{"name": "x", "resource_class": "A", "wat": 1}', "Additional properties"),
])
def test_bad_alias_config_is_a_config_error(alias, text):
    manager = make_manager()
    manager.conf.set_override("alias", [alias], group="pci")
    with pytest.raises(ConfigError, match=text):
        build(manager, {"pci_passthrough:alias": "x:1"})
    with pytest.raises(pci_conf.PciInvalidAlias):
        pci_conf.load_aliases(manager.conf)


# -- disk --------------------------------------------------------------------------------

def test_disk_gb_as_nova(manager):
    spec = build(manager, root_gb=10, ephemeral_gb=5, swap=1025)
    assert spec.request("disk").disk_gb == 17  # swap 1025 MiB -> 2 GiB
    assert groups(spec)[""].resources["DISK_GB"] == 17


def test_disk_override_and_zero(manager):
    spec = build(manager, {"resources:DISK_GB": "0"}, root_gb=10)
    assert "DISK_GB" not in groups(spec)[""].resources


def test_shared_storage_aggregate_asks_disk_gb_as_nova_does():
    """The scheduler's own [disk] shared_storage_aggregate does not change
    the query: DISK_GB stays in the unsuffixed group, which a sharing
    provider may serve (hosts of both kinds share one cloud)."""
    manager = make_manager(shared_aggregate=AGG)
    spec = build(manager, root_gb=10)
    assert "_DISK" not in groups(spec)
    assert groups(spec)[""].resources["DISK_GB"] == 10


# -- inputs ---------------------------------------------------------------------------------

@pytest.mark.parametrize("doc,text", [
    ([], "must be a JSON object"),
    ({"vcpus": 1}, "lacks 'memory_mb'"),
    ({"memory_mb": 1}, "lacks 'vcpus'"),
    ({"vcpus": "2", "memory_mb": 1}, "'vcpus' must be an integer"),
    ({"vcpus": 1, "memory_mb": 1, "extra_specs": []}, "must be a JSON object"),
])
def test_unusable_flavor(manager, doc, text):
    with pytest.raises(RequestInputError, match=text):
        build_request_spec(manager.plugins, doc)


@pytest.mark.parametrize("field", ["vcpus", "memory_mb", "root_gb", "swap"])
def test_amounts_above_placement_max_are_unusable_input(manager, field):
    kwargs = {"vcpus": 2, "memory_mb": 2048, field: 2**31}
    with pytest.raises(RequestInputError, match="2147483647"):
        build(manager, {}, **kwargs)


def test_a_port_is_tunneled_or_not(manager):
    """``tunneled`` (nova's NetworkMetadata.tunneled): true or false only."""
    spec = build(manager, {}, ports=[{"id": "p", "tunneled": True}])
    assert spec.ports[0].tunneled is True
    with pytest.raises(RequestInputError,
                       match="port 0 field 'tunneled' must be true or false"):
        build(manager, {}, ports=[{"id": "p", "tunneled": "yes"}])


# -- keys nova schedules on that only an opt-in plugin gives -----------------------

@pytest.mark.parametrize("specs, image, key, what", [
    ({"hw:mem_encryption": "true"}, None, "hw:mem_encryption", "memory encryption"),
    ({}, {"properties": {"hw_mem_encryption": True, "hw_firmware_type": "uefi"}},
     "hw_mem_encryption", "memory encryption"),
    ({"hw:pmem": "SMALL"}, None, "hw:pmem", "virtual persistent memory"),
])
def test_asking_what_no_enabled_plugin_gives_is_refused(manager, specs, image, key,
                                                        what):
    # memenc and pmem are opt-in: without them the guest would run
    # unencrypted / without its NVDIMM, and nothing would say so
    found = problems(manager, specs, image=image)
    assert_problem(found, key, "asks for %s, which no enabled plugin provides" % what)


def test_not_asking_is_still_accepted_without_the_plugins(manager):
    build(manager, {"hw:mem_encryption": "false", "hw:mem_encryption_model": "amd-sev"},
          image={"properties": {"hw_mem_encryption": False}})


# -- keys of an installed plugin that is not enabled -------------------------------

def _without_numa():
    manager = make_manager()
    manager.conf.set_override("enabled_plugins", ["vgpu", "sriov", "disk"],
                              group="compute_plugins")
    return type(manager)(manager.conf)


@pytest.mark.parametrize("key, value", [
    ("hw:cpu_sockets", "2"), ("hw:cpu_max_threads", "1"), ("hw:locked_memory", "true"),
    ("hw:numa_nodes", "2"), ("hw:numa_cpus.0", "0,1"), ("hw:cpu_policy", "dedicated"),
])
def test_a_disabled_plugins_key_names_the_plugin_to_enable(key, value):
    # the numa plugin declares the keys it owns: with it installed but not
    # enabled, its keys are not "unknown" (nova knows them), they are keys
    # nothing here provides
    manager = _without_numa()
    assert "numa" not in manager.plugins
    found = problems(manager, {key: value})
    assert_problem(found, key, "is the numa plugin's key, which no enabled plugin "
                   "provides (add numa to [compute_plugins] enabled_plugins)")
    assert not any("valid extra spec" in p.rule for p in found)


def test_an_unknown_key_is_still_unknown_with_the_plugin_disabled():
    found = problems(_without_numa(), {"hw:cpu_sockts": "2"})
    assert_problem(found, "hw:cpu_sockts", "does not appear to be a valid extra spec")


def test_any_disabled_plugins_declared_keys_are_named():
    # not numa's names in the framework: whatever a plugin declares
    from compute_plugins.request import generic
    from compute_plugins.request.inputs import RequestInput
    ri = RequestInput.from_dicts({"name": "f", "vcpus": 1, "memory_mb": 512,
                                  "root_gb": 0,
                                  "extra_specs": {"hw:acme_widgets": "2",
                                                  "hw:acme": "1",
                                                  "hw:other": "x"}})
    view = ri.for_plugin("framework")
    generic.unknown_keys(view, (), {"acme": ("hw:acme_*",)})
    rules = {p.key: p.rule for p in view.problems}
    assert rules["hw:acme_widgets"].startswith("is the acme plugin's key")
    assert "valid extra spec" in rules["hw:acme"]
    assert "valid extra spec" in rules["hw:other"]


def test_the_numa_plugin_parses_every_key_it_declares(manager):
    # owned_keys must not name a key the enabled plugin leaves unclaimed
    from compute_plugins.request.errors import RequestValidationError
    from resources.numa import NUMAPlugin
    for pattern in NUMAPlugin.owned_keys:
        key = pattern.replace("*", "0")
        try:
            build(manager, {key: "1"})
            found = []
        except RequestValidationError as err:
            found = err.problems
        assert not any("valid extra spec" in p.rule or "plugin's key" in p.rule
                       for p in found), (key, found)
