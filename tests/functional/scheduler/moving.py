"""Helpers of the move tests: a mover on a cloud, and the invariants every
step must keep (issue 21)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest
from oslo_config import cfg

from compute_plugins import conf as conf_areas
from compute_plugins.scheduler.moves import Mover
from tests.functional.scheduler.cloud import Cloud

#: Seconds a test waits for an agent to do what it polls for.
WAIT = 15.0


class Killed(BaseException):
    """The mover's process killed at an injected point."""


def killed_at(mv: Mover, point: str, call: Callable[[], object]) -> None:
    """Run ``call`` with the mover killed (:class:`Killed`) when it reaches
    ``point``; the mover's injection cleared after."""
    def kill(at: str) -> None:
        if at == point:
            raise Killed(at)

    mv.inject = kill
    try:
        with pytest.raises(Killed):
            call()
    finally:
        mv.inject = None


def mover(cloud: Cloud, **overrides: Any) -> Mover:
    """A mover on ``cloud``; ``overrides`` are ``[scheduler]`` options."""
    conf = cfg.ConfigOpts()
    conf_areas.register_all(conf)
    conf([], default_config_files=[], default_config_dirs=[])
    for name, value in overrides.items():
        conf.set_override(name, value, "scheduler")
    sched = cloud.scheduler()
    return Mover(conf, sched.plugins, cloud.placement.emb.client(), cloud.store,
                 domain_type="test")


def wait_until(predicate: Any, what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("not within %g s: %s" % (timeout, what))
        time.sleep(0.02)


def ledger_keys(host: Any) -> set[str]:
    return set(host.agent.ledger.entries())


def settled(cloud: Cloud) -> None:
    """Every agent's ledger names its claims as the store does: the re-keys
    of hand-overs and reverts are followed at the agent's next periodic (one
    run now) or, where the store pushes, on their wake-up; or before a claim
    or release that needs them."""
    for host in cloud.hosts.values():
        if host.running:
            assert host.agent.run_once().ok

    def same() -> bool:
        for host in cloud.hosts.values():
            if not host.running:
                continue
            in_store = {d.consumer for status in ("claimed", "releasing")
                        for d in cloud.store.list_decisions(host.name, status)}
            if ledger_keys(host) != in_store:
                return False
        return True
    wait_until(same, "the ledgers name the claims as the store does")


def check_invariants(cloud: Cloud, up_only: bool = False) -> None:
    """Placement's usage on every provider = the sum of the claims in the
    ledgers (instance and migration consumers); nothing held twice (the
    plugins' host states under every ledger's assignments, strict); every
    ledger claim is a claimed (or releasing) decision of its host.
    ``up_only``: the hosts whose agent runs (an evacuated host's ledger
    keeps the claims whose allocation is gone until its agent is back)."""
    for host in cloud.hosts.values():
        if up_only and not host.running:
            continue
        assert cloud.usage(host) == cloud.ledger_usage(host), host.name
        host.manager.host_states(host.agent.nodename, host.agent.ledger.assignments(),
                                 strict=True, host=host.name)
        ids = {d.id for status in ("claimed", "releasing")
               for d in cloud.store.list_decisions(host.name, status)}
        held = {e.decision_id for e in host.agent.ledger.entries().values()}
        if host.running:
            assert held == ids, host.name


def on_host(cloud: Cloud, host: Any, consumer: str) -> bool:
    """Whether anything of ``consumer`` is left on ``host``: a ledger
    claim, a Placement allocation on its providers, a decision in force."""
    if consumer in ledger_keys(host):
        return True
    if set(cloud.allocations(consumer)) & set(host.providers):
        return True
    active = cloud.store.active_decision(consumer)
    return active is not None and active.host == host.name


def check_instances(cloud: Cloud, instances: Any) -> None:
    """Each instance placed once: its claimed decision, and its allocation
    on that host only; a move in force to confirm holds the source under
    its migration consumer (decision and allocation on the source only);
    a move that ended left nothing of its migration consumer."""
    store = cloud.store
    for consumer in instances:
        decision = store.active_decision(consumer)
        assert decision is not None and decision.status == "claimed", consumer
        held = cloud.allocations(consumer)
        assert held and set(held) <= set(cloud.hosts[decision.host].providers), consumer
        move = store.latest_move(consumer)
        if move is None:
            continue
        source = store.active_decision(move.migration)
        if move.in_force:
            assert move.status == "to-confirm" and move.dest == decision.host, move
            assert source is not None and source.id == move.source_decision, move
            assert source.host == move.source and source.status == "claimed", move
            kept = cloud.allocations(move.migration)
            assert kept and set(kept) <= set(cloud.hosts[move.source].providers), move
        else:
            assert source is None and cloud.allocations(move.migration) == {}, move
