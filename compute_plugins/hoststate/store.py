"""The host-state store: the SQL transport between schedulers and compute
agents, as the Kubernetes API server is between its scheduler and kubelet.

One database (SQLite embedded, PostgreSQL or MySQL across machines) holds
both channels of :class:`~compute_plugins.hoststate.transport.HostStateTransport`:

- host publication (:mod:`compute_plugins.hoststate.hosts`): each agent
  publishes every plugin's host state, its node name and its providers
  under one generation written compare-and-swap; schedulers read them;
- the decision queue (:mod:`compute_plugins.hoststate.decisions`):
  schedulers address decisions to hosts and the hosts' agents answer them,
  by the moves of the decision protocol
  (:mod:`compute_plugins.hoststate.protocol`).
"""

from __future__ import annotations

from typing import Any

from oslo_config import cfg

from compute_plugins import exception
from compute_plugins.conf import host_state as host_state_conf
from compute_plugins.hoststate import broker
from compute_plugins.hoststate import engine as engines
from compute_plugins.hoststate import push as push_backends
from compute_plugins.hoststate.agents import SqlAgentLeases
from compute_plugins.hoststate.database import Database
from compute_plugins.hoststate.decisions import SqlDecisionQueue
from compute_plugins.hoststate.hosts import SqlHostPublication
from compute_plugins.hoststate.moves import SqlMoves
from compute_plugins.hoststate.transport import (
    HostStateTransport,
    HostStatusFeed,
    HostWakeups,
)


class HostStateStore(SqlHostPublication, SqlDecisionQueue, SqlAgentLeases, SqlMoves):
    """The host-state store on one database: host publication, the
    decision queue, the agents' leases (:mod:`.agents`) and the moves of
    instances between hosts (:mod:`.moves`).

    :param connection: an SQLAlchemy URL; see :class:`Database` for the
        kinds, what opening checks and what it raises.
    :param lock_timeout: seconds a writer waits for another's lock
        (:class:`Database`).
    :param push: wake agents and schedulers through ``push_transport_url``,
        else by ``LISTEN``/``NOTIFY`` where the database can (PostgreSQL;
        :mod:`~compute_plugins.hoststate.notify`).
    :param safety_poll_interval: with push, seconds between the waiters'
        reads that catch a lost notification.
    :param push_transport_url: the broker that carries the wake-ups,
        whatever the database (an oslo.messaging transport URL:
        ``rabbit://...``, or ``fake://`` for this process only;
        :mod:`~compute_plugins.hoststate.broker`); empty: none.
    :param push_tls: how that broker is reached over TLS (``[host_state]
        push_ssl*``: :class:`~compute_plugins.hoststate.broker.TLS`).
    :param push_heartbeat: that broker's connections' heartbeat
        (``[host_state] push_heartbeat_*``:
        :class:`~compute_plugins.hoststate.broker.Heartbeat`); None: their
        defaults.
    :param lease_duration: the agents' lease (``[compute]
        agent_lease_duration``): on PostgreSQL a statement sent to a server
        that vanished fails within a third of it, while the lease holds
        (:func:`~compute_plugins.hoststate.engine.pg_socket_params`).
    """

    def __init__(self, connection: str, lock_timeout: float = 30.0, *,
                 push: bool = True, safety_poll_interval: float = 300.0,
                 push_transport_url: str = "",
                 push_tls: broker.TLS | None = None,
                 push_heartbeat: broker.Heartbeat | None = None,
                 lease_duration: float = engines.DEFAULT_LEASE_DURATION) -> None:
        super().__init__(Database(connection, lock_timeout, push=push,
                                  safety_poll_interval=safety_poll_interval,
                                  push_transport_url=push_transport_url,
                                  push_tls=push_tls, push_heartbeat=push_heartbeat,
                                  lease_duration=lease_duration))

    @classmethod
    def from_config(cls, conf: cfg.ConfigOpts) -> HostStateStore:
        """The store ``[host_state]`` of ``conf`` names.

        Its broker (``push_transport_url``) is connected to at once
        (:meth:`~compute_plugins.hoststate.broker.BrokerPush.verify`): one
        that refuses this configuration (its certificate, TLS on one side
        only) stops the process here, one that is down only is said (the
        waiters poll until it is back). This waits for one connection
        attempt per broker, in turn: milliseconds, refused at once when it
        is down, :data:`~compute_plugins.hoststate.broker.CONNECT_TIMEOUT`
        when it accepts connections and never answers; the brokers left
        once :data:`~compute_plugins.hoststate.broker.CONNECT_TIMEOUT` +
        :data:`~compute_plugins.hoststate.broker.IO_TIMEOUT` seconds have
        passed are not tried here (the publisher and the listener try
        them later): about that long at most, whatever their number.

        :raises ConfigError: ``push_transport_url`` is not a broker's URL,
            its TLS files do not load, or the broker refuses them.
        """
        group = conf.host_state
        tls = broker.TLS(enabled=group.push_ssl, ca_file=group.push_ssl_ca_file,
                         cert_file=group.push_ssl_cert_file,
                         key_file=group.push_ssl_key_file, version=group.push_ssl_version)
        try:
            if conf.host_state.push:
                push_backends.check_configured(conf.host_state.push_transport_url,
                                               conf.host_state.push_safety_poll_interval,
                                               tls)
        except ValueError as err:
            raise exception.ConfigError(str(err)) from err
        store = cls(host_state_conf.connection(conf),
                    lock_timeout=conf.host_state.lock_timeout,
                    push=conf.host_state.push,
                    safety_poll_interval=conf.host_state.push_safety_poll_interval,
                    push_transport_url=conf.host_state.push_transport_url,
                    push_tls=tls,
                    push_heartbeat=broker.Heartbeat(
                        group.push_heartbeat_timeout_threshold, group.push_heartbeat_rate),
                    lease_duration=_lease_duration(conf))
        if isinstance(store.db.push, broker.BrokerPush):
            try:
                store.db.push.verify()
            except broker.BrokerConfigError as err:
                store.close()
                raise exception.ConfigError(str(err)) from None
        return store

    def close(self) -> None:
        """Close the store's connections."""
        self.db.close()

    def __enter__(self) -> HostStateStore:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


def _lease_duration(conf: cfg.ConfigOpts) -> float:
    """``[compute] agent_lease_duration`` of ``conf``, or its default where
    the ``[compute]`` options are not registered (a configuration of the
    ``[host_state]`` options only)."""
    try:
        return float(conf.compute.agent_lease_duration)
    except (cfg.NoSuchOptError, cfg.NoSuchGroupError):
        return engines.DEFAULT_LEASE_DURATION


#: The SQL store is a transport (checked by mypy), and wakes its agents.
_TRANSPORT: type[HostStateTransport] = HostStateStore
_WAKEUPS: type[HostWakeups] = HostStateStore
_FEED: type[HostStatusFeed] = HostStateStore

__all__ = ["HostStateStore"]

