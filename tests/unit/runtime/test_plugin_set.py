"""PluginSet's isolation policy: a plugin that raises, or returns what its
hook's contract does not allow, is one reason naming it (its class or entry
point) and the host or request it concerns; never an exception to the
caller. The exceptions a contract defines go through as they are."""

from __future__ import annotations

import dataclasses
import logging

import pytest
from oslo_config import cfg

from compute_plugins import exception
from compute_plugins.host.model import HostInfo
from compute_plugins.plugin.contract import (
    GroupAllocation,
    GuestFragment,
    Rejection,
    ResourcePlugin,
)
from compute_plugins.plugin.state import AssignmentConflict, PluginState, StateFormatError
from compute_plugins.request.errors import RequestValidationError
from compute_plugins.request.groups import (
    KIND_DEVICE,
    Decision,
    PluginAssignment,
    PluginRequest,
    RequestGroup,
)
from compute_plugins.request.spec import build_request_spec
from compute_plugins.runtime import PluginSet
from compute_plugins.tree.contribution import Providers

HOST = "h1"
#: Neither plugin contributes a provider: each has the root only.
PROVIDERS = {"widget": Providers.of(HOST, ()), "gizmo": Providers.of(HOST, ())}
ORIGIN = "class %s:Widget" % __name__
BUG = "RuntimeError: widget bug"


@dataclasses.dataclass(frozen=True)
class WidgetRequest(PluginRequest):
    count: int


@dataclasses.dataclass(frozen=True)
class WidgetAssignment(PluginAssignment):
    slots: tuple[int, ...] = ()


@dataclasses.dataclass(frozen=True)
class WidgetState(PluginState):
    free: frozenset[int] = frozenset()


class Widget(ResourcePlugin):
    """``widget:count=N``: N of the host's 4 slots, the lowest free first;
    its alternatives slide the choice up one slot at a time."""

    name = "widget"
    request_type = WidgetRequest
    assignment_type = WidgetAssignment
    state_type = WidgetState

    def discover(self, host):
        return 4

    def provider_contributions(self, view, nodename):
        return []

    def parse_request(self, request_input):
        value = request_input.extra_specs.get("widget:count")
        request_input.claim("widget:count")
        return None if value is None else WidgetRequest(count=int(value))

    def request_groups(self, plugin_request):
        return [RequestGroup("_WIDGET", resources={"CUSTOM_WIDGET": plugin_request.count},
                             owner=self.name, kind=KIND_DEVICE)]

    def host_state(self, view, nodename, assignments):
        taken = {slot for a in assignments for slot in a.slots}
        return WidgetState(free=frozenset(range(view)) - taken)

    def fit(self, state, request, placement, earlier):
        return next(self.alternatives(state, request, placement, earlier), None) or \
            Rejection("%d free slots, the guest needs %d" % (len(state.free), request.count))

    def alternatives(self, state, request, placement, earlier):
        free = sorted(state.free)
        for start in range(len(free) - request.count + 1):
            yield WidgetAssignment(slots=tuple(free[start:start + request.count]))

    def verify(self, state, request, assignment):
        taken = set(assignment.slots) - state.free
        return Rejection("slots %s are taken" % sorted(taken)) if taken else None

    def allocations(self, request, assignment, state):
        return [GroupAllocation("_WIDGET", "rp-widget", {"CUSTOM_WIDGET": request.count})]

    def guest_config(self, request, assignment):
        return [GuestFragment("devices", "<hostdev type='pci'/>")]

    def utilization(self, state):
        return 1 - len(state.free) / 4


@dataclasses.dataclass(frozen=True)
class GizmoRequest(PluginRequest):
    """The gizmo asks for nothing but to be there."""


class Gizmo(ResourcePlugin):
    """``gizmo:on``: runs after widget and refuses a widget on slot 0."""

    name = "gizmo"
    fit_after = ("widget",)
    request_type = GizmoRequest

    def discover(self, host):
        return None

    def provider_contributions(self, view, nodename):
        return []

    def parse_request(self, request_input):
        request_input.claim("gizmo:on")
        return GizmoRequest() if "gizmo:on" in request_input.extra_specs else None

    def fit(self, state, request, placement, earlier):
        widget = earlier.get("widget")
        if widget is not None and 0 in widget.slots:
            return Rejection("slot 0 is too hot for the gizmo")
        return None


