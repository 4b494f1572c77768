"""The memenc plugin: SEV/SEV-SNP/TDX slots from libvirt's domain
capability captures, nova's request rules, fit/verify, guest XML (compared
with nova's own ``LibvirtConfigGuest*LaunchSecurity``)."""

from __future__ import annotations

import dataclasses
import pathlib
import xml.etree.ElementTree as ET

import pytest

from compute_plugins.host.errors import HostDataError
from compute_plugins.host.libvirt_xml import parse_domain_capabilities
from compute_plugins.host.snapshot import load_snapshot
from compute_plugins.plugin.contract import Rejection
from compute_plugins.request.errors import RequestValidationError
from compute_plugins.request.inputs import RequestInput
from compute_plugins.request.spec import RequestSpec
from resources.memenc import MemEncAssignment, MemEncPlugin, MemEncRequest
from tests.unit.resources.helpers import NODE, manager, parse, state_of, update

HOSTS = pathlib.Path(__file__).parents[3] / "fixtures" / "hosts" / "memenc"
UEFI = {"hw_firmware_type": "uefi", "hw_machine_type": "q35"}
SEV = {"hw:mem_encryption": "true"}


@pytest.fixture
def sev_host():
    return load_snapshot(str(HOSTS / "sev"))


@pytest.fixture
def tdx_host():
    return load_snapshot(str(HOSTS / "tdx"))


def test_domain_capabilities_of_the_sev_capture(sev_host):
    caps = sev_host.domain_caps
    assert (caps.machine, caps.arch) == ("pc-q35-10.0", "x86_64")
    assert caps.sev.cbitpos == 51 and caps.sev.reduced_phys_bits == 1
    assert (caps.sev.max_guests, caps.sev.max_es_guests) == (59, 450)
    assert caps.launch_security == {"sev", "sev-snp"} and not caps.tdx
    assert "efi" in caps.firmware


def test_a_bad_count_names_the_file_and_field():
    text = ("<domainCapabilities><arch>x86_64</arch><features><sev supported='yes'>"
            "<maxGuests>many</maxGuests></sev></features></domainCapabilities>")
    with pytest.raises(HostDataError, match=r"dc.xml.*<sev><maxGuests> is not an integer"):
        parse_domain_capabilities(text, "dc.xml")


def test_sev_host_reports_nova_34s_child_providers(conf, sev_host):
    # the snapshot's kernel enables sev and sev_es (host.json kvm_amd_sev)
    tree = update(manager(conf, ["memenc"]), sev_host)
    sev = tree.data(NODE + "_amd_sev")
    es = tree.data(NODE + "_amd_sev_es")
    assert sev.inventory == {"MEM_ENCRYPTION_CONTEXT": {
        "total": 59, "min_unit": 1, "max_unit": 1, "step_size": 1,
        "allocation_ratio": 1.0}}
    assert es.inventory["MEM_ENCRYPTION_CONTEXT"]["total"] == 450
    assert sev.traits == {"HW_CPU_X86_AMD_SEV"}
    assert es.traits == {"HW_CPU_X86_AMD_SEV_ES"}
    assert not tree.exists(NODE + "_amd_sev_snp")
    assert tree.data(NODE).inventory == {}  # nothing on the root (nova 34)


@pytest.mark.parametrize("kernel, models", [
    # SEV-SNP enabled: SEV-ES is not offered (nova: they share the ES ASIDs)
    ({"sev", "sev-es", "sev-snp"}, ["amd-sev", "amd-sev-snp"]),
    ({"sev", "sev-es"}, ["amd-sev", "amd-sev-es"]),
    ({"sev"}, ["amd-sev"]),
    (set(), []),  # kvm_amd without SEV: libvirt's <sev> alone is not enough
    (None, ["amd-sev", "amd-sev-snp"]),  # unknown kernel: domain capabilities
])
def test_the_kernel_enables_each_model_as_novas_checks(conf, sev_host, kernel, models):
    host = dataclasses.replace(sev_host, kvm_amd_sev=None if kernel is None
                               else frozenset(kernel))
    assert [s.model for s in MemEncPlugin(conf).discover(host).slots] == models


def test_tdx_needs_num_intel_tdx_guests(conf, tdx_host):
    assert not update(manager(conf, ["memenc"]), tdx_host).exists(NODE + "_intel_tdx")
    conf.set_override("num_intel_tdx_guests", 8, "libvirt")
    tree = update(manager(conf, ["memenc"]), tdx_host)
    tdx = tree.data(NODE + "_intel_tdx")
    assert tdx.inventory["MEM_ENCRYPTION_CONTEXT"]["total"] == 8
    assert tdx.traits == {"HW_CPU_X86_INTEL_TDX"}


def test_no_domain_capabilities_no_provider(conf, tdx_host):
    host = dataclasses.replace(tdx_host, domain_caps=None)
    assert MemEncPlugin(conf).discover(host).slots == ()


