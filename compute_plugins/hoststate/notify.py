"""Push for the SQL store on PostgreSQL: ``LISTEN``/``NOTIFY``.

The store stays the record of every decision; a notification only wakes
whoever waits for a change, who then reads the store. Every write a waiter
cares about sends one ``NOTIFY`` in its own transaction (PostgreSQL
delivers it at the commit, never for a rollback):

- a host's channel (:func:`host_channel`): a decision addressed to the host
  was submitted or changed by someone other than the host's agent (a
  scheduler, a requester, an auditor), or an operator disabled or enabled
  the host. The host's agent listens on it for as long as it runs;
- a decision's channel (:func:`decision_channel`): its status changed. A
  scheduler listens on it while it waits for the host's answer, a
  requester while it waits for a release.

One :class:`Listener` per store holds one connection of its own (outside
the pool) in ``LISTEN`` on every channel its process' waiters subscribed
to, and a thread blocked on that connection's socket: nothing is sent to
the server while nothing changes. A notification can still be lost (the
connection dropped, the listener reconnecting): when the connection is
back every waiter is woken to read the store again, and waiters read the
store every ``[host_state] push_safety_poll_interval`` seconds whatever
happened (the safety net).

The same channels and wake-ups travel through a message broker where
``[host_state] push_transport_url`` names one, whatever the database
(:mod:`~compute_plugins.hoststate.broker`: RabbitMQ, published after the
commit; or ``fake://``, this process only). How a store pushes is a
:class:`Push` it chooses when it opens (:func:`choose`); waiters only see
a :class:`Hub`'s :class:`Subscription`, whichever carries the wake-ups.
Without either, SQLite and MySQL have no channel: there the waiters poll.
"""

from __future__ import annotations

import hashlib
import os
import select
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Optional, Protocol

import sqlalchemy as sa
from oslo_log import log as logging
from sqlalchemy.engine import Connection, Engine

from compute_plugins.hoststate import engine as engines
from compute_plugins.util import forks

LOG = logging.getLogger(__name__)

#: Seconds between attempts to reconnect a listener whose connection failed
#: (doubling up to :data:`_RECONNECT_MAX`).
_RECONNECT_FIRST = 0.5
_RECONNECT_MAX = 30.0


def host_channel(host: str) -> str:
    """The channel of ``host``'s agent (a digest: a channel name is at most
    63 bytes, a host name up to 255 characters)."""
    return "cp_host_" + hashlib.sha256(host.encode("utf-8")).hexdigest()[:40]


def host_channel_of(host: Any) -> Any:
    """:func:`host_channel` of the SQL expression ``host`` (a column),
    computed by PostgreSQL (``sha256``, PostgreSQL 11 and later): a write
    notifies its row's host from its own ``RETURNING``."""
    digest = sa.func.encode(sa.func.sha256(sa.func.convert_to(host, "UTF8")), "hex")
    return sa.literal("cp_host_") + sa.func.left(digest, 40)


def decision_channel(decision_id: int) -> str:
    """The channel of one decision's status."""
    return "cp_decision_%d" % decision_id


def supported(engine: Engine) -> bool:
    """Whether ``engine``'s database and driver can push (PostgreSQL with
    psycopg2)."""
    return engine.dialect.name == "postgresql" and engine.dialect.driver == "psycopg2"


def send(conn: Connection, channels: Iterable[str], payload: str) -> None:
    """In a write transaction on ``conn``: notify ``channels`` at its
    commit (one statement; nothing on a database that cannot push)."""
    names = sorted(set(channels))
    if not names or conn.engine.dialect.name != "postgresql":
        return
    params = {"payload": payload}
    calls = []
    for index, name in enumerate(names):
        params["c%d" % index] = name
        calls.append("pg_notify(:c%d, :payload)" % index)
    conn.execute(sa.text("SELECT " + ", ".join(calls)), params)