@pytest.fixture
def plugins():
    conf = cfg.ConfigOpts()
    return PluginSet.of({"widget": Widget(conf), "gizmo": Gizmo(conf)})


def spec_for(plugins, **extra_specs):
    return build_request_spec(plugins, {
        "name": "f", "vcpus": 1, "memory_mb": 512,
        "extra_specs": {k.replace("_", ":", 1): v for k, v in extra_specs.items()}})


def states(plugins):
    views = {name: plugins.discover(name, HostInfo(hostname=HOST, source="test"))
             for name in plugins}
    built, broken = plugins.host_states(views, PROVIDERS, {}, host=HOST)
    assert not broken
    return built


def decided(plugins, spec):
    result = plugins.fit(states(plugins), spec, host=HOST)
    assert result.fits, result.rejections
    return spec.with_decision(Decision(host=HOST, assignments=result.assignments))


def test_the_plugins_work(plugins):
    spec = spec_for(plugins, widget_count="1", gizmo_on="1")
    assert plugins.order == ("widget", "gizmo")
    spec = decided(plugins, spec)
    # gizmo refused slot 0: the widget's next alternative is slot 1.
    assert spec.decision.assignments["widget"].slots == (1,)
    assert plugins.verify(states(plugins), spec, host=HOST) == ()


# -- one reason per failing plugin, whatever the hook --------------------------------


def boom(*args, **kwargs):
    raise RuntimeError("widget bug")


def garbage(*args, **kwargs):
    return "garbage"


def garbage_alternatives(self, state, request, placement, earlier):
    yield WidgetAssignment(slots=(0,))
    yield "garbage"


def raising_alternatives(self, state, request, placement, earlier):
    yield WidgetAssignment(slots=(0,))
    raise RuntimeError("widget bug")


def parse_reasons(plugins):
    with pytest.raises(RequestValidationError) as info:
        spec_for(plugins, widget_count="1")
    return [(p.plugin, str(p)) for p in info.value.problems]


def host_state_reasons(plugins):
    views = {name: plugins.discover(name, HostInfo(hostname=HOST, source="test"))
             for name in plugins}
    built, broken = plugins.host_states(views, PROVIDERS, {}, host=HOST)
    assert set(built) == {"gizmo"}, "the other plugins go on"
    return [(r.plugin, r.reason) for r in broken]


def fit_reasons(plugins):
    spec = spec_for(plugins, widget_count="1", gizmo_on="1")
    result = plugins.fit(states(plugins), spec, host=HOST)
    return [(r.plugin, r.reason) for r in result.rejections if r.plugin == "widget"]


def verify_reasons(plugins, monkeypatch, hook, fault):
    monkeypatch.undo()
    spec = decided(plugins, spec_for(plugins, widget_count="1"))
    monkeypatch.setattr(Widget, hook, fault)
    return [(r.plugin, r.reason) for r in plugins.verify(states(plugins), spec, host=HOST)]


def allocation_reasons(plugins):
    spec = spec_for(plugins, widget_count="1")
    reason = plugins.allocations("widget", spec.requests["widget"],
                                 WidgetAssignment(slots=(0,)), None, host=HOST)
    assert isinstance(reason, Rejection)
    return [(reason.plugin, reason.reason)]


def guest_reasons(plugins):
    spec = spec_for(plugins, widget_count="1")
    reason = plugins.guest_fragments(spec.requests,
                                     {"widget": WidgetAssignment(slots=(0,))})
    assert isinstance(reason, Rejection)
    return [(reason.plugin, reason.reason)]


def describe_reasons(plugins):
    spec = spec_for(plugins, widget_count="1")
    (line,) = plugins.describe("widget", spec.requests["widget"],
                               WidgetAssignment(slots=(0,)))
    return [("widget", line)]


