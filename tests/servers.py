"""Private, throwaway PostgreSQL, MariaDB and RabbitMQ servers for the test
session.

The database tests need real servers, and they must not depend on what the
machine happens to run: each server here gets its own temporary directory
(data, unix socket, log), a free TCP port on 127.0.0.1 (never the default
5432/3306, so a machine that runs its own servers is left alone) and no
configuration from ``/etc``; the session starts it on first use and stops
and removes it at its end. Under pytest-xdist each worker that needs a
server starts its own (initdb and mariadb-install-db take about a second
each: cheaper and simpler than sharing one between processes). A run killed
before its clean-up (a Ctrl-C whose teardown xdist cuts short) leaves its
directory, and maybe its server; the next run's first server stops and
removes them (:func:`clean_stale`: the directory's lock no process holds).

The processes are run by pytest-postgresql's and pytest-mysql's executors
(initdb/pg_ctl and mariadb-install-db/mysqld_safe, waited on until they
accept connections, stopped with pg_ctl/mariadb-admin). Their fixture
factories are not used, for two reasons:

- PostgreSQL refuses to run as root (initdb and postgres exit at once), and
  the suite runs as root on CI. As root the server runs as the package's
  own unprivileged ``postgres`` user (``mysql`` for MariaDB) through a
  two-line ``setpriv`` wrapper given to the executor as its pg_ctl; such a
  user cannot reach pytest's temporary directories (``/tmp/pytest-of-root``
  is 0700), where the factories put the data directory, so the directory
  here is a new one under ``$TMPDIR``, owned by that user.
- pytest-mysql starts ``mysqld_safe`` and ``mysql_install_db`` without
  ``--no-defaults``, so they read ``/etc/mysql/my.cnf`` (a machine's
  ``user = mysql``, ``log-error``, ...); the wrappers here add it, and have
  ``root`` log in with an empty password over TCP, as the tests do.

RabbitMQ (:func:`rabbitmq`) runs the same way without an executor: its own
Erlang node name (``rabbit-PID@localhost``), cookie and ``HOME``, AMQP and
distribution ports, and its own ``epmd`` on a free port (``ERL_EPMD_PORT``),
killed at the end, so that neither a machine's RabbitMQ nor its ``epmd``
on 4369 is touched; ``/etc/rabbitmq`` is not read (its own configuration,
environment and plugins files). Besides its plain AMQP port it listens
for AMQP over TLS on a second one (:class:`TLSFiles`: a CA made for the
session, and a server certificate it signed for ``127.0.0.1`` and
``localhost``): the same node, so that the TLS tests cost no second start.

A missing server binary or user fails the tests that need the server, with
the Debian package (listed in ``bindep.txt``) to install; nothing skips.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import glob
import os
import pwd
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import port_for
import psycopg2
import pymysql
import pytest
from mirakuru.exceptions import ExecutorError
from pytest_mysql.executor import MySQLExecutor
from pytest_postgresql.executors import PostgreSQLExecutor

HOST = "127.0.0.1"
#: Tries to start a server, each on a new free port (another process may
#: take the port picked between the pick and the server's bind).
START_TRIES = 3
#: Settings of a throwaway server: nothing it writes needs to survive a crash.
PG_OPTIONS = ("-c listen_addresses=%s -c fsync=off -c synchronous_commit=off "
              "-c full_page_writes=off -c max_connections=200" % HOST)
MARIADB_PARAMS = ("--bind-address=%s --skip-name-resolve --skip-log-bin "
                  "--character-set-server=utf8mb4 --collation-server=utf8mb4_general_ci "
                  "--innodb-flush-log-at-trx-commit=0 --innodb-doublewrite=0 "
                  "--max-connections=200" % HOST)
#: Where Debian installs each PostgreSQL version's pg_ctl (not on PATH).
PG_CTL_GLOB = "/usr/lib/postgresql/*/bin/pg_ctl"
#: Searched after PATH (/usr/sbin is not on a user's PATH).
SYSTEM_DIRS = ("/usr/sbin", "/usr/bin")
BINDEP = "bindep.txt (tools/install-bindep.sh, run by `make test`, installs it)"


@dataclasses.dataclass(frozen=True)
class DatabaseServer:
    """Where a private server listens, and its superuser (no password)."""

    backend: str  # "postgresql" or "mariadb"
    host: str
    port: int
    user: str

    def url(self, database: str, password: str | None = None) -> str:
        """SQLAlchemy URL of ``database`` on this server."""
        auth = self.user if password is None else "%s:%s" % (self.user, password)
        driver = "postgresql+psycopg2" if self.backend == "postgresql" else "mysql+pymysql"
        return "%s://%s@%s:%d/%s" % (driver, auth, self.host, self.port, database)

    def admin(self) -> Any:
        """A new autocommit superuser connection (DB-API) to the server."""
        if self.backend == "postgresql":
            conn = psycopg2.connect(host=self.host, port=self.port, user=self.user,
                                    dbname="postgres", connect_timeout=10)
            conn.autocommit = True
            return conn
        return pymysql.connect(host=self.host, port=self.port, user=self.user,
                               password="", connect_timeout=10, autocommit=True)


def _find(names: tuple[str, ...], package: str, what: str,
          dirs: tuple[str, ...] | None = None) -> str:
    """The first of ``names`` on PATH or in ``dirs`` (SYSTEM_DIRS); else
    fail naming the Debian package that ships it."""
    dirs = SYSTEM_DIRS if dirs is None else dirs
    path = os.pathsep.join([os.environ.get("PATH", ""), *dirs])
    for name in names:
        found = shutil.which(name, path=path)
        if found:
            return found
    pytest.fail("%s is not installed (no %s on PATH or in %s): install the Debian "
                "package %s, listed in %s"
                % (what, " or ".join(names), ", ".join(dirs), package, BINDEP),
                pytrace=False)


def _pg_ctl() -> str:
    """pg_ctl of the newest PostgreSQL (Debian keeps it off PATH, under
    /usr/lib/postgresql/VERSION/bin)."""
    found = sorted(glob.glob(PG_CTL_GLOB),
                   key=lambda p: [int(x) if x.isdigit() else 0
                                  for x in Path(p).parts[-3].split(".")])
    if found:
        return found[-1]
    return _find(("pg_ctl",), "postgresql", "the PostgreSQL server",
                 (os.path.dirname(PG_CTL_GLOB),))


def _service_user(name: str, package: str) -> pwd.struct_passwd | None:
    """The unprivileged user to run a server as when this is root (the
    servers refuse or should not run as root); None when this is not root."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(name)
    except KeyError:
        pytest.fail("the tests run as root and the database server runs as the "
                    "user %r, which does not exist: install the Debian package "
                    "%s, listed in %s (it creates the user)" % (name, package, BINDEP),
                    pytrace=False)