def problems(conf, extra_specs, image=None):
    plugin = MemEncPlugin(conf)
    ri = RequestInput.from_dicts({"name": "f", "vcpus": 2, "memory_mb": 2048,
                                  "extra_specs": extra_specs},
                                 {"name": "img", "properties": image or {}}
                                 ).for_plugin("memenc")
    request = plugin.parse_request(ri)
    return request, [(p.key, p.rule) for p in ri.problems]


def test_request_as_nova_translates_it(conf):
    request = parse(MemEncPlugin(conf), SEV, image=UEFI)
    assert request == MemEncRequest(model="amd-sev")
    (group,) = MemEncPlugin(conf).request_groups(request)
    assert dict(group.resources) == {"MEM_ENCRYPTION_CONTEXT": 1}
    assert group.required_traits == {"HW_CPU_X86_AMD_SEV"}


def test_image_alone_asks_and_model_from_image(conf):
    request = parse(MemEncPlugin(conf), {}, image={
        **UEFI, "hw_mem_encryption": True, "hw_mem_encryption_model": "amd-sev-es"})
    assert request.model == "amd-sev-es"


def test_false_asks_nothing(conf):
    assert parse(MemEncPlugin(conf), {"hw:mem_encryption": "false"}) is None


@pytest.mark.parametrize("specs, image, key, rule", [
    (SEV, {}, "hw:mem_encryption", "Memory encryption is requested by "
     "hw:mem_encryption extra spec in f flavor but the image metadata doesn't have "
     "the 'hw_firmware_type' property set to 'uefi'"),
    ({}, {"hw_mem_encryption": "yes", "hw_firmware_type": "bios"}, "hw_mem_encryption",
     "requested by hw_mem_encryption property of image img but"),
    (SEV, {**UEFI, "hw_machine_type": "pc-i440fx-8.0"}, "hw_machine_type",
     "q35 type is required for amd-sev to work"),
    ({"hw:mem_encryption": "false"}, {**UEFI, "hw_mem_encryption": True},
     "hw_mem_encryption", "conflicting with image img"),
    ({**SEV, "hw:mem_encryption_model": "amd-sev"},
     {**UEFI, "hw_mem_encryption_model": "intel-tdx"}, "hw_mem_encryption_model",
     "conflicting"),
    ({**SEV, "hw:mem_encryption_model": "arm-cca"}, UEFI, "hw:mem_encryption_model",
     "is not one of: amd-sev, amd-sev-es, amd-sev-snp, intel-tdx"),
    ({**SEV, "hw:mem_encryption_model": "amd-sev-snp"}, UEFI, "hw_firmware_stateless",
     "requires stateless firmware"),
    ({"hw:mem_encryption": "maybe"}, UEFI, "hw:mem_encryption",
     "is not a valid boolean-like value"),
])
def test_nova_refuses_and_so_do_we(conf, specs, image, key, rule):
    request, found = problems(conf, specs, image)
    assert request is None
    assert any(k == key and rule in r for k, r in found), found


def test_a_problem_is_one_line_of_the_request_error(conf):
    with pytest.raises(RequestValidationError) as err:
        RequestSpec.build(manager(conf, ["memenc"]).plugins,
                          RequestInput.from_dicts({"name": "f", "vcpus": 1,
                                                   "memory_mb": 512,
                                                   "extra_specs": SEV}))
    assert "'hw_firmware_type' property set to 'uefi'" in str(err.value)


def test_fit_takes_a_slot_and_verify_refuses_when_full(conf, sev_host):
    plugin = MemEncPlugin(conf)
    view = plugin.discover(sev_host)
    request = MemEncRequest(model="amd-sev")
    state = state_of(plugin, view)
    decided = plugin.fit(state, request, None, {})
    assert isinstance(decided, MemEncAssignment)
    assert decided.provider_uuid == state.model("amd-sev").provider_uuid
    full = state_of(plugin, view, [decided] * 59)
    assert full.model("amd-sev").used == 59
    why = plugin.verify(full, request, decided)
    assert isinstance(why, Rejection) and "all 59 amd-sev slots" in why.reason
    assert isinstance(plugin.fit(full, request, None, {}), Rejection)
    # the other model's slots are not these
    es = plugin.fit(full, MemEncRequest(model="amd-sev-es"), None, {})
    assert isinstance(es, MemEncAssignment)


