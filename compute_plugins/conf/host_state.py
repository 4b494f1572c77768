"""``[host_state]``: the host-state store shared by agents and schedulers.

Each compute agent publishes its plugins' host states there and answers the
decisions the scheduler addresses to its host. By default it is an SQLite
file in the agent's state directory (one machine); across machines it is a
PostgreSQL or MySQL database that every agent and scheduler points at.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from oslo_config import cfg

from compute_plugins.conf import (
    FiniteFloat,
    FiniteFloatOpt,
    database_url_opt,
    plugins,
    register_group_opts,
)

GROUP = cfg.OptGroup(
    "host_state",
    title="Host-state store",
    help="Where compute agents publish their host states and schedulers "
    "address their decisions.",
)

#: File name of the default SQLite database, in ``[compute_plugins] state_dir``.
DB_FILE = "host_state.sqlite"

#: oslo.messaging's ``[oslo_messaging_rabbit] heartbeat_timeout_threshold``
#: and ``heartbeat_rate`` defaults, those of ``push_heartbeat_*``.
HEARTBEAT_TIMEOUT_THRESHOLD = 60
HEARTBEAT_RATE = 3

OPTS = [
    database_url_opt(
        "connection",
        help="SQLAlchemy URL of the host-state database, e.g. "
        "``postgresql+psycopg2://user:password@db/compute_plugins`` or "
        "``mysql+pymysql://user:password@db/compute_plugins?charset=utf8mb4``. "
        "Every agent and scheduler that works together must use the same "
        "database. Default: the SQLite file ``host_state.sqlite`` in "
        "``[compute_plugins] state_dir`` (one machine only). The tables are "
        "created on first use.",
    ),
    FiniteFloatOpt(
        "lock_timeout",
        default=30.0,
        min=0.0,
        deprecated_name="sqlite_busy_timeout",
        help="Seconds a writer waits for another's lock (a row on "
        "PostgreSQL and MySQL, the database file on SQLite) before failing "
        "with the database unavailable, instead of hanging behind a stuck "
        "transaction. MySQL counts whole seconds, at least 1.",
    ),
    cfg.BoolOpt(
        "push",
        default=True,
        help="Wake compute agents and schedulers through the broker "
        "``push_transport_url`` names (any store), else by PostgreSQL "
        "``LISTEN``/``NOTIFY`` when the store is PostgreSQL (the psycopg2 "
        "driver): an agent learns of a decision addressed to its host, and "
        "a scheduler of the host's answer, as soon as it is committed, and "
        "an idle agent reads nothing from the store (its lease renewal "
        "aside). Each agent and scheduler process then holds one more "
        "connection (to the database, or to the broker), listening. The "
        "store stays the record: a notification only wakes the waiter, "
        "which reads the store. False, and on SQLite and MySQL without "
        "``push_transport_url``: agents poll every ``[compute] "
        "claim_poll_interval`` and schedulers poll for the answer.",
    ),
    cfg.Opt(
        "push_safety_poll_interval",
        type=FiniteFloat(min=1.0, max=86400.0),
        default=300.0,
        help="With push: seconds between an idle agent's reads of the "
        "store (decisions, releases, its disabled record, the claims it "
        "holds) and between a waiting scheduler's reads of its decision, "
        "whatever was notified: the safety net for a notification that "
        "was lost. A notification lost while the listening connection was "
        "down is covered sooner: every waiter reads the store when it "
        "reconnects.",
    ),
    cfg.StrOpt(
        "push_transport_url",
        default="",
        secret=True,
        help="An oslo.messaging transport URL of the message broker that "
        "carries the wake-ups of ``push``, whatever the store's database "
        "(SQLite, MySQL or PostgreSQL): "
        "``rabbit://USER:PASS@HOST:PORT/VHOST`` (RabbitMQ; several "
        "``USER:PASS@HOST:PORT`` separated by commas are tried in rotation, "
        "as oslo.messaging's default ``kombu_failover_strategy`` "
        "round-robin: a new connection starts with the broker the last one "
        "reached, and with the next one after it failed), as "
        "in an OpenStack deployment's ``[DEFAULT] transport_url`` (a ',', "
        "'@', ':', '/', '?' or '#' in a password percent-encoded). Its query may set "
        "the TLS options as oslo.messaging's does, by their "
        "``[oslo_messaging_rabbit]`` names, overriding ``push_ssl*`` here: "
        "``?ssl=1&ssl_ca_file=/etc/ssl/certs/rabbit-ca.pem`` (also "
        "``ssl_cert_file``, ``ssl_key_file``, ``ssl_version``); any other "
        "query option is refused. The port is 5672 unless given, with TLS "
        "too (as oslo.messaging). The "
        "writer publishes to the host's or the decision's channel after its "
        "commit; each agent and scheduler process holds one connection "
        "consuming its own queue and one publishing. ``fake://`` wakes the "
        "waiters of this process only (every agent, scheduler and writer of "
        "the store in one process, as the embedded demo). Every process "
        "that uses the store must name the same broker: a writer without it "
        "wakes nobody, and its changes are read at the waiters' "
        "``push_safety_poll_interval``. Empty: ``LISTEN``/``NOTIFY`` on "
        "PostgreSQL, polling elsewhere.",
    ),
    cfg.IntOpt(
        "push_heartbeat_timeout_threshold",
        default=HEARTBEAT_TIMEOUT_THRESHOLD,
        min=0,
        help="Seconds of AMQP heartbeat on the connections to "
        "``push_transport_url``'s broker, as oslo.messaging's "
        "``[oslo_messaging_rabbit] heartbeat_timeout_threshold`` (0: none). "
        "The broker is offered it (the smaller of it and the broker's own "
        "is used), and a connection on which nothing was received for twice "
        "that (py-amqp's rule, under oslo.messaging too) is dropped and "
        "made again: a connection a NAT or a firewall dropped without a "
        "word, or a broker host gone, is noticed then, not at the next "
        "publish's read timeout.",
    ),
    cfg.IntOpt(
        "push_heartbeat_rate",
        default=HEARTBEAT_RATE,
        min=1,
        help="How many times during ``push_heartbeat_timeout_threshold`` the "
        "heartbeat is sent and checked, as oslo.messaging's "
        "``[oslo_messaging_rabbit] heartbeat_rate``: the publishing "
        "connection's every threshold / rate / 2 seconds while idle, by its "
        "publisher's thread (no thread of its own), the listening one's at "
        "each of its reads (at least every second).",
    ),
    cfg.BoolOpt(
        "push_ssl",
        default=False,
        help="Connect to ``push_transport_url``'s broker over TLS, as "
        "oslo.messaging's ``[oslo_messaging_rabbit] ssl`` (``?ssl=1`` in "
        "the URL overrides it). The broker's certificate is verified "
        "against ``push_ssl_ca_file`` (else the system's CAs) and must name "
        "the host the URL names (each broker of the URL its own). A "
        "process opening the store connects at once and stops with an "
        "error naming the option when the broker's certificate is not "
        "trusted, or only one side speaks TLS; a broker that is down "
        "only makes the waiters poll until it is back.",
    ),
    cfg.StrOpt(
        "push_ssl_ca_file",
        default="",
        help="PEM file of the CA certificates that vouch for the broker's "
        "(oslo.messaging's ``[oslo_messaging_rabbit] ssl_ca_file``; "
        "``?ssl_ca_file=`` in the URL overrides it). Empty: the system's "
        "CAs. Read at start: a missing or unreadable file stops the process.",
    ),
    cfg.StrOpt(
        "push_ssl_cert_file",
        default="",
        help="PEM file of this process's client certificate, for a broker "
        "that asks for one (``[oslo_messaging_rabbit] ssl_cert_file``; "
        "``?ssl_cert_file=``). Empty: none sent.",
    ),
    cfg.StrOpt(
        "push_ssl_key_file",
        default="",
        help="PEM file of the client certificate's private key, unencrypted "
        "(``[oslo_messaging_rabbit] ssl_key_file``; ``?ssl_key_file=``). "
        "Empty: in ``push_ssl_cert_file``.",
    ),
    cfg.StrOpt(
        "push_ssl_version",
        default="",
        help="The TLS version to use, as oslo.messaging's "
        "``[oslo_messaging_rabbit] ssl_version`` (``?ssl_version=``): "
        "``TLSv1_2``, ``TLSv1_1`` or ``TLSv1`` (that version only), "
        "``SSLv23`` or empty (the highest both sides speak, TLS 1.2 or 1.3 "
        "with OpenSSL's defaults).",
    ),
]


def register_opts(conf: cfg.ConfigOpts) -> None:
    register_group_opts(conf, GROUP, OPTS)


def list_opts() -> list[tuple[cfg.OptGroup, Sequence[cfg.Opt]]]:
    return [(GROUP, OPTS)]


def connection(conf: cfg.ConfigOpts) -> str:
    """The effective ``[host_state] connection``: the option, else an SQLite
    file in the state directory."""
    register_opts(conf)
    plugins.register_opts(conf)
    if conf.host_state.connection:
        return str(conf.host_state.connection)
    path = os.path.abspath(os.path.join(plugins.state_dir(conf), DB_FILE))
    return "sqlite:///" + path
