"""The HTTP server of ``compute-plugins placement serve``: waitress.

:class:`PlacementHTTPServer` serves a WSGI app (the embedded Placement,
:class:`~compute_plugins.placement.embedded.EmbeddedPlacement`) with
`waitress <https://docs.pylonsproject.org/projects/waitress/>`_, a maintained
production WSGI server:

* connections are read and written by one asynchronous loop, so a client
  that sends half its headers (or half its body) and stalls holds no worker
  thread and blocks nobody; it is closed after ``channel_timeout`` seconds
  without a byte;
* a request reaches the app only once waitress has received all of it, and
  is handled by one of ``threads`` worker threads;
* HTTP/1.1 keep-alive: a client sends many requests over one connection
  (keystoneauth's requests session pools its connections).

The app decides how many requests run at once; the embedded Placement runs
one at a time (see :meth:`EmbeddedPlacement.__call__
<compute_plugins.placement.embedded.EmbeddedPlacement.__call__>`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, cast

from oslo_log import log as logging
from waitress import server as waitress_server
from waitress import wasyncore
from waitress.task import ThreadedTaskDispatcher

LOG = logging.getLogger(__name__)


class _Trigger(Protocol):
    def pull_trigger(self, thunk: Callable[[], object] | None = None) -> None: ...


class _Server(Protocol):
    """What this module uses of waitress's ``TcpWSGIServer`` (the server
    ``create_server`` builds for one host and port). types-waitress lacks
    ``effective_host``/``effective_port``, types ``trigger`` as an ``int``
    and gives ``pull_trigger`` a thunk that takes an argument (waitress
    calls it with none)."""

    effective_host: str
    effective_port: int
    trigger: _Trigger
    task_dispatcher: ThreadedTaskDispatcher

    def run(self) -> None: ...

#: Worker threads that run the app (the embedded Placement serialises them,
#: so more only helps requests that wait for a slow reader of a large answer).
DEFAULT_THREADS = 4
#: Seconds a connection may stay silent (idle between requests, or stalled
#: in the middle of one) before the server closes it.
DEFAULT_CHANNEL_TIMEOUT = 60
#: At most this many open connections; more wait in the listen backlog.
DEFAULT_CONNECTION_LIMIT = 100


class PlacementHTTPServer:
    """A WSGI app served over HTTP by waitress, until :meth:`shutdown`.

    :param app: the WSGI application.
    :param host: the address to listen on (``127.0.0.1``).
    :param port: the TCP port; 0 picks a free one (see :attr:`port`).
    :param threads: worker threads that call ``app``.
    :param channel_timeout: seconds of silence before a connection is closed
        (idle keep-alive, or a client stalled mid-request).
    :param connection_limit: the most connections served at once.
    :raises OSError: the address cannot be listened on.
    """

    def __init__(
        self,
        app: Any,
        host: str = "127.0.0.1",
        port: int = 0,
        threads: int = DEFAULT_THREADS,
        channel_timeout: int = DEFAULT_CHANNEL_TIMEOUT,
        connection_limit: int = DEFAULT_CONNECTION_LIMIT,
    ) -> None:
        if threads < 1:
            raise ValueError("threads must be 1 or more, got %r" % threads)
        if channel_timeout < 1:
            raise ValueError("channel_timeout must be 1 second or more, "
                             "got %r" % channel_timeout)
        self._map: dict[int, Any] = {}
        self._server = cast(_Server, waitress_server.create_server(
            app,
            map=self._map,
            host=host,
            port=port,
            threads=threads,
            channel_timeout=channel_timeout,
            # NOTE: idle connections are looked for every cleanup_interval
            # seconds; at most the timeout, so a stalled client goes within
            # about twice the timeout.
            cleanup_interval=min(30, channel_timeout),
            connection_limit=connection_limit,
            ident="compute-plugins placement",
            # Tracebacks stay in the server's log, never in answers.
            expose_tracebacks=False,
        ))
        self.host: str = str(self._server.effective_host)
        self.port: int = int(self._server.effective_port)

    @property
    def url(self) -> str:
        """``http://HOST:PORT``."""
        return "http://%s:%d" % (self.host, self.port)

    @property
    def server_address(self) -> tuple[str, int]:
        """``(host, port)`` as ``socketserver`` names it."""
        return self.host, self.port

    def serve_forever(self) -> None:
        """Serve until :meth:`shutdown` (from another thread) or until a
        signal handler raises ``SystemExit``/``KeyboardInterrupt`` in this
        one; then stop the worker threads and close every connection."""
        try:
            self._server.run()
        finally:
            self._server.task_dispatcher.shutdown()
            wasyncore.close_all(self._map, ignore_all=True)

    def shutdown(self) -> None:
        """Make :meth:`serve_forever` return; safe from any thread but a
        signal handler (it takes waitress's trigger lock)."""
        if self._map:
            self._server.trigger.pull_trigger(
                lambda: wasyncore.close_all(self._map, ignore_all=True))

    def close(self) -> None:
        """Close the listening socket and every connection (when
        :meth:`serve_forever` is not running)."""
        self._server.task_dispatcher.shutdown()
        wasyncore.close_all(self._map, ignore_all=True)