def test_fit_follows_the_mappings_and_refuses_an_absent_model(conf, sev_host):
    plugin = MemEncPlugin(conf)
    state = state_of(plugin, plugin.discover(sev_host))
    sev_rp = state.model("amd-sev").provider_uuid
    assert isinstance(plugin.fit(state, MemEncRequest(), {"_MEMENC": [sev_rp]}, {}),
                      MemEncAssignment)
    wrong = plugin.fit(state, MemEncRequest(), {"_MEMENC": ["other"]}, {})
    assert isinstance(wrong, Rejection) and "allocated from other" in wrong.reason
    tdx = plugin.fit(state, MemEncRequest(model="intel-tdx"), None, {})
    assert isinstance(tdx, Rejection)
    assert "offers no intel-tdx" in tdx.reason and "amd-sev (59 slots)" in tdx.reason


@pytest.mark.parametrize("model", ["amd-sev", "amd-sev-es", "amd-sev-snp", "intel-tdx"])
def test_launch_security_is_novas(conf, model):
    from nova.objects import fields
    from nova.virt.libvirt import config as vconfig

    if model == "intel-tdx":
        theirs = vconfig.LibvirtConfigGuestTDXLaunchSecurity()
    elif model == "amd-sev-snp":
        theirs = vconfig.LibvirtConfigGuestSEVSNPLaunchSecurity()
    else:
        theirs = vconfig.LibvirtConfigGuestSEVLaunchSecurity()
        if model == fields.MemEncryptionModel.AMD_SEV_ES:
            theirs.policy = theirs.DEFAULT_SEV_ES_POLICY
    ours = MemEncPlugin(conf).guest_config(MemEncRequest(model=model),
                                           MemEncAssignment(model=model, provider_uuid="u"))
    assert ours[0].parent == "domain"
    assert (ET.canonicalize(ours[0].xml, strip_text=True)
            == ET.canonicalize(theirs.to_xml(), strip_text=True))
    locked = [f.xml for f in ours[1:]]
    assert locked == (["<memoryBacking><locked/></memoryBacking>"]
                      if model in ("amd-sev", "amd-sev-es") else [])


def test_conformance_on_the_sev_capture():
    from compute_plugins.testing import assert_conformant, snapshot_host

    report = assert_conformant(MemEncPlugin, hosts=[snapshot_host(str(HOSTS / "sev"))])
    assert report.result("fit-verify").status == "PASS"
    assert report.result("guest-xml").status in ("PASS", "SKIP")
    assert "60 decisions" in report.result("fit-verify").detail  # SEV and SEV-ES


def test_nodename_is_the_root(conf, sev_host):
    plugin = MemEncPlugin(conf)
    names = [c.name for c in plugin.provider_contributions(plugin.discover(sev_host), NODE)]
    assert names == [NODE + "_amd_sev", NODE + "_amd_sev_es"]


@pytest.mark.parametrize("model", ["amd-sev", "amd-sev-es", "amd-sev-snp", "intel-tdx"])
def test_each_models_rules_are_novas(model):
    """Trait, locked memory and stateless firmware as nova 34's
    ``MemEncryptionConfig`` classes say (TDX needs stateless firmware)."""
    from nova.virt.hardware import MemEncryptionConfig

    from resources.memenc.view import MODELS

    theirs, ours = MemEncryptionConfig.create(model), MODELS[model]
    assert (ours.trait, ours.locked_memory, ours.stateless_firmware) == (
        theirs.required_trait, theirs.needs_locked_memory,
        theirs.needs_stateless_firmware)


def test_tdx_without_stateless_firmware_is_refused_as_nova(conf):
    request, found = problems(conf, {**SEV, "hw:mem_encryption_model": "intel-tdx"},
                              UEFI)
    assert request is None
    assert ("hw_firmware_stateless", "The intel-tdx memory encryption model requires "
            "stateless firmware but the image metadata doesn't have the "
            "'hw_firmware_stateless' property set to True") in found
    ok = parse(MemEncPlugin(conf), {**SEV, "hw:mem_encryption_model": "intel-tdx"},
               image={**UEFI, "hw_firmware_stateless": True})
    assert ok == MemEncRequest(model="intel-tdx")


def test_kernel_sev_snp_hides_sev_es_even_when_libvirt_lacks_snp(conf, sev_host):
    # nova's supports_amd_sev_es: the kernel's sev_snp alone ignores SEV-ES;
    # supports_amd_sev_snp also needs libvirt's sectype: neither is offered
    host = dataclasses.replace(
        sev_host, kvm_amd_sev=frozenset({"sev", "sev-es", "sev-snp"}),
        domain_caps=dataclasses.replace(sev_host.domain_caps,
                                        launch_security=frozenset({"sev"})))
    assert [s.model for s in MemEncPlugin(conf).discover(host).slots] == ["amd-sev"]


def test_a_model_conflict_without_encryption_asks_nothing(conf):
    # nova reads the model only once encryption is asked
    # (get_mem_encryption_constraint returns None first)
    request, found = problems(conf, {"hw:mem_encryption_model": "amd-sev-es"},
                              {"hw_mem_encryption_model": "amd-sev"})
    assert (request, found) == (None, [])
