"""Real Placement (``openstack-placement``) running in this process.

:class:`EmbeddedPlacement` builds Placement's WSGI app once, with a private
``ConfigOpts`` and ``auth_strategy=noauth2``, on SQLite (a file, or memory
for tests), or on a PostgreSQL or MySQL database. Requests reach it in two
ways, both serialised by one lock on SQLite (on a server database they run
side by side, as in Placement's own API workers):

* :meth:`EmbeddedPlacement.client`: a keystoneauth1 session whose requests
  session has a transport adapter mounted that calls the WSGI app directly
  (no socket), so :class:`~compute_plugins.placement.client.PlacementClient`
  works unchanged;
* :meth:`EmbeddedPlacement.make_server`: a loopback HTTP server (waitress,
  :mod:`compute_plugins.placement.server`; ``compute-plugins placement
  serve``) for other processes.

NOTE: why one request at a time: Placement is written for MySQL and
PostgreSQL, where each request has its own connection and transaction. On
SQLite, an in-memory database is one connection that every thread shares
(oslo.db's ``StaticPool``): two requests at once run inside one
transaction, and one's commit or rollback ends the other's (``cannot start
a transaction within a transaction``). A file database has a connection per
request, but SQLite has one writer at a time and refuses a transaction that
read and then wants to write while another writes (``database is
locked``). Either way concurrent writers get HTTP 500s and lose writes
instead of Placement's 409 generation conflicts
(``tests/functional/placement/test_serve.py`` shows it stays right). The
lock is taken only around the app: the request body is read before it and
the answer is written after it, so a slow or stalled client never holds it.
On PostgreSQL and MySQL each request has its own pooled connection and
transaction, as under Placement's own WSGI workers, and Placement's
generation checks (409) arbitrate: no lock (:attr:`EmbeddedPlacement.serialised`
is False). One process-wide lock there made every scheduler's ``PUT
/allocations`` wait behind every agent's ``DELETE`` and every other
scheduler's query (``bench.scale``, doc/source/benchmarks.md).

NOTE: ``placement.direct.PlacementDirect`` is not used: it rebuilds the app
per request and is not thread-safe (it was seen losing writes across
threads). Placement keeps its database engine in a process-wide
``enginefacade`` context; one embedded Placement is bound to it at a time
(:meth:`start` binds, :meth:`close` unbinds), which is what placement's own
test fixtures do with ``patch_engine``.
"""

from __future__ import annotations

import contextlib
import io
import logging as std_logging
import os
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Optional

import requests
from keystoneauth1 import session as ks_session
from keystoneauth1 import token_endpoint
from oslo_config import cfg
from oslo_log import log as logging
from requests import adapters as rq_adapters
from requests import structures as rq_structures
from requests import utils as rq_utils

from compute_plugins import exception
from compute_plugins.conf import plugins as plugins_conf
from compute_plugins.placement import aliases, consumers, lookups, policy
from compute_plugins.placement import client as pclient
from compute_plugins.placement import server as pserver
from compute_plugins.util import files, pools

LOG = logging.getLogger(__name__)

#: The base URL the in-process transport answers to.
EMBEDDED_URL = "http://placement.embedded"
DB_FILE = "placement.sqlite"

# Only one embedded Placement may own placement's global DB context.
_BIND_LOCK = threading.Lock()
_BOUND: Optional[EmbeddedPlacement] = None

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def default_state_dir() -> str:
    """Where the embedded database lives by default: the agent's state dir."""
    return plugins_conf.default_state_dir()


def connection_for(conf: cfg.ConfigOpts) -> str:
    """The embedded database URL that ``[placement]`` options select."""
    group = conf.placement
    if group.embedded_connection:
        return str(group.embedded_connection)
    state = group.embedded_state_dir or default_state_dir()
    return sqlite_url(os.path.join(state, DB_FILE))


def sqlite_url(path: Optional[str]) -> str:
    """``sqlite://`` (memory) for None or ``:memory:``, else a file URL."""
    if not path or path == ":memory:":
        return "sqlite://"
    return "sqlite:///" + os.path.abspath(path)


class EmbeddedDatabaseError(exception.ComputePluginsError):
    """The embedded Placement's database cannot be created or opened.

    :param connection: the SQLAlchemy URL.
    :param reason: the underlying error (OSError, SQLAlchemy, oslo.db).
    """

    def __init__(self, connection: str, reason: BaseException) -> None:
        self.connection = connection
        self.reason = reason
        text = str(reason).splitlines()[0] if str(reason) else ""
        super().__init__("cannot open the embedded Placement database %s: "
                         "%s%s" % (connection, type(reason).__name__,
                                   ": " + text if text else ""))