CASES = {
    "parse_request": (parse_reasons, "failed to parse the request: " + BUG,
                      "returned a value the request model refuses"),
    "request_groups": (parse_reasons, "failed to parse the request: " + BUG,
                       "returned a value the request model refuses"),
    "host_state": (host_state_reasons, "failed while building its host state on "
                   "host h1: " + BUG, "host_state on host h1 returned a str"),
    "fit": (fit_reasons, "failed while fitting on host h1: " + BUG,
            "fit on host h1 returned a str"),
    "allocations": (allocation_reasons, "failed while building its allocation on "
                    "host h1: " + BUG, "allocations on host h1 returned a str"),
    "guest_config": (guest_reasons, "failed while building the guest "
                     "configuration: " + BUG, "guest_config returned a str"),
    "describe": (describe_reasons, "failed while describing its assignment: " + BUG,
                 "describe returned a str"),
}


@pytest.mark.parametrize("hook", sorted(CASES))
def test_a_hook_that_raises_is_one_reason_naming_the_plugin(plugins, monkeypatch, hook):
    run, text, _ = CASES[hook]
    monkeypatch.setattr(Widget, hook, boom)
    (reason,) = [r for r in run(plugins) if r[0] == "widget"]
    assert text in reason[1] and ORIGIN in reason[1]


@pytest.mark.parametrize("hook", sorted(CASES))
def test_a_hook_that_returns_garbage_is_one_reason_naming_the_plugin(
        plugins, monkeypatch, hook):
    run, _, text = CASES[hook]
    monkeypatch.setattr(Widget, hook, garbage)
    (reason,) = [r for r in run(plugins) if r[0] == "widget"]
    assert text in reason[1]
    assert ORIGIN in reason[1]


@pytest.mark.parametrize("fault, text", [
    (boom, "failed while verifying the decision on host h1: " + BUG),
    (garbage, "verify on host h1 returned a str, not a Rejection or None")])
def test_a_verify_that_fails_is_one_rejection_naming_the_plugin(
        plugins, monkeypatch, fault, text):
    (reason,) = verify_reasons(plugins, monkeypatch, "verify", fault)
    assert reason[0] == "widget" and text in reason[1] and ORIGIN in reason[1]


@pytest.mark.parametrize("fault, text", [
    (raising_alternatives, "failed while offering alternatives on host h1: " + BUG),
    (garbage_alternatives, "alternatives on host h1 returned a str, not its "
     "assignment")])
def test_alternatives_that_fail_are_one_reason_naming_the_plugin(
        plugins, monkeypatch, fault, text):
    monkeypatch.setattr(Widget, "alternatives", fault)
    monkeypatch.setattr(Widget, "fit", lambda self, s, r, p, e: WidgetAssignment((0,)))
    spec = spec_for(plugins, widget_count="1", gizmo_on="1")
    result = plugins.fit(states(plugins), spec, host=HOST)
    assert [(r.plugin, r.reason) for r in result.rejections][0] == (
        "gizmo", "slot 0 is too hot for the gizmo")
    (reason,) = [r for r in result.rejections if r.plugin == "widget"]
    assert text in reason.reason and ORIGIN in reason.reason


def test_a_utilization_that_fails_is_no_opinion(plugins, monkeypatch):
    state = WidgetState(free=frozenset({1}))
    assert plugins.utilization("widget", state) == 0.75
    monkeypatch.setattr(Widget, "utilization", boom)
    assert plugins.utilization("widget", state) is None
    monkeypatch.setattr(Widget, "utilization", garbage)
    assert plugins.utilization("widget", state) is None


def test_a_state_that_cannot_be_read_names_the_plugin(plugins):
    doc = plugins.encode_state("widget", WidgetState(free=frozenset({1})))
    assert plugins.decode_state("widget", doc) == WidgetState(free=frozenset({1}))
    doc["state"]["free"] = "all"
    with pytest.raises(StateFormatError, match="host state of widget"):
        plugins.decode_state("widget", doc)
    states_, broken = plugins.decode_states({"widget": doc, "unknown": {}})
    assert states_ == {} and list(broken) == ["widget"]