#: The lock file in each server's directory: held (flock) by the process
#: that started the server for as long as the server is its.
LOCK = ".owner.lock"
#: A directory without its lock file is one being made (or one of a version
#: of these tests without locks): removed only once this old.
UNLOCKED_GRACE_S = 600


def _processes_naming(path: Path) -> list[int]:
    """The pids of the processes whose command line names ``path`` (a
    server's mysqld_safe, mariadbd, postgres: their data directory is in it)."""
    needle = str(path).encode()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                with open("/proc/%s/cmdline" % entry, "rb") as f:
                    if needle in f.read():
                        found.append(int(entry))
            except OSError:  # gone meanwhile
                pass
    return found


def clean_stale(prefix: str) -> None:
    """Stop the servers and remove the directories that runs killed before
    their clean-up left under $TMPDIR (``prefix*``): those whose lock no
    process holds. A SIGKILLed xdist worker (a Ctrl-C whose teardown was
    cut short) runs neither the fixtures' teardown nor mirakuru's atexit
    kill, and its server runs on. Directories of live runs (theirs or
    another session's, concurrently) keep their lock and are left alone."""
    for base in Path(tempfile.gettempdir()).glob(prefix + "*"):
        lock_path = base / LOCK
        try:
            fd = os.open(lock_path, os.O_RDWR)
        except FileNotFoundError:
            try:
                young = time.time() - base.stat().st_mtime < UNLOCKED_GRACE_S
            except OSError:
                continue
            if young or _processes_naming(base):
                continue
            shutil.rmtree(base, ignore_errors=True)
            continue
        except OSError:
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue  # a live run's
            for pid in _processes_naming(base):
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
            shutil.rmtree(base, ignore_errors=True)
        finally:
            os.close(fd)