def _is_database_error(err: BaseException) -> bool:
    import sqlalchemy.exc
    from oslo_db import exception as db_exc

    return isinstance(err, (OSError, sqlalchemy.exc.SQLAlchemyError,
                            db_exc.DBError))


class _DropWrapped(std_logging.Filter):
    """Drops oslo.db's "DB exception wrapped." warnings (and their tracebacks)."""

    def filter(self, record: std_logging.LogRecord) -> bool:
        return "exception wrapped" not in str(record.msg)


@contextlib.contextmanager
def _quiet_db_errors() -> Iterator[None]:
    """While the database is opened, oslo.db's exception filters log the
    error they wrap with its traceback (``oslo_db.sqlalchemy.exc_filters``,
    WARNING with ``exc_info``) before it is raised: the caller reports it
    as one line (:class:`EmbeddedDatabaseError`), so that log is dropped,
    unless the logger is at DEBUG (``--debug``)."""
    logger = std_logging.getLogger("oslo_db.sqlalchemy.exc_filters")
    if logger.isEnabledFor(std_logging.DEBUG):
        yield
        return
    drop = _DropWrapped()
    logger.addFilter(drop)
    try:
        yield
    finally:
        logger.removeFilter(drop)


#: ``[placement] max_allocation_candidates`` of the embedded Placement
#: (Placement's advice for wide trees: at most 1000; -1: unbounded).
MAX_ALLOCATION_CANDIDATES = 1000


