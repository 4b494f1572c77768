"""The tests' TCP relay (:class:`tests.servers.Relay`), in front of an echo
server on loopback: what each of its modes does to a client, and that a
relay closed refuses connections and leaves no thread behind."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from tests import servers

#: Seconds a client waits for what it expects (never reached when it works).
WAIT = 5.0


class Echo:
    """A TCP server on loopback that sends back what it reads."""

    def __init__(self) -> None:
        self.listener = socket.create_server((servers.HOST, 0))
        self.port = self.listener.getsockname()[1]
        self.accepted: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.accepted.append(conn)
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    @staticmethod
    def _echo(conn: socket.socket) -> None:
        with conn:
            while True:
                try:
                    data = conn.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                conn.sendall(data)

    def close(self) -> None:
        self.listener.shutdown(socket.SHUT_RDWR)
        self.listener.close()
        for conn in self.accepted:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


@pytest.fixture
def relay() -> Iterator[servers.Relay]:
    echo = Echo()
    relay = servers.Relay(servers.HOST, echo.port)
    try:
        yield relay
    finally:
        relay.close()
        echo.close()


def connect(relay: servers.Relay) -> socket.socket:
    sock = socket.create_connection((servers.HOST, relay.port), timeout=WAIT)
    return sock


def echoed(sock: socket.socket, data: bytes = b"ping") -> bytes:
    sock.sendall(data)
    got = b""
    while len(got) < len(data):
        chunk = sock.recv(65536)
        if not chunk:
            break
        got += chunk
    return got


def relay_threads(relay: servers.Relay) -> list[threading.Thread]:
    """The threads running ``relay``'s methods."""
    return [t for t in threading.enumerate()
            if getattr(getattr(t, "_target", None), "__self__", None) is relay]


def test_every_byte_is_forwarded_both_ways(relay):
    with connect(relay) as sock:
        assert echoed(sock) == b"ping"
        assert echoed(sock, b"x" * 200_000) == b"x" * 200_000
    assert len(relay.connections) == 1


def test_a_relay_closed_refuses_connections_and_leaves_no_thread(relay):
    with connect(relay) as sock:
        assert echoed(sock) == b"ping"
    relay.close()
    relay.close()  # closing again does nothing
    for _ in range(2):  # NOTE: the first was taken by an accept left blocked
        with pytest.raises(ConnectionRefusedError):
            connect(relay).close()
    deadline = time.monotonic() + WAIT
    while relay_threads(relay) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert relay_threads(relay) == []


def test_a_client_waiting_on_a_relay_closed_fails_at_once(relay):
    with connect(relay) as sock:
        assert echoed(sock) == b"ping"
        relay.stall()
        sock.sendall(b"held")
        relay.close()
        try:  # NOTE: ended, not left waiting (a TimeoutError after WAIT)
            assert sock.recv(10) == b""
        except ConnectionResetError:
            pass


def test_stall_existing_holds_the_connections_relayed_now_only(relay):
    with connect(relay) as old:
        assert echoed(old) == b"ping"
        relay.stall_existing()
        old.sendall(b"held")
        old.settimeout(0.3)
        with pytest.raises(TimeoutError):
            old.recv(10)
        with connect(relay) as new:
            assert echoed(new) == b"ping"


def test_stall_holds_every_connection_those_made_after_too(relay):
    with connect(relay) as old:
        assert echoed(old) == b"ping"
        relay.stall()
        with connect(relay) as new:
            for sock in (old, new):
                sock.sendall(b"held")
                sock.settimeout(0.3)
                with pytest.raises(TimeoutError):
                    sock.recv(10)


def test_drop_leaves_the_client_open_until_it_sends_then_resets_it(relay):
    with connect(relay) as old:
        assert echoed(old) == b"ping"
        relay.drop()
        old.settimeout(0.3)
        with pytest.raises(TimeoutError):  # nothing to read: not ended
            old.recv(10)
        old.settimeout(WAIT)
        old.sendall(b"lost")
        with pytest.raises(ConnectionResetError):
            old.recv(10)
        with connect(relay) as new:
            assert echoed(new) == b"ping"
