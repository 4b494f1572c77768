"""Functions the host-state tests run in other processes (spawned: each
opens its own store, as an agent or a scheduler would)."""

from __future__ import annotations

import time

from compute_plugins import hoststate
from compute_plugins.hoststate import protocol


def doc(plugin: str, **state: object) -> dict:
    """A host-state document as ``fit.encode_state`` makes it."""
    return {"plugin": plugin, "version": "1.0", "state": dict(state)}


def increment(url: str, host: str, times: int) -> int:
    """Add 1 to the host's counter ``times`` times, read-modify-CAS with
    retries; returns how many conflicts it met."""
    conflicts = 0
    with hoststate.HostStateStore(url) as store:
        for _ in range(times):
            while True:
                snap = store.get_host(host)
                assert snap is not None, host
                count = snap.states["counter"]["state"]["n"]
                try:
                    store.publish(host, {"counter": doc("counter", n=count + 1)},
                                  snap.generation)
                    break
                except hoststate.GenerationConflict:
                    conflicts += 1
    return conflicts


def publish_round(store: hoststate.HostStateStore, host: str, n: int) -> int:
    """Publish round ``n`` over round ``n - 1``: every part (each plugin's
    state, the node name, the providers) names ``n``; returns the generation."""
    states = {p: doc(p, round=n, filler="x" * (n % 7)) for p in ("a", "b", "c", "d")}
    providers = {"%s-rp-%d-%d" % (host, n, i): "rp-%d" % n for i in range(3)}
    return store.publish(host, states, n - 1, nodename="node-%d" % n,
                         providers=providers).generation


def _ready_marker(host: str) -> str:
    return "ready-%s" % host


def publish_rounds(url: str, host: str, first: int, last: int) -> None:
    """Publish rounds ``first`` to ``last``, once a reader of ``host``
    (:func:`read_rounds`) is reading."""
    with hoststate.HostStateStore(url) as store:
        deadline = time.monotonic() + 60
        while store.active_decision(_ready_marker(host)) is None:
            assert time.monotonic() < deadline, "no reader of %s started" % host
            time.sleep(0.01)
        for n in range(first, last + 1):
            publish_round(store, host, n)


def check_round(snap: hoststate.HostSnapshot) -> None:
    """Every part of ``snap`` belongs to its generation."""
    n = snap.generation
    rounds = {d["state"]["round"] for d in snap.states.values()}
    assert sorted(snap.states) == ["a", "b", "c", "d"], snap.states
    assert rounds == {n}, "generation %d with states of rounds %s" % (n, rounds)
    assert snap.nodename == "node-%d" % n, (n, snap.nodename)
    assert set(snap.providers.values()) == {"rp-%d" % n}, (n, snap.providers)
    assert len(snap.providers) == 3, snap.providers


def read_rounds(url: str, host: str, until: int) -> int:
    """Read ``host`` until it reaches generation ``until``, checking every
    read; tells :func:`publish_rounds` (a decision addressed to ``host``)
    once it reads. Returns how many generations it saw."""
    seen: set[int] = set()
    with hoststate.HostStateStore(url) as store:
        while True:
            snap = store.get_host(host)
            assert snap is not None, host
            check_round(snap)
            if not seen:
                store.submit_decision(_ready_marker(host), host, "{}")
            seen.add(snap.generation)
            if snap.generation >= until:
                return len(seen)


def claim(url: str, decision_ids: list[int]) -> list[int]:
    """Try to claim every decision; returns those this process claimed."""
    won = []
    with hoststate.HostStateStore(url) as store:
        for decision_id in decision_ids:
            try:
                protocol.claim(store, decision_id)
                won.append(decision_id)
            except hoststate.DecisionStatusConflict:
                pass
    return won


def open_store(url: str) -> int:
    """Open the store (creating the schema if the database is empty)."""
    with hoststate.HostStateStore(url):
        return hoststate.SCHEMA_VERSION
