"""What the checks share: their context and how they say what they found.

A check (:mod:`compute_plugins.testing.checks`) is a function of the
:class:`~compute_plugins.testing.runs.World` (the plugin run on the hosts)
and a :class:`Context`, returning one
:class:`~compute_plugins.testing.report.CheckResult`: :func:`result` from
its problems (each a line naming the host, the state and the request),
:func:`skip` when it could not run.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, Optional

from compute_plugins.testing import _framework as fw
from compute_plugins.testing.hosts import HostCase
from compute_plugins.testing.report import FAIL, PASS, SKIP, CheckResult
from compute_plugins.testing.runs import Attempt, HostRun, Subject, World

__all__ = ["Check", "Context", "count", "decided", "doc", "hosts", "no_requests",
           "reasons", "result", "skip", "undecided"]


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


def result(world: World, check: str, problems: Sequence[str], detail: str) -> CheckResult:
    """PASS with ``detail`` when there is no problem, else FAIL with the
    first problem (and how many more) and every problem."""
    if not problems:
        return CheckResult(world.name, check, PASS, detail)
    more = " (and %d more)" % (len(problems) - 1) if len(problems) > 1 else ""
    return CheckResult(world.name, check, FAIL, problems[0] + more, tuple(problems))


def skip(world: World, check: str, why: str) -> CheckResult:
    """SKIP, saying why."""
    return CheckResult(world.name, check, SKIP, why)


def undecided(world: World, check: str) -> CheckResult:
    """SKIP of a check of decisions where the plugin made none."""
    if any(run.requests for run in world.used):
        return skip(world, check, "the plugin decided nothing on the hosts")
    return skip(world, check, "the plugin decided nothing: " + no_requests(world))


def no_requests(world: World) -> str:
    """Why no request asks anything of the plugin."""
    if world.samples_error:
        return "sample_requests() failed"
    if not world.samples:
        return "the plugin offers no sample_requests()"
    return "no sample request asks anything of the plugin on the hosts"


def doc(value: Any) -> str:
    """``value``'s JSON document as text (to compare decisions)."""
    return json.dumps(fw.value_doc(value), sort_keys=True)


def reasons(rejections: Sequence[fw.Rejection]) -> str:
    """``plugin: reason; ...``."""
    return "; ".join("%s: %s" % (r.plugin or "framework", r.reason) for r in rejections)


def decided(world: World) -> list[tuple[HostRun, Attempt]]:
    """The attempts where the plugin under test decided."""
    return [(run, attempt) for run in world.used for attempt in run.attempts
            if world.name in attempt.result.assignments]


def count(number: int, noun: str) -> str:
    """``1 decision``, ``2 decisions``."""
    return "%d %s%s" % (number, noun, "" if number == 1 else "s")


def hosts(world: World) -> str:
    """``5 hosts``: those the plugin ran on."""
    return count(len(world.used), "host")
