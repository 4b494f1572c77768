"""The conformance kit (``compute_plugins.testing``) on the built-in plugins,
on the demo's bundled hosts, and on seeded defects: each defect is a
built-in plugin subclassed here with one bug, and the check that must catch
it fails, naming the case.

(``examples/fpga`` passes the kit in tests/functional/demo/test_example_plugin.py,
where it is installed with pip; the command in tests/functional/test_cli_conformance.py.)
"""

from __future__ import annotations

import dataclasses
import shutil

import pytest
from oslo_config import cfg

from compute_plugins import testing
from compute_plugins.plugin.contract import GuestFragment
from compute_plugins.runtime.search import FitResult
from compute_plugins.testing import (
    CHECKS,
    FAIL,
    PASS,
    SKIP,
    _framework,
    assert_conformant,
    check_plugin,
)
from resources.disk import DiskAssignment, DiskPlugin
from resources.numa import NUMAPlugin
from resources.sriov import SRIOVPlugin
from resources.vgpu import VGPUPlugin

VALIDATOR = shutil.which(testing.domain.VIRT_XML_VALIDATE)


@pytest.mark.parametrize("cls", [NUMAPlugin, VGPUPlugin, SRIOVPlugin, DiskPlugin],
                         ids=lambda cls: cls.name)
def test_the_builtin_plugins_keep_the_contract(cls):
    report = assert_conformant(cls)
    assert [r.check for r in report] == list(CHECKS)
    expected = {check: PASS for check in CHECKS}
    if VALIDATOR is None:
        expected["guest-xml"] = SKIP
    assert {r.check: r.status for r in report} == expected, report.text()
    assert report.lines() == [r.line for r in report]
    assert all(line.startswith("%s %s " % (r.status, cls.name))
               for line, r in zip(report.lines(), report, strict=True))


def test_a_plugin_with_devices_runs_with_the_plugins_it_runs_after():
    """vgpu's NUMA affinity needs numa's decision: the kit loads numa too,
    and the vGPUs are decided on the gpu host only."""
    report = check_plugin(VGPUPlugin, checks=["json-roundtrip", "double-booking"])
    assert report.ok, report.text()
    assert "5 hosts" in report.result("json-roundtrip").detail
    assert report.result("double-booking").detail.endswith("rejected once held")


def test_a_ready_instance_is_checked_with_its_configuration_and_left_as_it_was():
    conf = cfg.ConfigOpts()
    plugin = DiskPlugin(conf)
    report = check_plugin(plugin, checks=["fit-verify", "exceptions"])
    assert report.ok, report.text()
    assert not {"fit", "verify", "host_state"} & set(vars(plugin))


# -- seeded defects ----------------------------------------------------------------


class LenientDisk(DiskPlugin):
    """verify accepts every decision, even on a full disk."""

    def verify(self, state, request, assignment):
        return None


def test_a_verify_that_accepts_what_fit_refuses_fails_fit_verify():
    result = check_plugin(LenientDisk, checks=["fit-verify"]).result("fit-verify")
    assert result.status == FAIL
    assert result.line.startswith("FAIL disk fit-verify: host ")
    assert all("verify accepts the decision fit made on" in p for p in result.problems)
    assert any("full: " in p and "DISK_GB free" in p for p in result.problems), result.problems


class FloatDisk(DiskPlugin):
    """The state counts used disk with ``/``: a float where the state's
    type says int, which JSON cannot bring back."""

    def host_state(self, view, providers, assignments):
        state = super().host_state(view, providers, assignments)
        return dataclasses.replace(state, used_gb=state.used_gb / 1)


def test_a_state_that_does_not_round_trip_fails_json_roundtrip():
    result = check_plugin(FloatDisk, checks=["json-roundtrip"]).result("json-roundtrip")
    assert result.status == FAIL
    assert all("the state cannot be read back" in p and "used_gb" in p
               for p in result.problems), result.problems


def _forget_usage(state):
    return dataclasses.replace(state, pgpus=tuple(
        dataclasses.replace(gpu, used_mdevs=(), planned_mdevs=()) for gpu in state.pgpus))


class DoubleBookingVGPU(VGPUPlugin):
    """fit ignores the mdevs the guests in force use."""

    def fit(self, state, request, placement, earlier):
        return super().fit(_forget_usage(state), request, placement, earlier)


def test_a_fit_that_double_books_fails_double_booking():
    report = check_plugin(DoubleBookingVGPU, checks=["fit-verify", "double-booking"])
    result = report.result("double-booking")
    assert result.status == FAIL
    assert result.line.startswith("FAIL vgpu double-booking: host gpu, ")
    assert "fit chose what is taken" in result.line
    assert "assigned twice" in result.line
    assert report.result("fit-verify").status == FAIL


class ForgetfulVGPU(VGPUPlugin):
    """verify ignores the mdevs the guests in force use (fit does not)."""

    def verify(self, state, request, assignment):
        return super().verify(_forget_usage(state), request, assignment)


