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

import functools
import importlib
import os
import re
import socket
import threading
import uuid
from collections.abc import Sequence
from typing import Any, Optional
from urllib.parse import quote, unquote, urlsplit

from oslo_log import log as logging
from sqlalchemy.engine import Connection

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
#: Heartbeat of the listening connection (seconds), checked every
#: :data:`_DRAIN_TIMEOUT`: a broker that vanished is noticed within it.
HEARTBEAT = 30
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


def broker_urls(transport_url: str) -> list[str]:
    """The kombu URLs (one per broker, tried in turn) of an oslo.messaging
    transport URL.

    :raises ValueError: not a ``rabbit://`` URL with at least one host, a
        port that is not one (1-65535), or query options (``?ssl=1``: not
        understood here, refused rather than ignored).
    """
    parts = urlsplit(transport_url)
    if parts.scheme.lower() not in SCHEMES or not parts.netloc:
        raise ValueError("[host_state] push_transport_url %r: expected %s"
                         % (redacted(transport_url), EXPECTED))
    if parts.query or parts.fragment:
        raise ValueError("[host_state] push_transport_url %r: options %r are not "
                         "understood (TLS and the like are not supported); expected %s"
                         % (redacted(transport_url), parts.query or parts.fragment,
                            EXPECTED))
    vhost = unquote(parts.path[1:]) if parts.path.startswith("/") else ""
    urls = []
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
        urls.append("pyamqp://%s%s/%s" % (credentials, where, quote(vhost or "/", safe="")))
    return urls


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


class _Connection:
    """One kombu connection to the broker and its one channel (not
    thread-safe: its owner serialises)."""

    def __init__(self, urls: Sequence[str], heartbeat: int) -> None:
        # NOTE: imported here (an untyped library, and a second's import
        # that a store without a broker never pays).
        kombu: Any = importlib.import_module("kombu")
        self._kombu: Any = kombu.Connection(
            list(urls), connect_timeout=CONNECT_TIMEOUT, heartbeat=heartbeat,
            failover_strategy="round-robin",
            transport_options={"read_timeout": IO_TIMEOUT, "write_timeout": IO_TIMEOUT})
        # NOTE: each broker once (kombu's max_retries counts the tries
        # after the first), without kombu's pauses (connect() sleeps 2 s
        # before its retry): nothing waits twice for a broker that is down.
        self._kombu.ensure_connection(max_retries=len(urls) - 1, interval_start=0,
                                      interval_step=0, interval_max=0)
        self.channel: Any = self._kombu.channel()
        self.channel.exchange_declare(exchange=EXCHANGE, type="direct", durable=True,
                                      auto_delete=False)

    def drain(self, timeout: float) -> None:
        """Deliver what arrived within ``timeout`` seconds (the consumer's
        callback runs here); keep the heartbeat."""
        try:
            self._kombu.drain_events(timeout=timeout)
        except TimeoutError:
            pass
        self._kombu.heartbeat_check()

    def close(self) -> None:
        try:
            self._kombu.release()
        except Exception:  # noqa: BLE001 - closing a broken connection
            pass


class BrokerPush:
    """The writers' publisher and the waiters' :class:`BrokerListener` of
    one store in this process (see the module docstring).

    :param transport_url: the oslo.messaging transport URL of the broker.
    :param url: the store's URL, password hidden (for messages).
    :param safety_poll_interval: see :class:`~compute_plugins.hoststate.notify.Hub`.
    :raises ValueError: ``transport_url`` is not a broker's.
    """

    kind = "rabbit"

    def __init__(self, transport_url: str, url: str, safety_poll_interval: float) -> None:
        self.urls = broker_urls(transport_url)
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
            if self._publisher is None:
                self._publisher = threading.Thread(target=self._publishing, daemon=True,
                                                   name="hoststate-broker-publisher")
                self._publisher.start()
            self._pending_cond.notify()

    def _publishing(self) -> None:
        """The publisher thread: publishes what is pending; keeps it while
        the broker cannot be reached, trying again (0.5 s doubling up to
        :data:`_PUBLISH_RETRY_MAX`), so that a wake-up committed while a
        waiter's listener is back is not dropped. Once closed, it tries what
        is left once and ends."""
        delay = _RECONNECT_FIRST
        while True:
            with self._pending_cond:
                while not self._pending and not self._closed:
                    self._pending_cond.wait()
                if not self._pending:
                    break
                batch, self._pending = self._pending, {}
                closing = self._closed
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

    @staticmethod
    def _publish(channel: Any, batch: dict[str, str]) -> None:
        amqp: Any = importlib.import_module("amqp")
        for name, payload in sorted(batch.items()):
            # NOTE: confirmed: a publish into a connection the broker
            # closed fails here (and is tried again on a new one) instead
            # of vanishing.
            channel.basic_publish_confirm(amqp.Message(payload, delivery_mode=1),
                                          exchange=EXCHANGE, routing_key=name)

    def _on_control(self, operation: Any) -> None:
        """Run ``operation(channel)`` on the control connection (the lock
        held), on a new one if it fails (a connection the broker closed
        while it was idle, a restart)."""
        for attempt in (1, 2):
            control = self._control
            fresh = control is None
            try:
                if control is None:
                    control = self._control = _Connection(self.urls, heartbeat=0)
                    control.channel.confirm_select()
                operation(control.channel)
                break
            except Exception:
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
            LOG.warning("host-state store %s: broker %s unavailable (%s: %s): waiters "
                        "poll until it is back", self.url, self.broker, doing,
                        _one_line(err))

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
            conn = _Connection(self._push.urls, heartbeat=HEARTBEAT)
            try:
                conn.channel.queue_declare(
                    queue=self.queue, durable=False, exclusive=False, auto_delete=True,
                    arguments={"x-expires": int(max(60.0, self.safety_poll_interval)
                                                * 1000)})
                conn.channel.basic_consume(queue=self.queue, no_ack=True,
                                           callback=self._delivered)
            except BaseException:
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
            LOG.warning("host-state store %s: cannot listen for changes on %s (%s): "
                        "reconnecting, polling meanwhile", self.url, self._push.broker,
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
                conn.drain(_DRAIN_TIMEOUT)
            except Exception as err:  # noqa: BLE001 - the connection broke
                with self._lock:
                    if self._conn is conn:
                        self._said_down(err)
                        self._drop()
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


__all__ = ["EXCHANGE", "BrokerListener", "BrokerPush", "broker_urls", "redacted"]
