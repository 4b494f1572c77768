"""Push through a message broker (RabbitMQ): the host-state store's
wake-ups on any database (SQLite, MySQL, PostgreSQL), where
``[host_state] push_transport_url`` names the broker by an oslo.messaging
transport URL (``rabbit://USER:PASS@HOST:PORT[,USER:PASS@HOST2:PORT]/VHOST``,
the ``[DEFAULT] transport_url`` an OpenStack deployment already has).

The channels are :mod:`~compute_plugins.hoststate.notify`'s (a host's, a
decision's), carried as routing keys on one direct exchange
(:data:`EXCHANGE`): each process that waits has one queue of its own,
bound to the channels its waiters subscribed to (bound when the first
waiter of a channel subscribes, unbound when the last one leaves), so the
broker routes a wake-up only to the processes that wait on its channel,
each getting its copy (as ``NOTIFY`` reaches every ``LISTEN``\\ ing
session). The message only wakes; the waiter reads the store.

Ordering (why nothing is missed but what the safety net catches):

- the writer publishes *after* its transaction committed
  (:meth:`compute_plugins.hoststate.database.Database.wake`), so a waiter
  woken reads the change that woke it; publishing before the commit could
  wake it before the change is visible, and it would sleep on;
- a waiter subscribes (the binding confirmed by the broker) *before* it
  reads the store: a change committed before its read is in what it reads,
  one committed after it is published after that, hence routed to its
  queue. While the listener's thread is not connected (the first
  subscription, an outage) nothing is bound: the waiter polls
  (``live`` False), and the thread, once connected and every channel
  bound, wakes every waiter; no waiter ever waits for the broker itself;
- the writer does not wait for the broker: it hands the wake-up to its
  process's publisher thread, which keeps what it could not publish and
  tries again until the broker is back. A wake-up committed while a waiter's
  listener is connected is therefore published after that, and reaches it;
  one published before the waiter's listener (re)connected is covered by
  the wake-up of every waiter at the reconnection, which reads the store
  after the commit;
- a wake-up is lost when the writer's process dies between its commit and
  the publish, or when the broker restarts with the message queued (queues
  and messages are transient). A listener whose connection failed
  polls meanwhile, and wakes every waiter once reconnected; whatever is
  still lost is read at the waiters' safety net
  (``[host_state] push_safety_poll_interval``).

Several brokers in the URL are tried in rotation, as oslo.messaging's
driver does by default (``kombu_failover_strategy`` ``round-robin``): a new
connection starts with the broker the last one reached, and the next one
after a failure (:class:`_Rotation`), not always with the URL's first.

Every connection has an AMQP heartbeat, as oslo.messaging's driver
(:class:`Heartbeat`: ``[host_state] push_heartbeat_timeout_threshold``
and ``push_heartbeat_rate``, its ``heartbeat_*`` options): a connection a
NAT or a firewall dropped without a word is noticed within twice the
threshold, by the threads that use the connections (no thread of its own).

TLS is oslo.messaging's RabbitMQ driver's: ``[host_state] push_ssl``,
``push_ssl_ca_file``, ``push_ssl_cert_file``, ``push_ssl_key_file`` and
``push_ssl_version`` are its ``[oslo_messaging_rabbit]`` ``ssl*`` options
(:class:`TLS`), and the transport URL's query may set them by those names
(``?ssl=1&ssl_ca_file=/etc/ssl/ca.pem``), overriding the option, as
oslo.messaging's driver reads any of its options from the URL. Any other
query option is refused (one that would be ignored here, or a typo that
would connect in clear; a heartbeat setting is ``[host_state]
push_heartbeat_*``). A certificate
the CA does not vouch for, a TLS handshake with a plain AMQP port, and a
plain connection to a TLS port are configuration errors: a process
opening the store says so and stops (:meth:`BrokerPush.verify`); a broker
that is down is not (its waiters poll until it is back).

oslo.messaging itself is not used, only its URL: its servers and
notification listeners take their targets when they start (one consumer
thread and queue set each), and a topic's queue is shared by its servers
(each message to one of them), whereas a wake-up must reach every process
that waits on the channel, and the channels a process waits on change with
every decision a scheduler waits for. Kombu (the library oslo.messaging's
RabbitMQ driver runs on) binds and unbinds routing keys on one queue as
waiters come and go. ``fake://``, oslo.messaging's in-process driver, is
:class:`compute_plugins.hoststate.notify.LocalPush`.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import os
import re
import socket
import ssl
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any, Optional, Union
from urllib.parse import parse_qsl, quote, unquote, urlsplit

from oslo_config import types
from oslo_log import log as logging
from sqlalchemy.engine import Connection

from compute_plugins.conf import host_state as host_state_conf
from compute_plugins.hoststate import notify
from compute_plugins.util import forks

LOG = logging.getLogger(__name__)

#: The direct exchange every wake-up is published to (routing key: the channel).
EXCHANGE = "compute_plugins.hoststate.wakeups"
#: The schemes of ``push_transport_url`` a broker serves (oslo.messaging's
#: RabbitMQ driver's name, and kombu's).
SCHEMES = ("rabbit", "amqp", "pyamqp")
#: What the option takes, for errors.
EXPECTED = "rabbit://USER:PASS@HOST:PORT/VHOST (several HOST:PORT separated by commas) or fake://"

#: Seconds to connect, and to wait for the broker's answer on a connection.
CONNECT_TIMEOUT = 5.0
IO_TIMEOUT = 10.0
#: The least timeout a broker is tried with near a deadline (seconds).
_LEAST_WAIT = 0.1
#: The listening connection's longest read: its heartbeat is checked at
#: least this often (:class:`Heartbeat`).
_DRAIN_TIMEOUT = 1.0
#: Seconds between reconnection attempts (doubling up to the maximum); the
#: writers too wait as long before publishing again after a failure.
_RECONNECT_FIRST = 0.5
_RECONNECT_MAX = 30.0
#: The publisher's longest pause between tries while the broker is down
#: (what it holds meanwhile is published within this of the broker's return).
_PUBLISH_RETRY_MAX = 5.0
#: Channels pending publication beyond which they are dropped (the waiters'
#: safety net reads them): a broker down for long under many writes.
MAX_PENDING = 100_000


#: oslo.messaging's ``ssl_version`` values (its driver lowercases them) and
#: the TLS versions each allows (lowest, highest; None: OpenSSL's default
#: bound). ``sslv23`` is its name for "negotiate"; SSLv2 and SSLv3, which it
#: lists where Python has them, no Python here has.
SSL_VERSIONS: dict[str, tuple[Optional[ssl.TLSVersion], Optional[ssl.TLSVersion]]] = {
    "sslv23": (None, None),
    "tlsv1": (ssl.TLSVersion.TLSv1, ssl.TLSVersion.TLSv1),
    "tlsv1_1": (ssl.TLSVersion.TLSv1_1, ssl.TLSVersion.TLSv1_1),
    "tlsv1_2": (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_2),
}


@dataclasses.dataclass(frozen=True)
class TLS:
    """How the broker is reached over TLS: ``[host_state] push_ssl*``, as
    oslo.messaging's ``[oslo_messaging_rabbit] ssl*`` (same names and
    meaning; a transport URL's ``?ssl=1&ssl_ca_file=...`` overrides them:
    :func:`brokers`).

    The broker's certificate is always verified, against ``ca_file`` (else
    the system's CAs), and must name the host the URL names (its name or
    IP address, each broker of the URL its own). oslo.messaging checks the
    name only with ``ssl_ca_file`` and a single broker in the URL.
    """

    enabled: bool = False
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""
    #: One of :data:`SSL_VERSIONS`, any case; empty: negotiated.
    version: str = ""
    #: Where each field came from (field -> the option, or the URL's query
    #: key), for messages; a field not listed is its option's.
    origins: tuple[tuple[str, str], ...] = ()

    #: The ``[host_state]`` option of each field, and the query key of each
    #: (oslo.messaging's option name).
    OPTIONS = {"enabled": "push_ssl", "ca_file": "push_ssl_ca_file",
               "cert_file": "push_ssl_cert_file", "key_file": "push_ssl_key_file",
               "version": "push_ssl_version"}
    QUERY = {"ssl": "enabled", "ssl_ca_file": "ca_file", "ssl_cert_file": "cert_file",
             "ssl_key_file": "key_file", "ssl_version": "version"}

    def origin(self, field: str) -> str:
        """Where ``field``'s value is set, for messages:
        ``[host_state] push_ssl_ca_file`` or ``push_transport_url's
        ?ssl_ca_file``."""
        return dict(self.origins).get(field, "[host_state] " + self.OPTIONS[field])

    def check(self) -> None:
        """Check what can be without a broker: the version is one
        oslo.messaging names, a key goes with a certificate, and the files
        are readable PEM that load (the key matching the certificate).

        :raises ValueError: naming the option (or query key), the file and
            the reason, in one line.
        """
        if not self.enabled:
            return
        if self.version and self.version.lower() not in SSL_VERSIONS:
            raise ValueError("%s %r: expected one of %s, or empty (negotiated)"
                             % (self.origin("version"), self.version,
                                ", ".join(SSL_VERSIONS)))
        if self.key_file and not self.cert_file:
            raise ValueError("%s %s: a key without its certificate (%s)"
                             % (self.origin("key_file"), self.key_file,
                                self.origin("cert_file")))
        context = ssl.create_default_context()
        if self.ca_file:
            try:
                context.load_verify_locations(cafile=self.ca_file)
            except (OSError, ssl.SSLError) as err:
                raise ValueError("%s %s: not a readable PEM file of CA certificates: %s"
                                 % (self.origin("ca_file"), self.ca_file,
                                    _one_line(err))) from None
        if self.cert_file:
            try:
                context.load_cert_chain(self.cert_file, self.key_file or None)
            except (OSError, ssl.SSLError) as err:
                where = "%s %s" % (self.origin("cert_file"), self.cert_file)
                if self.key_file:
                    where += " with %s %s" % (self.origin("key_file"), self.key_file)
                raise ValueError("%s: not a readable PEM certificate and its private key "
                                 "(unencrypted): %s" % (where, _one_line(err))) from None

    def context(self) -> ssl.SSLContext:
        """An SSL context as :meth:`params` makes py-amqp's (for a
        diagnosis: :func:`explain`).

        :raises OSError, ssl.SSLError: a file does not load (:meth:`check`).
        """
        context = ssl.create_default_context(cafile=self.ca_file or None)
        if self.cert_file:
            context.load_cert_chain(self.cert_file, self.key_file or None)
        lowest, highest = SSL_VERSIONS.get(self.version.lower(), (None, None))
        if lowest is not None:
            context.minimum_version = lowest
        if highest is not None:
            context.maximum_version = highest
        return context

    def params(self, hostname: str) -> Union[bool, dict[str, Any]]:
        """kombu's (py-amqp's) ``ssl`` argument for the broker ``hostname``:
        False without TLS."""
        if not self.enabled:
            return False
        params: dict[str, Any] = {"cert_reqs": ssl.CERT_REQUIRED,
                                  "server_hostname": hostname}
        if self.ca_file:
            params["ca_certs"] = self.ca_file
        if self.cert_file:
            params["certfile"] = self.cert_file
            if self.key_file:
                params["keyfile"] = self.key_file
        lowest, highest = SSL_VERSIONS.get(self.version.lower(), (None, None))
        if lowest is not None:
            params["tls_minimum_version"] = lowest
        if highest is not None:
            params["tls_maximum_version"] = highest
        return params


@dataclasses.dataclass(frozen=True)
class Heartbeat:
    """The AMQP heartbeat of every connection to the broker: ``[host_state]
    push_heartbeat_timeout_threshold`` and ``push_heartbeat_rate``, as
    oslo.messaging's ``[oslo_messaging_rabbit] heartbeat_timeout_threshold``
    and ``heartbeat_rate`` (same meaning and defaults).

    The broker is offered ``timeout_threshold`` seconds (it uses the
    smaller of that and its own); py-amqp sends a heartbeat when nothing
    was sent for threshold / rate, and fails a connection on which nothing
    was received for twice the threshold: a connection a NAT or a firewall
    dropped without a word is noticed then. The checks need no thread of
    their own: the publisher's thread checks its connection every
    :attr:`interval` while idle (oslo.messaging's threshold / rate / 2),
    the listener's at each of its reads.
    """

    timeout_threshold: int = host_state_conf.HEARTBEAT_TIMEOUT_THRESHOLD
    rate: int = host_state_conf.HEARTBEAT_RATE

    @property
    def interval(self) -> Optional[float]:
        """Seconds between checks; None without heartbeats."""
        if self.timeout_threshold <= 0:
            return None
        return self.timeout_threshold / max(self.rate, 1) / 2.0


@dataclasses.dataclass(frozen=True)
class Broker:
    """One broker of a transport URL."""

    #: kombu's URL of it (``pyamqp://USER:PASS@HOST:PORT/VHOST``).
    url: str
    host: str
    port: int

    @property
    def address(self) -> str:
        return "%s:%d" % (self.host, self.port)


def brokers(transport_url: str, tls: Optional[TLS] = None) -> tuple[list[Broker], TLS]:
    """The brokers of an oslo.messaging transport URL (tried in turn, from
    the one a connection last reached: :class:`_Rotation`), and
    the TLS to reach them: ``tls`` (``[host_state] push_ssl*``) with what
    the URL's query sets (oslo.messaging's option names: ``ssl``,
    ``ssl_ca_file``, ``ssl_cert_file``, ``ssl_key_file``, ``ssl_version``)
    instead (a key with an empty value sets nothing, as there). A port not
    given is 5672, with TLS too (as oslo.messaging).

    :raises ValueError: not a ``rabbit://`` URL with at least one host, a
        port that is not one (1-65535), a query option other than those, or
        one given twice or with a value its option does not take.
    """
    tls = tls or TLS()
    parts = urlsplit(transport_url)
    if parts.scheme.lower() not in SCHEMES or not parts.netloc:
        raise ValueError("[host_state] push_transport_url %r: expected %s"
                         % (redacted(transport_url), EXPECTED))
    if "@" not in parts.netloc and "@" in parts.query + parts.fragment:
        # NOTE: the hosts ended at a '?' or '#' of a password: the rest of
        # it is in the query or the fragment, which must not be shown.
        raise ValueError("[host_state] push_transport_url %r: a '?' or '#' in a password "
                         "is percent-encoded (%%3F, %%23); expected %s"
                         % (redacted(transport_url), EXPECTED))
    if parts.fragment:
        raise ValueError("[host_state] push_transport_url %r: a fragment #%s is not "
                         "understood; expected %s"
                         % (redacted(transport_url), parts.fragment, EXPECTED))
    tls = _query_tls(transport_url, parts.query, tls)
    vhost = unquote(parts.path[1:]) if parts.path.startswith("/") else ""
    found = []
    for host in parts.netloc.split(","):
        auth, _, where = host.rpartition("@")
        if not where:
            raise ValueError("[host_state] push_transport_url %r: a host without a "
                             "name; expected %s" % (redacted(transport_url), EXPECTED))
        try:
            address = urlsplit("//" + where)
            port = address.port
        except ValueError:
            port = 0
        else:
            if port is None:
                port = 5672
        if not address.hostname or not 0 < port < 65536:
            # NOTE: the port is not quoted: with an unencoded ',' in a
            # password, it is that password's start.
            raise ValueError("[host_state] push_transport_url %r: a host without a "
                             "port 1-65535 (a ',', '@', ':' or '/' in a password is "
                             "percent-encoded); expected %s"
                             % (redacted(transport_url), EXPECTED))
        user, _, password = auth.partition(":")
        credentials = ("%s:%s@" % (user, password)) if auth else ""
        found.append(Broker("pyamqp://%s%s/%s" % (credentials, where,
                                                  quote(vhost or "/", safe="")),
                            address.hostname, port))
    return found, tls


#: oslo.messaging's options of its RabbitMQ driver taken as ``[host_state]
#: push_<name>`` only (not from the URL's query).
_OPTION_NOT_QUERY = ("heartbeat_timeout_threshold", "heartbeat_rate")


def _query_tls(transport_url: str, query: str, tls: TLS) -> TLS:
    """``tls`` with the TLS options ``query`` sets (see :func:`brokers`)."""
    if not query:
        tls.check()
        return tls
    try:
        # NOTE: as oslo.messaging's TransportURL.parse (parse_qs): an empty
        # segment ('ssl=1&') is nothing, and a key with an empty value
        # ('ssl_ca_file=', as templates leave it) sets nothing: the option
        # applies. A key without '=' (which it ignores) is refused: a typo
        # that would connect in clear.
        items = [(key, value) for key, value in parse_qsl(
            "&".join(part for part in query.split("&") if part),
            keep_blank_values=True, strict_parsing=True) if value]
    except ValueError:
        raise ValueError("[host_state] push_transport_url %r: the query %r is not "
                         "KEY=VALUE pairs separated by '&'"
                         % (redacted(transport_url), query)) from None
    keys = [key for key, _ in items]
    unknown = sorted({key for key in keys if key not in TLS.QUERY})
    if unknown:
        options = ["[host_state] push_" + key for key in unknown if key in _OPTION_NOT_QUERY]
        raise ValueError("[host_state] push_transport_url %r: query options %s are "
                         "not understood here; expected %s (oslo.messaging's "
                         "[oslo_messaging_rabbit] TLS options) or none%s"
                         % (redacted(transport_url), ", ".join(unknown),
                            ", ".join(TLS.QUERY),
                            "; set %s instead" % ", ".join(options) if options else ""))
    twice = sorted({key for key in keys if keys.count(key) > 1})
    if twice:
        raise ValueError("[host_state] push_transport_url %r: query option %s given "
                         "more than once" % (redacted(transport_url), ", ".join(twice)))
    changes: dict[str, Any] = {}
    origins = dict(tls.origins)
    for key, value in items:
        field = TLS.QUERY[key]
        origins[field] = "push_transport_url's ?%s" % key
        if field == "enabled":
            try:
                changes[field] = bool(types.Boolean()(value))
            except ValueError:
                raise ValueError("[host_state] push_transport_url %r: ?ssl=%s: expected "
                                 "true or false (1, 0, yes, no, on, off)"
                                 % (redacted(transport_url), value)) from None
        else:
            changes[field] = value
    tls = dataclasses.replace(tls, origins=tuple(sorted(origins.items())), **changes)
    tls.check()
    return tls


def broker_urls(transport_url: str) -> list[str]:
    """The kombu URLs (one per broker, in the URL's order) of an oslo.messaging
    transport URL.

    :raises ValueError: see :func:`brokers`.
    """
    return [b.url for b in brokers(transport_url)[0]]


def explain(err: BaseException, broker: Broker, tls: TLS) -> Optional[str]:
    """What a failure to connect to ``broker`` says of the configuration,
    in one line naming the option (and file) to change; None when it is no
    configuration error (the broker is down, unreachable, restarting)."""
    cause = _root(err)
    if tls.enabled and _closed_on_us(cause) and (
            isinstance(cause, ssl.SSLEOFError) or not isinstance(cause, ssl.SSLError)):
        # NOTE: with TLS 1.3 the broker checks a client certificate after
        # the client's side of the handshake is done, and its refusal (an
        # alert, then it closes) races the client's AMQP greeting: a
        # greeting it did not read makes its close a reset, which drops
        # the alert. Asked again without a greeting, it says why.
        cause = _tls_refusal(broker, tls) or cause
    if isinstance(cause, ssl.SSLCertVerificationError):
        reason = cause.verify_message or _one_line(cause)
        if tls.ca_file:
            trusted = "%s %s" % (tls.origin("ca_file"), tls.ca_file)
        else:
            trusted = ("the system's CA certificates (%s not set)"
                       % tls.origin("ca_file"))
        if "hostname" in reason.lower() or "ip address" in reason.lower():
            return ("broker %s: its certificate does not name %s (%s); the host in "
                    "[host_state] push_transport_url must be one the certificate "
                    "names" % (broker.address, broker.host, reason))
        return ("broker %s: its certificate is not trusted by %s (%s)"
                % (broker.address, trusted, reason))
    if isinstance(cause, ssl.SSLError) and tls.enabled:
        reason = cause.reason or _one_line(cause)
        if reason in ("WRONG_VERSION_NUMBER", "RECORD_LAYER_FAILURE", "PACKET_LENGTH_TOO_LONG",
                      "HTTP_REQUEST", "UNKNOWN_PROTOCOL"):
            return ("broker %s: the TLS handshake got no TLS answer (%s): a plain AMQP "
                    "port? %s is set; the TLS port is usually 5671"
                    % (broker.address, reason, tls.origin("enabled")))
        if "ALERT" in reason and tls.cert_file:
            return ("broker %s refused the TLS handshake (%s): does it trust %s %s?"
                    % (broker.address, reason, tls.origin("cert_file"), tls.cert_file))
        if "ALERT" in reason:
            return ("broker %s refused the TLS handshake (%s): it may want a client "
                    "certificate (%s) or another version (%s)"
                    % (broker.address, reason, tls.origin("cert_file"),
                       tls.origin("version")))
        return None
    if not tls.enabled and _closed_on_us(cause) and _speaks_tls(broker):
        return ("broker %s speaks TLS and %s is not set: set it (or ?ssl=1 in "
                "push_transport_url) and %s" % (broker.address, tls.origin("enabled"),
                                                 tls.origin("ca_file")))
    return None


def _closed_on_us(err: BaseException) -> bool:
    """Whether the broker closed (or reset) the connection, as a TLS port
    does when it gets AMQP's greeting; not refused, timed out nor
    unresolved, which say nothing of the port's protocol (and would cost a
    second attempt each, for nothing)."""
    if isinstance(err, (ConnectionRefusedError, TimeoutError, socket.gaierror)):
        return False
    return isinstance(err, (OSError, EOFError))


#: Seconds :func:`_tls_refusal` waits for the broker's word after the
#: handshake (one that accepts the client says nothing: it waits for AMQP's
#: greeting).
_REFUSAL_WAIT = 2.0


def _tls_refusal(broker: Broker, tls: TLS) -> Optional[BaseException]:
    """The TLS error with which ``broker`` refuses this client (its
    certificate, the client's, a version), from a handshake without an AMQP
    greeting after it; None when it does not refuse it (or cannot be
    reached: nothing said of the configuration)."""
    try:
        with socket.create_connection((broker.host, broker.port), timeout=CONNECT_TIMEOUT) \
                as sock, tls.context().wrap_socket(sock, server_hostname=broker.host) as conn:
            conn.settimeout(_REFUSAL_WAIT)
            conn.recv(1)
    except ssl.SSLError as err:
        return err if not isinstance(err, ssl.SSLEOFError) else None
    except (OSError, ValueError):
        return None
    return None


def _root(err: BaseException) -> BaseException:
    """The innermost cause of ``err`` (kombu wraps socket and TLS errors)."""
    seen = {id(err)}
    while True:
        inner = err.__cause__ or err.__context__
        if inner is None or id(inner) in seen:
            return err
        seen.add(id(inner))
        err = inner


def _speaks_tls(broker: Broker) -> bool:
    """Whether ``broker``'s port completes a TLS handshake (nothing
    verified: only to tell a TLS port from a broker that closed the
    connection)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with socket.create_connection((broker.host, broker.port), timeout=CONNECT_TIMEOUT) \
                as sock, context.wrap_socket(sock):
            return True
    except (OSError, ssl.SSLError):
        return False