def notification(channel: Any, payload: Any, label: str = "notified") -> Any:
    """``pg_notify(channel, payload)`` as a column of a statement's
    ``RETURNING``: the write notifies ``channel`` by itself, once per row
    it returns (only when it changed one), at its transaction's commit; no
    statement of its own (:meth:`~compute_plugins.hoststate.database.
    Database.notifies_in_statement`)."""
    return sa.func.pg_notify(channel, payload).label(label)


class Subscription:
    """One waiter's subscription to a channel (:meth:`Hub.subscribe`).

    :param listener: the listener it belongs to.
    :param channel: the channel.
    """

    def __init__(self, listener: Hub, channel: str) -> None:
        self.listener = listener
        self.channel = channel
        self._event = threading.Event()
        self._closed = False
        self._callback: Optional[Callable[[], None]] = None

    @property
    def live(self) -> bool:
        """Whether changes are pushed now (False: the listener's connection
        is down and being reconnected; poll meanwhile)."""
        return self.listener.connected

    @property
    def safety_poll_interval(self) -> float:
        """Seconds between the waiter's reads of the store while nothing
        is pushed (:attr:`Hub.safety_poll_interval`)."""
        return self.listener.safety_poll_interval

    def wait(self, timeout: float) -> bool:
        """Block until the channel was notified since the last wait (True;
        also when the listener reconnected: a notification may have been
        lost) or for ``timeout`` seconds (False)."""
        if self._event.wait(max(0.0, timeout)):
            self._event.clear()
            return True
        return False

    def wake(self) -> None:
        """Make the next :meth:`wait` return True at once (and call the
        :meth:`on_wake` callback)."""
        self._event.set()
        callback = self._callback
        if callback is not None:
            callback()

    def on_wake(self, callback: Optional[Callable[[], None]]) -> None:
        """Call ``callback`` (no arguments; on the listener's thread: it
        must not block) at every wake-up from now on, and at once when one
        is pending: for a caller that serves many waiters on a few threads
        instead of blocking one thread in :meth:`wait` per waiter (the
        10,000-host simulation, ``bench.scale``). None: no callback."""
        self._callback = callback
        if callback is not None and self._event.is_set():
            callback()

    def close(self) -> None:
        """Stop listening (once)."""
        if not self._closed:
            self._closed = True
            self.listener._unsubscribe(self)

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


class Hub:
    """The waiters of one store in this process, by channel: what every
    way of pushing shares (:class:`Listener` on PostgreSQL, the broker's
    listener, or this hub alone for ``fake://``, where the writers of this
    process wake it after their commits: :class:`LocalPush`).

    :param url: the store's URL, password hidden (for messages).
    :param safety_poll_interval: seconds between a waiter's reads of the
        store while nothing is pushed (lost wake-ups).
    """

    def __init__(self, url: str, safety_poll_interval: float) -> None:
        self.url = url
        self.safety_poll_interval = safety_poll_interval
        #: Guards the subscriptions (and a subclass's connection).
        self._lock = threading.RLock()
        self._subs: dict[str, list[Subscription]] = {}
        self._closed = False

    @property
    def connected(self) -> bool:
        """Whether wake-ups are delivered now (False: poll meanwhile)."""
        return not self._closed

    def subscribe(self, channel: str) -> Subscription:
        """Listen on ``channel`` for a waiter: once this returns, every
        change committed after it wakes the subscription (a change
        committed before it is what the waiter reads next)."""
        sub = Subscription(self, channel)
        with self._lock:
            if self._closed:
                raise RuntimeError("listener of %s closed" % self.url)
            first = channel not in self._subs
            self._subs.setdefault(channel, []).append(sub)
            self._subscribed(channel, first)
        return sub

    def _subscribed(self, channel: str, first: bool) -> None:
        """A subclass's hook (the lock held): ``channel`` has a new waiter
        (``first``: its first)."""

    def _unsubscribed(self, channel: str) -> None:
        """A subclass's hook (the lock held): ``channel``'s last waiter left."""

    def _unsubscribe(self, sub: Subscription) -> None:
        with self._lock:
            subs = self._subs.get(sub.channel, [])
            if sub in subs:
                subs.remove(sub)
            if subs:
                return
            self._subs.pop(sub.channel, None)
            if not self._closed:
                self._unsubscribed(sub.channel)

    def wake(self, channels: Iterable[str]) -> None:
        """Wake the waiters of ``channels`` (those of other channels sleep on)."""
        with self._lock:
            for channel in channels:
                for sub in list(self._subs.get(channel, ())):
                    sub.wake()

    def _wake_all(self) -> None:
        """Every waiter reads the store again (wake-ups may have been lost
        while the channel was down)."""
        with self._lock:
            for subs in list(self._subs.values()):
                for sub in list(subs):
                    sub.wake()

    def close(self) -> None:
        """Stop delivering wake-ups (waiters still subscribed poll)."""
        with self._lock:
            self._closed = True


