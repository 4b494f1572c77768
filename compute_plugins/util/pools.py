"""Connection pools that ping a pooled connection only when it may be stale.

SQLAlchemy's ``pool_pre_ping`` sends ``SELECT 1`` (a round trip, and the
database's CPU) before every transaction, to find a connection the server
closed (a restart, an idle timeout, a failover) before a statement fails on
it. :func:`ping_when_idle` keeps that check where it can matter: a
connection given back to the pool less than a second ago was working then,
and a server that closed it since says so on its socket (something to read
where an idle connection has nothing: :func:`maybe_closed`, no round trip).
Used by the embedded Placement's pool and by the host-state store's.
"""

from __future__ import annotations

import select
import time
from collections.abc import Callable
from typing import Any, Optional

import sqlalchemy as sa

#: A pooled connection that waited in the pool longer than this many
#: seconds is pinged before it is handed out again (:func:`ping_when_idle`).
IDLE_PING_SECONDS = 1.0
_CHECKED_IN = "compute_plugins.checked_in"


def ping_when_idle(engine: sa.Engine, idle: Optional[float] = None,
                   clock: Callable[[], float] = time.monotonic) -> None:
    """Ping a connection of ``engine`` (created without ``pool_pre_ping``)
    before it is handed out only when it waited in the pool more than
    ``idle`` seconds, or when its socket shows the server may have closed
    it (:func:`maybe_closed`). One that fails its ping is replaced
    (SQLAlchemy's ``DisconnectionError``: the pool connects again), as
    with the ping on every checkout. A driver whose socket cannot be looked
    at has every connection pinged, as before; SQLite (no server) only the
    idle ones.

    :param idle: seconds (None: :data:`IDLE_PING_SECONDS` at each checkout).
    """
    record_checkins(engine, clock)
    server = engine.dialect.name != "sqlite"

    def checkout(dbapi_conn: Any, record: Any, proxy: Any) -> None:
        if not may_be_stale(dbapi_conn, record.info, idle, clock, server=server):
            return
        try:
            engine.dialect.do_ping(dbapi_conn)
        except Exception as err:
            raise sa.exc.DisconnectionError(
                "pooled connection failed its ping: %s" % err) from err

    sa.event.listen(engine, "checkout", checkout)


def record_checkins(engine: sa.Engine, clock: Callable[[], float] = time.monotonic) -> None:
    """Note in each pooled connection's ``info`` when it was given back to
    ``engine``'s pool (read by :func:`may_be_stale`)."""
    def checkin(dbapi_conn: Any, record: Any) -> None:
        if record is not None:
            record.info[_CHECKED_IN] = clock()

    sa.event.listen(engine, "checkin", checkin)


def may_be_stale(dbapi_conn: Any, info: dict[Any, Any], idle: Optional[float] = None,
                 clock: Callable[[], float] = time.monotonic, *,
                 server: bool = True) -> bool:
    """Whether the pooled connection ``dbapi_conn`` (its record's ``info``,
    :func:`record_checkins`) is worth a ping before it is used: it waited
    in the pool more than ``idle`` seconds (None:
    :data:`IDLE_PING_SECONDS`), or, on a ``server``, its socket shows the
    server may have closed it (:func:`maybe_closed`). A connection made
    just now never is."""
    last = info.get(_CHECKED_IN)
    if last is None:
        return False  # NOTE: new (connected just now)
    limit = IDLE_PING_SECONDS if idle is None else idle
    return clock() - last > limit or (server and maybe_closed(dbapi_conn))


def maybe_closed(dbapi_conn: Any) -> bool:
    """Whether the server may have closed the pooled (idle) connection
    ``dbapi_conn``: its socket has something to read (a server closing a
    connection sends its reason, or the end of the stream; an idle one
    is sent nothing: PostgreSQL's rare unprompted messages only cost a
    ping), or the driver does not show its socket (psycopg and
    psycopg2's ``fileno()``, PyMySQL's ``_sock``)."""
    fileno = getattr(dbapi_conn, "fileno", None)
    if fileno is None:
        fileno = getattr(getattr(dbapi_conn, "_sock", None), "fileno", None)
    if fileno is None:
        return True
    try:
        fd = fileno()
        if hasattr(select, "poll"):
            poller = select.poll()
            poller.register(fd, select.POLLIN | select.POLLPRI)
            return bool(poller.poll(0))
        return bool(select.select([fd], [], [], 0)[0])
    except Exception:  # noqa: BLE001 - closed or odd: let the ping tell
        return True


__all__ = ["IDLE_PING_SECONDS", "may_be_stale", "maybe_closed", "ping_when_idle",
           "record_checkins"]
