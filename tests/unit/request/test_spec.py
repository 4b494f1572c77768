"""RequestSpec: immutability, decision, JSON round trip, versions, fuzz."""

from __future__ import annotations

import dataclasses
import functools
import json
import pathlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compute_plugins.request.errors import (
    RequestFormatError,
    RequestInputError,
    RequestValidationError,
)
from compute_plugins.request.groups import Decision, PluginRequest
from compute_plugins.request.spec import FORMAT_VERSION, RequestSpec, build_request_spec
from compute_plugins.request.types import FrozenMap
from compute_plugins.scheduler.query import preview
from resources.numa.request import CellAssignment, NUMAAssignment
from resources.sriov.request import SRIOVAssignment, VFAssignment
from resources.vgpu.request import MdevAssignment, VGPUAssignment
from tests.unit.request.conftest import build

RP = "1b4e28ba-2fa1-11d2-883f-0016d3cca427"
RICH = {"hw:numa_nodes": "2", "hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "0,2",
        "hw:mem_page_size": "large", "resources1:VGPU": "1",
        "trait1:CUSTOM_MDEV_TYPE_NVIDIA_35": "required",
        "pci_passthrough:alias": "qat:1", "group_policy": "isolate",
        "trait:HW_CPU_X86_AVX2": "required"}
PORTS = [{"id": "p1", "vnic_type": "direct", "physnet": "physnet1",
          "min_kbps_egress": 10}]


def decision():
    return Decision.from_allocation_request(
        "host1", {"allocations": {RP: {"resources": {"PCPU": 2}}},
                  "mappings": {"_NUMA0": [RP]}}, nodename="host1",
        assignments={
            "numa": NUMAAssignment(cells=(CellAssignment(
                guest_cell=0, host_cell=1, provider_uuid=RP,
                pinning=FrozenMap({0: 4, 2: 6}), shared_cpus=frozenset({8, 9}),
                page_size_kb=2048),), emulator_threads=frozenset({3})),
            "vgpu": VGPUAssignment(devices=(MdevAssignment(
                "1", RP, "0000:3b:00.0", "nvidia-35"),)),
            "sriov": SRIOVAssignment(vfs=(VFAssignment(
                "_PORT0", RP, "0000:5e:00.0", "0000:5e:10.1", "p1"),)),
        })


def test_spec_is_immutable_and_hashable(manager):
    spec = build(manager, RICH, ports=PORTS)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.flavor = None
    with pytest.raises(TypeError):
        spec.flavor.extra_specs["x"] = "y"
    hash(spec)


def test_with_decision_is_copy_on_write(manager):
    spec = build(manager, RICH, ports=PORTS)
    decided = spec.with_decision(decision())
    assert spec.decision is None and decided.decision.host == "host1"
    assert decided.groups is spec.groups
    again = decided.with_assignment("numa", NUMAAssignment())
    assert again.decision.assignments["numa"] == NUMAAssignment()
    assert decided.decision.assignments["numa"] != NUMAAssignment()
    with pytest.raises(ValueError, match="must be a PluginAssignment"):
        decided.with_assignment("numa", spec.requests["numa"])
    with pytest.raises(ValueError):
        spec.with_assignment("numa", NUMAAssignment())
    assert decided.decision.allocation_request()["mappings"] == {"_NUMA0": [RP]}


def test_round_trip_with_decision(manager):
    spec = build(manager, RICH, ports=PORTS,
                 image={"name": "img", "properties": {"hw_cpu_policy": "mixed",
                                                      "traits_required": ["HW_CPU_X86_AVX2"]}})
    spec = spec.with_decision(decision())
    text = spec.to_json()
    doc = json.loads(text)
    assert doc["version"] == "2.0"  # its ports use no field of 2.1
    assert doc["plugins"] == {"numa": "1.2", "vgpu": "1.2", "sriov": "1.2", "disk": "1.2"}
    again = RequestSpec.from_json(text, manager.plugins)
    assert again == spec
    assert again.to_json() == text
    assert preview(again) == preview(spec)


