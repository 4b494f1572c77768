"""The demo's report for people (:func:`text`) and as data (:func:`to_json`).

``to_json`` is exactly::

    {"hosts": [{"name", "snapshot", "placement_calls", "calls", "providers"}],
     "operator": {"placement_calls", "calls", "shared_storage"},
     "released_earlier": [consumer, ...],
     "requests": [{"name", "placed", "host", "assignments", "reasons",
                   "placement_calls", ...}],
     "usage": {provider name: {"uuid", "host", "inventories", "usages", ...}},
     "final_periodic_calls": 0, ...}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from compute_plugins.text import printable

#: Short names of resource classes in the trees and the table.
SHORT = {
    "CUSTOM_MEMORY_PAGE_2048KB": "PAGE_2M",
    "CUSTOM_MEMORY_PAGE_1048576KB": "PAGE_1G",
    "NET_BW_EGR_KILOBIT_PER_SEC": "BW_EGR_KBPS",
    "NET_BW_IGR_KILOBIT_PER_SEC": "BW_IGR_KBPS",
}


def to_json(report: Mapping[str, Any]) -> dict[str, Any]:
    return dict(report)


def _rc(name: str) -> str:
    return SHORT.get(name, name)


def _amounts(doc: Mapping[str, Any], usage: bool) -> str:
    parts = []
    for rc, inv in doc["inventories"].items():
        total = inv["total"] - inv["reserved"]
        if usage:
            parts.append("%s %d/%d" % (_rc(rc), doc["usages"].get(rc, 0), total))
        else:
            parts.append("%s %d" % (_rc(rc), total))
    return ", ".join(parts)


def _tree(providers: Mapping[str, Mapping[str, Any]], root: str,
          usage: bool) -> list[str]:
    """``root``'s tree; each provider with its amounts (``used/total`` with
    ``usage``; totals are what can be allocated: total - reserved)."""
    children: dict[str, list[str]] = {}
    for name, doc in providers.items():
        parent = doc["parent_provider_uuid"]
        if parent:
            children.setdefault(parent, []).append(name)
    lines: list[str] = []

    def draw(name: str, prefix: str, last: bool, top: bool) -> None:
        doc = providers[name]
        branch = "" if top else ("└── " if last else "├── ")
        amounts = _amounts(doc, usage)
        extra = [t for t in doc["traits"] if t.startswith("CUSTOM_")
                 and not t.startswith("CUSTOM_VNIC")]
        text = "%s%s%s" % (prefix, branch, printable(name))
        details = "; ".join(x for x in (amounts, ", ".join(extra)) if x)
        lines.append("%s  [%s]" % (text, details) if details else text)
        kids = sorted(children.get(doc["uuid"], []))
        inner = prefix + ("" if top else ("    " if last else "│   "))
        for index, kid in enumerate(kids):
            draw(kid, inner, index == len(kids) - 1, False)

    draw(root, "", True, True)
    return lines


def _calls(calls: Mapping[str, int]) -> str:
    return ", ".join("%d %s" % (n, call) for call, n in calls.items()) or "none"


def _indent(lines: list[str], by: str) -> list[str]:
    return [by + line for line in lines]


def _hosts(report: Mapping[str, Any]) -> list[str]:
    out = ["1. Every host reports its provider tree to Placement", ""]
    usage = report["usage"]
    for host in report["hosts"]:
        out.append("%s (snapshot %s): first periodic, %d Placement calls"
                   % (host["name"], host["snapshot"], host["placement_calls"]))
        out += _indent(_tree(usage, host["name"], usage=False), "  ")
        out.append("")
    operator = report["operator"]
    shared = operator["shared_storage"]
    out.append("operator: sharing provider %s [DISK_GB %d; %s; aggregate %s], %d "
               "Placement calls" % (
                   "demo-shared-storage", shared["inventories"]["DISK_GB"]["total"],
                   ", ".join(shared["traits"]), ", ".join(shared["aggregates"]),
                   operator["placement_calls"]))
    if report.get("released_earlier"):
        out.append("released %d instance(s) of the previous run in this state "
                   "directory" % len(report["released_earlier"]))
    return out


def _verdicts(request: Mapping[str, Any]) -> list[str]:
    out = []
    excluded = []
    for host, verdicts in request["verdicts"].items():
        if "placement" in verdicts:
            excluded.append(host)
            continue
        out.append("%s: %s" % (host, "; ".join(
            "%s %s" % (plugin, reason) for plugin, reason in verdicts.items())))
    if excluded:
        out.append("left out by Placement (no room): %s" % ", ".join(excluded))
    return out


def _request(request: Mapping[str, Any]) -> list[str]:
    out = ["%s: %s" % (request["name"], request["about"])]
    for query in request["query"]:
        out.append("  Placement: %s" % query)
    out.append("  candidates: %d host(s) with room, %d fit" % (
        request["candidates"], request["fitting"]))
    out += _indent(_verdicts(request), "    ")
    if request["placed"]:
        out.append("  -> %s (%d Placement calls, %.2f s)" % (
            request["host"], request["placement_calls"], request["seconds"]))
        for plugin, lines in request["describe"].items():
            out += ["     %s: %s" % (plugin, line) for line in lines]
        out.append("     guest XML: %s" % request["guest_xml"][0])
        out += ["                %s" % line for line in request["guest_xml"][1:]]
    else:
        out.append("  -> not placed (%d Placement calls); every host's and "
                   "plugin's reason:" % request["placement_calls"])
        by_host: dict[str, list[str]] = {}
        for reason in request["reasons"]:
            line = "%s: %s" % (reason["plugin"] or "host", reason["reason"])
            if line not in by_host.setdefault(reason["host"], []):
                by_host[reason["host"]].append(line)
        for host, lines in by_host.items():
            out.append("     %s" % host)
            out += ["       %s" % line for line in lines]
    return out


def _table(usage: Mapping[str, Any]) -> list[str]:
    rows = [("provider", "resource class", "used", "total")]
    for name, doc in usage.items():
        for rc, inv in doc["inventories"].items():
            rows.append((name, _rc(rc), str(doc["usages"].get(rc, 0)),
                         str(inv["total"] - inv["reserved"])))
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    out = []
    for index, row in enumerate(rows):
        out.append("%-*s  %-*s  %*s  %*s" % (widths[0], row[0], widths[1], row[1],
                                             widths[2], row[2], widths[3], row[3]))
        if index == 0:
            out.append("  ".join("-" * w for w in widths))
    return out


def text(report: Mapping[str, Any]) -> str:
    requests = report["requests"]
    placed = [r for r in requests if r["placed"]]
    refused = [r for r in requests if not r["placed"]]
    out = ["compute-plugins demo: %d hosts, %d requests (state: %s)" % (
        len(report["hosts"]), len(requests), report["state_dir"] or "a temporary "
        "directory, removed"), ""]
    out += _hosts(report)
    out += ["", "2. Booting the requests", ""]
    for request in placed:
        out += _request(request) + [""]
    out += ["3. The request that fits nowhere", ""]
    for request in refused:
        out += _request(request) + [""]
    out += ["4. The final state: usage per provider (used/total, total = what "
            "can be allocated)", ""]
    usage = report["usage"]
    for host in report["hosts"]:
        out += _tree(usage, host["name"], usage=True)
    out += _tree(usage, "demo-shared-storage", usage=True) + [""]
    out += _table({n: d for n, d in usage.items()
                   if any(d["usages"].get(rc) for rc in d["inventories"])}) + [""]
    out.append("Placement calls:")
    for host in report["hosts"]:
        out.append("  %-16s first periodic: %d" % (host["name"], host["placement_calls"]))
    out.append("  %-16s shared storage: %d" % ("operator", report["operator"]["placement_calls"]))
    for request in requests:
        out.append("  %-16s scheduling: %d (%s)" % (request["name"], request["placement_calls"],
                                                    _calls(request["calls"])))
    out.append("  last periodic of every host: %d Placement calls" % (
        report["final_periodic_calls"]))
    out.append("")
    out.append("done in %.1f s" % report["seconds"])
    return "\n".join(out)
