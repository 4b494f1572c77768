"""A soak of a small cloud with faults at seeded random moments (issue 20).

Real processes on the loopback: ``placement serve``, one ``report`` agent
per host, ``schedule`` and ``release`` commands; agents, schedulers and
Placement killed (``SIGKILL``) at random moments, agents restarted, store
outages. At the end the audit must find nothing, Placement must equal the
claims ledgers, nothing given twice, nothing left behind
(:mod:`tests.functional.soak` says what is checked). The suite runs a
short one (tests/functional/test_soak.py); this runs a longer one.

Run ``python -m bench soak [--duration S] [--seed N] [--hosts N]
[--clients N] [--keep DIR]`` (or ``make soak``). It prints what it did and
every problem found, and exits 1 on any, naming the seed to replay.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
from pathlib import Path

from tests.functional.soak import soak


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench soak", description=__doc__
                                     .split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=300.0,
                        help="seconds of work and faults (default 300)")
    parser.add_argument("--seed", type=int, default=None,
                        help="the random schedule's seed (default: a new one, printed)")
    parser.add_argument("--hosts", type=int, default=2, help="hosts (default 2)")
    parser.add_argument("--clients", type=int, default=3,
                        help="schedule/release commands at a time (default 3)")
    parser.add_argument("--keep", metavar="DIR",
                        help="run in DIR and keep it (default: a temporary "
                        "directory, kept only on failure)")
    args = parser.parse_args(argv)
    seed = random.SystemRandom().randrange(2 ** 32) if args.seed is None else args.seed
    print("soak: seed %d, %.0f s, %d hosts" % (seed, args.duration, args.hosts), flush=True)
    directory = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="soak-"))
    # NOTE: the commands' default state directory (Placement's token, the
    # auditor's sightings) in the soak's, never the user's.
    os.environ["XDG_STATE_HOME"] = str(directory / "xdg-state")
    result = soak(directory / "soak", seed, args.duration, args.hosts, args.clients,
                  say=lambda line: print(line, flush=True))
    print(result.summary())
    for problem in result.problems:
        print("  %s" % problem)
    if result.problems:
        print("replay: python -m bench soak --seed %d --duration %.0f (logs in %s)"
              % (seed, args.duration, result.directory))
        return 1
    if not args.keep:
        import shutil

        shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
