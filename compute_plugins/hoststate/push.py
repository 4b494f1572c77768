"""How a host-state store pushes its wake-ups, chosen when it opens: through
a broker (:mod:`~compute_plugins.hoststate.broker`, or ``fake://`` in this
process), by PostgreSQL's ``LISTEN``/``NOTIFY``
(:mod:`~compute_plugins.hoststate.notify`), or not at all (the waiters
poll). Each is a :class:`~compute_plugins.hoststate.notify.Push`; the
waiters see only its hub's subscriptions, whichever it is."""

from __future__ import annotations

from typing import Optional

from oslo_log import log as logging
from sqlalchemy.engine import Engine

from compute_plugins.hoststate import broker, notify
from compute_plugins.hoststate import engine as engines

LOG = logging.getLogger(__name__)


def _is_fake(transport_url: str) -> bool:
    scheme, sep, _ = transport_url.partition("://")
    return bool(sep) and scheme.lower() == "fake"


def check_configured(transport_url: str, safety_poll_interval: float,
                     tls: Optional[broker.TLS] = None) -> None:
    """Check ``[host_state] push_transport_url`` as a process opened from
    its configuration (a service, a command) has it: a broker's URL must
    parse and its TLS files load (``tls``: ``[host_state] push_ssl*``);
    ``fake://`` is said, since such a process shares no hub with the others
    (their changes reach its waiters at the safety net only).

    :raises ValueError: ``transport_url`` is not one :func:`choose` takes,
        or its TLS files do not load.
    """
    if not transport_url:
        return
    if _is_fake(transport_url):
        LOG.warning("[host_state] push_transport_url fake:// wakes only this "
                    "process's waiters: a change another process makes (an agent, "
                    "a scheduler, a command) is read here every "
                    "push_safety_poll_interval (%s s); name a broker (rabbit://) "
                    "or leave it empty", safety_poll_interval)
        return
    broker.brokers(transport_url, tls)


def choose(engine: Engine, url: str, *, push: bool, transport_url: str,
           safety_poll_interval: float, tls: Optional[broker.TLS] = None,
           heartbeat: Optional[broker.Heartbeat] = None,
           lock_timeout: float = 30.0,
           lease_duration: float = engines.DEFAULT_LEASE_DURATION) -> Optional[notify.Push]:
    """How the store at ``engine`` pushes: through the broker
    ``transport_url`` names (any database), else by ``LISTEN``/``NOTIFY``
    on PostgreSQL; None where it does not (``push`` False, or SQLite and
    MySQL without a transport URL: the waiters poll).

    :param tls: how a broker is reached over TLS (:class:`broker.TLS`).
    :param heartbeat: the broker connections' heartbeat
        (:class:`broker.Heartbeat`; default: its options' defaults).
    :param lock_timeout: the store's, and
    :param lease_duration: the agents' lease (they bound the ``LISTEN``
        connection's ``tcp_user_timeout``: :func:`notify.connector`).
    :raises ValueError: ``transport_url`` is not one this understands.
    """
    if not push:
        return None
    if transport_url:
        if _is_fake(transport_url):
            return notify.LocalPush(url, safety_poll_interval)
        return broker.BrokerPush(transport_url, url, safety_poll_interval, tls, heartbeat)
    if notify.supported(engine):
        return notify.PgPush(engine, url, safety_poll_interval, lock_timeout,
                             lease_duration)
    return None


__all__ = ["check_configured", "choose"]
