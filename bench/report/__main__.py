"""Placement calls and time per periodic: this report client and nova's.

For trees of 1, 30 and 300 providers (a root, up to 4 NUMA cells, devices
under them; see ``shape.py``), three phases each:

- ``first``: the first periodic (creates the tree);
- ``steady``: the periodics after it, nothing changed (median of N);
- ``change``: one provider's inventory changed.

Both clients talk over HTTP to the same real Placement
(``openstack-placement`` on SQLite, served in a subprocess), each on its own
root of the same shape. nova's side (``nova_side.py``: nova 34's
``SchedulerReportClient`` and ``ProviderTree``, driven as
``ResourceTracker._update_to_placement`` does) runs in nova's Python when
one is found (``--nova-python``, default: this Python, where the ``test``
extra installs nova);
otherwise a "nova not installed" line says so.

Times are given in ms and as ratios against a baseline measured in the same
run: one Placement round trip (median ``GET /resource_providers?in_tree=``),
because these machines are shared and noisy; ``ours/nova`` compares the two
clients directly.

Run ``python -m bench.report [-n N] [--sizes 1,30,300] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from bench.report import shape as shapes
from compute_plugins.placement import client as pclient
from compute_plugins.placement import report

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DEFAULT_NOVA_PYTHON = sys.executable

SERVE = (
    "import sys\n"
    "from compute_plugins.placement import embedded\n"
    "e = embedded.EmbeddedPlacement(sys.argv[1])\n"
    "s = e.make_server('127.0.0.1', 0)\n"
    "print(s.server_address[1], flush=True)\n"
    "s.serve_forever()\n"
)


def serve(db: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVE, "sqlite:///" + db],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        cwd=ROOT, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    port = int(proc.stdout.readline())
    return proc, "http://127.0.0.1:%d" % port


def ours(url: str, node: str, size: int, steady: int) -> dict[str, list]:
    client = pclient.PlacementClient.for_url(url)
    client.negotiate()
    rc = report.ReportClient(client, refresh_interval=300)
    shape = shapes.Shape(size)
    root = shapes.provider_uuid(node)

    def periodic() -> tuple[dict[str, int], float]:
        result = rc.periodic(shape, node, root_uuid=root)
        if not result.ok:
            raise RuntimeError(result.error)
        return result.calls, result.seconds

    out: dict[str, list] = {"first": [periodic()], "steady": [],
                            "change": []}
    for _ in range(steady):
        out["steady"].append(periodic())
    shape.change()
    out["change"].append(periodic())
    return out


def nova(python: str, url: str, node: str, size: int, steady: int
         ) -> dict[str, list]:
    args = json.dumps({"url": url, "node": node, "size": size,
                       "steady": steady})
    proc = subprocess.run(
        [python, os.path.join(HERE, "nova_side.py"), args],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
        env={**os.environ, "PYTHONWARNINGS": "ignore"})
    if proc.returncode:
        raise RuntimeError("nova side failed: %s"
                           % proc.stderr.strip().splitlines()[-1:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def baseline(url: str, runs: int = 30) -> float:
    client = pclient.PlacementClient.for_url(url)
    client.negotiate()
    root = shapes.provider_uuid("bench-baseline")
    client.post("/resource_providers", {"name": "bench-baseline",
                                        "uuid": root})
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        client.get("/resource_providers?in_tree=%s" % root)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def summarise(phases: dict[str, list]) -> dict[str, dict[str, Any]]:
    out = {}
    for phase, runs in phases.items():
        calls = [sum(c.values()) for c, _ in runs]
        out[phase] = {
            "calls": statistics.median(calls),
            "seconds": statistics.median(s for _, s in runs),
            "by_call": runs[-1][0],
        }
    return out


def nova_python(path: str) -> str | None:
    if not os.path.exists(path):
        return None
    probe = subprocess.run(
        [path, "-c", "import nova.scheduler.client.report"],
        capture_output=True, timeout=120)
    return path if probe.returncode == 0 else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.report")
    parser.add_argument("-n", "--steady", type=int, default=5,
                        help="steady periodics per size (default 5)")
    parser.add_argument("--sizes", default="1,30,300",
                        help="tree sizes in providers (default 1,30,300)")
    parser.add_argument("--nova-python", default=DEFAULT_NOVA_PYTHON,
                        help="a Python with nova installed")
    parser.add_argument("--json", action="store_true",
                        help="print the figures as JSON")
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)
    sizes = [int(s) for s in args.sizes.split(",")]
    nova_py = nova_python(args.nova_python)

    with tempfile.TemporaryDirectory() as tmp:
        proc, url = serve(os.path.join(tmp, "placement.sqlite"))
        try:
            base = baseline(url)
            results: dict[str, Any] = {"baseline_seconds": base,
                                       "nova": bool(nova_py), "sizes": {}}
            for size in sizes:
                entry = {"ours": summarise(ours(
                    url, "bench-ours-%d" % size, size, args.steady))}
                if nova_py:
                    entry["nova"] = summarise(nova(
                        nova_py, url, "bench-nova-%d" % size, size,
                        args.steady))
                results["sizes"][size] = entry
        finally:
            proc.terminate()
            proc.wait()

    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print("baseline: one Placement round trip (GET ?in_tree) = %.2f ms"
          % (base * 1000))
    if not nova_py:
        print("nova not installed (no %s with nova importable): nova's side "
              "skipped" % args.nova_python)
    head = "%6s %-7s %-7s %6s %10s %9s" % (
        "size", "phase", "client", "calls", "ms", "x base")
    if nova_py:
        head += "  ours/nova (calls, time)"
    print(head)
    for size, entry in results["sizes"].items():
        for phase in ("first", "steady", "change"):
            for who in ("ours", "nova"):
                if who not in entry:
                    continue
                fig = entry[who][phase]
                line = "%6d %-7s %-7s %6g %10.2f %9.2f" % (
                    size, phase, who, fig["calls"], fig["seconds"] * 1000,
                    fig["seconds"] / base)
                if who == "nova":
                    mine = entry["ours"][phase]
                    line += "  %s, %.3f" % (
                        "%.3f" % (mine["calls"] / fig["calls"])
                        if fig["calls"] else "-",
                        mine["seconds"] / fig["seconds"])
                print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
