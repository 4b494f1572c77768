"""Real Placement for the functional tests: in-process and over HTTP.

``placement`` is module-scoped and parametrised: every test module that uses
it runs once against the embedded Placement (in-process, in-memory SQLite)
and once against ``compute-plugins placement serve`` in a subprocess (over
HTTP, SQLite file). Tests share it, so each uses its own root name.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from typing import Optional

import pytest

from compute_plugins.placement import client as pclient
from compute_plugins.placement import embedded

CLI = [sys.executable, "-m", "compute_plugins.cmd.main"]


def cli_env(**extra: str) -> dict[str, str]:
    """The environment of a CLI subprocess, built at call time so that it
    sees the test's ``XDG_STATE_HOME`` (tests/conftest.py)."""
    return {**os.environ, "PYTHONWARNINGS": "ignore", **extra}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServedPlacement:
    """``compute-plugins placement serve`` in a subprocess, restartable.

    :param args: more ``placement serve`` arguments (``--timeout 1``).

    ``--no-token``: the command lines of the tests run with a state
    directory of each test's own, where they would not find the token of a
    module's Placement (``test_serve`` tests the token).
    """

    def __init__(self, db: str, port: int, args: Sequence[str] = ()) -> None:
        self.db = db
        self.port = port
        self.args = list(args) + ["--no-token"]
        self.url = "http://127.0.0.1:%d" % port
        self.proc: Optional[subprocess.Popen] = None
        #: The exit status of the last stop (None: killed or not stopped).
        self.returncode: Optional[int] = None

    def start(self) -> None:
        # NOTE: the log goes to a file: a pipe nobody reads would fill up
        # and block the service.
        log = self.db + ".log"
        with open(log, "a") as log_file:
            self.proc = subprocess.Popen(
                CLI + ["placement", "serve", "--port", str(self.port),
                       "--db", self.db] + self.args,
                stdout=subprocess.PIPE, stderr=log_file, text=True,
                env=cli_env())
        assert self.proc.stdout is not None  # stdout=PIPE
        line = self.proc.stdout.readline()
        if not line.startswith("Placement listening on "):
            self.proc.kill()
            with open(log) as log_file:
                raise RuntimeError("placement serve failed: %s %s"
                                   % (line, log_file.read()))

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.returncode = self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                self.returncode = None
            self.proc = None

    def client(self) -> pclient.PlacementClient:
        return pclient.PlacementClient.for_url(self.url)


class Target:
    """One Placement under test.

    :param kind: ``embedded`` or ``http``.
    :param new_client: a fresh PlacementClient (own call log).
    :param stop/start: take the service away and bring it back (the
        embedded one refuses requests; the served one is killed and
        restarted on the same port and database).
    """

    def __init__(self, kind, new_client, stop, start) -> None:
        self.kind = kind
        self.new_client = new_client
        self.stop = stop
        self.start = start


@pytest.fixture(scope="module", params=["embedded", "http"])
def placement(request, tmp_path_factory):
    if request.param == "embedded":
        emb = embedded.EmbeddedPlacement("sqlite://").start()
        yield Target("embedded", emb.client, emb.stop, emb.start)
        emb.close()
    else:
        db = str(tmp_path_factory.mktemp("placement") / "placement.sqlite")
        served = ServedPlacement(db, free_port())
        served.start()
        yield Target("http", served.client, served.stop, served.start)
        served.stop()


@pytest.fixture
def nodename(request):
    """A root name of its own for each test (Placement is shared)."""
    return "%s-%s" % (request.node.name.split("[")[0][:40],
                      uuid.uuid4().hex[:6])


def wait_for(predicate, timeout=10.0, step=0.05):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(step)
    return False