@contextlib.contextmanager
def _private_dir(prefix: str, owner: pwd.struct_passwd | None) -> Iterator[Path]:
    """A new directory under $TMPDIR for one server, owned by ``owner``,
    locked by this process while the block runs and removed after; the
    directories earlier runs left (:func:`clean_stale`) removed first."""
    clean_stale(prefix)
    base = Path(tempfile.mkdtemp(prefix=prefix))
    fd = os.open(base / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        if owner is not None:
            os.chown(base, owner.pw_uid, owner.pw_gid)
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)
        os.close(fd)


def _wrapper(path: Path, command: str) -> str:
    """An executable script at ``path`` that execs ``command``, where
    ``"$@"`` is its arguments (the executors take one program path, not a
    command line)."""
    path.write_text("#!/bin/sh\nexec %s\n" % command)
    path.chmod(0o755)
    return str(path)


def _log_tail(path: Path) -> str:
    try:
        return "; log %s: %s" % (path, " | ".join(path.read_text().splitlines()[-8:]))
    except OSError:
        return ""


@contextlib.contextmanager
def postgresql() -> Iterator[DatabaseServer]:
    """A private PostgreSQL (trust auth, superuser ``postgres``) while the
    block runs; its directory removed after."""
    pg_ctl = _pg_ctl()
    owner = _service_user("postgres", "postgresql")
    with _private_dir("compute-plugins-pg-", owner) as base:
        if owner is not None:
            pg_ctl = _wrapper(base / "pg_ctl", 'setpriv --reuid=%s --regid=%s --init-groups %s "$@"'
                              % (owner.pw_name, owner.pw_gid, pg_ctl))
        for attempt in range(1, START_TRIES + 1):
            executor = PostgreSQLExecutor(
                executable=pg_ctl, host=HOST, port=port_for.select_random(),
                datadir=str(base / "data"), unixsocketdir=str(base),
                logfile=str(base / "postgresql.log"), startparams="-w",
                dbname="postgres", user="postgres", postgres_options=PG_OPTIONS)
            try:
                executor.start()
                # NOTE: the executor returns once the port accepts
                # connections, when PostgreSQL may still answer "the
                # database system is starting up"; `pg_ctl start -w`
                # exits 0 only when it accepts sessions.
                if executor.process is not None and executor.process.wait(60):
                    raise OSError("pg_ctl start exited %d" % executor.process.returncode)
                break
            except (ExecutorError, OSError, subprocess.TimeoutExpired) as err:
                with contextlib.suppress(Exception):
                    if executor.running():
                        executor.stop()
                if attempt == START_TRIES:
                    pytest.fail("the private PostgreSQL (%s) did not start: %s%s"
                                % (pg_ctl, err, _log_tail(base / "postgresql.log")),
                                pytrace=False)
        try:
            yield DatabaseServer("postgresql", HOST, executor.port, "postgres")
        finally:
            executor.stop()


@contextlib.contextmanager
def mariadb() -> Iterator[DatabaseServer]:
    """A private MariaDB (``root`` without a password over TCP) while the
    block runs; its directory removed after."""
    what = "the MariaDB server"
    mariadbd = _find(("mariadbd", "mysqld"), "mariadb-server", what)
    safe = _find(("mariadbd-safe", "mysqld_safe"), "mariadb-server", what)
    install_db = _find(("mariadb-install-db", "mysql_install_db"), "mariadb-server", what)
    admin = _find(("mariadb-admin", "mysqladmin"), "mariadb-server", what)
    owner = _service_user("mysql", "mariadb-server")
    with _private_dir("compute-plugins-mariadb-", owner) as base:
        # NOTE: the executor gives ``--user=root`` to all three: the SQL
        # superuser that shuts the server down, and the OS user the server
        # would run as. The later --user here (the last one wins) runs it as
        # ``mysql`` when this is root, as this user otherwise.
        user = (owner or pwd.getpwuid(os.geteuid())).pw_name
        safe = _wrapper(base / "mysqld_safe", '%s --no-defaults "$@" --user=%s' % (safe, user))
        install_db = _wrapper(base / "install_db", '%s --no-defaults "$@" --user=%s '
                              "--auth-root-authentication-method=normal --skip-test-db"
                              % (install_db, user))
        admin = _wrapper(base / "admin", '%s --no-defaults "$@"' % admin)
        for attempt in range(1, START_TRIES + 1):
            port = port_for.select_random()
            # NOTE: the executor makes its data directory itself, owned by
            # this process; mariadb-install-db --user hands it to ``user``.
            shutil.rmtree(base / ("mysqldata_%d" % port), ignore_errors=True)
            log = base / "mariadb.log"
            executor = MySQLExecutor(
                mysqld_safe=Path(safe), mysqld=Path(mariadbd), admin_exec=admin,
                logfile_path=str(log), params=MARIADB_PARAMS, base_directory=base,
                user="root", host=HOST, port=port, install_db=install_db)
            try:
                executor.start()
                break
            except (ExecutorError, OSError, subprocess.CalledProcessError) as err:
                with contextlib.suppress(Exception):
                    executor.kill()
                if attempt == START_TRIES:
                    pytest.fail("the private MariaDB (%s) did not start: %s%s"
                                % (mariadbd, err, _log_tail(log)), pytrace=False)
        try:
            server = DatabaseServer("mariadb", HOST, port, "root")
            with _preferred_tls_skipped(server):
                yield server
        finally:
            executor.stop()