class EmbeddedPlacement:
    """Placement's WSGI app, built once, called under one lock on SQLite.

    :param connection: SQLAlchemy URL: ``sqlite://`` (memory) or
        ``sqlite:////abs/path``. File databases are created (with their
        directory, mode 0700) mode 0600, and migrated to the current schema;
        an existing database file that group or others can read is
        tightened to 0600.
    :param max_allocation_candidates: Placement's ``[placement]
        max_allocation_candidates`` (generated breadth-first when > 0).
    :param optimize_for_wide_trees: Placement's ``[workarounds]
        optimize_for_wide_provider_trees``.
    """

    def __init__(self, connection: str = "sqlite://",
                 max_allocation_candidates: int = MAX_ALLOCATION_CANDIDATES,
                 optimize_for_wide_trees: bool = True) -> None:
        self.connection = connection
        self.max_allocation_candidates = max_allocation_candidates
        self.optimize_for_wide_trees = optimize_for_wide_trees
        self.lock = threading.RLock()
        #: Requests reach the app one at a time (SQLite: module doc).
        self.serialised = serialised(connection)
        self.app: Optional[WSGIApp] = None
        self.running = False
        self._unbind: Optional[Callable[[], None]] = None
        self._server: Optional[pserver.PlacementHTTPServer] = None
        self._engine: Any = None

    # -- lifecycle ----------------------------------------------------------

    def start(self) -> EmbeddedPlacement:
        """Bind the database and build the app (once); accept requests."""
        global _BOUND
        if self.app is not None:
            self.running = True
            return self
        with _BIND_LOCK:
            if _BOUND is not None and _BOUND is not self:
                raise RuntimeError(
                    "another embedded Placement (%s) is running in this "
                    "process; close it first" % _BOUND.connection
                )
            try:
                with _quiet_db_errors():
                    self.app = self._build()
            except Exception as err:
                if self._unbind is not None:
                    self._unbind()
                    self._unbind = None
                if _is_database_error(err):
                    raise EmbeddedDatabaseError(self.connection, err) from err
                raise
            _BOUND = self
        self.running = True
        return self

    def stop(self) -> None:
        """Refuse requests (as if the service were down); keep the data."""
        self.running = False

    def close(self) -> None:
        """Stop, and release placement's database context."""
        global _BOUND
        self.stop()
        if self._server is not None:
            self._server.shutdown()
            self._server.stop_workers()
            self._server = None
        with _BIND_LOCK:
            if self._unbind is not None:
                self._unbind()
                self._unbind = None
            if _BOUND is self:
                _BOUND = None
            self.app = None

    def __enter__(self) -> EmbeddedPlacement:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _build(self) -> WSGIApp:
        # Imported here: placement pulls in a lot, and only the embedded
        # mode needs it.
        from oslo_db.sqlalchemy import engines
        from oslo_policy import opts as policy_opts
        from placement import conf as p_conf
        from placement import db_api, deploy
        from placement.db.sqlalchemy import migration
        from placement.objects import resource_class, trait

        conf = cfg.ConfigOpts()
        p_conf.register_opts(conf)
        conf.set_override("auth_strategy", "noauth2", group="api")
        conf.set_override("connection", self.connection,
                          group="placement_database")
        # NOTE: wide trees (8 NUMA cells, 8 GPUs under one root) make
        # GET /allocation_candidates combinatorial (Placement bug 2126751):
        # an 8-node guest on an 8-cell host got no answer in 120 s. Placement's
        # advice: cap the candidates, generate them breadth-first (balanced
        # over roots) and turn on its wide-tree optimisation. The scheduler
        # itself does not depend on it (compute_plugins.scheduler.providers).
        conf.set_override("max_allocation_candidates",
                          self.max_allocation_candidates, group="placement")
        if self.max_allocation_candidates > 0:
            conf.set_override("allocation_candidates_generation_strategy",
                              "breadth-first", group="placement")
        conf.set_override("optimize_for_wide_provider_trees",
                          self.optimize_for_wide_trees, group="workarounds")
        # NOTE: same policy defaults as the placement service itself (and
        # its PlacementFixture); noauth2's admin token passes either way.
        policy_opts.set_defaults(conf, enforce_new_defaults=False)
        conf([], project="placement", default_config_files=[],
             default_config_dirs=[])

        url = self.connection
        if url.startswith("sqlite:///"):
            # NOTE: created readable by the owner only (0700, 0600) before
            # SQLite opens it: SQLite gives its journal the database's mode.
            path = url[len("sqlite:///"):]
            files.ensure_private_dir(os.path.dirname(path) or ".")
            files.create_private_file(path)
        if not db_api.configure.called:
            # The global factory must exist before an engine is patched in;
            # give it a throwaway in-memory database, never ours.
            boot = cfg.ConfigOpts()
            p_conf.register_opts(boot)
            boot.set_override("connection", "sqlite://",
                              group="placement_database")
            boot([], project="placement", default_config_files=[],
                 default_config_dirs=[])
            db_api.configure(boot)
        # NOTE: the pool's ping on every checkout (oslo.db's
        # pool_pre_ping) and its yield on every checkin (thread_checkin, for
        # eventlet) are left out: connections idle a while are pinged
        # instead (tune_pool).
        engine = engines.create_engine(url, sqlite_fk=False, max_retries=0,
                                       thread_checkin=False,
                                       _engine_target=_engine_without_ping)
        tune_pool(engine)
        self._unbind = db_api.placement_context_manager.patch_engine(engine)
        self._engine = engine
        if url == "sqlite://":
            migration.create_schema(engine)
        else:
            migration.upgrade("head")
        # NOTE: placement caches "already synced" in module globals; a new
        # database must be synced again.
        trait._TRAITS_SYNCED = False
        resource_class._RESOURCE_CLASSES_SYNCED = False
        check_schemas_once()
        scope_tree_listings()
        aliases.keep_aliases()
        lookups.remember_fixed_rows()
        consumers.trim_consumer_writes()
        policy.argspecs_once()
        app: WSGIApp = deploy.loadapp(conf)
        if url.startswith("sqlite:///"):
            # NOTE: only once it proved to be Placement's database: a file
            # named by mistake (--db notes.txt) keeps its mode.
            files.tighten_private_file(url[len("sqlite:///"):])
        LOG.debug("embedded Placement on %s", url)
        return app

    # -- serialised WSGI ----------------------------------------------------

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> list[bytes]:
        """The WSGI app; one request at a time on SQLite (see the module's
        NOTE).

        The request body is read before the lock is taken and the answer is
        handed back whole, so no socket I/O happens while it is held.
        """
        _buffer_body(environ)
        with self.lock if self.serialised else contextlib.nullcontext():
            if not self.running or self.app is None:
                start_response(
                    "503 Service Unavailable",
                    [("Content-Type", "text/plain")],
                )
                return [b"embedded Placement is stopped"]
            result = self.app(environ, start_response)
            try:
                return [b"".join(result)]
            finally:
                close = getattr(result, "close", None)
                if close is not None:
                    close()

    # -- clients ------------------------------------------------------------

    def session(self) -> ks_session.Session:
        """A keystoneauth1 session whose requests reach this app directly.

        Its requests session does not read the environment (``trust_env``
        off): the proxy settings, ``~/.netrc`` and CA bundle it would look
        up on every request (a third of the client's CPU per request,
        ``bench.scale.placement``) mean nothing to a call that never
        leaves the process."""
        rq = requests.Session()
        rq.trust_env = False
        rq.mount(EMBEDDED_URL + "/", WSGITransport(self))
        return ks_session.Session(
            auth=token_endpoint.Token(EMBEDDED_URL, pclient.NOAUTH_TOKEN),
            session=rq,
        )

    def client(self) -> pclient.PlacementClient:
        """A :class:`PlacementClient` for this embedded Placement."""
        return pclient.PlacementClient(
            pclient.PlacementClient._adapter(self.session()),
            "embedded Placement (%s)" % self.connection,
        )

    # -- HTTP ---------------------------------------------------------------

    def make_server(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        threads: int = pserver.DEFAULT_THREADS,
        channel_timeout: int = pserver.DEFAULT_CHANNEL_TIMEOUT,
        request_timeout: int = pserver.DEFAULT_REQUEST_TIMEOUT,
        token: Optional[str] = None,
        workers: int = 1,
    ) -> pserver.PlacementHTTPServer:
        """An HTTP server for this app (``port`` 0: any free port).

        Call ``serve_forever()`` on it; :meth:`close` shuts it down.

        :param threads: worker threads (on SQLite requests still reach
            Placement one at a time).
        :param channel_timeout: seconds of silence after which a connection
            (idle, or stalled mid-request) is closed.
        :param request_timeout: seconds a request may take to arrive whole
            (a slow client's connection is closed after that).
        :param token: the token every request must carry (``admin`` is
            then refused, :mod:`compute_plugins.placement.token`); None:
            ``noauth2``'s ``admin``.
        :param workers: processes serving the port (PostgreSQL and MySQL
            only): this one and ``workers - 1`` forked from it now, each
            with ``threads`` threads and its own database connections, as
            Placement's own API workers; one process's Python runs one
            thread at a time, so several use several cores. They end with
            the server (:meth:`close`), or when this process ends.
        :raises OSError: the address cannot be listened on.
        :raises ValueError: ``workers`` > 1 on SQLite (one request at a
            time: the module doc).
        """
        if workers < 1:
            raise ValueError("workers must be 1 or more, got %r" % workers)
        if workers > 1 and self.serialised:
            raise ValueError(
                "%d Placement workers: Placement on SQLite answers one request "
                "at a time; several workers need a PostgreSQL or MySQL "
                "database" % workers)
        self.start()
        if not self.serialised:
            # NOTE: before the workers fork: their pools are this one's,
            # recreated (_after_fork).
            fit_pool(self._engine, threads)
        from compute_plugins.placement import token as ptoken

        app: Any = self if token is None else ptoken.TokenMiddleware(self, token)
        options: dict[str, Any] = dict(threads=threads, channel_timeout=channel_timeout,
                                       request_timeout=request_timeout)
        sock = pserver.listen(host, port) if workers > 1 else None
        pids: list[int] = []
        if sock is not None:
            # NOTE: forked before this process's server starts its threads.

            def serve() -> None:
                self._after_fork()
                pserver.PlacementHTTPServer(app, host, port, sock=sock,
                                            **options).serve_forever()

            pids = pserver.fork_workers(workers - 1, serve)
        try:
            server = pserver.PlacementHTTPServer(app, host, port, sock=sock, **options)
        except BaseException:
            pserver.stop_workers(pids)
            raise
        server.workers = pids
        self._server = server
        return server

    def _after_fork(self) -> None:
        """In a forked worker: the database connections pooled by the
        parent are the parent's (the same sockets): this process opens its
        own (SQLAlchemy's ``dispose(close=False)`` for a forked child)."""
        if self._engine is not None:
            self._engine.dispose(close=False)


