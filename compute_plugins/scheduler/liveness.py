"""Which hosts are alive: their agents' leases (issue 19, item 3).

Each compute agent holds a lease on its host in the host-state store
(:mod:`compute_plugins.hoststate.agents`), renewed every third of
``[compute] agent_lease_duration``: the agent's only steady-state write. A
host whose lease expired is down (its agent stopped, crashed, hangs or is
cut off from the store): it is no candidate, and the scheduler says so
(``host X is down: its agent's lease expired at T``) instead of offering
it a decision nobody answers. The leases are read with the hosts'
generations, in one statement
(:meth:`~compute_plugins.hoststate.transport.HostPublication.host_statuses`).

A host without a lease (published by a tool, not by an agent) is not
judged. Expiry is compared with this machine's clock: the machines'
clocks must agree to within a small part of the lease duration (NTP).
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Mapping
from typing import Optional

from compute_plugins.hoststate import database
from compute_plugins.hoststate.records import HostStatus
from compute_plugins.hoststate.transport import HostPublication
from compute_plugins.plugin.contract import Rejection


@dataclasses.dataclass(frozen=True)
class Liveness:
    """The hosts the store knows, split by their agents' leases.

    :param generations: live host -> its generation (the candidates).
    :param down: down host -> why (one rejection naming the lease's expiry).
    """

    generations: Mapping[str, int]
    down: Mapping[str, tuple[Rejection, ...]]


def split(statuses: Mapping[str, HostStatus],
          now: Optional[datetime.datetime] = None) -> Liveness:
    """``statuses`` split into live hosts and down ones at ``now`` (naive
    UTC; default: this machine's clock)."""
    when = database.utcnow() if now is None else now
    generations: dict[str, int] = {}
    down: dict[str, tuple[Rejection, ...]] = {}
    for host, status in statuses.items():
        if status.down(when):
            down[host] = (Rejection(status.down_reason()),)
        else:
            generations[host] = status.generation
    return Liveness(generations, down)


def read(store: HostPublication) -> Liveness:
    """Every host of ``store``, split (one read)."""
    return split(store.host_statuses())


__all__ = ["Liveness", "read", "split"]