def test_the_request_text_kept_by_a_spec_is_never_another_specs(manager):
    """to_json keeps the text of what a spec asks and shares it with the
    specs with_decision makes of it; any other copy (another field
    changed, a decision changed by with_assignment) encodes its own: the
    text is always json.dumps(to_dict(), sort_keys=True)."""
    spec = build(manager, RICH, ports=PORTS)

    def full(one):
        return json.dumps(one.to_dict(), sort_keys=True)

    assert spec.to_json() == full(spec)
    first = spec.with_decision(decision())
    other = spec.with_decision(dataclasses.replace(decision(), host="host2"))
    assert first.to_json() == full(first) and '"host1"' in first.to_json()
    assert other.to_json() == full(other) and '"host2"' in other.to_json()
    assert first.with_decision(None).to_json() == spec.to_json()
    renamed = dataclasses.replace(first, image_name="another-image")
    assert renamed.to_json() == full(renamed)
    assert '"another-image"' in renamed.to_json()
    assert '"another-image"' in renamed.with_decision(decision()).to_json()
    assert '"another-image"' not in first.to_json()
    changed = first.with_assignment("numa", NUMAAssignment())
    assert changed.to_json() == full(changed)
    assert RequestSpec.from_json(changed.to_json(), manager.plugins) == changed
    assert first.to_json(indent=1) == json.dumps(first.to_dict(), sort_keys=True,
                                                 indent=1)


@dataclasses.dataclass(eq=False)
class _LooseRequest(PluginRequest):
    """A plugin request that is not frozen (the framework takes it: the
    docs ask for a frozen dataclass, nothing enforces it)."""

    count: int = 1


def test_the_text_of_a_request_that_can_change_is_not_kept(manager):
    """A plugin's request that can change after the spec encoded it once
    (not a frozen dataclass) is encoded as it is now: the text is still
    json.dumps(to_dict(), sort_keys=True), never the first call's."""
    base = build(manager, {})
    loose = _LooseRequest(2)
    spec = dataclasses.replace(
        base, requests=FrozenMap({"loose": loose}),
        plugin_versions=FrozenMap(dict(base.plugin_versions, loose="1.0")))
    decided = spec.with_decision(decision())
    assert '"count": 2' in spec.to_json() and '"count": 2' in decided.to_json()
    loose.count = 5
    for one in (spec, decided):
        assert one.to_json() == json.dumps(one.to_dict(), sort_keys=True)
        assert '"count": 5' in one.to_json()


MAJOR, MINOR = (int(part) for part in FORMAT_VERSION.split("."))


@pytest.mark.parametrize("mutate,text", [
    (lambda d: d.update(version="%s.%d" % (MAJOR, MINOR + 1)), "newer than this reader"),
    (lambda d: d.update(version="%d.0" % (MAJOR + 1)), "newer than this reader"),
    (lambda d: d.update(version="%d.9" % (MAJOR - 1)), "older than this reader"),
    (lambda d: d["plugins"].update(gpu9000="1.0"), "'gpu9000', which is not loaded"),
    (lambda d: d["plugins"].update(numa="1.9"), "newer than the loaded plugin"),
    (lambda d: d.update(format="other"), "not a compute_plugins.RequestSpec"),
    (lambda d: d["flavor"].update(vcpus="x"), "expected an integer"),
    (lambda d: d["requests"]["numa"].update(bogus=1), "unknown field"),
])
def test_rejected_payloads(manager, mutate, text):
    doc = build(manager, RICH, ports=PORTS).to_dict()
    mutate(doc)
    with pytest.raises(RequestFormatError, match=text):
        RequestSpec.from_dict(doc, manager.plugins)


def test_not_json(manager):
    with pytest.raises(RequestFormatError, match="not JSON"):
        RequestSpec.from_json("{", manager.plugins)


# -- properties ---------------------------------------------------------------------------

