"""``compute-plugins placement serve``: the embedded Placement over HTTP.

Runs real Placement (``openstack-placement``) on SQLite as an HTTP service
on 127.0.0.1 with ``auth_strategy=noauth2`` (token ``admin``), for other
processes: ``compute-plugins --placement-url URL ...``, nova, the openstack
client. Requests are served one at a time by the app built once. The first
line on stdout is ``Placement listening on http://127.0.0.1:PORT``.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any

from oslo_config import cfg
from oslo_log import log as logging

from compute_plugins import exception
from compute_plugins.placement import connect, embedded

LOG = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "placement", help="run the embedded Placement as a service")
    sub = parser.add_subparsers(dest="placement_command", metavar="ACTION")
    sub.required = True
    serve = sub.add_parser(
        "serve", help="serve the embedded Placement over HTTP on 127.0.0.1 "
        "(noauth2, token admin)")
    serve.add_argument("--port", type=_port, default=8778,
                       help="TCP port, 1-65535 (default 8778; 0: any free "
                       "port)")
    serve.add_argument("--db", metavar="PATH",
                       help="SQLite database file (created if missing); "
                       "':memory:' for a throw-away database; default: "
                       "[placement] embedded_connection / embedded_state_dir")
    serve.set_defaults(func=run)


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

    report.quiet_placement_logs(conf.debug)
    connection = (embedded.sqlite_url(args.db) if args.db
                  else embedded.connection_for(conf))
    service = embedded.EmbeddedPlacement(connection)
    try:
        service.start()
    except embedded.EmbeddedDatabaseError as err:
        where = ("--db %s" % args.db if args.db
                 else connect.embedded_option(conf))
        raise exception.ConfigError("%s: %s" % (where, err)) from err
    # NOTE: loopback only: noauth2 lets anyone who can connect be admin.
    try:
        server = service.make_server("127.0.0.1", args.port)
    except OSError as err:
        service.close()
        print("compute-plugins: error: cannot listen on 127.0.0.1:%s: %s"
              % (args.port, err.strerror or err), file=sys.stderr)
        return 1
    host, port = server.server_address[:2]
    print("Placement listening on http://%s:%d (noauth2: token admin; "
          "database %s)" % (host, port, connection), flush=True)

    def stop(signum: int, frame: Any) -> None:
        # shutdown() waits for serve_forever to return: not from its thread.
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()
        service._server = None
        service.close()
    return 0
