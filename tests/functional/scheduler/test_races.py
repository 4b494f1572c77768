"""Issue 20 item 5: no spurious refusal. Several schedulers race for
exactly as many free slots as there are schedulers: every one is placed,
none gives up after ``[scheduler] max_attempts`` rejections caused by the
others' claims ("taken by another guest") while a slot is still free."""

from __future__ import annotations

import threading
import uuid

import pytest

from compute_plugins.scheduler.selection import Scheduler
from tests.functional.request.hosts import cell
from tests.functional.scheduler.cloud import Cloud, expected_allocation
from tests.functional.scheduler.test_schedule import pinned, spec_of

#: Races between schedulers: the agents answer as they did when the
#: races were found (polling), not sooner on a wake-up.
pytestmark = pytest.mark.polling


def race(cloud: Cloud, schedulers: int, vcpus: int, extra_specs=None, **overrides
         ) -> list:
    """``schedulers`` threads, each its own scheduler, start together and
    each places one pinned guest of ``vcpus`` CPUs (or, with
    ``extra_specs``, a floating guest with those); their results."""
    results: list = []
    barrier = threading.Barrier(schedulers)

    def run() -> None:
        sched: Scheduler = cloud.scheduler(**overrides)
        spec = (spec_of(sched, *pinned(1, vcpus, 256)) if extra_specs is None
                else spec_of(sched, extra_specs, vcpus, 256))
        barrier.wait(30)
        results.append(sched.schedule(spec, str(uuid.uuid4()), "p", "u"))

    threads = [threading.Thread(target=run) for _ in range(schedulers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(180)
    assert len(results) == schedulers
    return results


@pytest.mark.parametrize("hosts", [1, 2])
def test_n_schedulers_for_n_free_slots_all_placed(cloud, hosts):
    """6 slots of 2 PCPUs (on one host, or 3 on each of two), 6
    schedulers with the default max_attempts (3): all 6 placed, no CPU
    twice, Placement equal to the ledgers. Several rounds: before the fix
    one scheduler in most rounds gave up ("taken by another guest")."""
    per_host = 6 // hosts
    for round_ in range(3):
        added = [cloud.add_host("r%dh%d" % (round_, i), [cell(per_host * 2, 4096)],
                                dedicated="0-%d" % (per_host * 2 - 1))
                 for i in range(hosts)]
        results = race(cloud, 6, 2)
        refused = [(r.consumer, [(a.host, a.outcome) for a in r.attempts])
                   for r in results if not r.placed]
        assert not refused, "round %d: refused with room left: %s" % (round_, refused)
        for host in added:
            cpus = sorted(cpu for cons in host.assignments["numa"]
                          for c in cons.cells for cpu in c.pinning.values())
            assert cpus == list(range(per_host * 2))  # every CPU once
            assert cloud.usage(host) == cloud.ledger_usage(host)
        for r in results:
            assert cloud.allocations(r.consumer) == expected_allocation(r.decision)


def test_n_schedulers_for_n_free_vgpus_all_placed(cloud):
    """4 mdevs of one GPU, 4 schedulers each asking one vGPU: all placed,
    each mdev once (before the fix, some rounds refused one)."""
    for round_ in range(5):
        host = cloud.add_host("g%d" % round_, [cell(8, 8192)],
                              gpus=((0, "nvidia-35", 4),))
        results = race(cloud, 4, 1, {"resources:VGPU": "1"})
        refused = [[(a.host, a.outcome) for a in r.attempts]
                   for r in results if not r.placed]
        assert not refused, "round %d: refused with room left: %s" % (round_, refused)
        mdevs = [m for r in results for d in r.decision.assignments["vgpu"].devices
                 for m in d.mdev_uuids]
        assert len(mdevs) == len(set(mdevs))
        assert cloud.usage(host) == cloud.ledger_usage(host)


def test_races_are_bounded_by_max_races(cloud):
    """A refit after a race is bounded: with ``[scheduler] max_races`` 0
    every race counts as an attempt again (and with max_attempts 1, the
    losers of the race are refused, naming the race)."""
    cloud.add_host("bound", [cell(8, 4096)], dedicated="0-7")
    results = race(cloud, 4, 2, max_races=0, max_attempts=1)
    placed = [r for r in results if r.placed]
    assert placed  # at least the first claim
    for r in results:
        if not r.placed:
            assert r.attempts and r.attempts[-1].outcome in ("rejected", "conflict")