KEYS = st.sampled_from([
    "hw:cpu_policy", "hw:cpu_thread_policy", "hw:emulator_threads_policy",
    "hw:cpu_dedicated_mask", "hw:numa_nodes", "hw:numa_cpus.0", "hw:numa_cpus.1",
    "hw:numa_mem.0", "hw:numa_mem.1", "hw:mem_page_size", "hw:cpu_realtime",
    "hw:cpu_realtime_mask", "hw:pci_numa_affinity_policy", "resources:VCPU",
    "resources:PCPU", "resources:MEMORY_MB", "resources:DISK_GB", "resources1:VGPU",
    "resources:VGPU", "trait1:CUSTOM_MDEV_TYPE_A", "trait:HW_CPU_HYPERTHREADING",
    "resources2:CUSTOM_X", "trait2:CUSTOM_Y", "group_policy", "member_of",
    "member_of1", "pci_passthrough:alias", "hw:bogus", "resources:NOPE",
    "trait:lower", "hw:cpu_sockets", "quota:x"])
VALUES = st.one_of(
    st.sampled_from(["dedicated", "shared", "mixed", "prefer", "isolate", "require",
                     "share", "0", "1", "2", "3", "4", "-1", "0-1", "^0", "2-3",
                     "0,2", "1024", "2048", "4096", "large", "small", "any", "2MB",
                     "1GB", "required", "forbidden", "none", "yes", "qat:1",
                     "a16:2", "in:" + RP, RP, "legacy", "preferred", "socket", ""]),
    st.text(max_size=8))
IMAGE_KEYS = st.sampled_from([
    "hw_cpu_policy", "hw_cpu_thread_policy", "hw_numa_nodes", "hw_mem_page_size",
    "hw_numa_cpus.0", "hw_numa_mem.0", "hw_pci_numa_affinity_policy",
    "hw_cpu_realtime_mask", "traits_required", "os_distro"])
IMAGE_VALUES = st.one_of(VALUES, st.integers(-2, 5), st.lists(VALUES, max_size=2))


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(specs=st.dictionaries(KEYS, VALUES, max_size=6),
       image=st.dictionaries(IMAGE_KEYS, IMAGE_VALUES, max_size=3),
       vcpus=st.integers(1, 6), memory=st.sampled_from([512, 2048, 3000, 4096]),
       direct=st.booleans())
def test_fuzz_ends_in_a_spec_or_the_validation_error(manager, specs, image, vcpus,
                                                     memory, direct):
    ports = PORTS if direct else []
    try:
        spec = build_request_spec(manager.plugins, {"name": "fz", "vcpus": vcpus,
                                            "memory_mb": memory, "extra_specs": specs},
                                  image=image, ports=ports)
    except RequestValidationError as err:
        assert err.problems
        for problem in err.problems:
            assert problem.key and problem.rule
        return
    except RequestInputError:
        return
    query = preview(spec)
    assert query.alternatives
    for alt in query.alternatives:
        alt.to_querystring()
    assert RequestSpec.from_json(spec.to_json(), manager.plugins) == spec
    decided = spec.with_decision(decision())
    for one in (spec, decided, decided.with_decision(None)):
        assert one.to_json() == json.dumps(one.to_dict(), sort_keys=True)


# -- tampered payloads -------------------------------------------------------------

@functools.cache
def _rich_text(manager) -> str:
    """The rich payload's JSON, built once per manager (20 ms a build: the
    fuzz below tampers with a fresh copy of it hundreds of times)."""
    spec = build(manager, RICH, vcpus=4, memory_mb=4096, ports=PORTS,
                 image={"name": "img", "properties": {"hw_cpu_thread_policy": "prefer"}})
    return json.dumps(spec.with_decision(decision()).to_dict())


def _rich_payload(manager):
    """A fresh copy of the rich payload, the test's own to tamper with."""
    return json.loads(_rich_text(manager))