class Listener(Hub):
    """One connection in ``LISTEN`` for a store's waiters, and the thread
    that reads its notifications (see the module docstring).

    :param connect: opens a new DB-API connection (psycopg2) to the store.
    :param url: the store's URL, password hidden (for messages).
    :param safety_poll_interval: seconds between a waiter's reads of the
        store while nothing is pushed (lost notifications).
    """

    def __init__(self, connect: Callable[[], Any], url: str,
                 safety_poll_interval: float) -> None:
        super().__init__(url, safety_poll_interval)
        self._connect = connect
        self._conn: Any = None
        self._thread: Optional[threading.Thread] = None
        self._wake_r, self._wake_w = os.pipe()
        #: Said once per outage of the listening connection.
        self._down_said = False

    @property
    def connected(self) -> bool:
        """Whether the listening connection is up."""
        return self._conn is not None and not self._closed

    # -- subscribing ---------------------------------------------------------

    def _subscribed(self, channel: str, first: bool) -> None:
        if self._conn is None and self._thread is None:
            self._open()
        if first and self._conn is not None:
            self._listening("LISTEN " + _quoted(channel))
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, daemon=True,
                                            name="hoststate-listener")
            self._thread.start()

    def _unsubscribed(self, channel: str) -> None:
        if self._conn is not None:
            self._listening("UNLISTEN " + _quoted(channel))

    def close(self) -> None:
        """Close the listening connection and stop its thread."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._drop()
        os.write(self._wake_w, b"x")
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(10)
        os.close(self._wake_r)
        os.close(self._wake_w)

    # -- the connection ------------------------------------------------------

    def _open(self) -> bool:
        """Connect and listen on every subscribed channel (the lock held);
        False when the server cannot be reached (said once per outage)."""
        try:
            conn = self._connect()
            conn.autocommit = True
            self._conn = conn
            for channel in sorted(self._subs):
                self._execute("LISTEN " + _quoted(channel))
        except Exception as err:  # noqa: BLE001 - any driver failure: retried
            self._drop()
            if not self._down_said:
                self._down_said = True
                LOG.warning("host-state store %s: cannot listen for changes (%s): "
                            "polling until it can", self.url, _one_line(err))
            return False
        if self._down_said:
            self._down_said = False
            LOG.info("host-state store %s: listening for changes again", self.url)
        return True

    def _execute(self, statement: str) -> None:
        """Run ``statement`` on the listening connection (the lock held),
        then hand out the notifications that arrived with its answer."""
        with self._conn.cursor() as cursor:
            cursor.execute(statement)
        self._dispatch()

    def _listening(self, statement: str) -> None:
        """A waiter's ``LISTEN``/``UNLISTEN`` (the lock held): a connection
        that broke before the thread noticed is dropped, never the waiter's
        error; the thread reconnects (listening on every subscribed channel)
        and wakes every waiter, which polls meanwhile."""
        try:
            self._execute(statement)
        except Exception as err:  # noqa: BLE001 - any driver failure: reconnected
            self._failed(err)
            os.write(self._wake_w, b"x")

    def _failed(self, err: BaseException) -> None:
        """The listening connection failed (the lock held): said once per
        outage, dropped, every waiter woken to read the store."""
        if not self._closed and not self._down_said:
            self._down_said = True
            LOG.warning("host-state store %s: the connection listening for changes "
                        "failed (%s): reconnecting, polling meanwhile", self.url,
                        _one_line(err))
        self._drop()
        self._wake_all()

    def _dispatch(self) -> None:
        notifies = self._conn.notifies
        while notifies:
            note = notifies.pop(0)
            for sub in self._subs.get(note.channel, ()):
                sub.wake()

    def _drop(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # noqa: BLE001 - closing a broken connection
                pass

    def _run(self) -> None:
        delay = _RECONNECT_FIRST
        while not self._closed:
            with self._lock:
                conn = self._conn
                if conn is None and not self._closed:
                    if self._open():
                        delay = _RECONNECT_FIRST
                        self._wake_all()
                    conn = self._conn
            if self._closed:
                return
            if conn is None:
                readable, _, _ = select.select([self._wake_r], [], [], delay)
                if readable and not self._closed:
                    os.read(self._wake_r, 64)  # NOTE: else no pause next time
                delay = min(delay * 2, _RECONNECT_MAX)
                continue
            try:
                readable, _, _ = select.select([conn, self._wake_r], [], [])
            except Exception:  # noqa: BLE001 - closed under us (a waiter's
                # LISTEN failed, close()): psycopg2's fileno() raises its own
                # InterfaceError; the loop reconnects or ends.
                readable = [conn]
            if self._wake_r in readable:
                if self._closed:
                    return
                os.read(self._wake_r, 64)
            with self._lock:
                if self._conn is not conn:
                    continue
                try:
                    conn.poll()
                    self._dispatch()
                except Exception as err:  # noqa: BLE001 - the connection broke
                    self._failed(err)


def _quoted(channel: str) -> str:
    """``channel`` as an SQL identifier (the channels' names are this
    module's: letters, digits and underscores)."""
    if not channel.replace("_", "").isalnum():
        raise ValueError("channel %r" % channel)
    return '"%s"' % channel


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split()) or type(err).__name__


