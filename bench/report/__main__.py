"""Placement calls and time per periodic: this report client and nova's.

For trees of 1, 30 and 300 providers (a root, up to 4 NUMA cells, devices
under them; see ``shape.py``), three phases each:

- ``first``: the first periodic (creates the tree);
- ``steady``: the periodics after it, nothing changed;
- ``change``: one provider's inventory changed.

Both clients talk over HTTP to the same real Placement
(``openstack-placement`` on SQLite, served in a subprocess), each on roots
of its own of the same shape. nova's side (``nova_side.py``: nova 34's
``SchedulerReportClient`` and ``ProviderTree``, driven as
``ResourceTracker._update_to_placement`` does) is a worker process in
nova's Python when one is found (``--nova-python``, default: this Python,
where the ``test`` extra installs nova); otherwise a "nova not installed"
line says so.

The run is made of rounds (``--rounds``); in each, for each size, both
clients build a new tree and run every phase, taking turns periodic by
periodic (who goes first alternates between rounds), so that a machine
getting busier or quieter weighs on both alike. Every figure is a median:
over the rounds for ``first`` and ``change`` (one periodic per round),
over every periodic for ``steady``; ``ours/nova`` is the median of the
per-round ratios, with their range.

Times are given in ms and as multiples of a baseline measured in the same
run: one Placement round trip (median ``GET /resource_providers?in_tree=``,
sampled in every round), because these machines are shared and noisy.

Run ``python -m bench.report [-n N] [--rounds R] [--sizes 1,30,300] [--json]``.
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
    assert proc.stdout is not None  # stdout=PIPE
    port = int(proc.stdout.readline())
    return proc, "http://127.0.0.1:%d" % port


class Ours:
    """This project's report client, one tree per node."""

    def __init__(self, url: str) -> None:
        self.client = pclient.PlacementClient.for_url(url)
        self.client.negotiate()
        self.trees: dict[str, tuple[report.ReportClient, shapes.Shape]] = {}

    def periodic(self, node: str, size: int) -> tuple[dict[str, int], float]:
        if node not in self.trees:
            self.trees[node] = (report.ReportClient(self.client, refresh_interval=300),
                                shapes.Shape(size))
        rc, shape = self.trees[node]
        result = rc.periodic(shape, node, root_uuid=shapes.provider_uuid(node))
        if not result.ok:
            raise RuntimeError(result.error)
        return result.calls, result.seconds

    def change(self, node: str) -> None:
        self.trees[node][1].change()

    def close(self) -> None:
        pass


class Nova:
    """nova's side: ``nova_side.py`` as a worker in nova's Python."""

    def __init__(self, python: str, url: str) -> None:
        self.proc = subprocess.Popen(
            [python, os.path.join(HERE, "nova_side.py")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT,
            env={**os.environ, "PYTHONWARNINGS": "ignore"})
        self._ask({"url": url})

    def _ask(self, order: dict[str, Any]) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(order) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError("nova side failed (exit %s)" % self.proc.wait())
        return json.loads(line)

    def periodic(self, node: str, size: int) -> tuple[dict[str, int], float]:
        calls, seconds = self._ask({"node": node, "size": size, "do": "periodic"})
        return calls, seconds

    def change(self, node: str) -> None:
        self._ask({"node": node, "size": 0, "do": "change"})

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


def one_round(clients: dict[str, Any], round_: int, size: int, steady: int
              ) -> dict[str, dict[str, list]]:
    """Both clients on new trees of ``size``, periodic by periodic in turn."""
    names = list(clients)
    if round_ % 2:
        names.reverse()
    nodes = {who: "bench-%s-%d-r%d" % (who, size, round_) for who in names}
    out: dict[str, dict[str, list]] = {
        who: {"first": [], "steady": [], "change": []} for who in names}

    def turn(phase: str) -> None:
        for who in names:
            out[who][phase].append(clients[who].periodic(nodes[who], size))

    turn("first")
    for _ in range(steady):
        turn("steady")
    for who in names:
        clients[who].change(nodes[who])
    turn("change")
    return out


def baseline(url: str, runs: int = 30) -> float:
    client = pclient.PlacementClient.for_url(url)
    client.negotiate()
    root = shapes.provider_uuid("bench-baseline")
    if not client.get("/resource_providers?uuid=%s" % root)["resource_providers"]:
        client.post("/resource_providers", {"name": "bench-baseline", "uuid": root})
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        client.get("/resource_providers?in_tree=%s" % root)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def summarise(rounds: list[dict[str, dict[str, list]]], who: str
              ) -> dict[str, dict[str, Any]]:
    out = {}
    for phase in ("first", "steady", "change"):
        runs = [run for r in rounds for run in r[who][phase]]
        out[phase] = {
            "calls": statistics.median(sum(c.values()) for c, _ in runs),
            "seconds": statistics.median(s for _, s in runs),
            "by_call": runs[-1][0],
        }
    return out


def paired(rounds: list[dict[str, dict[str, list]]]) -> dict[str, list[float]]:
    """Per phase, ours/nova of each round (steady: of the round's medians)."""
    out = {}
    for phase in ("first", "steady", "change"):
        out[phase] = [
            statistics.median(s for _, s in r["ours"][phase])
            / statistics.median(s for _, s in r["nova"][phase])
            for r in rounds]
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
                        help="steady periodics per size and round (default 5)")
    parser.add_argument("--rounds", type=int, default=5,
                        help="rounds: new trees, every phase (default 5)")
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

    rounds: dict[int, list[dict[str, dict[str, list]]]] = {size: [] for size in sizes}
    bases = []
    with tempfile.TemporaryDirectory() as tmp:
        proc, url = serve(os.path.join(tmp, "placement.sqlite"))
        clients: dict[str, Any] = {"ours": Ours(url)}
        try:
            if nova_py:
                clients["nova"] = Nova(nova_py, url)
            for round_ in range(args.rounds):
                bases.append(baseline(url))
                for size in sizes:
                    rounds[size].append(one_round(clients, round_, size, args.steady))
        finally:
            for client in clients.values():
                client.close()
            proc.terminate()
            proc.wait()

    base = statistics.median(bases)
    results: dict[str, Any] = {"baseline_seconds": base, "rounds": args.rounds,
                               "nova": bool(nova_py), "sizes": {}}
    for size in sizes:
        entry: dict[str, Any] = {who: summarise(rounds[size], who) for who in clients}
        if nova_py:
            entry["ours/nova"] = {
                phase: {"median": statistics.median(ratios),
                        "min": min(ratios), "max": max(ratios)}
                for phase, ratios in paired(rounds[size]).items()}
        results["sizes"][size] = entry

    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print("baseline: one Placement round trip (GET ?in_tree) = %.2f ms; "
          "medians of %d rounds" % (base * 1000, args.rounds))
    if not nova_py:
        print("nova not installed (no %s with nova importable): nova's side "
              "skipped" % args.nova_python)
    head = "%6s %-7s %-7s %6s %10s %9s" % (
        "size", "phase", "client", "calls", "ms", "x base")
    if nova_py:
        head += "  ours/nova calls; time (range over rounds)"
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
                    ratio = entry["ours/nova"][phase]
                    line += "  %s; %.3f (%.3f-%.3f)" % (
                        "%.3f" % (mine["calls"] / fig["calls"])
                        if fig["calls"] else "-",
                        ratio["median"], ratio["min"], ratio["max"])
                print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
