"""The checks of the plugin contract, each on a :class:`~compute_plugins.
testing.runs.World` (the plugin run on the kit's hosts).

Each check is a function returning one :class:`CheckResult`; every case
that breaks the contract is one problem naming the host, the state (its
guests) and the request. See :data:`CHECKS` for the order and
:func:`compute_plugins.testing.check_plugin` for what each checks.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NoReturn, Optional

from compute_plugins.testing import _framework as fw
from compute_plugins.testing.hosts import HostCase
from compute_plugins.testing.report import FAIL, PASS, SKIP, CheckResult
from compute_plugins.testing.runs import (
    Attempt,
    HostRun,
    Situation,
    Subject,
    World,
    build_world,
    transcript,
)

__all__ = ["CHECKS", "Context", "Validator", "run_checks"]

#: The validator of libvirt domain XML the ``guest-xml`` check runs
#: (Debian: ``libvirt-clients``, with ``xmllint`` from ``libxml2-utils``).
VIRT_XML_VALIDATE = "virt-xml-validate"
#: The most distinct domains validated per plugin (each is a process).
MAX_VALIDATED = 64

#: Hooks the isolation check makes raise, in the order the framework calls
#: them.
ISOLATED_HOOKS = ("discover", "parse_request", "host_state", "fit", "verify")


class Context:
    """What a check may need besides the world.

    :param subject: the plugin under test (to build it again).
    :param hosts: the hosts.
    :param validator: the domain XML validator command (None: none).
    """

    def __init__(self, subject: Subject, hosts: Sequence[HostCase],
                 validator: Optional[str]) -> None:
        self.subject = subject
        self.hosts = tuple(hosts)
        self.validator = validator


Check = Callable[[World, Context], CheckResult]


def _result(world: World, check: str, problems: Sequence[str], detail: str,
            failed: str = "") -> CheckResult:
    """PASS with ``detail``, or FAIL with ``failed`` (default: the first
    problem and how many more) and every problem."""
    if not problems:
        return CheckResult(world.name, check, PASS, detail)
    more = " (and %d more)" % (len(problems) - 1) if len(problems) > 1 else ""
    return CheckResult(world.name, check, FAIL, failed or problems[0] + more,
                       tuple(problems))


def _skip(world: World, check: str, why: str) -> CheckResult:
    return CheckResult(world.name, check, SKIP, why)


def _no_requests(world: World) -> str:
    if world.samples_error:
        return "sample_requests() failed"
    if not world.samples:
        return "the plugin offers no sample_requests()"
    return "no sample request asks anything of the plugin on the hosts"


def _doc(value: Any) -> str:
    return json.dumps(fw.value_doc(value), sort_keys=True)


def _reasons(rejections: Sequence[fw.Rejection]) -> str:
    return "; ".join("%s: %s" % (r.plugin or "framework", r.reason) for r in rejections)


def _decided(world: World) -> list[tuple[HostRun, Attempt]]:
    """The attempts where the plugin under test decided."""
    return [(run, attempt) for run in world.used for attempt in run.attempts
            if world.name in attempt.result.assignments]


def _n(count: int, noun: str) -> str:
    """``1 decision``, ``2 decisions``."""
    return "%d %s%s" % (count, noun, "" if count == 1 else "s")


def _hosts(world: World) -> str:
    return _n(len(world.used), "host")


# -- the checks ------------------------------------------------------------------


def discovery(world: World, context: Context) -> CheckResult:
    """The plugin discovers the kit's hosts (those it cannot are left out of
    every check; at least one must be usable)."""
    out = [r for r in world.runs if r.unusable]
    detail = "%d of %s" % (len(world.used), _n(len(world.runs), "host"))
    if out:
        detail += "; left out: " + "; ".join(
            "%s (%s)" % (r.case.name, r.unusable) for r in out)
    if not world.used:
        return CheckResult(world.name, "discovery", FAIL, "no host usable: " + detail,
                           tuple("host %s: %s" % (r.case.name, r.unusable) for r in out))
    return CheckResult(world.name, "discovery", PASS, detail)


def sample_requests(world: World, context: Context) -> CheckResult:
    """Each sample request, as given, asks something of the plugin on at
    least one host."""
    check = "sample-requests"
    if world.samples_error:
        return CheckResult(world.name, check, FAIL, "sample_requests() raised %s"
                           % world.samples_error)
    if not world.samples:
        return _skip(world, check, "the plugin offers no sample_requests(): the "
                     "checks that need requests have none")
    problems = []
    for index in range(len(world.samples)):
        why = [run.sample_problems[index] for run in world.used]
        if all(why):
            problems.append("sample %d asks nothing of the plugin on any host: %s"
                            % (index, why[0] if why else "no usable host"))
    requests = sum(len(run.requests) for run in world.used)
    return _result(world, check, problems,
                   "%s, %s at the kit's sizes, %s"
                   % (_n(len(world.samples), "sample"), _n(requests, "request"),
                      _hosts(world)))


def json_roundtrip(world: World, context: Context) -> CheckResult:
    """Requests, states and assignments come back equal from JSON text."""
    check = "json-roundtrip"
    counts = {"requests": 0, "states": 0, "assignments": 0}
    problems: list[str] = []

    def trip(kind: str, where: str, value: Any,
             round_trip: Callable[[fw.AnyPlugin, Any], Any], plugin: fw.AnyPlugin) -> None:
        counts[kind] += 1
        try:
            back = round_trip(plugin, value)
        except Exception as err:  # noqa: BLE001 - the plugin's, reported
            problems.append("%s: the %s cannot be read back: %s: %s"
                            % (where, kind[:-1], type(err).__name__, err))
            return
        if back != value or _doc(back) != _doc(value):
            problems.append("%s: the %s comes back different: %s, read back %s"
                            % (where, kind[:-1], _doc(value), _doc(back)))

    for run in world.used:
        plugin = run.loaded.plugins[world.name]
        for request in run.requests:
            trip("requests", "host %s, %s" % (run.case.name, request.label),
                 request.spec.requests[world.name], fw.request_round_trip, plugin)
        for situation in run.situations:
            state = situation.states.get(world.name)
            if state is not None:
                trip("states", "host %s, %s" % (run.case.name, situation.label), state,
                     fw.state_round_trip, plugin)
        for attempt in run.attempts:
            decided = attempt.result.assignments.get(world.name)
            for assignment in ((decided,) if decided is not None else ()) + tuple(
                    attempt.alternatives[1:]):
                trip("assignments", attempt.where, assignment, fw.assignment_round_trip,
                     plugin)
    if not any(counts.values()):
        return _skip(world, check, "nothing to round-trip: " + _no_requests(world))
    return _result(world, check, problems, "%s, %s, %s, %s"
                   % (_n(counts["requests"], "request"), _n(counts["states"], "state"),
                      _n(counts["assignments"], "assignment"), _hosts(world)))


def fit_verify(world: World, context: Context) -> CheckResult:
    """Every decision of ``fit`` passes ``verify`` on the state it was made
    on; and where ``fit`` refuses a request, ``verify`` refuses the
    decisions made for it on other states of the host (a ``verify`` that
    accepts what ``fit`` would refuse)."""
    check = "fit-verify"
    problems: list[str] = []
    held = confirmed = 0
    for run in world.used:
        nodename = run.case.host.hostname
        made: dict[str, dict[str, tuple[Situation, Mapping[str, Any]]]] = {}
        for attempt in run.attempts:
            result = attempt.result
            if not result.fits:
                continue
            rejections = fw.verify(run.loaded, attempt.situation.states,
                                   attempt.request.spec, result.assignments, nodename)
            held += 1
            if rejections:
                problems.append("%s: fit's decision fails verify on the same state: %s"
                                % (attempt.where, _reasons(rejections)))
            if world.name in result.assignments:
                made.setdefault(attempt.request.label, {}).setdefault(
                    _doc(dict(result.assignments)),
                    (attempt.situation, result.assignments))
        for attempt in run.attempts:
            refusals = attempt.result.rejections
            if not refusals or any(r.plugin != world.name for r in refusals):
                continue
            for situation, assignments in made.get(attempt.request.label, {}).values():
                rejections = fw.verify(run.loaded, attempt.situation.states,
                                       attempt.request.spec, assignments, nodename)
                if rejections:
                    confirmed += 1
                    continue
                problems.append(
                    "%s: verify accepts the decision fit made on %s, where fit "
                    "refuses the request: %s" % (attempt.where, situation.label,
                                                 _reasons(refusals)))
    if not held:
        return _skip(world, check, "no decision to verify: " + _no_requests(world)
                     if not any(run.requests for run in world.used)
                     else "no request fits on any host")
    return _result(world, check, problems,
                   "%s pass verify on the state fit made them on; verify refuses "
                   "%s made on other states where fit refuses the request; %s"
                   % (_n(held, "decision"), _n(confirmed, "decision"), _hosts(world)))


def alternatives(world: World, context: Context) -> CheckResult:
    """The plugin's alternatives start with ``fit``'s answer, each passes
    ``verify``, and no two are the same decision."""
    check = "alternatives"
    problems: list[str] = []
    decided = _decided(world)
    offered = most = 0
    for run, attempt in decided:
        where = attempt.where
        if attempt.alternatives_error:
            problems.append("%s: alternatives() raised %s" % (where, attempt.alternatives_error))
            continue
        answer = attempt.result.assignments[world.name]
        alts = attempt.alternatives
        offered += len(alts)
        most = max(most, len(alts))
        if not alts:
            problems.append("%s: alternatives() offers nothing though fit decided" % where)
            continue
        if _doc(alts[0]) != _doc(answer):
            problems.append("%s: the first alternative is not fit's answer: %s, fit %s"
                            % (where, _doc(alts[0]), _doc(answer)))
        seen: dict[str, int] = {}
        earlier = run.loaded.earlier_than(world.name, attempt.result.assignments)
        for index, alt in enumerate(alts):
            text = _doc(alt)
            if text in seen:
                problems.append("%s: alternatives %d and %d are the same decision: %s"
                                % (where, seen[text], index, text))
                continue
            seen[text] = index
            rejections = [r for r in fw.verify(
                run.loaded, attempt.situation.states, attempt.request.spec,
                {**earlier, world.name: alt}, run.case.host.hostname)
                if r.plugin == world.name]
            if rejections:
                problems.append("%s: alternative %d fails verify: %s"
                                % (where, index, _reasons(rejections)))
    if not decided:
        return _skip(world, check, "the plugin decided nothing: " + _no_requests(world)
                     if not any(run.requests for run in world.used)
                     else "the plugin decided nothing on the hosts")
    detail = "%s, %s, valid and distinct" % (_n(len(decided), "decision"),
                                             _n(offered, "alternative"))
    if most == 1:
        detail += " (only fit's answer each time)"
    return _result(world, check, problems, detail)


def _broken_for(name: str, broken: Sequence[fw.Rejection]) -> list[fw.Rejection]:
    return [r for r in broken if r.plugin == name]


def double_booking(world: World, context: Context) -> CheckResult:
    """A decision verified on a state that already holds it is rejected.

    Where ``verify`` accepts it there, the state must be able to hold it
    twice (the plugin counts capacity, not exclusive units), or holding
    it must change nothing in the state (the plugin holds nothing
    exclusive); fit's decisions must fit with the assignments in force.
    """
    check = "double-booking"
    problems = [p for run in world.used for p in run.fill_problems]
    rejected = twice = unchanged = 0
    for run, attempt in _decided(world):
        nodename = run.case.host.hostname
        situation, decision = attempt.situation, attempt.result.assignments
        usage = situation.holding(decision)
        states, broken = fw.host_states(run.loaded, nodename, usage)
        mine = _broken_for(world.name, broken)
        if mine:
            problems.append("%s: fit's decision cannot be added to the assignments "
                            "in force (fit chose what is taken): %s"
                            % (attempt.where, _reasons(mine)))
            continue
        if broken:
            continue
        verdict = fw.verify(run.loaded, states, attempt.request.spec, decision, nodename)
        if _broken_for(world.name, verdict):
            rejected += 1
            continue
        before = fw.state_doc(run.loaded.plugins[world.name],
                              situation.states.get(world.name))
        after = fw.state_doc(run.loaded.plugins[world.name], states.get(world.name))
        if before == after:
            unchanged += 1
            continue
        again = dict(usage)
        again[world.name] = [*usage[world.name], decision[world.name]]
        _, broken_twice = fw.host_states(run.loaded, nodename, again)
        mine = _broken_for(world.name, broken_twice)
        if mine:
            problems.append(
                "%s: verify accepts the decision on a state that already holds it, "
                "and the state cannot hold it twice: %s" % (attempt.where, _reasons(mine)))
        else:
            twice += 1
    checked = rejected + twice + unchanged
    if problems:
        return _result(world, check, problems, "")
    if not checked:
        return _skip(world, check, "the plugin decided nothing: " + _no_requests(world)
                     if not any(run.requests for run in world.used)
                     else "the plugin decided nothing on the hosts")
    if checked == unchanged:
        return _skip(world, check, "holding a decision changes nothing in the "
                     "plugin's state (it holds no exclusive unit): %s"
                     % _n(checked, "decision"))
    detail = "%s: %d rejected once held" % (_n(checked, "decision"), rejected)
    if twice:
        detail += ", %d fit twice (capacity, no exclusive unit)" % twice
    if unchanged:
        detail += ", %d change nothing in the state" % unchanged
    return _result(world, check, problems, detail)


class Validator:
    """libvirt's domain schema, through ``virt-xml-validate``.

    :param command: the command (a name on ``PATH`` or a path).
    """

    def __init__(self, command: str) -> None:
        self.command = command

    def problem(self, domain: str) -> Optional[str]:
        """None when ``domain`` validates, else the validator's complaint."""
        with tempfile.TemporaryDirectory(prefix="conformance-") as tmp:
            path = os.path.join(tmp, "domain.xml")
            with open(path, "w", encoding="utf-8") as out:
                out.write(domain)
            try:
                done = subprocess.run([self.command, path, "domain"], capture_output=True,
                                      text=True, timeout=60, check=False)
            except (OSError, subprocess.TimeoutExpired) as err:
                return "%s could not run: %s" % (self.command, err)
        if done.returncode == 0:
            return None
        lines = [line.replace(path, "domain.xml")
                 for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        return " | ".join(lines[:3]) or "exit status %d" % done.returncode


def guest_xml(world: World, context: Context) -> CheckResult:
    """The plugins' guest fragments assemble into a domain, valid against
    libvirt's domain schema when ``virt-xml-validate`` is installed."""
    check = "guest-xml"
    decided = _decided(world)
    problems = ["%s: the guest domain cannot be assembled: %s"
                % (attempt.where, attempt.domain_error)
                for _, attempt in decided if attempt.domain_error]
    domains: dict[str, str] = {}
    for _, attempt in decided:
        if attempt.domain:
            domains.setdefault(attempt.domain, attempt.where)
    if not decided:
        return _skip(world, check, "the plugin decided nothing: " + _no_requests(world)
                     if not any(run.requests for run in world.used)
                     else "the plugin decided nothing on the hosts")
    if problems:
        return _result(world, check, problems, "")
    command = context.validator and shutil.which(context.validator)
    if not command:
        why = ("%s is not installed (Debian: libvirt-clients, libxml2-utils)"
               % context.validator if context.validator else "no validator given")
        return _skip(world, check, "%s assembled; not validated against libvirt's "
                     "domain schema: %s" % (_n(len(domains), "domain"), why))
    validator = Validator(command)
    chosen = list(domains.items())[:MAX_VALIDATED]
    for domain, where in chosen:
        complaint = validator.problem(domain)
        if complaint is not None:
            problems.append("%s: the guest domain is not valid against libvirt's "
                            "domain schema: %s" % (where, complaint))
    shown = (_n(len(domains), "domain") if len(chosen) == len(domains)
             else "%d of %d distinct domains" % (len(chosen), len(domains)))
    return _result(world, check, problems,
                   "%s valid against libvirt's domain schema (virt-xml-validate)" % shown)


def determinism(world: World, context: Context) -> CheckResult:
    """The same hosts and requests give the same answers a second time, on
    fresh plugins (when the kit was given a class)."""
    check = "determinism"
    again = build_world(context.subject, context.hosts)
    first, second = transcript(world), transcript(again)
    for (where, one), (_, two) in zip(first, second, strict=False):
        if one != two:
            return CheckResult(world.name, check, FAIL,
                               "two runs differ at %s" % where,
                               ("%s: first %s, then %s" % (where, one, two),))
    if len(first) != len(second):
        return CheckResult(world.name, check, FAIL, "two runs gave %d and %d answers"
                           % (len(first), len(second)))
    return CheckResult(world.name, check, PASS, "two runs gave the same %s, %s"
                       % (_n(len(first), "answer"), _hosts(world)))


def exceptions(world: World, context: Context) -> CheckResult:
    """In every call the kit made so far, the plugin raised nothing its
    hook's contract does not let it raise (an exception the framework
    contains is still a bug: the request or host it concerns is refused)."""
    recorder = context.subject.recorder
    problems = ["%s raised %s (%d time%s)" % (hook, text, count, "" if count == 1 else "s")
                for (hook, text), count in sorted(recorder.raised.items())]
    return _result(world, "exceptions", problems,
                   "no hook raised in %s" % _n(recorder.calls, "call"))


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
            [_reasons([r]) for r in rejections if r.plugin != name])


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
    decided = _decided(world)
    if not world.used:
        return _skip(world, check, "no usable host")
    run, attempt = decided[0] if decided else (world.used[0], None)
    hooks = ISOLATED_HOOKS if attempt is not None else ISOLATED_HOOKS[:1]
    problems = [p for p in (_isolated(world, context, run, attempt, hook)
                            for hook in hooks) if p is not None]
    detail = "%s raising: one reason naming the plugin each, on host %s" % (
        ", ".join(hooks), run.case.name)
    if attempt is None:
        detail += " (the hooks of a decision not tried: the plugin decided nothing)"
    return _result(world, check, problems, detail)


#: Every check, in the order they run and report.
CHECKS: Mapping[str, Check] = {
    "discovery": discovery,
    "sample-requests": sample_requests,
    "json-roundtrip": json_roundtrip,
    "fit-verify": fit_verify,
    "alternatives": alternatives,
    "double-booking": double_booking,
    "guest-xml": guest_xml,
    "determinism": determinism,
    "exceptions": exceptions,
    "isolation": isolation,
}


def run_checks(world: World, context: Context,
               names: Optional[Sequence[str]] = None) -> list[CheckResult]:
    """The results of the checks ``names`` (default: all), in
    :data:`CHECKS` order. A check that raises (a bug of the kit, or of
    the plugin where a check calls it unguarded) is a FAIL naming the
    exception."""
    wanted = list(CHECKS) if names is None else [n for n in CHECKS if n in names]
    results = []
    for name in wanted:
        try:
            results.append(CHECKS[name](world, context))
        except Exception as err:  # noqa: BLE001 - one check, reported
            results.append(CheckResult(world.name, name, FAIL,
                                       "the check failed: %s: %s" % (type(err).__name__, err)))
    return results