def test_the_entry_point_is_named_when_known(monkeypatch):
    conf = cfg.ConfigOpts()
    plugins = PluginSet.of({"widget": Widget(conf)},
                           entry_points={"widget": "acme.widget:Widget"})
    monkeypatch.setattr(Widget, "fit", boom)
    spec = spec_for(plugins, widget_count="1")
    (reason,) = plugins.fit(states(plugins), spec, host=HOST).rejections
    assert reason.reason.endswith("(entry point acme.widget:Widget)")


# -- the exceptions a hook's contract defines go through ----------------------------


def test_a_config_error_from_parse_is_raised_as_it_is(plugins, monkeypatch):
    def config_error(self, request_input):
        raise exception.ConfigError("[widget] size: not set")

    monkeypatch.setattr(Widget, "parse_request", config_error)
    with pytest.raises(exception.ConfigError, match="size"):
        spec_for(plugins, widget_count="1")


def test_an_assignment_conflict_is_the_claims_reason_or_raised(plugins, monkeypatch):
    def conflict(self, view, nodename, assignments):
        raise AssignmentConflict("widget", "slot 9 does not exist")

    monkeypatch.setattr(Widget, "host_state", conflict)
    views = {"widget": 4, "gizmo": None}
    _, broken = plugins.host_states(views, PROVIDERS, {})
    assert [(r.plugin, r.reason) for r in broken] == [
        ("widget", "the claims in force do not hold on the host: slot 9 does "
         "not exist")]
    with pytest.raises(AssignmentConflict):
        plugins.host_states(views, PROVIDERS, {}, strict=True)


def test_a_value_error_from_allocations_is_its_reason(plugins, monkeypatch):
    def two_providers(self, request, assignment, state):
        raise ValueError("group '_WIDGET' is assigned providers a and b")

    monkeypatch.setattr(Widget, "allocations", two_providers)
    spec = spec_for(plugins, widget_count="1")
    reason = plugins.allocations("widget", spec.requests["widget"],
                                 WidgetAssignment(slots=(0,)), None)
    assert reason == Rejection("cannot build its allocation: group '_WIDGET' is "
                               "assigned providers a and b", plugin="widget")


def test_a_plugin_without_a_view_says_why(plugins):
    _, broken = plugins.host_states({"gizmo": None}, PROVIDERS, {},
                                    unavailable={"widget": "no widget bus"})
    assert broken == [Rejection("the plugin could not discover the host: no "
                                "widget bus", plugin="widget")]


# -- one place for timing and logging ----------------------------------------------


def test_calls_are_timed_at_debug_and_failures_logged_once(plugins, monkeypatch, caplog):
    spec = spec_for(plugins, widget_count="1")
    with caplog.at_level(logging.DEBUG, logger="compute_plugins.runtime.calls"):
        plugins.fit(states(plugins), spec, host=HOST)
    assert any("resource plugin widget: fit took" in r.getMessage()
               for r in caplog.records)
    caplog.clear()
    monkeypatch.setattr(Widget, "fit", boom)
    with caplog.at_level(logging.INFO, logger="compute_plugins.runtime.calls"):
        plugins.fit(states(plugins), spec, host=HOST)
    (record,) = caplog.records
    assert record.levelno == logging.ERROR
    assert "resource plugin widget (%s): fit: %s" % (ORIGIN, BUG) == record.getMessage()


def test_a_set_is_an_ordered_immutable_mapping(plugins):
    assert list(plugins) == ["widget", "gizmo"]
    assert plugins.only(["gizmo", "nosuch"]).order == ("gizmo",)
    assert plugins.only(["gizmo"]) is plugins.only(["gizmo"])
    assert plugins.entry_point("widget") == ""
    with pytest.raises(TypeError):
        plugins["other"] = Gizmo(cfg.ConfigOpts())  # type: ignore[index]
    with pytest.raises(ValueError, match="loaded twice"):
        PluginSet([plugins.loaded("widget"), plugins.loaded("widget")])


# -- a plugin's values are of the types it declares on its class ----------------------