def connector(engine: Engine, lock_timeout: float,
              lease_duration: float = engines.DEFAULT_LEASE_DURATION) -> Callable[[], Any]:
    """Opens DB-API connections to ``engine``'s database outside its pool
    (the listener's), with the TCP keepalives and ``tcp_user_timeout`` of
    the pool's (:func:`compute_plugins.hoststate.engine.pg_socket_params`)
    unless the URL sets its own: the listener sends nothing while it
    waits, and would otherwise never learn that the server vanished."""
    cargs, cparams = engine.dialect.create_connect_args(engine.url)
    params = dict(cparams)
    for key, value in engines.pg_socket_params(lock_timeout, lease_duration).items():
        params.setdefault(key, value)

    def connect() -> Any:
        return engine.dialect.connect(*cargs, **params)
    return connect


class Push(Protocol):
    """How a store wakes its waiters (chosen by :func:`choose`): the
    writers' side (:meth:`send`, then :meth:`committed`) and the waiters'
    (:meth:`listener`). Waiters do not care which it is
    (:func:`compute_plugins.hoststate.push.choose`)."""

    #: What carries the wake-ups, for messages: "postgresql", "rabbit", "fake".
    kind: str

    def send(self, conn: Connection, channels: Sequence[str], payload: str) -> bool:
        """In the write transaction on ``conn``: wake ``channels`` at its
        commit. False: nothing was sent yet, the writer hands the channels
        to :meth:`committed` once the transaction committed (a broker is no
        part of the database's transaction)."""

    def committed(self, wakeups: Sequence[tuple[Sequence[str], str]]) -> None:
        """After the commit of a transaction whose :meth:`send` returned
        False: deliver its wake-ups (``(channels, payload)`` each). Never
        raises: a wake-up that cannot be delivered is caught by the
        waiters' safety net."""

    def listener(self) -> Hub:
        """This process's one hub of the store's waiters (opened at the
        first call)."""

    def close(self) -> None:
        """Close what the writers and the listener hold."""


