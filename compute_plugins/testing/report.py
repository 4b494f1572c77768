"""What the conformance kit found: a line per check, and the problems.

A check ends in one of three statuses: ``PASS`` (the contract holds on
every case tried), ``FAIL`` (it does not: every case that breaks it is a
problem, one line each) or ``SKIP`` (the check could not run, and the
line says why: no sample requests, no schema validator installed...).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

__all__ = ["FAIL", "PASS", "SKIP", "STATUSES", "CheckResult", "Report"]

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"
STATUSES = (PASS, FAIL, SKIP)

#: Problems a failed check shows in :meth:`Report.text` (all are kept).
SHOWN_PROBLEMS = 10


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """One check of one plugin.

    :param plugin: the plugin's name.
    :param check: the check's name (``json-roundtrip``, ``fit-verify``...).
    :param status: ``PASS``, ``FAIL`` or ``SKIP``.
    :param detail: what was checked, or why it failed or was skipped.
    :param problems: each case that breaks the contract, one line each
        (naming the host, the state and the request).
    """

    plugin: str
    check: str
    status: str
    detail: str
    problems: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError("check status %r is not one of %s"
                             % (self.status, ", ".join(STATUSES)))

    @property
    def line(self) -> str:
        """``STATUS plugin check: detail``."""
        return "%s %s %s: %s" % (self.status, self.plugin, self.check, self.detail)

    def to_dict(self) -> dict[str, Any]:
        return {"plugin": self.plugin, "check": self.check, "status": self.status,
                "detail": self.detail, "problems": list(self.problems)}


@dataclasses.dataclass(frozen=True)
class Report:
    """Every check of one plugin, in the order they ran.

    :param plugin: the plugin's name.
    :param results: a result per check.
    """

    plugin: str
    results: tuple[CheckResult, ...]

    def __iter__(self) -> Iterator[CheckResult]:
        return iter(self.results)

    @property
    def ok(self) -> bool:
        """True when no check failed (skips are not failures)."""
        return not self.failures

    @property
    def failures(self) -> tuple[CheckResult, ...]:
        return tuple(r for r in self.results if r.status == FAIL)

    def result(self, check: str) -> CheckResult:
        """The result of ``check``.

        :raises KeyError: no such check ran.
        """
        for result in self.results:
            if result.check == check:
                return result
        raise KeyError(check)

    def lines(self) -> list[str]:
        """One line per check."""
        return [r.line for r in self.results]

    def text(self) -> str:
        """A line per check, each failure's problems indented under it."""
        out: list[str] = []
        for result in self.results:
            out.append(result.line)
            if result.status == FAIL:
                out.extend("    " + p for p in result.problems[:SHOWN_PROBLEMS])
                if len(result.problems) > SHOWN_PROBLEMS:
                    out.append("    ... and %d more"
                               % (len(result.problems) - SHOWN_PROBLEMS))
        return "\n".join(out)

    def __str__(self) -> str:
        return self.text()

    def to_dict(self) -> dict[str, Any]:
        return {"plugin": self.plugin, "ok": self.ok,
                "checks": [r.to_dict() for r in self.results]}
