"""The ``isolation`` check: a plugin that raises in a hook gives one reason
naming it, never an exception out of the framework.

On a host where the plugin decided, with fresh plugins each time, the
plugin is made to raise (:class:`InjectedFailure`) in one hook, and the
framework's path through that hook runs: discovery, parsing the request,
the host states under the guests in force, fit, verify of the decision.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, NoReturn, Optional

from compute_plugins.testing import _framework as fw
from compute_plugins.testing import verdict as v
from compute_plugins.testing.report import CheckResult
from compute_plugins.testing.runs import Attempt, HostRun, Subject, World
from compute_plugins.testing.verdict import Context

__all__ = ["ISOLATED_HOOKS", "InjectedFailure", "isolation"]

#: Hooks made to raise, in the order the framework calls them.
ISOLATED_HOOKS = ("discover", "parse_request", "host_state", "fit", "verify")


class InjectedFailure(RuntimeError):
    """What a plugin made to fail by the isolation check raises."""


@contextlib.contextmanager
def _raising(subject: Subject, plugin: fw.AnyPlugin, hook: str) -> Iterator[None]:
    """``plugin.<hook>`` raises :class:`InjectedFailure` inside (not
    recorded as the plugin's own exception, nor logged)."""

    def fail(*args: Any, **kwargs: Any) -> NoReturn:
        raise InjectedFailure("injected by the conformance kit into %s.%s"
                              % (plugin.name, hook))

    saved = plugin.__dict__.get(hook)
    setattr(plugin, hook, fail)
    try:
        with subject.recorder.paused(), fw.quiet():
            yield
    finally:
        if saved is None:
            delattr(plugin, hook)
        else:
            setattr(plugin, hook, saved)


def _reasons_of(hook: str, world: World, context: Context, run: HostRun,
                attempt: Optional[Attempt]) -> tuple[list[str], list[str]]:
    """Run the framework's path through ``hook`` with the plugin made to
    raise there: the reasons it gave naming the plugin, and the others."""
    name, subject = world.name, context.subject
    loaded = subject.load(run.case)
    plugin = loaded.plugins[name]
    nodename = run.case.host.hostname
    if hook == "discover":
        with _raising(subject, plugin, hook):
            failures = fw.discover(loaded, run.case.host)
        return ([reason for who, reason in failures.items() if who == name],
                ["%s: %s" % item for item in failures.items() if item[0] != name])
    assert attempt is not None
    fw.discover(loaded, run.case.host)
    spec, usage = attempt.request.spec, attempt.situation.usage
    if hook == "parse_request":
        with _raising(subject, plugin, hook):
            _, problems = fw.build_spec(loaded, attempt.request.request_input)
        return ([p.rule for p in problems if p.plugin == name],
                [str(p) for p in problems if p.plugin != name])
    if hook == "host_state":
        with _raising(subject, plugin, hook):
            _, rejections = fw.host_states(loaded, nodename, usage)
    else:
        states, _ = fw.host_states(loaded, nodename, usage)
        with _raising(subject, plugin, hook):
            if hook == "fit":
                rejections = fw.fit(loaded, states, spec).rejections
            else:
                rejections = fw.verify(loaded, states, spec,
                                       attempt.result.assignments, nodename)
    return ([r.reason for r in rejections if r.plugin == name],
            [v.reasons([r]) for r in rejections if r.plugin != name])


def _isolated(world: World, context: Context, run: HostRun,
              attempt: Optional[Attempt], hook: str) -> Optional[str]:
    """None when the framework turns ``hook`` raising into one reason naming
    the plugin, else what it did instead."""
    try:
        with context.subject.recorder.paused():
            named, others = _reasons_of(hook, world, context, run, attempt)
    except Exception as err:  # noqa: BLE001 - what the check looks for
        return "%s raising: the framework let %s: %s through" % (
            hook, type(err).__name__, err)
    if len(named) != 1 or others:
        return ("%s raising: expected one reason naming plugin %s, got %d naming it%s"
                % (hook, world.name, len(named), "; and others: " + "; ".join(others)
                   if others else ""))
    return None


def isolation(world: World, context: Context) -> CheckResult:
    """A plugin whose hook raises (``discover``, ``parse_request``,
    ``host_state``, ``fit``, ``verify``) gives one reason naming it, never
    an exception out of the framework."""
    check = "isolation"
    decided = v.decided(world)
    if not world.used:
        return v.skip(world, check, "no usable host")
    run, attempt = decided[0] if decided else (world.used[0], None)
    hooks = ISOLATED_HOOKS if attempt is not None else ISOLATED_HOOKS[:1]
    problems = [p for p in (_isolated(world, context, run, attempt, hook)
                            for hook in hooks) if p is not None]
    detail = "%s raising: one reason naming the plugin each, on host %s" % (
        ", ".join(hooks), run.case.name)
    if attempt is None:
        detail += " (the hooks of a decision not tried: the plugin decided nothing)"
    return v.result(world, check, problems, detail)
