"""The periodic's result and its error policy.

A periodic never raises: what failed is one line in its
:class:`PeriodicResult` and in the log. :func:`failure` decides what a
failure means for the cache: a Placement failure (transport, an answer not
handled, conflicts past the retries) or an unexpected error clears it, since
it may no longer be what Placement has; a refusal of ours or of the plugins
(a :class:`~compute_plugins.exception.ComputePluginsError` that is not a
Placement error) leaves it right.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Optional

from compute_plugins import exception
from compute_plugins.placement import exception as pexc


@dataclasses.dataclass
class PeriodicResult:
    """What one periodic did.

    :param periodic: its number, from 1.
    :param calls: Placement calls by ``"METHOD /path/template"``.
    :param changed: what was written (``"inventory host1_NUMA0"``, ...).
    :param error: the one-line failure, or None when it succeeded.
    :param seconds: wall time of the periodic.
    :param reshaped: whether it went through ``POST /reshaper``.
    """

    periodic: int
    calls: dict[str, int]
    changed: list[str]
    error: Optional[str] = None
    seconds: float = 0.0
    reshaped: bool = False

    @property
    def total_calls(self) -> int:
        return sum(self.calls.values())

    @property
    def ok(self) -> bool:
        return self.error is None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "periodic": self.periodic,
            "calls": dict(sorted(self.calls.items())),
            "total_calls": self.total_calls,
            "changed": self.changed,
        }
        if self.reshaped:
            out["reshaped"] = True
        if self.error is not None:
            out["error"] = self.error
        return out


@dataclasses.dataclass(frozen=True)
class Failure:
    """How a periodic failed.

    :param error: the one line for the result and the log.
    :param clear_cache: whether the provider cache must be cleared.
    :param unexpected: not one of the project's errors (its traceback is
        logged at DEBUG).
    """

    error: str
    clear_cache: bool
    unexpected: bool


def failure(err: Exception) -> Failure:
    """The policy for an exception that ended a periodic (module doc)."""
    ours = isinstance(err, exception.ComputePluginsError)
    clear = isinstance(err, pexc.PlacementError) or not ours
    error = str(err) if ours else "%s: %s" % (type(err).__name__, err)
    return Failure(error, clear, not ours)


def calls_between(before: Mapping[str, int],
                  after: Mapping[str, int]) -> dict[str, int]:
    """The calls made between two :meth:`CallLog.snapshot` s."""
    return {k: v - before.get(k, 0) for k, v in after.items()
            if v - before.get(k, 0)}
