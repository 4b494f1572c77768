"""``compute-plugins placement serve`` as an HTTP server, over real sockets.

A real ``placement serve`` subprocess (waitress in front of real Placement
on a SQLite file); clients are raw sockets, ``http.client`` and the
project's keystoneauth :class:`PlacementClient`.
"""

from __future__ import annotations

import http.client
import signal
import socket
import sys
import threading
import uuid
from typing import Any

import pytest

from compute_plugins.placement import client as pclient
from compute_plugins.placement import exception as pexc
from tests.functional.placement.conftest import ServedPlacement, free_port

#: Seconds any single answer may take before the test gives up (a client
#: blocked by a stalled one would wait for ever).
ANSWER = 30


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    db = str(tmp_path_factory.mktemp("serve") / "placement.sqlite")
    placement = ServedPlacement(db, free_port(), ["--timeout", "1",
                                                    "--request-timeout", "2"])
    placement.start()
    yield placement
    placement.stop()


def client(served: ServedPlacement) -> pclient.PlacementClient:
    return pclient.PlacementClient.for_url(served.url, timeout=ANSWER)


def stalled(served: ServedPlacement, data: bytes) -> socket.socket:
    """A connection that sent ``data`` (part of a request) and stops."""
    sock = socket.create_connection(("127.0.0.1", served.port))
    sock.sendall(data)
    return sock


def test_a_client_stalled_in_its_headers_or_body_blocks_nobody(served):
    half_headers = stalled(served, b"GET /resource_providers HTTP/1.1\r\n"
                                   b"Host: placement\r\nX-Auth-Tok")
    half_body = stalled(served, b"POST /resource_providers HTTP/1.1\r\n"
                                b"Host: placement\r\nX-Auth-Token: admin\r\n"
                                b"Content-Type: application/json\r\n"
                                b"Content-Length: 100\r\n\r\n{\"name\": ")
    try:
        other = client(served)
        rp = str(uuid.uuid4())
        other.post("/resource_providers", {"name": "not-blocked", "uuid": rp})
        names = {p["name"] for p in other.get(
            "/resource_providers")["resource_providers"]}
        assert "not-blocked" in names
    finally:
        half_headers.close()
        half_body.close()


def test_a_stalled_client_is_disconnected_after_the_timeout(served):
    sock = stalled(served, b"GET / HTTP/1.1\r\nHost: placement\r\n")
    sock.settimeout(ANSWER)
    try:
        try:
            data = sock.recv(1024)
        except ConnectionResetError:
            data = b""
        # The server closed the connection without an answer.
        assert data == b""
    finally:
        sock.close()


def test_hundreds_of_slow_clients_block_nobody(served):
    """200 clients sending one header line every half second (never silent
    for the --timeout of 1 s, never done): each is closed once its request
    has taken --request-timeout (2 s), and a normal client is answered
    meanwhile (before: waitress stopped accepting at 100 connections, and a
    trickling client was never closed)."""
    slow = [stalled(served, b"GET /resource_providers HTTP/1.1\r\n")
            for _ in range(200)]
    closed: set[int] = set()
    done = threading.Event()

    def trickle() -> None:
        while not done.is_set() and len(closed) < len(slow):
            for index, sock in enumerate(slow):
                if index not in closed:
                    try:
                        sock.sendall(b"X-Slow: %d\r\n" % index)
                    except OSError:
                        closed.add(index)
            done.wait(0.5)

    trickler = threading.Thread(target=trickle)
    trickler.start()
    try:
        # NOTE: a liveness bound, not a timing: blocked, it never answers.
        conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=10)
        conn.request("GET", "/", headers={"X-Auth-Token": "admin"})
        assert conn.getresponse().status == 200
        conn.close()
        for sock in slow:
            sock.settimeout(ANSWER)
            try:
                data = sock.recv(1024)
            except ConnectionResetError:
                data = b""
            assert data == b""  # closed without an answer
    finally:
        done.set()
        trickler.join()
        for sock in slow:
            sock.close()


def test_requests_share_one_connection(served):
    """HTTP/1.1 keep-alive: ``http.client`` reopens a socket the server
    closed, so the same socket throughout means one connection."""
    conn = http.client.HTTPConnection("127.0.0.1", served.port,
                                      timeout=ANSWER)
    try:
        socks = []
        for _ in range(3):
            conn.request("GET", "/resource_providers",
                         headers={"X-Auth-Token": "admin",
                                  "OpenStack-API-Version": "placement 1.39"})
            resp = conn.getresponse()
            body = resp.read()
            assert resp.status == 200, body
            assert resp.getheader("Connection", "").lower() != "close"
            socks.append(conn.sock)
        assert socks[0] is not None
        assert all(s is socks[0] for s in socks)
    finally:
        conn.close()


