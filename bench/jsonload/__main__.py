"""The JSON loader of every input (:mod:`compute_plugins.util.jsonload`)
against plain ``json.loads`` on the same text.

Documents:

- a 128 KB flavor whose extra spec value is escaped quotes (``\\"``), and
  the same flavor cut short (its string never closed: the depth check was
  quadratic there, about 50 s; ``json.loads`` refuses it at once);
- a 3 MB ``GET /allocation_candidates`` answer of Placement's shape
  (allocation requests and provider summaries of 6,000 providers), the
  largest document the project reads.

Printed per document: the median of ``-n`` interleaved samples of
``json.loads``, of the depth check alone and of ``jsonload.loads`` (check
and decode), the last two as ratios to ``json.loads``.
Run ``python -m bench.jsonload [-n N]``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time
from collections.abc import Callable

from compute_plugins.util import jsonload


def flavor(size: int) -> str:
    """A flavor of about ``size`` characters, its one extra spec escaped quotes."""
    return json.dumps({"name": "quotes", "vcpus": 2, "memory_mb": 2048,
                       "extra_specs": {"trait:CUSTOM_Q": '"' * (size // 2)}})


def candidates(providers: int) -> str:
    """An allocation-candidates answer for ``providers`` compute nodes."""
    uuids = ["%08x-0000-4000-8000-%012x" % (n, n) for n in range(providers)]
    return json.dumps({
        "allocation_requests": [
            {"allocations": {u: {"resources": {"VCPU": 2, "MEMORY_MB": 2048}}},
             "mappings": {"": [u]}} for u in uuids],
        "provider_summaries": {
            u: {"resources": {"VCPU": {"capacity": 64, "used": 6},
                              "MEMORY_MB": {"capacity": 262144, "used": 8192}},
                "traits": ["COMPUTE_STATUS_ENABLED", "HW_CPU_X86_AVX2"],
                "parent_provider_uuid": None, "root_provider_uuid": u}
            for u in uuids}})


def timed(call: Callable[[], object]) -> float:
    """Seconds one call takes; a refusal (``ValueError``) is a result."""
    start = time.perf_counter()
    try:
        call()
    except ValueError:
        pass
    return time.perf_counter() - start


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.jsonload",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=15, help="samples per case")
    args = parser.parse_args(argv)
    if args.n < 1:
        parser.error("-n %d: expected at least 1" % args.n)
    whole = flavor(128 * 1024)
    documents = {
        "128 KB flavor, escaped quotes": whole,
        "128 KB flavor, cut short": whole[:-4],
        "3 MB allocation candidates": candidates(6000),
    }
    load = ", ".join("%.2f" % x for x in os.getloadavg())
    print("JSON input checks, median of %d interleaved samples (load average %s)"
          % (args.n, load))
    for name, text in documents.items():
        sides: dict[str, Callable[[], object]] = {
            "json.loads": functools.partial(json.loads, text),
            "depth check": functools.partial(jsonload.check_depth, text),
            "jsonload.loads": functools.partial(jsonload.loads, text),
        }
        samples: dict[str, list[float]] = {side: [] for side in sides}
        for _ in range(args.n):
            for side, call in sides.items():
                samples[side].append(timed(call))
        base = statistics.median(samples["json.loads"])
        print("  %s (%d KB): json.loads %.3f ms" % (name, len(text) // 1024, base * 1e3))
        for side in ("depth check", "jsonload.loads"):
            value = statistics.median(samples[side])
            print("    %-15s %8.3f ms  %6.2fx json.loads"
                  % (side, value * 1e3, value / base))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