#: Schemas remembered as checked at most (Placement's are a few dozen
#: constants; a schema built per request would otherwise grow the memo).
MAX_CHECKED_SCHEMAS = 256


class _SchemaOnce:
    """``jsonschema`` as ``placement.util`` uses it, but each schema checked
    against its meta-schema once, not on every request.

    ``jsonschema.validate(instance, schema)`` checks the *schema* before
    the instance, every call: Placement validates every request body and
    query string that way, and that check of its own constant schemas was
    a quarter of the embedded Placement's CPU (``bench.scale``, 1,000 hosts:
    doc/source/benchmarks.md). The instance is validated as before
    (``best_match`` of the same validator's errors: the same 400 and
    message); a schema is still checked the first time it is seen (kept by
    identity, with a reference so that its id is not reused), and an
    invalid one still raises ``SchemaError``. Every other attribute is
    jsonschema's own.
    """

    def __init__(self, module: Any) -> None:
        self._module = module
        self._checked: dict[int, Any] = {}
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)

    def validate(self, instance: Any, schema: Any, cls: Any = None,
                 *args: Any, **kwargs: Any) -> None:
        validators = self._module.validators
        if cls is None:
            cls = validators.validator_for(schema)
        key = id(schema)
        if self._checked.get(key) is not schema:
            cls.check_schema(schema)
            with self._lock:
                if len(self._checked) >= MAX_CHECKED_SCHEMAS:
                    self._checked.clear()
                self._checked[key] = schema
        validator = cls(schema, *args, **kwargs)
        error = self._module.exceptions.best_match(validator.iter_errors(instance))
        if error is not None:
            raise error


