"""``compute-plugins placement serve``: the embedded Placement over HTTP.

Runs real Placement (``openstack-placement``) on SQLite (or on the
PostgreSQL or MySQL database of ``[placement] embedded_connection``) as an
HTTP service
on 127.0.0.1, for other processes, every request carrying the random
token of ``placement.token`` in the state directory
(:mod:`compute_plugins.placement.token`; ``--no-token``: ``noauth2``'s
``admin``): ``compute-plugins --placement-url URL ...``, nova, the openstack
client. The HTTP server is waitress (:mod:`compute_plugins.placement.server`:
worker threads, keep-alive, a stalled client blocks nobody and is closed
after ``--timeout`` seconds of silence, a slow one once its request has
taken ``--request-timeout`` seconds); Placement itself, built once,
answers one request at a time on SQLite, several at once on PostgreSQL
or MySQL (:mod:`compute_plugins.placement.embedded`), there in
``--workers`` processes sharing the port, as Placement's API workers. The first line on stdout is
``Placement listening on http://127.0.0.1:PORT``. SIGTERM stops it (exit
0); so does Ctrl-C (SIGINT), as an interrupt: exit 130 and one line. A
``--workers`` process that ends on its own (a crash, the OOM killer) stops
the others and it: exit 1 and one line naming the worker.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from typing import TYPE_CHECKING, Any, NoReturn

from compute_plugins import exception
from compute_plugins.cmd import arguments, common

if TYPE_CHECKING:
    from oslo_config import cfg

LOG = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = arguments.command(
        subparsers, "placement", "run the embedded Placement as a service")
    sub = parser.add_subparsers(dest="placement_command", metavar="ACTION")
    sub.required = True
    serve = arguments.command(
        sub, "serve", "serve the embedded Placement over HTTP on 127.0.0.1 "
        "(a random token in the state directory) until SIGINT or SIGTERM",
        unused="it is the Placement, on no host", details="""[placement]
        embedded_connection or embedded_state_dir of the config files name
        its database unless --db does; every request must carry the token
        of placement.token in the state directory ([placement]
        embedded_state_dir), generated on the first start. The first line
        on stdout is 'Placement listening on http://127.0.0.1:PORT'.""")
    serve.add_argument("--port", type=_port, default=8778,
                       help="TCP port, 1-65535 (default 8778; 0: any free "
                       "port)")
    serve.add_argument("--db", metavar="PATH",
                       help="SQLite database file (created if missing); "
                       "':memory:' for a throw-away database; default: "
                       "[placement] embedded_connection / embedded_state_dir")
    # NOTE: the defaults are the server's, read when used or shown
    # (importing the server is not free: the command line's start-up).
    threads = serve.add_argument("--threads", type=_positive("threads"),
                                 help="worker threads of the HTTP server (default "
                                 "%(server_default)s; Placement answers one request "
                                 "at a time)")
    threads.server_default = arguments.Deferred(  # type: ignore[attr-defined]
        lambda: _server().DEFAULT_THREADS)
    serve.add_argument("--workers", type=_positive("workers"), default=1,
                       help="processes serving the port, each with its threads "
                       "(default 1; more only on a PostgreSQL or MySQL database: "
                       "Placement on SQLite answers one request at a time)")
    timeout = serve.add_argument("--timeout", type=_positive("timeout"),
                                 metavar="SECONDS",
                                 help="close a connection that sends nothing for this "
                                 "long, idle or in the middle of a request (default "
                                 "%(server_default)s)")
    timeout.server_default = arguments.Deferred(  # type: ignore[attr-defined]
        lambda: _server().DEFAULT_CHANNEL_TIMEOUT)
    request_timeout = serve.add_argument(
        "--request-timeout", type=_positive("request timeout"), metavar="SECONDS",
        help="close a connection whose request (headers and body) has not "
        "arrived whole this long after its first byte: a slow client holds "
        "its connection no longer (default %(server_default)s)")
    request_timeout.server_default = arguments.Deferred(  # type: ignore[attr-defined]
        lambda: _server().DEFAULT_REQUEST_TIMEOUT)
    auth = serve.add_mutually_exclusive_group()
    auth.add_argument("--token-file", metavar="PATH",
                      help="the file of the token every request must carry "
                      "(generated, mode 0600, if missing; default: "
                      "placement.token in the state directory, which this "
                      "project's commands read for a Placement on 127.0.0.1)")
    auth.add_argument("--no-token", action="store_true",
                      help="take noauth2's fixed token admin instead (any "
                      "local user is then Placement's administrator)")
    serve.set_defaults(func=run)


def _positive(what: str) -> Any:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = 0
        if not 1 <= value <= 86400:
            raise argparse.ArgumentTypeError(
                "invalid %s %r: must be a whole number from 1 to 86400"
                % (what, text))
        return value
    return parse


def _server() -> Any:
    from compute_plugins.placement import server as pserver

    return pserver


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            "invalid port %r: must be a whole number" % text) from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(
            "invalid port %r: must be 1-65535 (or 0: any free port)" % text)
    return value


def run(conf: cfg.ConfigOpts, args: argparse.Namespace) -> int:
    from compute_plugins.cmd import report
    from compute_plugins.placement import connect, embedded
    from compute_plugins.placement import server as pserver
    from compute_plugins.placement import token as ptoken
    from compute_plugins.util import files, urls
    from compute_plugins.util.text import printable

    report.quiet_placement_logs(conf.debug)
    connection = (embedded.sqlite_url(args.db) if args.db
                  else embedded.connection_for(conf))
    if args.workers > 1 and embedded.serialised(connection):
        raise exception.ConfigError(
            "--workers %d: Placement on SQLite (%s) answers one request at a time; "
            "several workers need a PostgreSQL or MySQL [placement] "
            "embedded_connection" % (args.workers, urls.masked(connection)))
    service = embedded.EmbeddedPlacement(connection)
    try:
        service.start()
    except embedded.EmbeddedDatabaseError as err:
        where = ("--db %s" % args.db if args.db
                 else connect.embedded_option(conf))
        raise exception.ConfigError("%s: %s" % (where, err)) from err
    try:
        secret = None if args.no_token else ptoken.ensure(
            args.token_file or ptoken.path_for(connect.state_dir(conf)))
    except (OSError, files.UnreadableFile) as err:
        service.close()
        raise exception.ConfigError("the token file: %s" % err) from err
    # NOTE: loopback only, and a token only this user can read.
    try:
        server = service.make_server("127.0.0.1", args.port,
                                     threads=(pserver.DEFAULT_THREADS if args.threads
                                              is None else args.threads),
                                     channel_timeout=(pserver.DEFAULT_CHANNEL_TIMEOUT
                                                      if args.timeout is None
                                                      else args.timeout),
                                     request_timeout=(pserver.DEFAULT_REQUEST_TIMEOUT
                                                      if args.request_timeout is None
                                                      else args.request_timeout),
                                     token=secret, workers=args.workers)
    except OSError as err:
        service.close()
        print("compute-plugins: error: cannot listen on 127.0.0.1:%s: %s"
              % (args.port, err.strerror or err), file=sys.stderr)
        return 1
    print("Placement listening on %s (%s; database %s)"
          % (server.url, "noauth2: token admin" if secret is None
             else "token in %s" % printable(args.token_file or ptoken.path_for(
                 connect.state_dir(conf))), urls.masked(connection)), flush=True)

    stopped_by: list[int] = []

    def stop(signum: int, frame: Any) -> NoReturn:
        # NOTE: no lock may be taken here (the main thread may hold it):
        # serve_forever ends on this exception and stops the workers; a
        # second signal while it does is ignored.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        stopped_by.append(signum)
        raise _Stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        server.serve_forever()
    except _Stop:
        pass  # a signal outside waitress's loop
    finally:
        server.close()
        service.close()
    if stopped_by == [signal.SIGINT]:
        return common.interrupted("Placement stopped")
    if server.lost_worker is not None:
        print("compute-plugins: error: %s: Placement stopped" % server.lost_worker,
              file=sys.stderr)
        return 1
    return 0


class _Stop(SystemExit):
    """SIGTERM/SIGINT: waitress's loop returns on a ``SystemExit``."""
