"""The HTTP server of ``compute-plugins placement serve``: waitress.

:class:`PlacementHTTPServer` serves a WSGI app (the embedded Placement,
:class:`~compute_plugins.placement.embedded.EmbeddedPlacement`) with
`waitress <https://docs.pylonsproject.org/projects/waitress/>`_, a maintained
production WSGI server:

* connections are read and written by one asynchronous loop (``poll``), so
  a client that sends half its headers (or half its body) and stalls holds
  no worker thread; it is closed after ``channel_timeout`` seconds without
  a byte;
* a slow client is bounded by time, not only by silence: each request
  (headers and body) must arrive whole within ``request_timeout`` seconds
  of its first byte (of the connection, for the first request), else the
  connection is closed unanswered. A client trickling one header line at a
  time holds its connection that long, no longer;
* open connections are bounded (``connection_limit``, within the process's
  file limit); when the limit is reached a new connection is still
  accepted, and the one waiting longest for its request (or idle longest)
  is closed to make room: slow clients delay nobody who sends a whole
  request (waitress alone stops accepting at its limit, so that 100
  trickling clients blocked everyone);
* a request reaches the app only once waitress has received all of it, and
  is handled by one of ``threads`` worker threads;
* HTTP/1.1 keep-alive: a client sends many requests over one connection
  (keystoneauth's requests session pools its connections).

The app decides how many requests run at once; the embedded Placement runs
one at a time (see :meth:`EmbeddedPlacement.__call__
<compute_plugins.placement.embedded.EmbeddedPlacement.__call__>`).
"""

from __future__ import annotations

import faulthandler
import os
import resource
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from importlib import metadata
from typing import Any, Protocol, cast

from oslo_log import log as logging
from waitress import server as waitress_server
from waitress import wasyncore
from waitress.adjustments import Adjustments
from waitress.buffers import ReadOnlyFileBasedBuffer
from waitress.channel import HTTPChannel
from waitress.task import ThreadedTaskDispatcher, WSGITask

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
#: Seconds a request may take to arrive whole (headers and body), from its
#: first byte (from the connection, for the first one).
DEFAULT_REQUEST_TIMEOUT = 10
#: At most this many open connections (and at most the process's file limit
#: less :data:`_SPARE_FILES`); at the limit, the one waiting longest goes.
DEFAULT_CONNECTION_LIMIT = 1000
#: Descriptors kept for everything but connections (database, logs, ...).
_SPARE_FILES = 64
#: Seconds between two warnings that the connection limit was reached.
_WARN_EVERY = 60.0


#: The waitress releases whose ``build_response_header`` was read: its one
#: call to ``set_close_on_finish`` for a bodiless HTTP/1.1 answer to a
#: request that did not ask ``close`` is its "no Content-Length" close,
#: which :class:`_KeepAliveTask` skips. With another waitress the answers
#: are waitress's own (and a warning says so, :func:`keeps_bodiless`).
WAITRESS_AUDITED = frozenset({"3.0.2"})


def keeps_bodiless() -> bool:
    """Whether the installed waitress is one :class:`_KeepAliveTask` was
    written for (:data:`WAITRESS_AUDITED`); if not, a warning says that an
    answer without a body closes its connection, as waitress alone does."""
    try:
        version = metadata.version("waitress")
    except metadata.PackageNotFoundError:
        version = "(unknown)"
    if version in WAITRESS_AUDITED:
        return True
    LOG.warning("waitress %s is not a release whose answers were read (%s): an "
                "answer without a body (204) closes its connection, as waitress's "
                "own do", version, ", ".join(sorted(WAITRESS_AUDITED)))
    return False


def _asks_close(request: Any) -> bool:
    """Whether a request's ``Connection`` options (a comma-separated list,
    RFC 9110 section 7.6.1) hold ``close``."""
    options = str(request.headers.get("CONNECTION", "")).lower().split(",")
    return "close" in {option.strip() for option in options}