class PgPush:
    """``LISTEN``/``NOTIFY``: the notification is part of the write
    transaction (PostgreSQL delivers it at the commit, never for a rollback).

    :param engine: the store's engine (PostgreSQL, psycopg2).
    :param url: the store's URL, password hidden.
    :param safety_poll_interval: see :class:`Hub`.
    :param lock_timeout: the store's, and
    :param lease_duration: the agents' lease (they bound its listener's
        ``tcp_user_timeout``: :func:`connector`).
    """

    kind = "postgresql"

    def __init__(self, engine: Engine, url: str, safety_poll_interval: float,
                 lock_timeout: float = 30.0,
                 lease_duration: float = engines.DEFAULT_LEASE_DURATION) -> None:
        self._engine = engine
        self._lock_timeout = lock_timeout
        self._lease_duration = lease_duration
        self._url = url
        self._safety = safety_poll_interval
        self._listener: Optional[Listener] = None
        self._lock = threading.Lock()
        #: What a forked child inherited of its parent (kept, never used).
        self._parents: list[Any] = []
        forks.renew_in_child(self)

    def _forked(self) -> None:
        """In a child forked with this object: the parent's listener
        thread is not here (a subscription waited for it for ever) and its
        connection is the parent's socket: forget it (kept from the garbage
        collector, whose close would end the parent's session), so that the
        child listens on a connection of its own (as the broker push does:
        :mod:`~compute_plugins.hoststate.broker`)."""
        self._parents.append(self._listener)
        self._listener = None
        self._lock = threading.Lock()

    def send(self, conn: Connection, channels: Sequence[str], payload: str) -> bool:
        send(conn, channels, payload)
        return True

    def committed(self, wakeups: Sequence[tuple[Sequence[str], str]]) -> None:
        return None

    def listener(self) -> Hub:
        with self._lock:
            if self._listener is None:
                self._listener = Listener(
                    connector(self._engine, self._lock_timeout, self._lease_duration),
                    self._url, self._safety)
            return self._listener

    def close(self) -> None:
        with self._lock:
            listener, self._listener = self._listener, None
        if listener is not None:
            listener.close()


#: The in-process hubs (``fake://``), one per store URL in this process:
#: every store object of the same database here shares it.
_LOCAL_HUBS: dict[str, Hub] = {}
_LOCAL_LOCK = threading.Lock()


class LocalPush:
    """``fake://`` (named after oslo.messaging's in-process driver): the
    writers of this process wake the waiters of this process, after the
    commit. Only where every writer and waiter of the store shares the
    process (the embedded demo): a change another process makes is read at
    the waiters' safety net only.

    :param url: the store's URL, password hidden (the hub's key).
    :param safety_poll_interval: see :class:`Hub`.
    """

    kind = "fake"

    def __init__(self, url: str, safety_poll_interval: float) -> None:
        with _LOCAL_LOCK:
            hub = _LOCAL_HUBS.get(url)
            if hub is None or hub._closed:
                hub = _LOCAL_HUBS[url] = Hub(url, safety_poll_interval)
        self._hub = hub

    def send(self, conn: Connection, channels: Sequence[str], payload: str) -> bool:
        return False

    def committed(self, wakeups: Sequence[tuple[Sequence[str], str]]) -> None:
        for channels, _payload in wakeups:
            self._hub.wake(channels)

    def listener(self) -> Hub:
        return self._hub

    def close(self) -> None:
        # NOTE: the hub is the process's, shared with the store's other
        # objects here: their waiters keep it.
        return None


__all__ = ["notification", "Hub", "Listener", "LocalPush", "PgPush", "Push", "Subscription",
           "connector", "decision_channel", "host_channel", "send", "supported"]