def test_the_placement_client_reuses_its_connection(served):
    placement = client(served)
    for _ in range(5):
        placement.get("/resource_providers")
    # NOTE: urllib3's pool of the client's requests session counts the
    # connections it opened and the requests it sent over them.
    adapter = placement.adapter.session.session.get_adapter(served.url)
    known = adapter.poolmanager.pools
    pools = [known[key] for key in known.keys()]
    assert [p.num_requests for p in pools] == [6]  # GET / (version) + 5
    assert [p.num_connections for p in pools] == [1]


def test_answers_without_a_body_keep_the_connection(served):
    """Every ``PUT`` and ``DELETE /allocations`` is answered ``204 No
    Content``: the connection stays open after it (waitress alone closed
    it, so each decision and each delete opened a new one), and a request
    that asks for ``Connection: close`` still gets it closed."""
    placement = client(served)
    rp = str(uuid.uuid4())
    placement.post("/resource_providers", {"name": "keep-" + rp, "uuid": rp})
    placement.put("/resource_providers/%s/inventories" % rp, {
        "resource_provider_generation": 0, "inventories": {"VCPU": {"total": 8}}})
    adapter = placement.adapter.session.session.get_adapter(served.url)
    (pool,) = [adapter.poolmanager.pools[key] for key in adapter.poolmanager.pools.keys()]
    # NOTE: urllib3 reconnects a pooled connection the server closed (its
    # counts do not move): the socket under it is what changes
    sockets = []
    for _ in range(3):
        consumer = str(uuid.uuid4())
        placement.put("/allocations/" + consumer, {
            "allocations": {rp: {"resources": {"VCPU": 1}}}, "project_id": "p",
            "user_id": "u", "consumer_generation": None, "consumer_type": "INSTANCE"})
        sockets += [conn.sock for conn in list(pool.pool.queue) if conn is not None]
        assert placement.delete_allocations(consumer)
        sockets += [conn.sock for conn in list(pool.pool.queue) if conn is not None]
    assert len(sockets) == 6 and sockets[0] is not None
    assert all(sock is sockets[0] for sock in sockets), sockets
    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=ANSWER)
    try:
        headers = {"X-Auth-Token": "admin", "OpenStack-API-Version": "placement 1.39"}
        conn.request("DELETE", "/resource_providers/%s/traits" % rp, headers=headers)
        resp = conn.getresponse()
        resp.read()
        assert resp.status == 204 and resp.getheader("Connection") is None
        sock = conn.sock
        conn.request("DELETE", "/resource_providers/%s/traits" % rp,
                     headers={**headers, "Connection": "close"})
        resp = conn.getresponse()
        resp.read()
        assert resp.status == 204 and resp.getheader("Connection") == "close"
        assert sock is not None and conn.sock is None
    finally:
        conn.close()


def _bodiless_answers(path: str, headers: str = "") -> tuple[bytes, bool]:
    """Two ``DELETE``s of ``path`` sent at once (pipelined) to an
    in-process :class:`PlacementHTTPServer` whose app answers ``204``: what
    came back, and whether the server then closed the connection."""
    import io
    import time

    from compute_plugins.placement import server

    def app(environ: Any, start_response: Any) -> Any:
        start_response("204 No Content", [])
        if environ["PATH_INFO"] == "/file":
            # NOTE: a 204 given a body by mistake, as a file (waitress
            # sends a file wrapper's bytes whatever the status)
            return environ["wsgi.file_wrapper"](io.BytesIO(b"STRAY"))
        return [b""]

    http_server = server.PlacementHTTPServer(app, threads=1)
    thread = threading.Thread(target=http_server.serve_forever, daemon=True)
    thread.start()
    try:
        sock = socket.create_connection(("127.0.0.1", http_server.port), timeout=ANSWER)
        request = ("DELETE %s HTTP/1.1\r\nHost: x\r\n%s\r\n" % (path, headers)).encode()
        sock.sendall(request * 2)
        data, closed, until = b"", False, time.monotonic() + 2
        sock.settimeout(0.2)
        while time.monotonic() < until:
            try:
                chunk = sock.recv(65536)
            except TimeoutError:
                continue
            if not chunk:
                closed = True
                break
            data += chunk
        sock.close()
        return data, closed
    finally:
        http_server.shutdown()
        thread.join(ANSWER)


def test_a_request_asking_close_among_its_options_gets_it_after_a_204():
    """``Connection`` is a list of options (RFC 9110 section 7.6.1): a
    request whose list holds ``close`` has its connection closed after a
    ``204`` as after any answer (and nothing more is answered on it)."""
    data, closed = _bodiless_answers("/x", "Connection: TE, close\r\nTE: trailers\r\n")
    assert closed and data.count(b"HTTP/1.1 204") == 1, data
    assert b"Connection: close" in data
    data, closed = _bodiless_answers("/x")
    assert not closed and data.count(b"HTTP/1.1 204") == 2, data