class _KeepAliveTask(WSGITask):
    """waitress's request task, but an HTTP/1.1 answer without a body (204,
    304, 1xx) keeps its connection.

    waitress 3.0 closes the connection after every answer that has no
    ``Content-Length``, and drops that header from an answer that may not
    have a body: every ``204 No Content`` (each ``PUT`` and ``DELETE
    /allocations``: every scheduler decision and every instance deleted)
    ended its connection (``Connection: close``), so the client opened a
    new one for its next request (a TCP connect and accept, a socket and a
    channel on both sides). Such an answer ends with its headers (RFC 9112
    section 6.3: no body follows a 1xx, 204 or 304), so the connection
    stays open unless the request asked for ``Connection: close`` or the app
    answered with a file (``wsgi.file_wrapper``: waitress sends its bytes
    whatever the status); every other case, and every answer of a waitress
    not in :data:`WAITRESS_AUDITED`, is waitress's own.
    """

    _bodiless = False
    _file_body = False

    def build_response_header(self) -> bytes:
        self._bodiless = (self.version == "1.1" and not self.has_body
                          and not self.close_on_finish and not self._file_body
                          and not _asks_close(self.request)
                          and bool(getattr(self.channel.server, "keep_bodiless", False)))
        try:
            return bytes(super().build_response_header())
        finally:
            self._bodiless = False

    def set_close_on_finish(self) -> None:
        # NOTE: while the header of a bodiless HTTP/1.1 answer is built,
        # waitress's one call is its "no Content-Length" close
        if not self._bodiless:
            super().set_close_on_finish()

    def get_environment(self) -> Any:
        environ = super().get_environment()
        if environ.get("wsgi.file_wrapper") is ReadOnlyFileBasedBuffer:
            environ["wsgi.file_wrapper"] = self._file_wrapper
        return environ

    def _file_wrapper(self, file: Any, block_size: int = 32768) -> ReadOnlyFileBasedBuffer:
        """waitress's ``wsgi.file_wrapper``, noting that the answer is a file."""
        self._file_body = True
        return ReadOnlyFileBasedBuffer(file, block_size)


class _Channel(HTTPChannel):
    """A waitress connection that knows since when it waits for a request;
    an answer without a body keeps it (:class:`_KeepAliveTask`)."""

    task_class = _KeepAliveTask

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        #: (monotonic) the connection's start, or the first byte of the
        #: request being received.
        self.waiting_since = time.monotonic()
        #: Whether a whole request arrived on it (then it may idle, as
        #: keep-alive, for ``channel_timeout``).
        self.answered = False
        super().__init__(*args, **kwargs)

    def received(self, data: bytes) -> bool:
        if data and self.request is None:
            self.waiting_since = time.monotonic()
        result = bool(super().received(data))
        if self.request is None or self.requests:
            self.answered = True  # a request arrived whole
        return result

    def overdue(self, now: float, request_timeout: float) -> bool:
        """Whether a request (or the first) has been arriving too long."""
        if self.requests or (self.request is None and self.answered):
            return False  # being answered, or idle between requests
        return now - self.waiting_since > request_timeout


class _WSGIServer(waitress_server.TcpWSGIServer):
    """waitress's TCP server with :class:`_Channel`, the request deadline
    and eviction at the connection limit."""

    channel_class = _Channel
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    #: Whether an answer without a body keeps its connection
    #: (:class:`_KeepAliveTask`, :func:`keeps_bodiless`).
    keep_bodiless = False
    _warned = -_WARN_EVERY

    def _channels(self) -> list[_Channel]:
        # NOTE: types-waitress types active_channels as one HTTPChannel; it
        # is waitress's dict of them by descriptor.
        return list(cast("dict[int, _Channel]", self.active_channels).values())

    def readable(self) -> bool:
        # NOTE: waitress's own stops accepting at the connection limit;
        # this one always accepts (handle_accept makes room).
        now = int(time.time())
        if now >= self.next_channel_cleanup:
            self.next_channel_cleanup = now + self.adj.cleanup_interval
            self.maintenance(now)
        return bool(self.accepting)

    def maintenance(self, now: int) -> None:
        super().maintenance(now)
        mono = time.monotonic()
        for channel in self._channels():
            if channel.overdue(mono, self.request_timeout):
                channel.will_close = True

    def handle_accept(self) -> None:
        if len(self._channels()) >= self.adj.connection_limit:
            self._make_room()
        super().handle_accept()

    def _make_room(self) -> None:
        """Close the connection waiting longest for its request (none is
        being answered)."""
        channels = self._channels()
        waiting = [c for c in channels if not c.requests]
        if not waiting:
            return
        victim = min(waiting, key=lambda c: c.waiting_since)
        mono = time.monotonic()
        if mono - self._warned >= _WARN_EVERY:
            self._warned = mono
            LOG.warning("placement serve: %d connections open (the limit): "
                        "closing those waiting longest for their request",
                        len(channels))
        victim.handle_close()


