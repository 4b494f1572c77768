"""RequestSpec.build with third-party plugins: a broken plugin is one named
problem and the others go on; what a plugin returns is checked when it is
built, so a spec that exists always reads back from its JSON."""

from __future__ import annotations

import dataclasses
from importlib import metadata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oslo_config import cfg
from oslo_config import fixture as config_fixture
from stevedore import extension

from compute_plugins import exception
from compute_plugins.plugin.contract import ResourcePlugin
from compute_plugins.request.errors import RequestValidationError
from compute_plugins.request.groups import (
    KIND_DEVICE,
    Decision,
    PluginRequest,
    RequestGroup,
)
from compute_plugins.request.spec import RequestSpec, build_request_spec
from compute_plugins.request.types import MAX_INT, FrozenMap, decode, encode
from compute_plugins.runtime import PluginSet
from compute_plugins.runtime.manager import NAMESPACE, PluginManager
from resources.numa import NUMAPlugin

AGG = "1b4e28ba-2fa1-11d2-883f-0016d3cca427"


@dataclasses.dataclass(frozen=True)
class FPGARequest(PluginRequest):
    """A third-party plugin's typed request."""

    amounts: FrozenMap[str, int] = dataclasses.field(default_factory=FrozenMap)


class FPGA(ResourcePlugin):
    """Asks for ``fpga:count`` CUSTOM_FPGA (well behaved)."""

    name = "fpga"
    request_type = FPGARequest

    def discover(self, host):
        return None

    def provider_contributions(self, view, nodename):
        return []

    def parse_request(self, request_input):
        value = request_input.extra_specs.get("fpga:count")
        if value is None:
            return None
        request_input.claim("fpga:count")
        return FPGARequest(amounts=FrozenMap({"CUSTOM_FPGA": int(value)}))

    def request_groups(self, plugin_request):
        return [RequestGroup("_FPGA", resources=plugin_request.amounts,
                             owner=self.name, kind=KIND_DEVICE)]


class CrashingFPGA(FPGA):
    """A bug in parse_request: ``int('x')``."""

    def parse_request(self, request_input):
        request_input.claim("fpga:count")
        return FPGARequest(amounts=FrozenMap({"CUSTOM_FPGA": int("x")}))


class NegativeGroupFPGA(FPGA):
    """request_groups asks Placement for -1 FPGA."""

    def request_groups(self, plugin_request):
        return [RequestGroup("_FPGA", resources={"CUSTOM_FPGA": -1},
                             owner=self.name, kind=KIND_DEVICE)]


class NegativeRequestFPGA(FPGA):
    """parse_request returns a request holding -1."""

    def parse_request(self, request_input):
        request_input.claim("fpga:count")
        return FPGARequest(amounts=FrozenMap({"CUSTOM_FPGA": -1}))


class BadVersionFPGA(FPGA):
    version = "2"


class ConfigErrorFPGA(FPGA):
    def parse_request(self, request_input):
        raise exception.ConfigError("[fpga] bitstream: not set")


@pytest.fixture
def conf():
    fixture = config_fixture.Config(cfg.ConfigOpts())
    fixture.setUp()
    yield fixture.conf
    fixture.cleanUp()


def manager(conf, fpga_class):
    """numa plus a third-party fpga plugin, loaded as stevedore loads an
    installed one (with its entry point)."""
    entry_point = metadata.EntryPoint(
        name="fpga", group=NAMESPACE,
        value="%s:%s" % (fpga_class.__module__, fpga_class.__qualname__))
    extensions = [
        extension.Extension("numa", None, NUMAPlugin, NUMAPlugin(conf)),
        extension.Extension("fpga", entry_point, fpga_class, fpga_class(conf)),
    ]
    return PluginManager(
        conf, extension_manager=extension.ExtensionManager.make_test_instance(
            extensions)).plugins


def build(plugins, **extra_specs):
    return build_request_spec(plugins, {"name": "f", "vcpus": 2,
                                        "memory_mb": 1024,
                                        "extra_specs": extra_specs})


def problems(plugins, **extra_specs):
    with pytest.raises(RequestValidationError) as info:
        build(plugins, **extra_specs)
    return info.value.problems


def the_plugin_problem(found):
    mine = [p for p in found if p.source == "plugin"]
    assert len(mine) == 1, found
    assert mine[0].key == "fpga" and mine[0].plugin == "fpga"
    return mine[0]


def test_a_plugin_that_raises_is_a_named_problem_and_the_others_go_on(conf):
    found = problems(manager(conf, CrashingFPGA),
                     **{"fpga:count": "2", "hw:cpu_policy": "bogus"})
    problem = the_plugin_problem(found)
    assert "ValueError: invalid literal for int()" in problem.rule
    assert ("entry point tests.unit.request.test_build_isolation:CrashingFPGA"
            in problem.rule)
    assert str(problem).startswith("plugin fpga: failed to parse the request")
    # numa still parsed the flavor and found its own problem
    assert any(p.key == "hw:cpu_policy" and p.plugin == "numa" for p in found)


def test_without_a_manager_the_class_is_named(conf):
    found = problems(PluginSet.of({"numa": NUMAPlugin(conf),
                                   "fpga": CrashingFPGA(conf)}),
                     **{"fpga:count": "2"})
    assert ("class tests.unit.request.test_build_isolation:CrashingFPGA"
            in the_plugin_problem(found).rule)