def check_schemas_once() -> None:
    """Make Placement's request validation check each of its schemas once
    per process (:class:`_SchemaOnce`); idempotent."""
    from placement import util as p_util

    if not isinstance(p_util.jsonschema, _SchemaOnce):
        p_util.jsonschema = _SchemaOnce(p_util.jsonschema)


class _TreeScoped:
    """Placement's ``research_context`` module as ``placement.objects.
    resource_provider`` sees it, but with the providers that have room for
    a resource class looked for in one tree only while a ``GET
    /resource_providers?in_tree=...`` is answered.

    Placement answers ``GET /resource_providers?resources=...&in_tree=X``
    by finding every provider of the whole cloud with room for each
    resource class (``get_providers_with_resource``, one query each over
    every inventory and allocation), passing their ids back in an ``IN``
    list, and keeping those in X's tree: at 10,000 hosts one such call
    for one host's few providers took 418 ms of Placement's CPU and 104 ms
    of the database's, against 658 ms and 180 ms for every host's
    (``python -m bench.scale.placement``). ``get_providers_with_resource``
    takes the tree's root already (Placement's allocation candidates pass
    it); this passes it for the listing too (at 10,000 hosts 13 ms of
    Placement's CPU and 56 ms of the database's). The answer is the same rows:
    the listing keeps only the tree's providers either way. Every other
    attribute is the module's own.
    """

    def __init__(self, module: Any) -> None:
        self._module = module
        self._local = threading.local()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)

    @contextlib.contextmanager
    def listing(self, in_tree: Optional[str]) -> Iterator[None]:
        """While a listing limited to ``in_tree``'s tree is answered (this
        thread)."""
        self._local.in_tree, self._local.root_id = in_tree, None
        try:
            yield
        finally:
            self._local.in_tree = self._local.root_id = None

    def provider_ids_from_uuid(self, context: Any, uuid: str) -> Any:
        """The module's; the root of the listing's ``in_tree`` remembered
        (the listing looks it up first: no query more)."""
        ids = self._module.provider_ids_from_uuid(context, uuid)
        if ids is not None and uuid and getattr(self._local, "in_tree", None) == uuid:
            self._local.root_id = ids.root_id
        return ids

    def get_providers_with_resource(self, ctx: Any, rc_id: int, amount: int,
                                    tree_root_id: Optional[int] = None) -> Any:
        """The module's, in the listing's tree when no other is given."""
        if tree_root_id is None:
            tree_root_id = getattr(self._local, "root_id", None)
        return self._module.get_providers_with_resource(ctx, rc_id, amount, tree_root_id)


#: What :func:`scope_tree_listings` relies on in Placement's listing
#: (``placement.objects.resource_provider._get_all_by_filters_from_db``):
#: the names its code uses.
_LISTING_USES = frozenset({"res_ctx", "provider_ids_from_uuid",
                           "get_providers_with_resource"})


