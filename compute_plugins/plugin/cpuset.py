"""CPU set specifications in nova's syntax (``"0-3,^2,8"``).

Used by the ``[compute] cpu_*_set`` options and the ``hw:cpu_dedicated_mask``
extra spec; error messages are nova's (``nova.virt.hardware.parse_cpu_spec``).
Ids are ASCII digits only: ``int()`` would read ``"٠-٣"`` as ``0-3``.
"""

from __future__ import annotations

from collections.abc import Iterable

from compute_plugins.util.text import ascii_int

#: Highest CPU id accepted: a bound so that ``0-99999999999`` is refused
#: instead of expanded (Linux' own limit, CONFIG_NR_CPUS, is 8192 at most).
MAX_CPU_ID = 65535


class InvalidCPUSpec(ValueError):
    """A CPU set specification does not parse; the message is nova's."""


def parse_cpu_spec(spec: str) -> frozenset[int]:
    """Parse ``spec`` (single ids, ``a-b`` ranges, ``^n`` / ``^a-b`` exclusions)."""
    include: set[int] = set()
    exclude: set[int] = set()
    for rule in spec.split(","):
        rule = rule.strip()
        if not rule:
            continue
        range_parts = rule.split("-", 1)
        if len(range_parts) > 1:
            target = include
            if range_parts[0].startswith("^"):
                target = exclude
                range_parts[0] = range_parts[0][1:]
            try:
                start, end = (ascii_int(p) for p in range_parts)
            except ValueError:
                raise InvalidCPUSpec("Invalid range expression %r" % rule) from None
            if start > end or start < 0:
                raise InvalidCPUSpec("Invalid range expression %r" % rule)
            if end > MAX_CPU_ID:
                raise InvalidCPUSpec("Invalid range expression %r: CPU ids go up to %d"
                                     % (rule, MAX_CPU_ID)) from None
            target.update(range(start, end + 1))
        elif rule.startswith("^"):
            try:
                exclude.add(_cpu_id(rule[1:]))
            except ValueError:
                raise InvalidCPUSpec("Invalid exclusion expression %r" % rule) from None
        else:
            try:
                include.add(_cpu_id(rule))
            except ValueError:
                raise InvalidCPUSpec("Invalid inclusion expression %r" % rule) from None
    return frozenset(include - exclude)


def _cpu_id(text: str) -> int:
    value = ascii_int(text)
    if value < 0 or value > MAX_CPU_ID:
        raise ValueError(text)
    return value


def format_cpu_spec(cpus: Iterable[int]) -> str:
    """Inverse of :func:`parse_cpu_spec`: ``{0, 1, 2, 5}`` -> ``"0-2,5"``."""
    ordered = sorted(set(cpus))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        if j > i:
            parts.append("%d-%d" % (ordered[i], ordered[j]))
        else:
            parts.append(str(ordered[i]))
        i = j + 1
    return ",".join(parts)