def test_a_group_of_minus_one_fpga_is_refused_at_build(conf):
    found = problems(manager(conf, NegativeGroupFPGA), **{"fpga:count": "1"})
    rule = the_plugin_problem(found).rule
    assert "request group '_FPGA'" in rule and "CUSTOM_FPGA" in rule
    assert "expected an integer from 0 to %d, got -1" % MAX_INT in rule


def test_a_request_holding_minus_one_is_refused_at_build(conf):
    found = problems(manager(conf, NegativeRequestFPGA), **{"fpga:count": "1"})
    rule = the_plugin_problem(found).rule
    assert "FPGARequest.amounts.CUSTOM_FPGA" in rule and "got -1" in rule


def test_a_mutable_container_in_a_request_is_refused():
    with pytest.raises(ValueError, match="amounts: expected FrozenMap, got dict"):
        FPGARequest(amounts={"CUSTOM_FPGA": 1})


def test_a_plugin_version_that_cannot_be_read_back_is_refused(conf):
    rule = the_plugin_problem(problems(manager(conf, BadVersionFPGA))).rule
    assert "version '2' is not MAJOR.MINOR" in rule


def test_a_plugin_config_error_is_the_commands_usage_error(conf):
    with pytest.raises(exception.ConfigError, match="bitstream"):
        build(manager(conf, ConfigErrorFPGA))


@settings(max_examples=60, deadline=None)
@given(count=st.integers(-3, MAX_INT + 3))
def test_a_built_spec_always_reads_back(count):
    fixture = config_fixture.Config(cfg.ConfigOpts())
    fixture.setUp()
    try:
        plugins = manager(fixture.conf, FPGA)
        try:
            spec = build(plugins, **{"fpga:count": str(count)})
        except RequestValidationError as err:
            assert not 0 <= count <= MAX_INT
            assert the_plugin_problem(err.problems)
            return
        assert 0 <= count <= MAX_INT
        assert RequestSpec.from_json(spec.to_json(), plugins) == spec
    finally:
        fixture.cleanUp()


# -- RequestGroup is checked when it is built -----------------------------------

@pytest.mark.parametrize("kwargs, text", [
    ({"resources": {"CUSTOM_FPGA": -1}}, "got -1"),
    ({"resources": {"CUSTOM_FPGA": MAX_INT + 1}}, "from 0 to"),
    ({"resources": {"CUSTOM_FPGA": True}}, "got True"),
    ({"resources": {"CUSTOM_FPGA": 1.5}}, "got 1.5"),
    ({"resources": {"fpga": 1}}, "resource class 'fpga'"),
    ({"resources": {"VCPU": 1}, "choices": ({"CUSTOM_x": 1},)},
     "resource class 'CUSTOM_x'"),
    ({"required_traits": {"not-a-trait"}}, "'not-a-trait' is not a standard"),
    ({"forbidden_traits": {"CUSTOM_"}}, "'CUSTOM_' is not a standard"),
    ({"required_traits": "CUSTOM_A"}, "got the string"),
    ({"member_of": (("not-a-uuid",),)}, "aggregate 'not-a-uuid'"),
    ({"member_of": ((),)}, "empty list"),
    ({"forbidden_aggregates": {"x"}}, "aggregate 'x'"),
    ({"kind": "bogus"}, "'bogus' is not one of"),
    ({"affinity": "bogus"}, "'bogus' is not one of"),
    ({"split": 0}, "below 1"),
    ({"node": -1}, "got -1"),
    ({"owner": 3}, "expected str"),
])
def test_a_bad_group_cannot_be_built(kwargs, text):
    with pytest.raises(ValueError, match=text):
        RequestGroup("1", **kwargs)


def test_a_bad_suffix_cannot_be_built():
    with pytest.raises(ValueError, match="invalid request group suffix"):
        RequestGroup("a b")


def test_a_bad_decision_cannot_be_built():
    with pytest.raises(ValueError, match="got -2"):
        Decision("host1", allocations={AGG: {"VCPU": -2}})


CLASSES = st.sampled_from(["VCPU", "MEMORY_MB", "CUSTOM_FPGA", "fpga",
                           "CUSTOM_", ""])
TRAITS = st.sampled_from(["HW_CPU_X86_AVX2", "CUSTOM_BLUE", "blue",
                          "COMPUTE_NOPE_NOT_A_TRAIT"])
AMOUNTS = st.one_of(st.integers(-2, MAX_INT + 2), st.booleans(),
                    st.floats(allow_nan=True))


@settings(max_examples=300, deadline=None)
@given(resources=st.dictionaries(CLASSES, AMOUNTS, max_size=3),
       required=st.frozensets(TRAITS, max_size=2),
       member_of=st.lists(st.lists(st.sampled_from([AGG, AGG.upper(), "x"]),
                                   max_size=2), max_size=2),
       node=st.one_of(st.none(), st.integers(-1, 3)))
def test_a_group_that_exists_reads_back_equal(resources, required, member_of,
                                              node):
    try:
        group = RequestGroup("1", resources=resources, required_traits=required,
                             member_of=member_of, node=node)
    except ValueError:
        return
    assert decode(RequestGroup, encode(group)) == group