def check_tree_listing(res_ctx: Any, listing: Any) -> None:
    """Refuse to start on a Placement whose listing is not the one
    :class:`_TreeScoped` was written for: ``get_providers_with_resource``
    takes a ``tree_root_id``, and the listing finds ``in_tree``'s root
    with ``res_ctx.provider_ids_from_uuid`` and the room with
    ``res_ctx.get_providers_with_resource``. Otherwise every tree's
    listing would fail (a 500) or quietly look in the whole cloud again.

    :raises ComputePluginsError: naming the Placement release and what
        differs.
    """
    import inspect
    from importlib import metadata

    problems = []
    try:
        params = inspect.signature(res_ctx.get_providers_with_resource).parameters
    except (AttributeError, TypeError, ValueError) as err:
        problems.append("research_context.get_providers_with_resource: %s" % err)
    else:
        if "tree_root_id" not in params:
            problems.append("research_context.get_providers_with_resource takes no "
                            "tree_root_id (it takes %s)" % ", ".join(params))
    code = getattr(inspect.unwrap(listing), "__code__", None)
    missing = _LISTING_USES - set(code.co_names if code is not None else ())
    if missing:
        problems.append("resource_provider._get_all_by_filters_from_db does not use "
                        "%s" % ", ".join(sorted(missing)))
    if problems:
        try:
            release = metadata.version("openstack-placement")
        except metadata.PackageNotFoundError:
            release = "unknown"
        raise exception.ComputePluginsError(
            "the embedded Placement cannot scope GET /resource_providers?in_tree= "
            "to one tree on openstack-placement %s: %s" % (release, "; ".join(problems)))


def scope_tree_listings() -> None:
    """Make Placement's ``GET /resource_providers?in_tree=...`` look for
    room in that tree only (:class:`_TreeScoped`); idempotent."""
    from placement.objects import resource_provider as rp_obj

    if isinstance(rp_obj.res_ctx, _TreeScoped):
        return
    original = rp_obj._get_all_by_filters_from_db
    check_tree_listing(rp_obj.res_ctx, original)
    scoped = _TreeScoped(rp_obj.res_ctx)

    def listing(context: Any, filters: Any = None) -> Any:
        with scoped.listing((filters or {}).get("in_tree")):
            return original(context, filters)

    listing.__wrapped__ = original  # type: ignore[attr-defined]
    rp_obj.res_ctx = scoped
    rp_obj._get_all_by_filters_from_db = listing


#: A pooled connection that waited in the pool longer than this many
#: seconds is pinged before it is handed out again (:func:`tune_pool`).
IDLE_PING_SECONDS = pools.IDLE_PING_SECONDS


def _engine_without_ping(url: Any, **engine_args: Any) -> tuple[Any, Any]:
    """oslo.db's engine factory (``create_engine``'s ``_engine_target``)
    with SQLAlchemy's ping on every checkout turned off (:func:`tune_pool`
    pings idle connections only)."""
    import sqlalchemy

    engine = sqlalchemy.create_engine(url, **{**engine_args, "pool_pre_ping": False})
    return engine, engine


def tune_pool(engine: Any, idle: Optional[float] = None,
              clock: Callable[[], float] = time.monotonic) -> None:
    """Placement's pool pings a connection only when it waited in the pool
    more than ``idle`` seconds (None: :data:`IDLE_PING_SECONDS`) or its
    socket shows the server closed it (:func:`compute_plugins.util.pools.
    ping_when_idle`): oslo.db pings every connection taken from the pool,
    and Placement takes one per transaction (7 per ``PUT /allocations``,
    on top of its 16 statements: ``python -m bench.scale.placement``)."""
    pools.ping_when_idle(engine, IDLE_PING_SECONDS if idle is None else idle, clock)


def fit_pool(engine: Any, size: int) -> None:
    """Keep at least ``size`` connections in ``engine``'s pool: one for
    each of the HTTP server's threads (:meth:`EmbeddedPlacement.make_server`).

    oslo.db's pool keeps ``[placement_database] max_pool_size``
    connections (5) and opens more as overflow, each closed when given
    back: a server of 8 threads under load opened and closed connections
    burst after burst, a new PostgreSQL backend each (its fork and
    authentication; ``bench.scale``, doc/source/benchmarks.md). The pool
    grows as if made that size (SQLAlchemy's ``QueuePool``: its queue's
    bound, and the overflow counted from it, so the cap on connections
    keeps its ``max_overflow`` above the pool); a larger pool, or any other
    kind of pool, is left as it is."""
    from sqlalchemy import pool as sa_pool

    pool = engine.pool
    if not isinstance(pool, sa_pool.QueuePool) or pool.size() >= size:
        return
    with pool._overflow_lock:
        grown = size - pool.size()
        pool._pool.maxsize += grown
        pool._overflow -= grown


