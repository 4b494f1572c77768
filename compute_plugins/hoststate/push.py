"""How a host-state store pushes its wake-ups, chosen when it opens: through
a broker (:mod:`~compute_plugins.hoststate.broker`, or ``fake://`` in this
process), by PostgreSQL's ``LISTEN``/``NOTIFY``
(:mod:`~compute_plugins.hoststate.notify`), or not at all (the waiters
poll). Each is a :class:`~compute_plugins.hoststate.notify.Push`; the
waiters see only its hub's subscriptions, whichever it is."""

from __future__ import annotations

from typing import Optional

from sqlalchemy.engine import Engine

from compute_plugins.hoststate import broker, notify


def choose(engine: Engine, url: str, *, push: bool, transport_url: str,
           safety_poll_interval: float) -> Optional[notify.Push]:
    """How the store at ``engine`` pushes: through the broker
    ``transport_url`` names (any database), else by ``LISTEN``/``NOTIFY``
    on PostgreSQL; None where it does not (``push`` False, or SQLite and
    MySQL without a transport URL: the waiters poll).

    :raises ValueError: ``transport_url`` is not one this understands.
    """
    if not push:
        return None
    if transport_url:
        scheme = transport_url.partition("://")[0].lower()
        if scheme == "fake" and "://" in transport_url:
            return notify.LocalPush(url, safety_poll_interval)
        return broker.BrokerPush(transport_url, url, safety_poll_interval)
    if notify.supported(engine):
        return notify.PgPush(engine, url, safety_poll_interval)
    return None


__all__ = ["choose"]
