"""Run every benchmark package under ``bench/`` (or those named on the command line;
``soak`` only when named).

``python -m bench [NAME ...] [OPTIONS]``: the options (from the first word
that starts with ``-``) go to every benchmark run, as ``python -m
bench.NAME OPTIONS`` would take them.
"""

from __future__ import annotations

import pathlib
import runpy
import sys

#: Run only when named: not a measurement, and minutes long (``bench.soak``:
#: faults in a small cloud, doc/source/testing.md).
ONLY_WHEN_NAMED = frozenset({"soak"})


def main(argv: list[str]) -> int:
    here = pathlib.Path(__file__).parent
    available = sorted(p.name for p in here.iterdir() if (p / "__main__.py").exists())
    split = next((i for i, arg in enumerate(argv) if arg.startswith("-")), len(argv))
    names, options = argv[:split], argv[split:]
    wanted = names or [name for name in available if name not in ONLY_WHEN_NAMED]
    unknown = sorted(set(wanted) - set(available))
    if unknown:
        print("unknown benchmark(s): %s; available: %s"
              % (", ".join(unknown), ", ".join(available)), file=sys.stderr)
        return 2
    failed = 0
    for name in wanted:
        print("== bench.%s" % name, flush=True)
        # NOTE: each benchmark parses sys.argv[1:]: its options, not the names.
        saved, sys.argv = sys.argv, ["bench.%s" % name, *options]
        try:
            runpy.run_module("bench.%s" % name, run_name="__main__")
        except SystemExit as done:
            failed += done.code not in (0, None)
        finally:
            sys.argv = saved
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
