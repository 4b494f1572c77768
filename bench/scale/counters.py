"""What each benchmark process counts, shared with the main process.

Every process (agents' workers, schedulers) has a :class:`Slot`: counts it
adds to as it goes and copies into shared memory (:meth:`Slot.sync`), so
that the main process reads every process's totals at a phase's start and
end without asking them. Store statements are counted by an SQLAlchemy
``before_cursor_execute`` listener on the store's engine
(:func:`count_statements`): every statement sent to the database,
the transaction's own included; Placement calls by the client's
:class:`~compute_plugins.placement.client.CallLog`.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any, Optional

import sqlalchemy as sa

STATEMENTS, PLACEMENT, POLLS, CLAIMS, REJECTIONS, RELEASES, ERRORS, RSS_KB = range(8)
FIELDS = 8


def rss_kb() -> int:
    """This process's resident memory now (KiB; 0 where /proc is missing)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


class Slot:
    """One process's counts.

    :param shared: a ``multiprocessing`` array of :data:`FIELDS` integers
        (made by the main process before it starts the process).
    """

    def __init__(self, shared: Any) -> None:
        self.shared = shared
        self._local = [0] * FIELDS
        self._lock = threading.Lock()
        #: The process's Placement client's call log, once it has one.
        self.placement: Optional[Any] = None

    def add(self, field: int, amount: int = 1) -> None:
        with self._lock:
            self._local[field] += amount

    def sync(self) -> None:
        """Copy this process's counts into the shared array."""
        with self._lock:
            values = list(self._local)
        if self.placement is not None:
            values[PLACEMENT] = self.placement.total
        values[RSS_KB] = rss_kb()
        for i, value in enumerate(values):
            self.shared[i] = value

    def read(self) -> list[int]:
        """The counts last synced (any process)."""
        return list(self.shared[:FIELDS])


def count_statements(engine: sa.Engine, slot: Slot) -> None:
    """Count every statement ``engine`` sends into ``slot``."""
    def counted(*_args: Any) -> None:
        slot.add(STATEMENTS)

    sa.event.listen(engine, "before_cursor_execute", counted)


def total(slots: Sequence[Slot], field: int) -> int:
    """``field`` summed over ``slots``."""
    return sum(s.read()[field] for s in slots)
