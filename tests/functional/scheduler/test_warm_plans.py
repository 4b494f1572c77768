"""A warm scheduler's plans are a fresh one's (issue 19: a decision's CPU).

A long-running scheduler keeps, from decision to decision, its hosts'
decoded states and fits, its liveness view and Placement's answers, and
brings them up to date by what changed (the hosts written, gone down or
back since its last plan) instead of looking at every host per decision.
Against real Placement, a real store and real agents, a random sequence of
boots, releases, hosts joining, going down and coming back: before each
boot, the warm scheduler's plan is compared with that of a scheduler made
just then (every host read, decoded and fitted anew, nothing kept) on the
same Placement answer, the same place in the rotation and the same draw:
the same hosts in the same order with the same weights, the same verdicts,
the same candidates.
"""

from __future__ import annotations

import dataclasses
import random
import time
from typing import Any

from compute_plugins.scheduler import view
from tests.functional.request.hosts import cell
from tests.functional.scheduler.test_schedule import new_consumer, pinned, spec_of

#: [scheduler] options of both schedulers: a sample (half of the
#: candidates, at least 2) so that the rotation matters.
OPTIONS = {"hosts_to_score_percentage": 50, "min_hosts_to_score": 2}


def fresh_like(cloud: Any, warm: Any) -> Any:
    """A scheduler that keeps nothing yet, at ``warm``'s place in the
    rotation and draw, with a copy of ``warm``'s kept Placement answers
    (what it derived from them left out): what ``warm`` must plan like."""
    cold = cloud.scheduler(draw=True, **OPTIONS)
    cold.rng = random.Random()
    cold.rng.setstate(warm.rng.getstate())
    cold.rotation = view.Rotation(warm.rotation._next)
    cold.view._entries = {key: dataclasses.replace(entry, unknown=None, served={})
                          for key, entry in warm.view._entries.items()}
    cold.view._trees = dict(warm.view._trees)
    return cold


def summary(planned: Any) -> dict[str, Any]:
    """What a plan decides, comparable."""
    return {"ordered": [(weight, fit.host, fit.generation, fit.result.rejections)
                        for weight, fit in planned.ordered],
            "verdicts": dict(planned.verdicts),
            "candidates": planned.found.hosts,
            "complete": planned.found.complete,
            "fitted": sorted(planned.fits),
            "unscored": planned.unscored}


def test_a_warm_schedulers_plans_are_a_fresh_schedulers(cloud):
    rng = random.Random(19)
    lease = 1.0
    for i in range(4):
        cloud.add_host("two%d" % i, [cell(4, 4096)] * 2, dedicated="0-7")
    cloud.add_host("four", [cell(4, 4096)] * 4, dedicated="0-15")
    mortal = cloud.add_host("mortal", [cell(4, 4096)] * 2, dedicated="0-7",
                            lease_duration=lease)
    warm = cloud.scheduler(draw=True, **OPTIONS)
    warm.rng = random.Random(7)
    specs = [spec_of(warm, *pinned(1, 2, 1024)), spec_of(warm, *pinned(2, 4, 2048)),
             spec_of(warm, *pinned(4, 8, 4096)), spec_of(warm, {}, 1, 512)]
    placed: list[str] = []
    compared = 0
    events: list[str] = []
    for step in range(36):
        roll = rng.random()
        if step == 12:
            cloud.add_host("joined", [cell(4, 4096)] * 2, dedicated="0-7")
            events.append("joined")
        elif step == 18:
            mortal.stop()
            time.sleep(lease + 0.3)
            events.append("down")
        elif step == 26:
            mortal.agent = cloud.new_agent(mortal)
            mortal.agent.lease_duration = lease
            assert mortal.agent.run_once().ok
            mortal.start()
            events.append("back")
        elif placed and roll < 0.3:
            consumer = placed.pop(rng.randrange(len(placed)))
            assert warm.release(consumer, timeout=10).outcome == "released"
            events.append("release")
            continue
        spec = rng.choice(specs)
        cold = fresh_like(cloud, warm)
        expected = summary(cold.plan(spec))
        got = summary(warm.plan(spec))
        assert got == expected, (step, events)
        compared += 1
        result = warm.schedule(spec, new_consumer(), "p", "u")
        if result.placed:
            placed.append(result.consumer)
            events.append("boot")
    assert compared >= 25
    assert {"joined", "down", "back", "release", "boot"} <= set(events)
    # the warm one kept its states and liveness (not a fresh read per plan)
    assert warm.liveness.full_reads == 1 and len(warm.states) > 0