#: A host's credentials in a transport URL: from the start or a ',', the
#: user, ':', the password (up to the next '@', commas included: an
#: unencoded one must not show the rest of the password).
_CREDENTIALS = re.compile(r"(^|,)([^:@,/]*):[^@]*@")


def redacted(transport_url: str) -> str:
    """``transport_url`` with its passwords hidden (for messages)."""
    scheme, sep, rest = transport_url.partition("://")
    # NOTE: the hosts end at the first '/' after the last '@' (an
    # unencoded '/' in a password is hidden too).
    cut = rest.find("/", rest.rfind("@") + 1)
    netloc, slash, path = (rest, "", "") if cut < 0 else (rest[:cut], "/", rest[cut + 1:])
    return scheme + sep + _CREDENTIALS.sub(r"\1\2:***@", netloc) + slash + path


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


def _level(err: BaseException) -> int:
    """A broker's failure is logged as an error when it is one of
    configuration (it lasts until someone changes it), else a warning."""
    return logging.ERROR if isinstance(err, BrokerConfigError) else logging.WARNING


class _Rotation:
    """Which broker of the URL a new connection tries first: oslo.messaging's
    ``[oslo_messaging_rabbit] kombu_failover_strategy`` default,
    ``round-robin`` (kombu's ``failover_strategy``; ``shuffle`` is not
    offered). The broker tried first is the one a connection last reached;
    when it fails (a connection to it refused, broken, or its heartbeats
    missed) the next one of the URL is, wrapping around: after a failover
    every new connection of the process (the publisher's, the listener's,
    a reconnection) starts with the broker that answered, not with the
    first of the URL, which may be the one that is down (each attempt on a
    silent one waits :data:`CONNECT_TIMEOUT`). Shared by the connections of
    one :class:`BrokerPush`; thread-safe."""

    def __init__(self, count: int) -> None:
        self._count = count
        self._current = 0
        self._lock = threading.Lock()

    def order(self) -> list[int]:
        """The brokers' indexes in the order a new connection tries them."""
        with self._lock:
            start = self._current
        return [(start + step) % self._count for step in range(self._count)]

    def reached(self, index: int) -> None:
        """A connection to broker ``index`` is up: it is tried first."""
        with self._lock:
            self._current = index

    def failed(self, index: int) -> None:
        """Broker ``index`` failed: the next one is tried first, unless
        another connection moved on from it already."""
        with self._lock:
            if self._current == index:
                self._current = (index + 1) % self._count


