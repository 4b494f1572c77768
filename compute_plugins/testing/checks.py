"""The checks of the plugin contract, in the order they run and report
(:data:`CHECKS`; :func:`compute_plugins.testing.check_plugin` says what
 each checks).

Each check is a function of the plugin's :class:`~compute_plugins.testing.
runs.World` (the plugin run on the kit's hosts) returning one result
(:mod:`compute_plugins.testing.verdict`); every case that breaks the
contract is one problem naming the host, the state (its guests) and the
request. The guest domain's check is in :mod:`~compute_plugins.testing.
domain`, the isolation of a raising plugin in :mod:`~compute_plugins.
testing.isolation`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Optional

from compute_plugins.testing import _framework as fw
from compute_plugins.testing import verdict as v
from compute_plugins.testing.domain import guest_xml
from compute_plugins.testing.isolation import isolation
from compute_plugins.testing.report import FAIL, PASS, CheckResult
from compute_plugins.testing.runs import (
    Attempt,
    HostRun,
    Situation,
    World,
    build_world,
    transcript,
)
from compute_plugins.testing.verdict import Check, Context

__all__ = ["CHECKS", "run_checks"]


def discovery(world: World, context: Context) -> CheckResult:
    """The plugin discovers the kit's hosts (those it cannot are left out of
    every check; at least one must be usable)."""
    out = [r for r in world.runs if r.unusable]
    detail = "%d of %s" % (len(world.used), v.count(len(world.runs), "host"))
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
        return CheckResult(world.name, check, FAIL, "sample_requests() "
                           + world.samples_error)
    if not world.samples:
        return v.skip(world, check, "the plugin offers no sample_requests(): the "
                      "checks that need requests have none")
    problems = []
    for index in range(len(world.samples)):
        why = [run.sample_problems[index] for run in world.used]
        if all(why):
            problems.append("sample %d asks nothing of the plugin on any host: %s"
                            % (index, why[0] if why else "no usable host"))
    requests = sum(len(run.requests) for run in world.used)
    return v.result(world, check, problems,
                    "%s, %s at the kit's sizes, %s"
                    % (v.count(len(world.samples), "sample"), v.count(requests, "request"),
                       v.hosts(world)))


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
        if back != value or v.doc(back) != v.doc(value):
            problems.append("%s: the %s comes back different: %s, read back %s"
                            % (where, kind[:-1], v.doc(value), v.doc(back)))

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
        return v.skip(world, check, "nothing to round-trip: " + v.no_requests(world))
    return v.result(world, check, problems, "%s, %s, %s, %s"
                    % (v.count(counts["requests"], "request"), v.count(counts["states"], "state"),
                       v.count(counts["assignments"], "assignment"), v.hosts(world)))


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
            # NOTE: only the plugin's own decisions count: a fit where it
            # decided nothing checks nothing of it.
            held += world.name in result.assignments
            if rejections:
                problems.append("%s: fit's decision fails verify on the same state: %s"
                                % (attempt.where, v.reasons(rejections)))
            if world.name in result.assignments:
                made.setdefault(attempt.request.label, {}).setdefault(
                    v.doc(dict(result.assignments)),
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
                                                 v.reasons(refusals)))
    if not held and not problems:
        return v.undecided(world, check)
    return v.result(world, check, problems,
                    "%s pass verify on the state fit made them on; verify refuses "
                    "%s made on other states where fit refuses the request; %s"
                    % (v.count(held, "decision"), v.count(confirmed, "decision"), v.hosts(world)))


def alternatives(world: World, context: Context) -> CheckResult:
    """The plugin's alternatives start with ``fit``'s answer, each passes
    ``verify``, and no two are the same decision."""
    check = "alternatives"
    problems: list[str] = []
    decided = v.decided(world)
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
        if v.doc(alts[0]) != v.doc(answer):
            problems.append("%s: the first alternative is not fit's answer: %s, fit %s"
                            % (where, v.doc(alts[0]), v.doc(answer)))
        seen: dict[str, int] = {}
        earlier = run.loaded.earlier_than(world.name, attempt.result.assignments)
        for index, alt in enumerate(alts):
            text = v.doc(alt)
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
                                % (where, index, v.reasons(rejections)))
    if not decided:
        return v.undecided(world, check)
    detail = "%s, %s, valid and distinct" % (v.count(len(decided), "decision"),
                                             v.count(offered, "alternative"))
    if most == 1:
        detail += " (only fit's answer each time)"
    return v.result(world, check, problems, detail)


def _broken_for(name: str, broken: Sequence[fw.Rejection]) -> list[fw.Rejection]:
    return [r for r in broken if r.plugin == name]


def _held_resources(name: str, run: HostRun, attempt: Attempt) -> list[str]:
    """What plugin ``name``'s decision in ``attempt`` takes from providers
    it names itself (``group_providers``): ``20 DISK_GB from provider X``.
    Holding such a decision must show in the plugin's host state.

    :raises Exception: what ``group_providers`` raised.
    """
    request = attempt.request.spec.requests[name]
    providers = fw.group_providers(run.loaded.plugins[name], request,
                                   attempt.result.assignments[name],
                                   attempt.situation.states.get(name)) or {}
    return ["%s from provider %s" % (", ".join("%d %s" % (amount, rc) for rc, amount
                                               in group.resources.items()),
                                     providers[group.requester_id])
            for group in attempt.request.spec.groups
            if group.owner == name and any(group.resources.values())
            and providers.get(group.requester_id)]


def double_booking(world: World, context: Context) -> CheckResult:
    """A decision verified on a state that already holds it is rejected.

    Where ``verify`` accepts it there, the state must be able to hold it
    twice (the plugin counts capacity, not exclusive units), or holding
    it must change nothing in the state (the plugin holds nothing
    exclusive, and takes no resource from a provider it names itself:
    a state that ignores what the guests take fails); fit's decisions
    must fit with the assignments in force.
    """
    check = "double-booking"
    problems = [p for run in world.used for p in run.fill_problems]
    rejected = twice = unchanged = 0
    for run, attempt in v.decided(world):
        nodename = run.case.host.hostname
        situation, decision = attempt.situation, attempt.result.assignments
        usage = situation.holding(decision)
        states, broken = fw.host_states(run.loaded, nodename, usage)
        mine = _broken_for(world.name, broken)
        if mine:
            problems.append("%s: fit's decision cannot be added to the assignments "
                            "in force (fit chose what is taken, or what the host does not have): %s"
                            % (attempt.where, v.reasons(mine)))
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
            try:
                taken = _held_resources(world.name, run, attempt)
            except Exception as err:  # noqa: BLE001 - the plugin's, reported
                problems.append("%s: group_providers() raised %s: %s"
                                % (attempt.where, type(err).__name__, err))
                continue
            if taken:
                problems.append(
                    "%s: holding fit's decision changes nothing in the plugin's "
                    "state, though it takes %s (host_state ignores the assignments "
                    "in force?)" % (attempt.where, "; ".join(taken)))
                continue
            unchanged += 1
            continue
        again = dict(usage)
        again[world.name] = [*usage[world.name], decision[world.name]]
        _, broken_twice = fw.host_states(run.loaded, nodename, again)
        mine = _broken_for(world.name, broken_twice)
        if mine:
            problems.append(
                "%s: verify accepts the decision on a state that already holds it, "
                "and the state cannot hold it twice: %s" % (attempt.where, v.reasons(mine)))
        else:
            twice += 1
    checked = rejected + twice + unchanged
    if problems:
        return v.result(world, check, problems, "")
    if not checked:
        return v.undecided(world, check)
    if checked == unchanged:
        return v.skip(world, check, "holding a decision changes nothing in the "
                      "plugin's state (it holds no exclusive unit): %s"
                      % v.count(checked, "decision"))
    detail = "%s: %d rejected once held" % (v.count(checked, "decision"), rejected)
    if twice:
        detail += ", %d fit twice (capacity, no exclusive unit)" % twice
    if unchanged:
        detail += ", %d change nothing in the state" % unchanged
    return v.result(world, check, problems, detail)


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
                       % (v.count(len(first), "answer"), v.hosts(world)))


def exceptions(world: World, context: Context) -> CheckResult:
    """In every call the kit made so far, the plugin raised nothing its
    hook's contract does not let it raise (an exception the framework
    contains is still a bug: the request or host it concerns is refused)."""
    recorder = context.subject.recorder
    problems = ["%s raised %s (%d time%s)" % (hook, text, count, "" if count == 1 else "s")
                for (hook, text), count in sorted(recorder.raised.items())]
    return v.result(world, "exceptions", problems,
                    "no hook raised in %s" % v.count(recorder.calls, "call"))


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