@contextlib.contextmanager
def _preferred_tls_skipped(server: DatabaseServer) -> Iterator[None]:
    """While the block runs, this process's PyMySQL connections without TLS
    options do not get ready for a TLS the private ``server`` does not
    offer.

    PyMySQL's default mode is "preferred": every such connection builds an
    SSL context first (the system's CA bundle read, ~30 ms of CPU; 3-4
    connections a test in the store's tests on MariaDB), then goes on in
    plain TCP when the server offers no TLS. The private server has no
    certificate (checked here: ``have_ssl``); where it offers TLS nothing
    is changed. On the wire nothing changes either way."""
    admin = server.admin()
    try:
        with admin.cursor() as cur:
            cur.execute("SHOW VARIABLES LIKE 'have_ssl'")
            row = cur.fetchone()
    finally:
        admin.close()
    if row is not None and str(row[1]).upper() == "YES":
        yield
        return
    saved = pymysql.connections.SSL_ENABLED
    pymysql.connections.SSL_ENABLED = False
    try:
        yield
    finally:
        pymysql.connections.SSL_ENABLED = saved


@dataclasses.dataclass(frozen=True)
class TLSFiles:
    """PEM files for a TLS listener and its clients, made by
    :func:`make_tls_files`: ``ca`` signed ``server_cert`` (for
    ``127.0.0.1`` and ``localhost``) and ``client_cert``; ``other_ca`` is an
    unrelated CA (a client trusting it refuses the server), which signed
    ``other_client_cert`` (a server trusting ``ca`` refuses that one)."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path
    other_client_cert: Path
    other_client_key: Path


def _write_key(path: Path, key: Any) -> None:
    from cryptography.hazmat.primitives import serialization

    path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)


def make_tls_files(directory: Path) -> TLSFiles:
    """Two throwaway CAs and the certificates of :class:`TLSFiles`, written
    under ``directory`` (P-256 keys: a few milliseconds; valid one day)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)

    def name(common: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])

    def certificate(subject: str, key: Any, issuer: tuple[str, Any] | None,
                    usage: Any = None, names: list[Any] | None = None) -> x509.Certificate:
        builder = (x509.CertificateBuilder().subject_name(name(subject))
                   .issuer_name(name(issuer[0] if issuer else subject))
                   .public_key(key.public_key()).serial_number(x509.random_serial_number())
                   .not_valid_before(now - datetime.timedelta(minutes=5))
                   .not_valid_after(now + datetime.timedelta(days=1))
                   .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None),
                                  critical=True))
        if usage is not None:
            builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        if names:
            builder = builder.add_extension(x509.SubjectAlternativeName(names),
                                            critical=False)
        return builder.sign(issuer[1] if issuer else key, hashes.SHA256())

    def write(path: Path, cert: x509.Certificate) -> Path:
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        return path

    files: dict[str, Path] = {}
    for ca_name, prefix in (("compute-plugins test CA", ""), ("another CA", "other_")):
        ca_key = ec.generate_private_key(ec.SECP256R1())
        files[prefix + "ca"] = write(directory / (prefix + "ca.pem"),
                                     certificate(ca_name, ca_key, None))
        issuer = (ca_name, ca_key)
        if not prefix:
            key = ec.generate_private_key(ec.SECP256R1())
            _write_key(directory / "server.key", key)
            files["server_key"] = directory / "server.key"
            files["server_cert"] = write(directory / "server.pem", certificate(
                "localhost", key, issuer, ExtendedKeyUsageOID.SERVER_AUTH,
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address(HOST))]))
        key = ec.generate_private_key(ec.SECP256R1())
        _write_key(directory / (prefix + "client.key"), key)
        files[prefix + "client_key"] = directory / (prefix + "client.key")
        files[prefix + "client_cert"] = write(
            directory / (prefix + "client.pem"),
            certificate("compute-plugins client", key, issuer, ExtendedKeyUsageOID.CLIENT_AUTH))
    return TLSFiles(**files)


