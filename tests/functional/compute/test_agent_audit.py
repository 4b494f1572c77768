"""Issue 20 item 4, the agent's part: the agent audits its own tree against
its ledger periodically (``[compute] placement_audit_interval``), not only
at start; a mismatch is reported once, and only when two audits in a row
saw it (a schedule between its PUT and its decision is in flight, not a
mismatch); nothing in steady state."""

from __future__ import annotations

import uuid

from tests.functional.request.hosts import cell
from tests.functional.scheduler.conftest import cloud, placement  # noqa: F401 - fixtures


def test_an_orphan_appearing_later_is_reported_once_by_the_periodic_audit(cloud):  # noqa: F811
    host = cloud.add_host("aud", [cell(4, 4096)], start=False)
    agent = host.agent
    agent.placement_audit_interval = 0.001
    quiet = agent.run_once()
    assert quiet.mismatches == [] and quiet.ok  # steady state: nothing
    (numa0,) = [rp for rp, name in host.providers.items() if name.endswith("_NUMA0")]
    consumer = str(uuid.uuid4())
    cloud.placement.emb.client().put("/allocations/%s" % consumer, {
        "allocations": {numa0: {"resources": {"MEMORY_MB": 256}}},
        "project_id": "p", "user_id": "u", "consumer_generation": None,
        "consumer_type": "INSTANCE"})
    first = agent.run_once()
    assert first.mismatches == []  # seen once: may be in flight
    second = agent.run_once()
    assert [(m.consumer, m.providers) for m in second.mismatches] == [
        (consumer, (numa0,))]
    assert agent.run_once().mismatches == []  # reported once
    cloud.placement.emb.client().delete_allocations(consumer)
    assert agent.run_once().mismatches == []


def test_the_periodic_audit_is_off_with_interval_0(cloud):  # noqa: F811
    host = cloud.add_host("off", [cell(4, 4096)], start=False)
    host.agent.placement_audit_interval = 0
    (numa0,) = [rp for rp, name in host.providers.items() if name.endswith("_NUMA0")]
    cloud.placement.emb.client().put("/allocations/%s" % uuid.uuid4(), {
        "allocations": {numa0: {"resources": {"MEMORY_MB": 256}}},
        "project_id": "p", "user_id": "u", "consumer_generation": None,
        "consumer_type": "INSTANCE"})
    for _ in range(3):
        result = host.agent.run_once()
        assert result.mismatches == []
        assert not any("/allocations" in call for call in result.calls)
