"""How long ``compute-plugins --version`` and ``--help`` take to start,
against the interpreter's own start-up (``python -c pass``), samples
interleaved in the same run.

Issue 19, item 5: ``--version`` under 0.3 s and ``--help`` under 0.5 s.
Each sample is a new process running ``main`` as the ``compute-plugins``
console script does, timed by wall clock from
``fork`` to exit, with its CPU time (user + system, of the child) beside:
on a shared machine the wall clock stretches with the load, the CPU time
much less. The figures are medians of N samples (``-n``, default 10); the
ratio is the command's median over ``python -c pass``'s. The load average
is printed with them: a busy machine says so.

Run ``python -m bench.startup [-n N]``.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time

#: What the ``compute-plugins`` console script runs.
SCRIPT = "import sys; from compute_plugins.cmd.main import main; sys.exit(main())"
#: name -> the arguments after ``python``.
CASES = {
    "python -c pass": ["-c", "pass"],
    "--version": ["-c", SCRIPT, "--version"],
    "--help": ["-c", SCRIPT, "--help"],
    "schedule --help": ["-c", SCRIPT, "schedule", "--help"],
}
#: The issue's targets, seconds of wall clock.
TARGETS = {"--version": 0.3, "--help": 0.5}


def sample(args: list[str]) -> tuple[float, float]:
    """One run: (wall seconds, CPU seconds of the child)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.startup",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=10, help="samples per case")
    args = parser.parse_args(argv)
    if args.n < 1:
        parser.error("-n %d: expected at least 1" % args.n)
    walls: dict[str, list[float]] = {name: [] for name in CASES}
    cpus: dict[str, list[float]] = {name: [] for name in CASES}
    for case in CASES.values():
        sample(case)  # NOTE: warm the file cache; not counted.
    for _ in range(args.n):
        for name, case in CASES.items():
            wall, cpu = sample(case)
            walls[name].append(wall)
            cpus[name].append(cpu)
    base = statistics.median(walls["python -c pass"])
    base_cpu = statistics.median(cpus["python -c pass"])
    load = ", ".join("%.2f" % x for x in os.getloadavg())
    print("start-up, median of %d interleaved samples (load average %s, %d CPUs)"
          % (args.n, load, os.cpu_count() or 0))
    for name in CASES:
        wall = statistics.median(walls[name])
        cpu = statistics.median(cpus[name])
        target = TARGETS.get(name)
        # NOTE: a missed target is reported, not an error: the machine's
        # load moves the wall clock (see the load average above).
        verdict = "" if target is None else "  target < %.1f s: %s" % (
            target, "met" if wall < target else "MISSED")
        print("  %-16s %6.3f s wall (%5.1fx python -c pass), %6.3f s CPU (%5.1fx)%s"
              % (name, wall, wall / base, cpu, cpu / base_cpu if base_cpu else 0.0,
                 verdict))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
