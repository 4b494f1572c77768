"""Errors of the request model: one per failure a caller handles differently.

- :class:`RequestValidationError`: the request (flavor, image, ports, hints)
  breaks rules. It lists *every* :class:`Problem` found, each naming where
  the key was (``flavor``, ``image``, ``port[0]``), the key, the value and the
  rule, in nova's wording where nova validates the same key.
- :class:`RequestInputError`: an input document is unusable (not JSON, not an
  object, ``vcpus`` missing...): the CLI exits 2.
- :class:`RequestFormatError`: a serialised spec cannot be read (newer format,
  unknown or newer plugin, bad shape).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from compute_plugins import exception
from compute_plugins.request.types import thaw_json
from compute_plugins.util.text import printable


@dataclasses.dataclass(frozen=True)
class Problem:
    """One broken rule.

    :param source: where the key is: ``flavor``, ``image``, ``port[N]``,
        ``hints``, ``request`` (a conflict between several keys) or
        ``plugin`` (the plugin named by ``key`` failed: a bug of that
        plugin, with its entry point in ``rule``).
    :param key: the extra spec, image property or port field (the plugin's
        name for ``plugin``).
    :param value: the offending value (as given), or None.
    :param rule: what is wrong, in words (nova's message where nova has one).
    :param plugin: the plugin that owns the key, or ``framework``.
    """

    source: str
    key: str
    value: Any
    rule: str
    plugin: str = "framework"

    def __str__(self) -> str:
        """One line: the key, the value (as JSON would have it) and the
        rule, with every non-printable character escaped."""
        key, rule = printable(self.key), printable(self.rule)
        if self.value is None:
            return "%s %s: %s" % (self.source, key, rule)
        # NOTE: repr escapes what is not printable; a frozen object or list
        # shows as the dict or list it was given as.
        return "%s %s=%s: %s" % (self.source, key,
                                 printable(repr(thaw_json(self.value))), rule)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serialisable: the key and value exactly as given (frozen
        objects and lists thawed), the rule escaped like the text."""
        data = dataclasses.asdict(self)
        data["value"] = thaw_json(self.value)
        data["rule"] = printable(self.rule)
        return data


class RequestValidationError(exception.ComputePluginsError):
    """The request breaks one or more rules; :attr:`problems` lists them all.

    :param problems: the problems, in the order found (duplicates dropped).
    """

    def __init__(self, problems: Iterable[Problem]) -> None:
        unique: list[Problem] = []
        seen: set[tuple[str, str, str, str]] = set()
        for problem in problems:
            ident = (problem.source, problem.key, repr(problem.value), problem.rule)
            if ident not in seen:
                seen.add(ident)
                unique.append(problem)
        self.problems: tuple[Problem, ...] = tuple(unique)
        lines = ["invalid request: %d problem(s):" % len(self.problems)]
        lines += ["- %s" % p for p in self.problems]
        super().__init__("\n".join(lines))

    def to_dict(self) -> dict[str, Any]:
        return {"problems": [p.to_dict() for p in self.problems]}


class RequestInputError(exception.InputError):
    """An input document cannot be used at all (the CLI's exit code 2)."""


class RequestFormatError(exception.ComputePluginsError):
    """A serialised RequestSpec cannot be read by this version."""