def _paths(doc, prefix=()):
    """Every (container, key) pair of a JSON document."""
    if isinstance(doc, dict):
        items = doc.items()
    elif isinstance(doc, list):
        items = enumerate(doc)
    else:
        return
    for key, value in items:
        yield prefix + (key,)
        yield from _paths(value, prefix + (key,))


JUNK = st.one_of(st.none(), st.booleans(), st.integers(-3, 2**40), st.text(max_size=5),
                 st.lists(st.integers(-1, 3), max_size=2),
                 st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
                 st.sampled_from(["bogus", "isolate", "dedicated", "_NUMA0", -1, 0]))


def _tamper(doc, paths, data):
    """One to three of ``paths`` in ``doc`` dropped or set to junk (drawn
    from ``data``), in place."""
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(paths))
        parent = doc
        try:
            for key in path[:-1]:
                parent = parent[key]
            if data.draw(st.booleans()) and isinstance(parent, dict):
                parent.pop(path[-1], None)
            else:
                parent[path[-1]] = data.draw(JUNK)
        except (KeyError, IndexError, TypeError):
            continue


@settings(max_examples=300, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_tampered_payload_is_a_spec_or_the_format_error(manager, data):
    doc = _rich_payload(manager)
    paths = list(_paths(doc))
    _tamper(doc, paths, data)
    try:
        spec = RequestSpec.from_json(json.dumps(doc), manager.plugins)
    except RequestFormatError:
        return
    assert isinstance(spec, RequestSpec)
    assert spec.to_json() == json.dumps(spec.to_dict(), sort_keys=True)


@pytest.mark.parametrize("mutate", [
    lambda d: d.update(requests=[1]),
    lambda d: d.update(decision="x"),
    lambda d: d["decision"].update(assignments=[1]),
    lambda d: d.update(image="x"),
    lambda d: d.update(image=[]),
    lambda d: d.update(ports={}),
    lambda d: d.update(hints=[]),
    lambda d: d.update(generic=[]),
    lambda d: d.update(extra_future_field=1),
    lambda d: d.pop("groups"),
    lambda d: d["requests"]["numa"].update(vcpus=-5),
    lambda d: d["requests"]["numa"].update(vcpus=0),
    lambda d: d["requests"]["numa"].update(cpu_policy="bogus"),
    lambda d: d["requests"]["sriov"].update(affinity_policy="bogus"),
    lambda d: d["generic"].update(group_policy="bogus"),
    lambda d: d["groups"][0].update(kind="bogus"),
    lambda d: d["groups"][0]["resources"].update(PCPU=-3),
    lambda d: d["groups"][0]["resources"].update(PCPU=99),
    lambda d: d.update(groups=[]),
    lambda d: d["flavor"].update(vcpus=0),
    lambda d: d["ports"][0].update(vnic_type="bogus"),
    lambda d: d["requests"]["numa"]["cells"][0].update(pcpus=[0, 0]),
])
def test_tampered_payloads_reviewer_cases(manager, mutate):
    doc = _rich_payload(manager)
    mutate(doc)
    with pytest.raises(RequestFormatError):
        RequestSpec.from_json(json.dumps(doc), manager.plugins)


def test_a_deeply_nested_payload_is_a_format_error(manager):
    from compute_plugins.request.errors import RequestFormatError

    with pytest.raises(RequestFormatError, match="nested more than 32 deep"):
        RequestSpec.from_json("[" * 1200 + "]" * 1200, manager.plugins)


#: A payload the previous release wrote (format 1.0, before the topology
#: contract renamed the guest-node groups): what a host's ledger and the
#: store hold across an upgrade (made by efcf4a8's ``to_dict`` of RICH
#: with ``decision()``).
SPEC_1_0 = (pathlib.Path(__file__).resolve().parents[2]
            / "fixtures" / "specs" / "request-spec-1.0.json")


def test_a_payload_of_the_previous_format_reads_as_the_spec_it_was(manager):
    doc = json.loads(SPEC_1_0.read_text())
    assert doc["version"] == "1.0" and any(g["kind"] == "numa_cell" for g in doc["groups"])
    read = RequestSpec.from_dict(doc, manager.plugins)
    # the plugins' data versions it was recorded with stay its own (numa
    # 1.1, disk 1.1 there; numa 1.2 and disk 1.2 added fields with defaults
    # that read as before)
    assert dict(read.plugin_versions) == doc["plugins"]
    built = build(manager, RICH, ports=PORTS).with_decision(decision())
    # numa 1.2 records the ports' physnets of a NUMA guest (network
    # affinity); a 1.1 request has none and reads without them
    numa = built.requests["numa"]
    assert numa.physnets
    # vgpu 1.2 records group_policy=isolate; a 1.1 request reads without it
    assert built.requests["vgpu"].isolate
    requests = type(built.requests)({
        **built.requests,
        "numa": dataclasses.replace(numa, physnets=frozenset(), tunneled=False),
        "vgpu": dataclasses.replace(built.requests["vgpu"], isolate=False)})
    assert dataclasses.replace(read, plugin_versions=built.plugin_versions) == \
        dataclasses.replace(built, requests=requests)
    # written at the lowest version that carries it: its ports use no
    # field of a later one
    assert json.loads(read.to_json())["version"] == "2.0"


#: The fields of a port in format 2.0, before 2.1 added ``tunneled`` and
#: ``affinity_policy`` (those of the 1.0 payload's ports).
PORT_FIELDS_2_0 = {"id", "vnic_type", "physnet", "min_kbps_egress", "min_kbps_ingress"}


def test_a_spec_using_no_later_field_is_written_at_the_version_an_older_reader_reads(
        manager):
    # what a reader of 2.0, which knows none of 2.1's port fields, needs:
    # version 2.0 and ports with only the fields it knows
    spec = build(manager, RICH, ports=PORTS).with_decision(decision())
    doc = spec.to_dict()
    assert doc["version"] == "2.0"
    assert [set(port) for port in doc["ports"]] == [PORT_FIELDS_2_0]
    assert {key for port in json.loads(SPEC_1_0.read_text())["ports"]
            for key in port} == PORT_FIELDS_2_0
    assert RequestSpec.from_dict(doc, manager.plugins) == spec
    assert FORMAT_VERSION == "2.1"


@pytest.mark.parametrize("port", [
    {"affinity_policy": "required"},
    {"tunneled": True},
])
def test_a_spec_using_a_later_port_field_is_written_at_its_version(manager, port):
    ports = [{**PORTS[0], "id": "p0"}, {**PORTS[0], **port}]
    spec = build(manager, RICH, ports=ports).with_decision(decision())
    doc = spec.to_dict()
    assert doc["version"] == "2.1"
    # every port writes every field of the version
    assert [set(p) for p in doc["ports"]] == [
        PORT_FIELDS_2_0 | {"tunneled", "affinity_policy"}] * 2
    assert RequestSpec.from_dict(doc, manager.plugins) == spec
    assert RequestSpec.from_json(spec.to_json(), manager.plugins).to_json() == \
        spec.to_json()


def test_a_reader_of_the_older_version_refuses_a_later_field_clearly(
        manager, monkeypatch):
    # a 2.0 reader would drop the port's policy (it has no such field):
    # it refuses the payload as newer instead, naming both versions
    ports = [{**PORTS[0], "affinity_policy": "required"}]
    doc = build(manager, RICH, ports=ports).to_dict()
    older = build(manager, RICH, ports=PORTS).to_dict()
    monkeypatch.setattr("compute_plugins.request.spec.FORMAT_VERSION", "2.0")
    with pytest.raises(RequestFormatError,
                       match=r"payload format 2\.1 is newer than this reader "
                             r"supports \(2\.0\)"):
        RequestSpec.from_dict(doc, manager.plugins)
    assert RequestSpec.from_dict(older, manager.plugins).to_dict() == older