def test_a_verify_that_accepts_a_decision_the_state_holds_fails_double_booking():
    result = check_plugin(ForgetfulVGPU, checks=["double-booking"]).result("double-booking")
    assert result.status == FAIL
    assert all("verify accepts the decision on a state that already holds it" in p
               and "assigned twice" in p for p in result.problems), result.problems


class RaisingDisk(DiskPlugin):
    """fit fails on a host that has guests."""

    def fit(self, state, request, placement, earlier):
        if state.used_gb:
            raise ZeroDivisionError("seeded")
        return super().fit(state, request, placement, earlier)


def test_a_raising_plugin_fails_exceptions_and_every_check_still_reports():
    report = check_plugin(RaisingDisk)
    assert [r.check for r in report] == list(CHECKS)
    result = report.result("exceptions")
    assert result.status == FAIL
    assert result.line.startswith("FAIL disk exceptions: fit raised ZeroDivisionError: seeded (")
    assert report.result("isolation").status == PASS


class DuplicatingNUMA(NUMAPlugin):
    """alternatives offers fit's answer twice."""

    def alternatives(self, state, request, placement, earlier):
        offered = list(super().alternatives(state, request, placement, earlier))
        return iter(offered[:1] + offered)


def test_alternatives_that_repeat_a_decision_fail():
    result = check_plugin(DuplicatingNUMA, checks=["alternatives"]).result("alternatives")
    assert result.status == FAIL
    assert "alternatives 0 and 1 are the same decision" in result.line


class MisplacedNUMA(NUMAPlugin):
    """guest_config puts a domain element under <devices>."""

    def guest_config(self, request, assignment):
        return [GuestFragment("devices", "<cputune/>")]


def test_fragments_that_do_not_assemble_fail_guest_xml():
    result = check_plugin(MisplacedNUMA, checks=["guest-xml"]).result("guest-xml")
    assert result.status == FAIL
    assert "the guest domain cannot be assembled: guest XML of plugin numa: <cputune> " \
           "is not a device" in result.line


def test_without_a_validator_guest_xml_is_a_skip_line():
    result = check_plugin(DiskPlugin, checks=["guest-xml"],
                          xml_validator=None).result("guest-xml")
    assert result.status == SKIP
    assert result.line == ("SKIP disk guest-xml: 5 domains assembled; not validated "
                           "against libvirt's domain schema: no validator given")
    result = check_plugin(DiskPlugin, checks=["guest-xml"],
                          xml_validator="no-such-validator").result("guest-xml")
    assert result.status == SKIP
    assert "no-such-validator is not installed (Debian: libvirt-clients" in result.line


def test_a_domain_the_schema_refuses_fails_guest_xml(tmp_path):
    refuse = tmp_path / "refuse"
    refuse.write_text("#!/bin/sh\necho \"$1:3: element cputune: Relax-NG validity "
                      "error\" >&2\necho \"$1 fails to validate\" >&2\nexit 1\n")
    refuse.chmod(0o755)
    result = check_plugin(DiskPlugin, checks=["guest-xml"],
                          xml_validator=str(refuse)).result("guest-xml")
    assert result.status == FAIL
    assert "not valid against libvirt's domain schema: domain.xml:3: element " \
           "cputune: Relax-NG validity error | domain.xml fails to validate" in result.line


def test_libvirts_schema_accepts_the_numa_plugins_domains():
    # NOTE: make test installs it (bindep.txt); a missing one is a failure.
    assert VALIDATOR is not None, ("virt-xml-validate is not installed "
                                   "(bindep.txt: libvirt-clients, libxml2-utils)")
    result = check_plugin(NUMAPlugin, checks=["guest-xml"]).result("guest-xml")
    assert result.status == PASS, result.problems
    assert "valid against libvirt's domain schema (virt-xml-validate)" in result.line


def test_a_plugin_without_sample_requests_is_skipped_and_said_so():
    class Quiet(DiskPlugin):
        def sample_requests(self):
            return ()

    report = check_plugin(Quiet)
    assert report.ok
    assert report.result("sample-requests").line == (
        "SKIP disk sample-requests: the plugin offers no sample_requests(): the "
        "checks that need requests have none")
    for check in ("fit-verify", "alternatives", "double-booking", "guest-xml"):
        assert report.result(check).status == SKIP
        assert "the plugin offers no sample_requests()" in report.result(check).detail


def test_a_sample_that_asks_nothing_of_the_plugin_fails():
    class Misleading(DiskPlugin):
        def sample_requests(self):
            return [*super().sample_requests(), _framework.RequestInput.from_dicts(
                {"vcpus": 1, "memory_mb": 512, "extra_specs": {"resources:DISK_GB": "x"}})]

    result = check_plugin(Misleading, checks=["sample-requests"]).result("sample-requests")
    assert result.status == FAIL
    # the added sample is the last one: index len(the disk plugin's samples)
    assert result.line.startswith("FAIL disk sample-requests: sample 4 asks nothing "
                                  "of the plugin on any host: ")
    assert "resources:DISK_GB" in result.line


