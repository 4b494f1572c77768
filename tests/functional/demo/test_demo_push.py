"""The demo's agents and scheduler share its process and its store: they
push through the in-process hub (``fake://``,
:data:`compute_plugins.demo.cluster.PUSH_TRANSPORT_URL`) instead of each
agent reading the store 20 times a second (issue 19, item 1)."""

from __future__ import annotations

import time

from compute_plugins.demo.cluster import Cluster
from tests.functional.scheduler.test_push import statements
from tests.functional.scheduler.test_push_broker import beyond_heartbeat, wait_until


def test_the_demos_idle_agents_read_nothing_while_nothing_is_pushed(tmp_path):
    """Every agent is woken by the hub (``pushed``); over 2 s the idle
    agents run only their lease renewals on the store (polling: about
    4,400 statements per agent-minute, 74 a second for the 5 agents)."""
    with Cluster(str(tmp_path / "demo")) as cluster:
        for host in cluster.hosts:
            cluster.report(host)
        cluster.start_agents()
        assert cluster.store is not None
        assert wait_until(lambda: all(h.agent.pushed() for h in cluster.hosts))
        time.sleep(0.5)
        seen, forget = statements(cluster.store.engine)
        time.sleep(2.0)
        forget()
        assert beyond_heartbeat(seen) == []
