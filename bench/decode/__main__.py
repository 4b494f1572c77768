"""Decoding what the scheduler reads: the compiled decoder
(:func:`compute_plugins.request.types.decode`, one decoder built per type)
against the generic decoder it replaced (``bench.decode.baseline``:
``typing.get_origin``/``get_args`` and a recursive call per field and item).

Documents (``bench.decode.payloads``): every plugin's published state of
one host of each of ``bench.schedule``'s four shapes (what the scheduler
decodes for every host that published, issue 19's 11%), and the parts of
five RequestSpec payloads. Both decoders decode every document of a set
``--repeat`` times per sample, samples interleaved; printed: the medians
of ``-n`` samples (CPU time), per document (and per host: its plugins' states), and
new/old.

``--against TREE`` adds a third decoder: another checkout's
``compute_plugins/request/types.py`` (the tree before a change) loaded in
this process beside this one, so that both are timed in the same run,
samples interleaved. It shares this tree's ``FrozenMap``, ``Checked`` and
its decode-in-progress mark (its values are this tree's types and equal
this tree's, which is checked); the dataclasses' own ``__post_init__``
are this tree's.
Run ``python -m bench.decode [-n N] [--repeat R] [--against TREE]``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import pathlib
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
    """CPU seconds ``decoder`` takes to decode every document ``repeat``
    times (this process's: other jobs on a loaded machine count less)."""
    start = time.process_time()
    for _ in range(repeat):
        for hint, doc, where in documents:
            decoder(hint, doc, where)
    return time.process_time() - start


#: What a tree's decoder shares with this one (:func:`other_tree`).
SHARED = ("FrozenMap", "Checked", "_BUILDING", "CodecError")


def other_tree(root: str) -> Decoder:
    """``types.decode`` of the checkout at ``root``, loaded beside this
    tree's (see the module doc).

    :raises SystemExit: ``root`` has no ``compute_plugins/request/types.py``.
    """
    path = pathlib.Path(root) / "compute_plugins" / "request" / "types.py"
    if not path.is_file():
        raise SystemExit("--against %s: no %s" % (root, path))
    spec = importlib.util.spec_from_file_location("bench_decode_against", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name in SHARED:
        setattr(module, name, getattr(types, name))
    decoder: Decoder = module.decode
    return decoder


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.decode",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=15, help="samples per decoder")
    parser.add_argument("--repeat", type=int, default=50,
                        help="times each document is decoded per sample")
    parser.add_argument("--against", metavar="TREE",
                        help="also time the decoder of the checkout at TREE")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.n < 1 or args.repeat < 1:
        parser.error("-n and --repeat: expected at least 1")
    hosts = len(cloud.SHAPES)
    sets = {"published states (%d host shapes)" % hosts: payloads.states(),
            "RequestSpec parts (5 payloads)": payloads.specs(cloud.manager("gpu").plugins)}
    decoders: dict[str, Decoder] = {"new": types.decode, "old": baseline.decode}
    if args.against:
        decoders["tree"] = other_tree(args.against)
    load = os.getloadavg()
    results: dict[str, dict[str, float]] = {}
    for name, documents in sets.items():
        for side, decoder in decoders.items():  # warm: the new decoder compiles here
            timed(decoder, documents, 1)
            for hint, doc, where in documents:
                if decoder(hint, doc, where) != types.decode(hint, doc, where):
                    raise SystemExit("%s: the %s decoder's value differs" % (where, side))
        samples: dict[str, list[float]] = {side: [] for side in decoders}
        for _ in range(args.n):
            for side, decoder in decoders.items():
                samples[side].append(timed(decoder, documents, args.repeat))
        per_doc = {side: statistics.median(values) / (args.repeat * len(documents))
                   for side, values in samples.items()}
        row = results[name] = {"documents": len(documents), "new_us": per_doc["new"] * 1e6,
                               "old_us": per_doc["old"] * 1e6,
                               "ratio": per_doc["new"] / per_doc["old"]}
        if "tree" in per_doc:
            row["tree_us"] = per_doc["tree"] * 1e6
            row["tree_ratio"] = per_doc["new"] / per_doc["tree"]
        if name.startswith("published states"):
            row["per_host_new_us"] = row["new_us"] * len(documents) / hosts
            row["per_host_old_us"] = row["old_us"] * len(documents) / hosts
            if "tree" in per_doc:
                row["per_host_tree_us"] = row["tree_us"] * len(documents) / hosts
    if args.json:
        print(json.dumps({"load": load, "n": args.n, "repeat": args.repeat,
                          "sets": results}, sort_keys=True))
        return 0
    print("decode, median of %d interleaved samples of %d passes (load average %s)"
          % (args.n, args.repeat, ", ".join("%.2f" % x for x in load)))
    for name, row in results.items():
        print("  %s, %d documents: new %.1f us, old %.1f us per document: new/old %.2fx"
              % (name, row["documents"], row["new_us"], row["old_us"], row["ratio"]))
        if "tree_us" in row:
            print("    %s: %.1f us per document: new/tree %.2fx"
                  % (args.against, row["tree_us"], row["tree_ratio"]))
        if "per_host_new_us" in row:
            print("    per host (its plugins' states): new %.1f us, old %.1f us%s"
                  % (row["per_host_new_us"], row["per_host_old_us"],
                     ", tree %.1f us" % row["per_host_tree_us"]
                     if "per_host_tree_us" in row else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