def _leaky_fit(loaded, states, spec):
    """A framework whose fit lets a plugin's exception out."""
    for name, request in spec.requests.items():
        loaded.plugins[name].fit(states.get(name), request, None, {})
    return loaded.plugins.fit(states, spec)


def _anonymous_fit(loaded, states, spec):
    """A framework whose fit rejects without naming the plugin."""
    result = loaded.plugins.fit(states, spec)
    return FitResult(result.assignments, tuple(
        dataclasses.replace(r, plugin="") for r in result.rejections))


@pytest.mark.parametrize("framework_fit, expected", [
    (_leaky_fit, "fit raising: the framework let InjectedFailure: injected by the "
     "conformance kit into disk.fit through"),
    (_anonymous_fit, "fit raising: expected one reason naming plugin disk, got 0 "
     "naming it; and others: framework: the plugin failed while fitting: "
     "InjectedFailure: injected by the conformance kit into disk.fit "
     "(entry point resources.disk:DiskPlugin)"),
], ids=["exception", "unnamed"])
def test_a_framework_that_does_not_isolate_a_raising_plugin_fails_isolation(
        monkeypatch, framework_fit, expected):
    monkeypatch.setattr(_framework, "fit", framework_fit)
    result = check_plugin(DiskPlugin, checks=["isolation"]).result("isolation")
    assert result.status == FAIL
    assert result.problems == (expected,)


def test_an_unknown_check_is_refused():
    with pytest.raises(ValueError, match="unknown check.s. nope; the checks are discovery"):
        check_plugin(DiskPlugin, checks=["nope"])


def test_assert_conformant_raises_with_every_line_and_the_problems():
    with pytest.raises(AssertionError) as info:
        assert_conformant(LenientDisk, checks=["discovery", "fit-verify"])
    text = str(info.value)
    lines = text.splitlines()
    assert lines[0] == "plugin disk breaks the plugin contract:"
    assert lines[1] == "PASS disk discovery: 5 of 5 hosts"
    assert lines[2].startswith("FAIL disk fit-verify: host ")
    assert lines[3].startswith("    host ") and "verify accepts" in lines[3]


# -- seeded defects the kit must not let through (review) -------------------------


class AmnesiacDisk(DiskPlugin):
    """host_state ignores the assignments in force: every guest fits on an
    empty disk, forever."""

    def host_state(self, view, providers, assignments):
        return super().host_state(view, providers, ())


def test_a_host_state_that_ignores_the_assignments_fails_double_booking():
    report = check_plugin(AmnesiacDisk, checks=["double-booking"])
    result = report.result("double-booking")
    assert result.status == FAIL, result.line
    assert "holding fit's decision changes nothing in the plugin's state" in result.line
    assert "DISK_GB" in result.line
    # shared storage: the disk is no resource of the host's, nothing to hold
    assert not any("host shared," in p for p in result.problems), result.problems


class IdleDisk(DiskPlugin):
    """fit never decides anything: the decision checks have nothing to check."""

    def fit(self, state, request, placement, earlier):
        return None


def test_a_plugin_that_decides_nothing_passes_no_check_of_decisions():
    report = check_plugin(IdleDisk, checks=["fit-verify", "alternatives",
                                            "double-booking", "guest-xml"])
    for result in report:
        assert result.status == SKIP, result.line
        assert result.detail == "the plugin decided nothing on the hosts", result.line


@pytest.mark.parametrize("samples, expected", [
    ([{"vcpus": 1, "memory_mb": 512}], "gave a dict as sample 0, not a RequestInput"),
    ("abc", "gave a str as sample 0, not a RequestInput"),
    (None, "raised TypeError: 'NoneType' object is not iterable"),
], ids=["dicts", "str", "none"])
def test_malformed_sample_requests_fail_sample_requests(samples, expected):
    class Malformed(DiskPlugin):
        def sample_requests(self):
            return samples

    report = check_plugin(Malformed)
    result = report.result("sample-requests")
    assert result.status == FAIL
    assert result.line == "FAIL disk sample-requests: sample_requests() " + expected
    assert not report.ok


GHOST = "00000000-0000-0000-0000-00000000dead"


class GhostDisk(DiskPlugin):
    """fit puts the disk on a provider the host does not have, and verify
    does not look at the provider."""

    def fit(self, state, request, placement, earlier):
        decided = super().fit(state, request, placement, earlier)
        if isinstance(decided, DiskAssignment) and not decided.shared:
            decided = dataclasses.replace(decided, provider_uuid=GHOST)
        return decided

    def verify(self, state, request, assignment):
        if not assignment.shared:
            assignment = dataclasses.replace(assignment, provider_uuid=state.provider_uuid)
        return super().verify(state, request, assignment)


def test_a_fit_that_names_a_provider_the_host_lacks_fails_double_booking():
    result = check_plugin(GhostDisk, checks=["double-booking"]).result("double-booking")
    assert result.status == FAIL
    assert "(fit chose what is taken, or what the host does not have)" in result.line
    assert GHOST in result.line
