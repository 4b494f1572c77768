"""A short soak of a small cloud (issue 20): real ``placement serve``,
``report``, ``schedule`` and ``release`` processes, agents, schedulers and
Placement killed at seeded random moments, a store outage; at the end the
audit finds nothing, Placement equals the ledgers, nothing is given twice
and nothing is left behind (:mod:`tests.functional.soak`).

A fixed seed keeps the choices the same from run to run (the timing of
real processes on a loaded machine still varies); a longer one runs as
``python -m bench soak --duration S --seed N``.
"""

from __future__ import annotations

import os

from tests.functional.soak import soak

#: Seconds of work and faults (then everything settles and is checked:
#: the whole test takes about twice that).
DURATION = 15.0


def test_a_short_soak_gives_nothing_twice_and_leaks_nothing(tmp_path):
    seed = int(os.environ.get("COMPUTE_PLUGINS_SOAK_SEED", "20"))
    result = soak(tmp_path / "soak", seed, DURATION)
    assert not result.problems, "\n".join(
        [result.summary(), *result.problems,
         "replay: python -m bench soak --seed %d --duration %.0f (logs in %s)"
         % (seed, DURATION, result.directory)])
    # the faults all happened: each kind at least once
    assert {"kill-agent", "restart-agent", "kill-placement", "store-outage"} <= set(
        result.counts), result.summary()