#: Where Debian installs RabbitMQ's own scripts (``/usr/sbin/rabbitmq-server``
#: is a wrapper that runs them as the ``rabbitmq`` user with /etc's settings).
RABBITMQ_SCRIPTS = ("/usr/lib/rabbitmq/bin",)
#: Seconds RabbitMQ takes to accept connections (about 3 s here).
RABBITMQ_START_S = 60.0


@dataclasses.dataclass
class RabbitServer:
    """A private RabbitMQ: ``guest``/``guest`` on 127.0.0.1, stopped and
    started again by the tests of a broker restart (same node, port and
    data)."""

    port: int
    base: Path
    env: dict[str, str]
    server: str
    #: Its AMQP-over-TLS port (TLS only), and the files of its certificates.
    tls_port: int
    tls: TLSFiles
    process: subprocess.Popen[bytes] | None = None

    @property
    def transport_url(self) -> str:
        """Its oslo.messaging transport URL."""
        return "rabbit://guest:guest@%s:%d/" % (HOST, self.port)

    @property
    def tls_transport_url(self) -> str:
        """The transport URL of its TLS port (no TLS option in it)."""
        return "rabbit://guest:guest@%s:%d/" % (HOST, self.tls_port)

    def accepts(self) -> bool:
        """Whether it accepts AMQP connections (guest logged in)."""
        from kombu.connection import Connection

        conn = Connection("pyamqp://guest:guest@%s:%d//" % (HOST, self.port),
                                connect_timeout=2)
        try:
            conn.connect()
            return True
        except Exception:  # noqa: BLE001 - not yet
            return False
        finally:
            conn.release()

    def start(self) -> None:
        """Start the node and wait until it accepts connections."""
        log = open(self.base / "server.out", "ab")  # noqa: SIM115 - the child's
        self.process = subprocess.Popen([self.server], env=self.env, stdout=log,
                                        stderr=subprocess.STDOUT, cwd=self.base,
                                        start_new_session=True)
        log.close()
        deadline = time.monotonic() + RABBITMQ_START_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                break
            if self.accepts():
                return
            time.sleep(0.2)
        self.stop()
        pytest.fail("the private RabbitMQ (%s) did not start%s"
                    % (self.server, _log_tail(self.base / "server.out")), pytrace=False)

    def stop(self) -> None:
        """Stop the node (SIGTERM: its clean shutdown), killed after 30 s."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(OSError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(10)
        # NOTE: the node's other processes (inet_gethost, erl_child_setup)
        # are in its session: gone with it.
        with contextlib.suppress(OSError):
            os.killpg(process.pid, signal.SIGKILL)


@contextlib.contextmanager
def rabbitmq() -> Iterator[RabbitServer]:
    """A private RabbitMQ while the block runs (see the module docstring);
    its ``epmd`` killed and its directory removed after."""
    # NOTE: Debian's own script first: the one on PATH (/usr/sbin) is its
    # wrapper (su to ``rabbitmq``, cd /var/lib/rabbitmq).
    scripts = [os.path.join(d, "rabbitmq-server") for d in RABBITMQ_SCRIPTS]
    server = next((p for p in scripts if os.access(p, os.X_OK)), None) or _find(
        ("rabbitmq-server",), "rabbitmq-server", "the RabbitMQ server", RABBITMQ_SCRIPTS)
    epmd = _find(("epmd",), "rabbitmq-server", "Erlang's epmd (a dependency of it)")
    with _private_dir("compute-plugins-rabbitmq-", None) as base:
        for name in ("mnesia", "log"):
            (base / name).mkdir()
        (base / "enabled_plugins").write_text("[].\n")
        tls = make_tls_files(base)
        tls_port = port_for.select_random()
        # NOTE: the TLS port asks for a client certificate and checks one
        # that is sent (verify_peer), without requiring it: a client's
        # ssl_cert_file is shown to be sent by a foreign one being refused.
        (base / "rabbitmq.conf").write_text("\n".join([
            "loopback_users.guest = true",
            "listeners.ssl.default = %s:%d" % (HOST, tls_port),
            "ssl_options.cacertfile = %s" % tls.ca,
            "ssl_options.certfile = %s" % tls.server_cert,
            "ssl_options.keyfile = %s" % tls.server_key,
            "ssl_options.verify = verify_peer",
            "ssl_options.fail_if_no_peer_cert = false", ""]))
        (base / "rabbitmq-env.conf").write_text("")
        cookie = base / ".erlang.cookie"
        cookie.write_text(os.urandom(20).hex())
        cookie.chmod(0o400)
        epmd_port = port_for.select_random()
        port = port_for.select_random()
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(base),
            "LANG": "C.UTF-8",
            "RABBITMQ_NODENAME": "rabbit-%d@localhost" % os.getpid(),
            "RABBITMQ_NODE_IP_ADDRESS": HOST,
            "RABBITMQ_NODE_PORT": str(port),
            "RABBITMQ_DIST_PORT": str(port_for.select_random()),
            "RABBITMQ_MNESIA_BASE": str(base / "mnesia"),
            "RABBITMQ_LOG_BASE": str(base / "log"),
            "RABBITMQ_CONFIG_FILE": str(base / "rabbitmq"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(base / "advanced.config"),
            "RABBITMQ_CONF_ENV_FILE": str(base / "rabbitmq-env.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(base / "enabled_plugins"),
            "RABBITMQ_PID_FILE": str(base / "rabbit.pid"),
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS":
                "-kernel inet_dist_use_interface {127,0,0,1}",
            "ERL_EPMD_PORT": str(epmd_port),
            "ERL_EPMD_ADDRESS": HOST,
        }
        rabbit = RabbitServer(port, base, env, server, tls_port, tls)
        try:
            rabbit.start()
            yield rabbit
        finally:
            rabbit.stop()
            subprocess.run([epmd, "-port", str(epmd_port), "-kill"], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           check=False, timeout=30)


@dataclasses.dataclass(eq=False)
class RelayedConnection:
    """One connection a :class:`Relay` relays: the client's socket (the
    relay's end of it) and the relay's to the server."""

    client: socket.socket
    server: socket.socket
    #: Nothing read nor forwarded any more (:meth:`Relay.stall_existing`).
    stalled: bool = False
    #: Its server side ended without a word to the client (:meth:`Relay.drop`).
    dropped: bool = False


def _shut(sock: socket.socket) -> None:
    """Shut ``sock`` down both ways: a thread blocked in its ``recv``
    returns (a close alone leaves it blocked, holding the socket)."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass


