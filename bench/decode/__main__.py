"""Decoding what the scheduler reads: the compiled decoder
(:func:`compute_plugins.request.types.decode`, one decoder built per type)
against the generic decoder it replaced (``bench.decode.baseline``:
``typing.get_origin``/``get_args`` and a recursive call per field and item).

Documents (``bench.decode.payloads``): every plugin's published state of
one host of each of ``bench.schedule``'s four shapes (what the scheduler
decodes for every host that published, issue 19's 11%), and the parts of
five RequestSpec payloads. Both decoders decode every document of a set
``--repeat`` times per sample, samples interleaved; printed: the medians
of ``-n`` samples, per document, and new/old.
Run ``python -m bench.decode [-n N] [--repeat R]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from bench.decode import baseline, payloads
from bench.schedule import cloud
from compute_plugins.request import types

Decoder = Callable[[Any, Any, str], Any]


def timed(decoder: Decoder, documents: Sequence[payloads.Payload], repeat: int) -> float:
    """Seconds ``decoder`` takes to decode every document ``repeat`` times."""
    start = time.perf_counter()
    for _ in range(repeat):
        for hint, doc, where in documents:
            decoder(hint, doc, where)
    return time.perf_counter() - start


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.decode",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=15, help="samples per decoder")
    parser.add_argument("--repeat", type=int, default=50,
                        help="times each document is decoded per sample")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.n < 1 or args.repeat < 1:
        parser.error("-n and --repeat: expected at least 1")
    sets = {"published states (4 host shapes)": payloads.states(),
            "RequestSpec parts (5 payloads)": payloads.specs(cloud.manager("gpu").plugins)}
    decoders: dict[str, Decoder] = {"new": types.decode, "old": baseline.decode}
    load = os.getloadavg()
    results: dict[str, dict[str, float]] = {}
    for name, documents in sets.items():
        for decoder in decoders.values():  # warm: the new decoder compiles here
            timed(decoder, documents, 1)
        samples: dict[str, list[float]] = {side: [] for side in decoders}
        for _ in range(args.n):
            for side, decoder in decoders.items():
                samples[side].append(timed(decoder, documents, args.repeat))
        per_doc = {side: statistics.median(values) / (args.repeat * len(documents))
                   for side, values in samples.items()}
        results[name] = {"documents": len(documents), "new_us": per_doc["new"] * 1e6,
                         "old_us": per_doc["old"] * 1e6,
                         "ratio": per_doc["new"] / per_doc["old"]}
    if args.json:
        print(json.dumps({"load": load, "n": args.n, "repeat": args.repeat,
                          "sets": results}, sort_keys=True))
        return 0
    print("decode, median of %d interleaved samples of %d passes (load average %s)"
          % (args.n, args.repeat, ", ".join("%.2f" % x for x in load)))
    for name, row in results.items():
        print("  %s, %d documents: new %.1f us, old %.1f us per document: new/old %.2fx"
              % (name, row["documents"], row["new_us"], row["old_us"], row["ratio"]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