class BrokerConfigError(ValueError):
    """A broker refused for a reason of configuration (:func:`explain`):
    no retry will help."""


class _Connection:
    """One kombu connection to the first of the brokers that answers (in
    ``rotation``'s order), and its one channel (not thread-safe: its owner
    serialises).

    :raises BrokerConfigError: no broker could be reached and one of them
        failed for a reason of configuration (:func:`explain`).
    :raises Exception: no broker could be reached (the last one's error).
    :param deadline: ``time.monotonic()`` after which no further broker is
        tried (the first always is), and by which each must have answered
        the handshakes (the start's check: :meth:`BrokerPush.verify`);
        None: each broker :data:`CONNECT_TIMEOUT`.
    """

    def __init__(self, brokers: Sequence[Broker], tls: TLS, heartbeat: Heartbeat,
                 deadline: Optional[float] = None,
                 rotation: Optional[_Rotation] = None) -> None:
        # NOTE: imported here (an untyped library, and a second's import
        # that a store without a broker never pays).
        kombu: Any = importlib.import_module("kombu")
        # NOTE: one kombu connection per broker tried, not kombu's failover
        # over a list of URLs: each broker's TLS names its own host (kombu
        # shares one ``ssl`` argument between the URLs, and fills its
        # server_hostname in once). Each broker once, without kombu's
        # pauses (connect() sleeps 2 s before its retry): nothing waits
        # twice for a broker that is down.
        failure: Optional[BaseException] = None
        refused: Optional[BrokerConfigError] = None
        chosen: Any = None
        #: The index in ``brokers`` of the broker connected to.
        self.index = 0
        for index in (rotation.order() if rotation is not None else range(len(brokers))):
            broker = brokers[index]
            connect = CONNECT_TIMEOUT
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0 and failure is not None:
                    break
                # NOTE: the connection's handshakes (TCP, TLS, AMQP) wait
                # this; its read and write timeouts stay whole (it is kept).
                connect = max(min(connect, left), _LEAST_WAIT)
            conn = kombu.Connection(
                broker.url, ssl=tls.params(broker.host), connect_timeout=connect,
                heartbeat=max(heartbeat.timeout_threshold, 0),
                transport_options={"read_timeout": IO_TIMEOUT, "write_timeout": IO_TIMEOUT})
            try:
                conn.ensure_connection(max_retries=0, interval_start=0, interval_step=0,
                                       interval_max=0)
            except Exception as err:  # noqa: BLE001 - the next broker, else raised
                conn.release()
                if rotation is not None:
                    rotation.failed(index)
                failure = err
                why = explain(err, broker, tls)
                if why is not None and refused is None:
                    refused = BrokerConfigError(why)
                continue
            chosen = conn
            self.index = index
            if rotation is not None:
                rotation.reached(index)
            break
        if chosen is None:
            if refused is not None:
                raise refused from failure
            assert failure is not None
            raise failure
        self._kombu: Any = chosen
        self._heartbeat = heartbeat
        self.channel: Any = self._kombu.channel()
        self.channel.exchange_declare(exchange=EXCHANGE, type="direct", durable=True,
                                      auto_delete=False)

    def drain(self, timeout: float) -> None:
        """Deliver what arrived within ``timeout`` seconds (the consumer's
        callback runs here, and the broker's heartbeats are read); keep the
        heartbeat: sent when due.

        :raises Exception: the broker was silent for twice the heartbeat
            (py-amqp's ``ConnectionForced``), or the connection broke.
        """
        try:
            self._kombu.drain_events(timeout=timeout)
        except TimeoutError:
            pass
        self._kombu.heartbeat_check(rate=self._heartbeat.rate)

    def close(self) -> None:
        try:
            self._kombu.release()
        except Exception:  # noqa: BLE001 - closing a broken connection
            pass

    def abandon(self) -> None:
        """Close a connection known broken (its heartbeats missed, its
        socket failed) without AMQP's closing handshake, which would wait
        :data:`IO_TIMEOUT` for a broker that no longer answers, nor TLS's
        (its ``close_notify`` waits for the peer's, seconds the lock may be
        held: the socket is made non-blocking first)."""
        try:
            sock = self.channel.connection.sock
            if sock is not None:
                sock.settimeout(0)
        except Exception:  # noqa: BLE001 - a connection already gone
            pass
        try:
            self._kombu.collect()
        except Exception:  # noqa: BLE001 - closing a broken connection
            pass