def serialised(connection: str) -> bool:
    """Whether Placement on ``connection`` (an SQLAlchemy URL) must take its
    requests one at a time: every database but PostgreSQL and MySQL
    (SQLite: the module doc)."""
    scheme = connection.split(":", 1)[0].split("+", 1)[0].lower()
    return scheme not in ("postgresql", "mysql", "mariadb")


def _buffer_body(environ: dict[str, Any]) -> None:
    """Read the request body now into memory (``wsgi.input``), so that the
    app never waits on the client's socket.

    waitress has received the whole body before it calls the app; this
    keeps the rule for any other server the app is mounted in.
    """
    stream = environ.get("wsgi.input")
    if stream is None or isinstance(stream, io.BytesIO):
        return
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        length = 0
    body = stream.read(length) if length > 0 else b""
    environ["wsgi.input"] = io.BytesIO(body)
    environ["CONTENT_LENGTH"] = str(len(body))


class WSGITransport(rq_adapters.BaseAdapter):
    """A requests transport that calls a WSGI app in-process.

    :param app: the WSGI callable (serialised by the caller, e.g.
        :class:`EmbeddedPlacement`); a stopped :class:`EmbeddedPlacement`
        is reported as a connection error, as a stopped service would be.
    """

    def __init__(self, app: EmbeddedPlacement) -> None:
        super().__init__()
        self.app = app

    def send(
        self,
        request: requests.PreparedRequest,
        stream: bool = False,
        timeout: Any = None,
        verify: Any = True,
        cert: Any = None,
        proxies: Any = None,
    ) -> requests.Response:
        if not self.app.running:
            raise requests.exceptions.ConnectionError(
                "embedded Placement is stopped", request=request
            )
        url = urllib.parse.urlsplit(request.url or "")
        body = request.body or b""
        if isinstance(body, str):
            body = body.encode("utf-8")
        if not isinstance(body, (bytes, bytearray)):
            # keystoneauth sends bytes or str; a streamed body (a file, an
            # iterator) has no length to put in CONTENT_LENGTH.
            raise TypeError("embedded Placement takes a bytes or str body, got %s"
                            % type(body).__name__)
        environ: dict[str, Any] = {
            "REQUEST_METHOD": request.method,
            "SCRIPT_NAME": "",
            "PATH_INFO": urllib.parse.unquote(url.path) or "/",
            "QUERY_STRING": url.query,
            "SERVER_NAME": url.hostname or "placement.embedded",
            "SERVER_PORT": str(url.port or 80),
            "SERVER_PROTOCOL": "HTTP/1.1",
            "REMOTE_ADDR": "127.0.0.1",
            "CONTENT_LENGTH": str(len(body)),
            "wsgi.version": (1, 0),
            "wsgi.url_scheme": url.scheme or "http",
            "wsgi.input": io.BytesIO(body),
            "wsgi.errors": sys.stderr,
            "wsgi.multithread": True,
            "wsgi.multiprocess": False,
            "wsgi.run_once": False,
        }
        for key, value in request.headers.items():
            name = key.upper().replace("-", "_")
            if name == "CONTENT_TYPE":
                environ["CONTENT_TYPE"] = value
            elif name != "CONTENT_LENGTH":
                environ["HTTP_" + name] = value
        captured: dict[str, Any] = {}

        def start_response(
            status: str, headers: list[tuple[str, str]], exc_info: Any = None
        ) -> Callable[[bytes], None]:
            captured["status"] = status
            captured["headers"] = headers
            return lambda data: None

        data = b"".join(self.app(environ, start_response))
        resp = requests.Response()
        code, _, reason = captured["status"].partition(" ")
        resp.status_code = int(code)
        resp.reason = reason
        resp.headers = rq_structures.CaseInsensitiveDict(captured["headers"])
        resp.encoding = rq_utils.get_encoding_from_headers(resp.headers)
        resp._content = data
        resp.raw = io.BytesIO(data)
        resp.url = request.url or ""
        resp.request = request
        if resp.status_code == 503 and not self.app.running:
            raise requests.exceptions.ConnectionError(
                "embedded Placement is stopped", request=request
            )
        return resp

    def close(self) -> None:
        pass