def test_values_of_another_type_than_declared_are_garbage(plugins, monkeypatch):
    monkeypatch.setattr(Widget, "parse_request", lambda self, r: GizmoRequest())
    (problem,) = [p for p in parse_reasons(plugins) if p[0] == "widget"]
    assert "parse_request returned GizmoRequest: expected its request_type " \
        "(WidgetRequest)" in problem[1]
    monkeypatch.undo()

    @dataclasses.dataclass(frozen=True)
    class OtherAssignment(PluginAssignment):
        slots: tuple[int, ...] = ()

    monkeypatch.setattr(Widget, "fit", lambda self, s, r, p, e: OtherAssignment((0,)))
    (reason,) = fit_reasons(plugins)
    assert "fit on host h1 returned an OtherAssignment, not its assignment" in reason[1]
    monkeypatch.setattr(Widget, "host_state", lambda self, v, n, a: GizmoRequest())
    (reason,) = host_state_reasons(plugins)
    assert "returned a GizmoRequest, not its state_type (WidgetState) or None" in reason[1]


def test_the_types_are_read_on_the_plugins_class(plugins):
    assert plugins.request_type("widget") is WidgetRequest
    assert plugins.assignment_type("widget") is WidgetAssignment
    assert plugins.state_type("widget") is WidgetState
    assert plugins.assignment_type("gizmo") is None
    assert plugins.state_type("nosuch") is None


# -- values a hook hands back lazily, or out of its contract's range ------------------


def lines_then_bug(*args, **kwargs):
    yield "slot 0"
    raise RuntimeError("widget bug")


@pytest.mark.parametrize("fault, text", [
    (lambda *a, **k: 5, "the plugin's describe returned an int, not a sequence of str"),
    (lines_then_bug, "the plugin failed while describing its assignment: " + BUG)])
def test_a_describe_that_fails_late_is_one_line_naming_the_plugin(
        plugins, monkeypatch, fault, text):
    monkeypatch.setattr(Widget, "describe", fault)
    (line,) = describe_reasons(plugins)[0][1:]
    assert text in line and ORIGIN in line


def test_the_lines_describe_yields_are_kept(plugins, monkeypatch):
    monkeypatch.setattr(Widget, "describe",
                        lambda self, r, a: (line for line in ("slot 0", "cool")))
    spec = spec_for(plugins, widget_count="1")
    assert plugins.describe("widget", spec.requests["widget"],
                            WidgetAssignment(slots=(0,))) == ["slot 0", "cool"]


@pytest.mark.parametrize("used", [float("nan"), float("inf"), 1.5, -0.5, "0.5"])
def test_a_utilization_out_of_its_range_is_no_opinion(plugins, monkeypatch, used, caplog):
    monkeypatch.setattr(Widget, "utilization", lambda self, state: used)
    with caplog.at_level(logging.ERROR, logger="compute_plugins.runtime.calls"):
        assert plugins.utilization("widget", WidgetState()) is None
    (record,) = caplog.records
    shown = "a str" if isinstance(used, str) else repr(used)
    assert ("utilization: returned %s, not a float from 0.0 to 1.0 or None" % shown
            in record.getMessage())


def test_plugins_that_run_after_each_other_reject_not_raise(plugins, monkeypatch):
    """A fit_after cycle (two plugins' declarations) rejects every host with
    one reason naming them (as fit_all did in the scheduler), never a
    ConfigError into the scheduler, the nova filter or the agent."""
    spec = decided(plugins, spec_for(plugins, widget_count="1", gizmo_on="1"))
    monkeypatch.setattr(Widget, "fit_after", ("gizmo",), raising=False)
    cyclic = PluginSet.of({"widget": Widget(cfg.ConfigOpts()),
                           "gizmo": Gizmo(cfg.ConfigOpts())})
    reason = Rejection("plugins gizmo, widget run after each other (fit_after, "
                       "needs: a cycle)", plugin="gizmo, widget")
    assert cyclic.fit(states(cyclic), spec, host=HOST).rejections == (reason,)
    assert cyclic.verify(states(cyclic), spec, host=HOST) == (reason,)