class BrokerPush:
    """The writers' publisher and the waiters' :class:`BrokerListener` of
    one store in this process (see the module docstring).

    :param transport_url: the oslo.messaging transport URL of the broker.
    :param url: the store's URL, password hidden (for messages).
    :param safety_poll_interval: see :class:`~compute_plugins.hoststate.notify.Hub`.
    :param tls: ``[host_state] push_ssl*`` (the URL's query may override them).
    :param heartbeat: ``[host_state] push_heartbeat_*`` (default: theirs).
    :raises ValueError: ``transport_url`` is not a broker's, or its TLS
        files do not load.
    """

    kind = "rabbit"

    def __init__(self, transport_url: str, url: str, safety_poll_interval: float,
                 tls: Optional[TLS] = None, heartbeat: Optional[Heartbeat] = None) -> None:
        self.brokers, self.tls = brokers(transport_url, tls)
        self.heartbeat = heartbeat or Heartbeat()
        #: Which broker a new connection tries first (:class:`_Rotation`).
        self.rotation = _Rotation(len(self.brokers))
        self.broker = redacted(transport_url)
        self.url = url
        self._safety = safety_poll_interval
        #: The connection the publisher publishes on and the waiters bind on.
        self._control: Optional[_Connection] = None
        self._control_lock = threading.Lock()
        self._down_said = False
        #: Wake-ups committed, not published yet: channel -> payload (a
        #: channel woken twice meanwhile is published once).
        self._pending: dict[str, str] = {}
        self._pending_cond = threading.Condition()
        self._publisher: Optional[threading.Thread] = None
        self._stop = threading.Event()
        self._listener: Optional[BrokerListener] = None
        self._listener_lock = threading.Lock()
        self._closed = False
        #: What a forked child inherited of its parent (kept, never used).
        self._parents: list[Any] = []
        forks.renew_in_child(self)

    def _forked(self) -> None:
        """In a child forked with this object: the parent's threads are not
        here, and its connections are the parent's sockets: forget them
        (kept from the garbage collector: never closed from here), so that
        the child publishes and listens on connections of its own."""
        self._parents.append((self._control, self._listener))
        self._control = None
        self._control_lock = threading.Lock()
        self.rotation = _Rotation(len(self.brokers))
        self._down_said = False
        self._pending = {}
        self._pending_cond = threading.Condition()
        self._publisher = None
        self._stop = threading.Event()
        self._listener = None
        self._listener_lock = threading.Lock()

    # -- writers -------------------------------------------------------------

    def send(self, conn: Connection, channels: Sequence[str], payload: str) -> bool:
        return False  # NOTE: published once committed (committed())

    def committed(self, wakeups: Sequence[tuple[Sequence[str], str]]) -> None:
        """Hand the wake-ups to this process's publisher thread: the writer
        never waits for the broker (nor for one that is down)."""
        with self._pending_cond:
            if self._closed:
                return
            for channels, payload in wakeups:
                for channel in channels:
                    self._pending[channel] = payload
            if len(self._pending) > MAX_PENDING:
                LOG.warning("host-state store %s: %d wake-ups not published to %s "
                            "dropped: waiters read the store at their safety net",
                            self.url, len(self._pending), self.broker)
                self._pending.clear()
            self._start_publisher()

    def _start_publisher(self) -> None:
        """Start the publisher's thread unless it runs (``_pending_cond``
        held), and wake it: wake-ups are pending, or a connection is up whose
        heartbeat it keeps."""
        if self._publisher is None and not self._closed:
            self._publisher = threading.Thread(target=self._publishing, daemon=True,
                                               name="hoststate-broker-publisher")
            self._publisher.start()
        self._pending_cond.notify()

    def _publishing(self) -> None:
        """The publisher thread: publishes what is pending; keeps it while
        the broker cannot be reached, trying again (0.5 s doubling up to
        :data:`_PUBLISH_RETRY_MAX`), so that a wake-up committed while a
        waiter's listener is back is not dropped. Once closed, it tries what
        is left once and ends. While idle with a connection, it keeps that
        connection's heartbeat (:meth:`_beat`)."""
        delay = _RECONNECT_FIRST
        while True:
            idle = False
            with self._pending_cond:
                while not self._pending and not self._closed:
                    interval = self.heartbeat.interval if self._control is not None else None
                    if not self._pending_cond.wait(interval):
                        idle = True
                        break
                if not idle:
                    if not self._pending:
                        break
                    batch, self._pending = self._pending, {}
                    closing = self._closed
            if idle:
                self._beat()
                continue
            try:
                with self._control_lock:
                    self._on_control(functools.partial(self._publish, batch=batch))
                delay = _RECONNECT_FIRST
            except Exception as err:  # noqa: BLE001 - any broker failure: kept, retried
                with self._control_lock:
                    self._failed(err, "publishing wake-ups")
                if closing or self._closed:
                    # NOTE: closed while this try failed: no other (close
                    # waits for one try at most).
                    break
                with self._pending_cond:
                    for channel, payload in batch.items():
                        self._pending.setdefault(channel, payload)
                self._stop.wait(delay)
                delay = min(delay * 2, _PUBLISH_RETRY_MAX)
        with self._control_lock:
            self._drop_control()

    def _beat(self) -> None:
        """The idle publisher's heartbeat of its connection: the broker's
        heartbeats read, one sent when due. A broker silent for twice the
        heartbeat (a connection a NAT or a firewall dropped without a word,
        a host gone) is said and the connection dropped, so that the next
        publish connects again at once, instead of waiting
        :data:`IO_TIMEOUT` for the confirm of a publish on a dead
        connection."""
        with self._control_lock:
            control = self._control
            if control is None:
                return
            try:
                control.drain(0.001)
            except Exception as err:  # noqa: BLE001 - any broker failure: reconnected later
                self.rotation.failed(control.index)
                self._control = None
                control.abandon()
                self._failed(err, "its heartbeats stopped")

    @staticmethod
    def _publish(channel: Any, batch: dict[str, str]) -> None:
        amqp: Any = importlib.import_module("amqp")
        for name, payload in sorted(batch.items()):
            # NOTE: confirmed: a publish into a connection the broker
            # closed fails here (and is tried again on a new one) instead
            # of vanishing.
            channel.basic_publish_confirm(amqp.Message(payload, delivery_mode=1),
                                          exchange=EXCHANGE, routing_key=name)

    def _on_control(self, operation: Any, deadline: Optional[float] = None) -> None:
        """Run ``operation(channel)`` on the control connection (the lock
        held), on a new one if it fails (a connection the broker closed
        while it was idle, a restart); ``deadline``: see
        :class:`_Connection`."""
        for attempt in (1, 2):
            control = self._control
            fresh = control is None
            try:
                if control is None:
                    control = self._control = _Connection(self.brokers, self.tls,
                                                          self.heartbeat, deadline=deadline,
                                                          rotation=self.rotation)
                    control.channel.confirm_select()
                    if self.heartbeat.interval is not None:
                        # NOTE: its thread keeps the connection's heartbeat.
                        with self._pending_cond:
                            self._start_publisher()
                operation(control.channel)
                break
            except Exception:
                if control is not None:
                    self.rotation.failed(control.index)
                self._drop_control()
                if fresh or attempt == 2:
                    # NOTE: again only on a new connection after an old one
                    # failed (the broker closed it while idle, restarted).
                    raise
        if self._down_said:
            self._down_said = False
            LOG.info("host-state store %s: publishing wake-ups to %s again",
                     self.url, self.broker)

    def _failed(self, err: BaseException, doing: str) -> None:
        self._drop_control()
        if not self._down_said:
            self._down_said = True
            LOG.log(_level(err), "host-state store %s: broker %s unavailable (%s: %s): "
                    "waiters poll until it is back", self.url, self.broker, doing,
                    _one_line(err))

    def verify(self) -> None:
        """Connect to the broker now, as a process opened from its
        configuration does (the connection is the publisher's, kept): a
        broker refused for a reason of configuration (:func:`explain`) is
        the caller's error; one that is down is said once, and the waiters
        poll until it is back. Waits :data:`CONNECT_TIMEOUT` +
        :data:`IO_TIMEOUT` seconds at most whatever the number of brokers
        (each command and service start waits for it): a broker there was
        no time for is tried when the publisher or the listener connects.

        :raises BrokerConfigError: one line naming the option (and file).
        """
        deadline = time.monotonic() + CONNECT_TIMEOUT + IO_TIMEOUT
        with self._control_lock:
            try:
                self._on_control(lambda channel: None, deadline)
            except BrokerConfigError as err:
                raise BrokerConfigError("[host_state] push_transport_url %s: %s"
                                        % (self.broker, err)) from None
            except Exception as err:  # noqa: BLE001 - down: said, polled meanwhile
                self._failed(err, "connecting")

    def _drop_control(self) -> None:
        control, self._control = self._control, None
        if control is not None:
            control.close()

    def bind(self, queue: str, channel: str, bind: bool) -> None:
        """Bind (or unbind) ``channel`` to ``queue``, confirmed by the broker.

        :raises Exception: the broker's error (the caller's listener
            reconnects, and its waiters poll meanwhile).
        """
        def operation(ch: Any) -> None:
            if bind:
                ch.queue_bind(queue=queue, exchange=EXCHANGE, routing_key=channel)
            else:
                ch.queue_unbind(queue=queue, exchange=EXCHANGE, routing_key=channel)
        with self._control_lock:
            if self._closed:
                raise RuntimeError("closed")
            try:
                self._on_control(operation)
            except Exception:
                self._drop_control()
                raise

    # -- waiters -------------------------------------------------------------

    def listener(self) -> notify.Hub:
        with self._listener_lock:
            if self._listener is None:
                self._listener = BrokerListener(self, self.url, self._safety)
            return self._listener

    def close(self) -> None:
        """Stop listening; publish what is pending (one try: a store
        closed right after its write, as a command's, still wakes its
        waiters), then close the connections. Waits for one connection
        attempt at most (a broker that does not answer): the threads left
        are daemons, and close what they hold when they end."""
        with self._pending_cond:
            self._closed = True
            publisher = self._publisher
            self._pending_cond.notify()
        self._stop.set()
        with self._listener_lock:
            listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()
        if publisher is not None and publisher is not threading.current_thread():
            publisher.join(CONNECT_TIMEOUT + IO_TIMEOUT)
            if publisher.is_alive():
                return  # NOTE: it drops the connection when it ends
        with self._control_lock:
            self._drop_control()