def _end(*socks: socket.socket) -> None:
    """Shut down and close ``socks``: both ends of a relayed connection."""
    for sock in socks:
        _shut(sock)
        sock.close()


class Relay:
    """A TCP relay on a port of its own on 127.0.0.1 to a server: what a
    client sees of the path between, as the tests of lost connections need.

    Every byte is forwarded both ways, and one side's end (or an error)
    ends both (shut down, not only closed: a close leaves the other
    direction's thread blocked in ``recv`` holding the socket, and the
    client never sees the server's end). A subclass sees what the clients
    send (:meth:`watcher`: :class:`QueryCounter`). What a path does to
    them, switched while it runs:

    - :meth:`stall` (every connection, those made after too) and
      :meth:`stall_existing` (the connections relayed now only: new ones go
      through): nothing is read nor forwarded any more, nothing closed nor
      refused. What a client sends is no longer acknowledged once the
      buffers between are full (``receive_buffer`` makes them small): a
      server that vanished without a RST (which takes root to make:
      dropped packets), or a NAT or a firewall that forgot the connections.
    - :meth:`drop`: the connections relayed now lose their server side
      (ended) without a word to the client: its socket stays open with
      nothing to read until it sends, then it is reset (a fail-over, a NAT
      that forgot them). Connections made afterwards work.

    :param host: the server's address.
    :param port: the server's port.
    :param receive_buffer: the relay's receive buffer on the client's side
        (bytes; None: the system's): a small window, filled sooner.
    """

    def __init__(self, host: str, port: int, *, receive_buffer: int | None = None) -> None:
        self.target = (host, port)
        self.receive_buffer = receive_buffer
        self.listener = socket.create_server((HOST, 0))
        self.port: int = self.listener.getsockname()[1]
        #: The connections relayed so far, in order.
        self.connections: list[RelayedConnection] = []
        self._stalled = threading.Event()
        self._closed = threading.Event()
        #: Held to add a connection, and to close: none added after.
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def url(self, url: str) -> str:
        """``url`` (SQLAlchemy) through this relay."""
        import sqlalchemy as sa

        return sa.engine.make_url(url).set(host=HOST, port=self.port) \
            .render_as_string(hide_password=False)

    def watcher(self) -> Callable[[bytes], None] | None:
        """Called once per connection: what is handed every chunk its
        client sends, before it is forwarded (None: nothing)."""
        return None

    def stall(self) -> None:
        """Stall every connection, and those relayed after."""
        self._stalled.set()

    def stall_existing(self) -> None:
        """Stall the connections relayed now only."""
        for connection in list(self.connections):
            connection.stalled = True

    def drop(self) -> None:
        """End the server side of the connections relayed now, their
        clients' left open (see the class doc)."""
        for connection in list(self.connections):
            connection.dropped = True
            _shut(connection.server)

    def close(self) -> None:
        """Stop relaying: refuse new connections and end every one (a
        client still waiting on one fails at once). Closing again does
        nothing."""
        with self._lock:
            self._closed.set()
            connections = list(self.connections)
        # NOTE: shut down first: a close alone leaves the accept thread
        # blocked in accept() on it, which takes the next connection.
        _shut(self.listener)
        self.listener.close()
        for connection in connections:
            _end(connection.client, connection.server)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            if self.receive_buffer is not None:
                client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.receive_buffer)
            try:
                server = socket.create_connection(self.target)
            except OSError:
                client.close()  # NOTE: the server refuses: so does the relay
                continue
            connection = RelayedConnection(client, server)
            with self._lock:
                if self._closed.is_set():
                    _end(client, server)  # NOTE: accepted as it closed
                    return
                self.connections.append(connection)
            for upstream in (True, False):
                threading.Thread(target=self._pump, args=(connection, upstream),
                                 daemon=True).start()

    def _pump(self, connection: RelayedConnection, upstream: bool) -> None:
        """Forward one direction of ``connection`` (``upstream``: the
        client's) until it ends, is dropped or the relay is closed."""
        src, dst = ((connection.client, connection.server) if upstream
                    else (connection.server, connection.client))
        watch = self.watcher() if upstream else None
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            # NOTE: stalled: what was read is held, never forwarded, and
            # nothing more is read (the buffers between fill).
            while ((self._stalled.is_set() or connection.stalled)
                   and not self._closed.is_set()):
                self._closed.wait(0.05)
            if self._closed.is_set():
                return
            if connection.dropped:
                if upstream:
                    # NOTE: what the client sent after the loss reaches
                    # nobody: its connection is reset.
                    try:
                        src.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                       struct.pack("ii", 1, 0))
                    except OSError:
                        pass  # NOTE: closed already (close())
                    src.close()
                return  # NOTE: downstream: the client's end left open
            if not data:
                _end(src, dst)
                return
            if watch is not None:
                watch(data)
            try:
                dst.sendall(data)
            except OSError:
                _end(src, dst)
                return


class QueryCounter(Relay):
    """A relay to a PostgreSQL server that records the queries its clients
    send (the wire protocol's simple-query ``Q`` and extended ``P``
    messages): every statement is one, the pool's ping and an isolation
    level set or reset included."""

    def __init__(self, host: str, port: int) -> None:
        self.queries: list[str] = []
        super().__init__(host, port)

    def watcher(self) -> Callable[[bytes], None]:
        """A reader of one connection's messages, recording its queries."""
        buffer = b""
        typed = False

        def watch(data: bytes) -> None:
            nonlocal buffer, typed
            buffer += data
            while True:
                head = 5 if typed else 4
                if len(buffer) < head:
                    break
                length = int.from_bytes(buffer[head - 4:head], "big")
                if len(buffer) < head - 4 + length:
                    break
                message, buffer = buffer[:head - 4 + length], buffer[head - 4 + length:]
                if not typed:
                    # NOTE: SSLRequest/GSSENCRequest, then the startup
                    # message (protocol 3.0): typed messages after it.
                    typed = int.from_bytes(message[4:8], "big") == 196608
                elif message[:1] in (b"Q", b"P"):
                    self.queries.append(message[5:].split(b"\0")[0].decode())
        return watch