def test_a_204_given_a_file_body_by_mistake_closes_its_connection():
    """A ``204`` whose app returned a file (``wsgi.file_wrapper``): waitress
    sends the file's bytes anyway, so the connection is closed after it (as
    waitress alone does) rather than have those bytes read as the start of
    the next answer."""
    data, closed = _bodiless_answers("/file")
    assert closed and data.count(b"HTTP/1.1 204") == 1, data
    assert b"Connection: close" in data


def test_another_waitress_closes_after_a_204_and_says_why(monkeypatch, caplog):
    """The kept connection relies on how waitress 3.0.2 builds an answer's
    header; with another waitress the answer is waitress's own (the
    connection closed after a 204) and a warning says so."""
    from importlib import metadata

    version = metadata.version
    monkeypatch.setattr(metadata, "version",
                        lambda name: "3.1.0" if name == "waitress" else version(name))
    with caplog.at_level("WARNING"):
        data, closed = _bodiless_answers("/x")
    assert closed and data.count(b"HTTP/1.1 204") == 1, data
    assert any("waitress 3.1.0" in r.getMessage() for r in caplog.records), caplog.text


def test_concurrent_writers_lose_nothing(served):
    """Eight agents at once, each creating providers and adding a trait to
    one shared provider by read-modify-write: every write lands, the only
    refusals are Placement's generation conflicts (no HTTP 500 from
    SQLite)."""
    admin = client(served)
    shared = str(uuid.uuid4())
    admin.post("/resource_providers", {"name": "shared-%s" % shared[:8],
                                       "uuid": shared})
    errors: list[str] = []
    created: list[str] = []

    def agent(index: int) -> None:
        own = client(served)
        trait = "CUSTOM_AGENT_%d" % index
        try:
            for n in range(3):
                rp = str(uuid.uuid4())
                own.post("/resource_providers",
                         {"name": "agent%d-%d-%s" % (index, n, rp[:8]),
                          "uuid": rp})
                own.put("/resource_providers/%s/inventories" % rp,
                        {"resource_provider_generation": 0,
                         "inventories": {"VCPU": {"total": 8}}})
                created.append(rp)
            own.put("/traits/%s" % trait)
            for _ in range(100):
                have = own.get("/resource_providers/%s/traits" % shared)
                try:
                    own.put("/resource_providers/%s/traits" % shared, {
                        "resource_provider_generation":
                            have["resource_provider_generation"],
                        "traits": sorted(set(have["traits"]) | {trait})})
                    return
                except pexc.GenerationConflict:
                    continue
            errors.append("agent %d: too many conflicts" % index)
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append("agent %d: %s" % (index, err))

    agents = [threading.Thread(target=agent, args=(i,)) for i in range(8)]
    for thread in agents:
        thread.start()
    for thread in agents:
        thread.join(ANSWER * 4)
    assert errors == []
    assert len(created) == 24
    for rp in created:
        inv = admin.get("/resource_providers/%s/inventories" % rp)
        assert inv["inventories"]["VCPU"]["total"] == 8
    traits = admin.get("/resource_providers/%s/traits" % shared)["traits"]
    assert sorted(traits) == sorted("CUSTOM_AGENT_%d" % i for i in range(8))


def test_sigterm_stops_it_with_exit_0(tmp_path):
    placement = ServedPlacement(str(tmp_path / "p.sqlite"), free_port())
    placement.start()
    client(placement).get("/resource_providers")
    # an idle keep-alive connection does not hold the shutdown up
    conn = http.client.HTTPConnection("127.0.0.1", placement.port,
                                      timeout=ANSWER)
    conn.request("GET", "/")
    conn.getresponse().read()
    placement.stop()
    conn.close()
    assert placement.returncode == 0


def test_ctrl_c_stops_it_with_exit_130_and_one_line(tmp_path):
    # NOTE: Ctrl-C is an interrupt, as in every command (SIGTERM, the
    # service manager's stop, is exit 0); --debug is taken (issue 22).
    placement = ServedPlacement(str(tmp_path / "p.sqlite"), free_port(), ["--debug"])
    placement.start()
    client(placement).get("/resource_providers")
    assert placement.proc is not None
    placement.proc.send_signal(signal.SIGINT)
    assert placement.proc.wait(timeout=10) == 130
    log = (tmp_path / "p.sqlite.log").read_text()
    assert "Traceback" not in log
    assert log.splitlines()[-1] == "compute-plugins: interrupted (Placement stopped)"
    assert " DEBUG " in log
    placement.proc = None
    # NOTE: the database is whole: a new service starts on it.
    placement.start()
    assert client(placement).get("/resource_providers")["resource_providers"] == []
    placement.stop()
    assert placement.returncode == 0