def connection_limit_for(wanted: int = DEFAULT_CONNECTION_LIMIT) -> int:
    """``wanted``, or fewer: what the process's open-file limit leaves."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(1, min(wanted, soft - _SPARE_FILES))


def listen(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host``:``port`` (0: any free port) and
    listening, for :class:`PlacementHTTPServer` processes to share.

    :raises OSError: the address cannot be listened on.
    """
    family, kind, proto, _name, address = socket.getaddrinfo(
        host, port, socket.AF_UNSPEC, socket.SOCK_STREAM)[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(1024)
    except OSError:
        sock.close()
        raise
    return sock


#: Seconds between a worker's checks that the process that forked it lives.
_PARENT_CHECK = 1.0
#: Seconds a worker has to end after SIGTERM before it is killed.
_WORKER_STOP = 10.0
#: Seconds between the parent's checks that its workers still run.
_WORKER_WATCH = 0.5


def _how_ended(status: int) -> str:
    """``killed by SIGKILL`` or ``exit code 1``, from a ``waitpid`` status."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            return "killed by %s" % signal.Signals(number).name
        except ValueError:
            return "killed by signal %d" % number
    return "exit code %d" % os.waitstatus_to_exitcode(status)


def fork_workers(count: int, serve: Callable[[], None]) -> list[int]:
    """``count`` processes forked from this one, each running ``serve()``
    (which serves a listening socket shared with this process: the kernel
    hands each new connection to one of the processes waiting on it, as
    pre-forking servers do) until SIGTERM, or until this process is gone.

    Fork before starting threads in this process where possible (a child
    has only the forking thread; a lock another thread held stays held).
    Each child ends with ``os._exit`` (nothing of the parent's is flushed
    or cleaned up twice); one that crashes in C (a fatal signal) prints its
    Python stack on stderr first (``faulthandler``).

    :returns: the children's pids (:func:`stop_workers` ends them).
    """
    parent = os.getpid()
    pids = []
    for _ in range(count):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child; its work is tested by its answers
            code = 1
            try:
                code = _run_worker(parent, serve)
            finally:
                os._exit(code)
        pids.append(pid)
    return pids


def _run_worker(parent: int, serve: Callable[[], None]) -> int:
    """In a forked worker: ``serve()``, then the code the worker ends with
    (a ``SystemExit``'s, as a process's; 1 after an error, said on
    stderr). Raises nothing: the caller must reach ``os._exit``, never
    return into the parent's code."""
    try:
        # NOTE: a crash in C (SIGSEGV, SIGABRT...) says where before the
        # worker ends by its signal; on descriptor 2, as sys.stderr may be
        # no file here (an application's stream object, None)
        faulthandler.enable(file=2)
    except (OSError, ValueError, RuntimeError):
        pass
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        signal.signal(signal.SIGTERM, _stop_worker)
        threading.Thread(target=_die_with, args=(parent,), daemon=True,
                         name="placement-worker-parent").start()
        serve()
        return 0
    except SystemExit as stop:
        # NOTE: SIGTERM's _stop_worker: 0
        if stop.code is None or isinstance(stop.code, int):
            return stop.code or 0
        _say("%s\n" % stop.code)
        return 1
    except BaseException:  # noqa: BLE001 - said, then the worker ends
        _say(traceback.format_exc())
        return 1
    finally:
        try:
            sys.stderr.flush()
        except Exception:  # noqa: BLE001, S110 - nothing to flush
            pass


def _say(text: str) -> None:
    """``text`` on this process's stderr (``sys.stderr``, else descriptor
    2), whatever it is: nothing raised."""
    try:
        sys.stderr.write(text)
        sys.stderr.flush()
        return
    except Exception:  # noqa: BLE001 - no usable sys.stderr: descriptor 2
        pass
    try:
        os.write(2, text.encode("utf-8", "replace"))
    except OSError:
        pass


def _stop_worker(signum: int, frame: object) -> None:
    # NOTE: waitress's loop (serve_forever) ends on SystemExit.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise SystemExit(0)


def _die_with(parent: int) -> None:
    """In a worker: end it once the process that forked it is gone (its
    workers must not keep serving the port on their own)."""
    while os.getppid() == parent:
        time.sleep(_PARENT_CHECK)
    os._exit(0)


def stop_workers(pids: list[int], timeout: float = _WORKER_STOP) -> None:
    """SIGTERM to each of ``pids`` (:func:`fork_workers`), then wait for
    them; one still running after ``timeout`` seconds is killed."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    left = list(pids)
    while left:
        for pid in list(left):
            try:
                done, _status = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                done = pid
            if done:
                left.remove(pid)
        if left and time.monotonic() > deadline:
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                    os.waitpid(pid, 0)
                except (ProcessLookupError, ChildProcessError):
                    pass
            return
        if left:
            time.sleep(0.05)


class PlacementHTTPServer:
    """A WSGI app served over HTTP by waitress, until :meth:`shutdown`.

    :param app: the WSGI application.
    :param host: the address to listen on (``127.0.0.1``).
    :param port: the TCP port; 0 picks a free one (see :attr:`port`).
    :param threads: worker threads that call ``app``.
    :param channel_timeout: seconds of silence before a connection is closed
        (idle keep-alive, or a client stalled mid-request).
    :param request_timeout: seconds a request may take to arrive whole.
    :param connection_limit: the most connections open at once (fewer if
        the open-file limit says so, :func:`connection_limit_for`).
    :param sock: a listening socket to serve (:func:`listen`, shared with
        other processes), instead of binding ``host``:``port``.
    :raises OSError: the address cannot be listened on.
    """

    #: Processes serving the same socket (:func:`fork_workers`), ended with
    #: this server.
    workers: list[int]
    #: How the first worker that ended on its own ended (``Placement worker
    #: PID ended (...)``): :meth:`serve_forever` then returned; None: none.
    lost_worker: str | None

    def __init__(
        self,
        app: Any,
        host: str = "127.0.0.1",
        port: int = 0,
        threads: int = DEFAULT_THREADS,
        channel_timeout: int = DEFAULT_CHANNEL_TIMEOUT,
        request_timeout: int = DEFAULT_REQUEST_TIMEOUT,
        connection_limit: int = DEFAULT_CONNECTION_LIMIT,
        sock: socket.socket | None = None,
    ) -> None:
        self.workers = []
        self.lost_worker = None
        self._stopping = threading.Event()
        self._workers_lock = threading.Lock()
        if threads < 1:
            raise ValueError("threads must be 1 or more, got %r" % threads)
        if channel_timeout < 1:
            raise ValueError("channel_timeout must be 1 second or more, "
                             "got %r" % channel_timeout)
        if request_timeout < 1:
            raise ValueError("request_timeout must be 1 second or more, "
                             "got %r" % request_timeout)
        self._map: dict[int, Any] = {}
        adjustments = Adjustments(
            host=host,
            port=port,
            threads=threads,
            channel_timeout=channel_timeout,
            # NOTE: connections are looked over every second (a loop over
            # them, cheap), so a stalled or slow one goes within a second
            # of its timeout.
            cleanup_interval=1,
            connection_limit=connection_limit_for(connection_limit),
            # NOTE: poll, not select: select cannot watch a descriptor
            # numbered 1024 or more.
            asyncore_use_poll=True,
            ident="compute-plugins placement",
            # Tracebacks stay in the server's log, never in answers.
            expose_tracebacks=False,
        )
        dispatcher = ThreadedTaskDispatcher()
        dispatcher.set_thread_count(threads)
        tcp = _WSGIServer(app, map=self._map, dispatcher=dispatcher,
                          adj=adjustments, _sock=sock, bind_socket=sock is None,
                          # NOTE: types-waitress types listen as strings;
                          # after parsing they are socket tuples.
                          sockinfo=cast(Any, adjustments.listen)[0])
        tcp.request_timeout = request_timeout
        tcp.keep_bodiless = keeps_bodiless()
        self._server = cast(_Server, tcp)
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
        one; then stop the worker threads and close every connection.

        With :attr:`workers`, also once one of them ends on its own (a
        crash, the OOM killer): :attr:`lost_worker` says which and how, the
        others are stopped (the port is not left to fewer workers than
        asked for, unnoticed)."""
        if self.workers:
            threading.Thread(target=self._watch_workers, daemon=True,
                             name="placement-workers-watch").start()
        try:
            self._server.run()
        finally:
            self._server.task_dispatcher.shutdown()
            wasyncore.close_all(self._map, ignore_all=True)
            self.stop_workers()

    def stop_workers(self) -> None:
        """End the processes serving the same socket (:attr:`workers`)."""
        with self._workers_lock:
            self._stopping.set()
            workers, self.workers = self.workers, []
        stop_workers(workers)

    def _watch_workers(self) -> None:
        """Until the workers are stopped: the first one that ended on its
        own is :attr:`lost_worker`, and :meth:`serve_forever` returns."""
        while not self._stopping.wait(_WORKER_WATCH):
            # NOTE: reaped and dropped under the lock that stop_workers
            # takes: a reaped pid (which the system may reuse) is never
            # signalled.
            with self._workers_lock:
                if self._stopping.is_set():
                    return
                for pid in self.workers:
                    try:
                        done, status = os.waitpid(pid, os.WNOHANG)
                    except ChildProcessError:
                        continue
                    if done:
                        self.workers = [p for p in self.workers if p != pid]
                        self.lost_worker = "Placement worker %d ended (%s)" % (
                            pid, _how_ended(status))
                        break
                else:
                    continue
            self.shutdown()
            return

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
        self.stop_workers()