class BrokerListener(notify.Hub):
    """This process's queue on the broker, bound to its waiters' channels,
    and the thread that consumes it: a message wakes its channel's waiters;
    a failed connection is said once per outage, reconnected with back-off
    (the queue declared again, every channel bound again), and every waiter
    woken then (a wake-up may have been lost meanwhile).

    Bindings are made on the publisher's connection (:meth:`BrokerPush.bind`,
    confirmed before :meth:`subscribe` returns), not on the consuming one,
    which only its thread touches. The queue is therefore not exclusive
    (another connection binds it) but deleted by the broker once its
    consumer is gone (``auto_delete``), and expires unused
    (``x-expires``) should it never get one.
    """

    def __init__(self, push: BrokerPush, url: str, safety_poll_interval: float) -> None:
        super().__init__(url, safety_poll_interval)
        self._push = push
        self.queue = "compute_plugins.hoststate.%s.%d.%s" % (
            socket.gethostname(), os.getpid(), uuid.uuid4().hex[:12])
        self._conn: Optional[_Connection] = None
        #: A binding failed: the thread reconnects (binding everything).
        self._broken = False
        self._thread: Optional[threading.Thread] = None
        self._stop = threading.Event()
        self._down_said = False

    @property
    def connected(self) -> bool:
        return self._conn is not None and not self._broken and not self._closed

    def _subscribed(self, channel: str, first: bool) -> None:
        # NOTE: the thread connects, never the waiter (nor under the lock):
        # a broker that does not answer holds up no subscription; the
        # waiter polls until the thread has connected and woken it.
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, daemon=True,
                                            name="hoststate-broker-listener")
            self._thread.start()
        if first and self.connected:
            self._binding(channel, True)

    def _unsubscribed(self, channel: str) -> None:
        if self.connected:
            self._binding(channel, False)

    def _binding(self, channel: str, bind: bool) -> None:
        """A waiter's binding (the lock held): a failure is never the
        waiter's error; the thread reconnects and wakes every waiter, which
        polls meanwhile."""
        try:
            self._push.bind(self.queue, channel, bind)
        except Exception as err:  # noqa: BLE001 - any broker failure: reconnected
            self._broken = True
            self._said_down(err)

    def _connect(self) -> Optional[_Connection]:
        """Connect, declare the queue and consume it (the thread's, the lock
        not held: it may wait for a broker that does not answer); None when
        the broker cannot be reached (said once per outage)."""
        try:
            conn = _Connection(self._push.brokers, self._push.tls, self._push.heartbeat,
                               rotation=self._push.rotation)
            try:
                conn.channel.queue_declare(
                    queue=self.queue, durable=False, exclusive=False, auto_delete=True,
                    arguments={"x-expires": int(max(60.0, self.safety_poll_interval)
                                                * 1000)})
                conn.channel.basic_consume(queue=self.queue, no_ack=True,
                                           callback=self._delivered)
            except BaseException:
                self._push.rotation.failed(conn.index)
                conn.close()
                raise
        except Exception as err:  # noqa: BLE001 - any broker failure: retried
            with self._lock:
                self._said_down(err)
            return None
        return conn

    def _attach(self, conn: _Connection) -> bool:
        """Bind every subscribed channel on ``conn`` and listen on it (the
        lock held: no waiter subscribes meanwhile); False when it failed."""
        try:
            for channel in sorted(self._subs):
                conn.channel.queue_bind(queue=self.queue, exchange=EXCHANGE,
                                        routing_key=channel)
        except Exception as err:  # noqa: BLE001 - any broker failure: retried
            self._push.rotation.failed(conn.index)
            conn.close()
            self._said_down(err)
            return False
        self._conn = conn
        self._broken = False
        if self._down_said:
            self._down_said = False
            LOG.info("host-state store %s: listening for changes on %s again",
                     self.url, self._push.broker)
        return True

    def _said_down(self, err: BaseException) -> None:
        if not self._closed and not self._down_said:
            self._down_said = True
            LOG.log(_level(err), "host-state store %s: cannot listen for changes on %s "
                    "(%s): reconnecting, polling meanwhile", self.url, self._push.broker,
                    _one_line(err))

    def _delivered(self, message: Any) -> None:
        key = message.delivery_info.get("routing_key")
        if key:
            self.wake([key])

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def _run(self) -> None:
        delay = _RECONNECT_FIRST
        while not self._closed:
            with self._lock:
                if self._broken:
                    self._drop()
                conn = self._conn
            if conn is None:
                fresh = self._connect()
                with self._lock:
                    if self._closed:
                        if fresh is not None:
                            fresh.close()
                        break
                    if fresh is not None and self._attach(fresh):
                        delay = _RECONNECT_FIRST
                        self._wake_all()
                        continue
                self._stop.wait(delay)
                delay = min(delay * 2, _RECONNECT_MAX)
                continue
            try:
                conn.drain(min(_DRAIN_TIMEOUT, self._push.heartbeat.interval or _DRAIN_TIMEOUT))
            except Exception as err:  # noqa: BLE001 - the connection broke
                self._push.rotation.failed(conn.index)
                # NOTE: no closing handshake on a broken connection (it
                # would wait for a broker that may not answer, the lock
                # held).
                conn.abandon()
                with self._lock:
                    if self._conn is conn:
                        self._said_down(err)
                        self._conn = None
                        self._wake_all()
        with self._lock:
            self._drop()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            # NOTE: one connection attempt at most (a daemon: it closes what
            # it holds when it ends).
            self._thread.join(CONNECT_TIMEOUT + 1)


__all__ = ["EXCHANGE", "TLS", "Broker", "BrokerConfigError", "BrokerListener", "BrokerPush",
           "Heartbeat", "broker_urls", "brokers", "explain", "redacted"]