@pytest.mark.parametrize("args, expected", [
    (["--timeout", "0"], "invalid timeout '0'"),
    (["--threads", "x"], "invalid threads 'x'"),
])
def test_bad_server_arguments_are_argparse_errors(args, expected):
    # NOTE: in-process (tests.cli): refused while the arguments are parsed.
    from tests import cli

    proc = cli.run("placement", "serve", "--db", ":memory:", *args)
    assert proc.returncode == 2, proc.stderr
    assert expected in proc.stderr and "Traceback" not in proc.stderr


# ------------------------------------------------------------------ token


def _status(port: int, path: str, token: str | None) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=ANSWER)
    try:
        headers = {"OpenStack-API-Version": "placement 1.39"}
        if token is not None:
            headers["X-Auth-Token"] = token
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def test_it_requires_the_token_it_generates_into_the_state_directory(tmp_path):
    """By default every request but the version document must carry the
    random token of placement.token (0600) in the state directory; admin,
    noauth2's fixed token, is refused. A restart keeps the token; this
    project's commands find it for a Placement on 127.0.0.1 (asked of the
    restarted service; the command in-process, :mod:`tests.cli`, its exit
    code is what is checked)."""
    import subprocess

    from tests import cli
    from tests.functional.placement.conftest import CLI, cli_env

    env = cli_env(XDG_STATE_HOME=str(tmp_path / "state"))
    path = tmp_path / "state" / "compute-plugins" / "placement.token"
    port = free_port()

    def serve() -> tuple[subprocess.Popen, str]:
        proc = subprocess.Popen(CLI + ["placement", "serve", "--port", str(port),
                                       "--db", str(tmp_path / "p.sqlite")],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                text=True, env=env)
        assert proc.stdout is not None
        return proc, proc.stdout.readline()

    tokens = []
    for restarted in (False, True):  # a restart keeps the token
        proc, line = serve()
        try:
            assert line.startswith("Placement listening on http://127.0.0.1:%d "
                                   "(token in %s; " % (port, path)), line
            assert path.stat().st_mode & 0o777 == 0o600
            token = path.read_text().strip()
            tokens.append(token)
            assert _status(port, "/resource_providers", "admin") == 401
            assert _status(port, "/resource_providers", None) == 401
            assert _status(port, "/resource_providers", token) == 200
            assert _status(port, "/", None) == 200
            if restarted:
                # the command line reads it: a Placement on 127.0.0.1 (or localhost)
                for host in ("127.0.0.1", "localhost"):
                    result = cli.run("--libvirt-uri", "test:///default", "--placement-url",
                                     "http://%s:%d" % (host, port), "report", "--periodic",
                                     "1", env={"XDG_STATE_HOME": str(tmp_path / "state")})
                    assert result.returncode == 0, result.stderr
        finally:
            proc.terminate()
            proc.wait(timeout=10)
    assert tokens[0] == tokens[1] and len(tokens[0]) >= 40


def test_no_token_takes_admin(served):
    # NOTE: the module's Placement: ServedPlacement serves with --no-token.
    assert _status(served.port, "/resource_providers", "admin") == 200


@pytest.mark.parametrize("stop, said", [
    (lambda: sys.exit(3), "exit code 3"),
    (lambda: sys.exit("no database"), "exit code 1"),
    (lambda: None, "exit code 0"),
])
def test_a_forked_worker_ends_with_the_code_it_exits_with(stop, said):
    """A ``--workers`` process that exits (``SystemExit``) ends with its
    code, as a process would: its parent says how it ended
    (``lost_worker``), and a worker that stopped on an error ended with
    exit code 0 there."""
    import os

    from compute_plugins.placement import server as pserver

    pids = pserver.fork_workers(1, stop)
    _pid, status = os.waitpid(pids[0], 0)
    assert pserver._how_ended(status) == said


def test_a_forked_worker_serves_where_stderr_is_no_file(monkeypatch):
    """Forked where ``sys.stderr`` is not a file (an application's stream
    object, None in a daemon), a worker still runs what it was given (its
    crash report, ``faulthandler``, needs a file: it goes to descriptor 2)."""
    import io
    import os

    from compute_plugins.placement import server as pserver

    for stream in (io.StringIO(), None):
        monkeypatch.setattr(sys, "stderr", stream)
        pids = pserver.fork_workers(1, lambda: sys.exit(3))
        _pid, status = os.waitpid(pids[0], 0)
        assert pserver._how_ended(status) == "exit code 3"
