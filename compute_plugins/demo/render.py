"""The demo's report for people (:func:`text`), as data (:func:`to_json`),
and what a correct run shows (:func:`checks`).

``to_json`` prints the report of :func:`compute_plugins.demo.run.run_demo`::

    {"hosts": [{"name", "snapshot", "placement_calls", "calls", "providers"}],
     "operator": {"placement_calls", "calls", "shared_storage"},
     "released_earlier": [consumer, ...],
     "requests": [{"name", "expect", "placed", "host", "consumer", "query",
                   "candidates", "verdicts", "assignments", "allocations",
                   "describe", "guest_xml", "reasons", "placement_calls", ...}],
     "moves": [{"kind", "name", "consumer", "migration", "source", "dest",
                "status", "assignments", "allocations", "describe", "guest_xml",
                "consumers": {"to_confirm", "confirmed"}, "pinning", ...}],
     "usage": {provider name: {"uuid", "host", "inventories", "usages", ...}},
     "final_periodic": {host: calls}, "final_periodic_calls": 0, ...}

The text says the same in lines of at most 100 columns: long lines are
wrapped (:func:`compute_plugins.util.text.wrap`), never cut.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from compute_plugins.util.text import WIDTH, printable, wrap, wrap_lines

#: Short names of resource classes in the trees and the table.
SHORT = {
    "CUSTOM_MEMORY_PAGE_2048KB": "PAGE_2M",
    "CUSTOM_MEMORY_PAGE_1048576KB": "PAGE_1G",
    "NET_BW_EGR_KILOBIT_PER_SEC": "BW_EGR_kbps",
    "NET_BW_IGR_KILOBIT_PER_SEC": "BW_IGR_kbps",
}
SHARED = "demo-shared-storage"
#: The scheduler's "no room" reasons, said in one line per host in the text.
_NO_ROOM = re.compile(r"^Placement: no provider of this host has room for "
                      r"(?:group (\S+)|(\S+) of the unsuffixed group)")


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


def tree(providers: Mapping[str, Mapping[str, Any]], root: str,
         usage: bool, indent: str = "") -> list[str]:
    """``root``'s tree, each provider with what it offers (what can be
    allocated: total - reserved), as ``used/total`` with ``usage``; and its
    custom traits. Every line starts with ``indent``; a provider's line
    wrapped to :data:`WIDTH` continues under its name."""
    children: dict[str, list[str]] = {}
    for name, doc in providers.items():
        parent = doc["parent_provider_uuid"]
        if parent:
            children.setdefault(parent, []).append(name)
    lines: list[str] = []

    def draw(name: str, prefix: str, last: bool, top: bool) -> None:
        doc = providers[name]
        branch = "" if top else ("└── " if last else "├── ")
        traits = [t for t in doc["traits"] if t.startswith("CUSTOM_")
                  and not t.startswith("CUSTOM_VNIC")]
        details = "; ".join(x for x in (_amounts(doc, usage), ", ".join(traits)) if x)
        text = "%s%s%s" % (prefix, branch, printable(name))
        kids = sorted(children.get(doc["uuid"], []))
        inner = prefix + ("" if top else ("    " if last else "│   "))
        # NOTE: a wrapped line continues under its provider's name, the
        # tree's lines drawn on.
        hang = inner + ("│" if kids else " ") + "     "
        lines.extend(wrap("[%s]" % details, indent=text + "  ", hang=hang)
                     if details else [text])
        for index, kid in enumerate(kids):
            draw(kid, inner, index == len(kids) - 1, False)

    draw(root, indent, True, True)
    return lines


def _grouped(calls: Mapping[str, int]) -> dict[str, int]:
    """Calls counted per method and resource (``GET /resource_providers``,
    ``PUT /allocations/{consumer}``), as the scheduler counts its own."""
    out: dict[str, int] = {}
    for call, count in calls.items():
        method, _, path = call.partition(" ")
        parts = path.split("?")[0].strip("/").split("/")
        key = "%s /%s" % (method, parts[0])
        if parts[0] == "allocations" and len(parts) > 1:
            key += "/{consumer}"
        out[key] = out.get(key, 0) + count
    return out


def _calls(calls: Mapping[str, int]) -> str:
    return ", ".join("%d %s" % (n, call) for call, n in calls.items()) or "none"


def _hosts(report: Mapping[str, Any]) -> list[str]:
    out = ["1. Every host reports its provider tree to Placement", ""]
    usage = report["usage"]
    for host in report["hosts"]:
        out.append("%s (snapshot %s): first periodic, %d Placement calls"
                   % (host["name"], host["snapshot"], host["placement_calls"]))
        out += tree(usage, host["name"], usage=False, indent="  ")
    operator = report["operator"]
    shared = operator["shared_storage"]
    out.append("operator: %s  [DISK_GB %d; %s; aggregate %s], %d Placement calls" % (
        SHARED, shared["inventories"]["DISK_GB"]["total"], ", ".join(shared["traits"]),
        ", ".join(shared["aggregates"]), operator["placement_calls"]))
    if report.get("released_earlier"):
        out.append("released the %d instance(s) the previous run placed in this "
                   "state directory" % len(report["released_earlier"]))
    return out


def _verdicts(request: Mapping[str, Any]) -> list[str]:
    out = []
    left_out = []
    for host, verdicts in request["verdicts"].items():
        if any(reason.startswith("Placement:") for reason in verdicts.values()):
            left_out.append(host)
            continue
        out.append("    %s: %s" % (host, printable(", ".join(
            "%s %s" % (plugin, reason) for plugin, reason in verdicts.items()))))
    if left_out:
        out.append("    Placement left out (no room): %s" % ", ".join(left_out))
    return out


def expectation_met(request: Mapping[str, Any]) -> bool:
    expect = request.get("expect", "any")
    if expect is None:
        return not request["placed"]
    return request["placed"] and expect in ("any", request["host"])


def _request(request: Mapping[str, Any]) -> list[str]:
    expect = request.get("expect", "any")
    where = (request["host"] if request["placed"] else "not placed")
    wanted = {None: "fits nowhere", "any": "fits anywhere"}.get(expect, "expected on %s"
                                                                 % expect)
    flag = "" if expectation_met(request) else "   <-- NOT AS EXPECTED"
    out = ["%s -> %s (%s)%s" % (request["name"], where, wanted, flag),
           "  %s" % request["about"]]
    queries = request["query"]
    out.append("  Placement (%d calls): %s" % (request["placement_calls"],
                                               queries[0] if queries else "-"))
    out += ["                       %s" % query for query in queries[1:]]
    out.append("  candidates: %d host(s) with room, %d fit" % (
        request["candidates"], request["fitting"]))
    out += _verdicts(request)
    if request["placed"]:
        out.append("  chosen: %s, claimed by its agent (%.2f s)" % (
            request["host"], request["seconds"]))
        for plugin, lines in request["describe"].items():
            out += ["    %s: %s" % (plugin, printable(line)) for line in lines]
        out.append("    guest XML: %s" % request["guest_xml"][0])
        out += ["               %s" % printable(line) for line in request["guest_xml"][1:]]
        return out
    out.append("  every host's and plugin's reason (Placement's, then each "
               "plugin's fit on the host's state):")
    by_host: dict[str, list[str]] = {}
    no_room: dict[str, list[str]] = {}
    for reason in request["reasons"]:
        text = reason["reason"]
        lines = by_host.setdefault(reason["host"], [])
        match = _NO_ROOM.match(text)
        if match:
            what = match.group(1) or match.group(2)
            groups = no_room.setdefault(reason["host"], [])
            if what not in groups:
                groups.append(what)
            continue
        line = ("%s: %s" % (reason["plugin"] or "host", text)
                if not text.startswith("Placement:") else text)
        if line not in lines:
            lines.append(line)
    for host, groups in no_room.items():
        by_host[host].insert(0, "Placement: no provider has room for %s" % ", ".join(groups))
    refused = {(r["host"], r["plugin"]) for r in request["reasons"]
               if r.get("source") == "fit"}
    for host, lines in by_host.items():
        # NOTE: a plugin whose fit has no objection says so (the disk
        # plugin on shared storage: the sharing provider's capacity is
        # Placement's to check), so that every plugin is on every host.
        lines += ["%s: fit finds no objection on this host's state" % plugin
                  for plugin in request.get("plugins", ())
                  if (host, plugin) not in refused]
    for host, lines in by_host.items():
        out.append("    %s" % host)
        out += ["      %s" % printable(line) for line in lines]
    return out


def _held(resources: Mapping[str, int]) -> str:
    return ", ".join("%s %d" % (_rc(rc), n) for rc, n in resources.items())


def _consumers(consumers: Mapping[str, Mapping[str, Mapping[str, int]]]) -> list[str]:
    """One line per provider: what the instance's and the migration
    consumer's allocations hold there."""
    width = max((len(name) for name in consumers), default=0)
    out = []
    for name, roles in consumers.items():
        held = "; ".join("%s %s" % (role, _held(roles[role]))
                         for role in ("instance", "migration") if role in roles)
        out.append("    %s  %s" % (printable(name).ljust(width), held))
    return out


def _move(move: Mapping[str, Any]) -> list[str]:
    kind, name = move["kind"], move["name"]
    if kind == "resize":
        out = ["%s: resize to %s" % (name, move["flavor"]), "  %s" % move["about"]]
    else:
        out = ["%s: live migration" % name]
    if not move["dest"]:
        out.append("  not moved: it stays on %s (rolled back)   <-- NOT AS EXPECTED"
                   % move["source"])
        return out + ["    %s: %s" % (r["plugin"] or "host", printable(r["reason"]))
                      for r in move["reasons"]]
    where = ("%s again (its own host)" % move["dest"] if move["dest"] == move["source"]
             else "%s -> %s" % (move["source"], move["dest"]))
    out.append("  %s, claimed by its agent (%.2f s)" % (where, move["seconds"]))
    if kind == "resize":
        for plugin, lines in move["describe"].items():
            out += ["    %s: %s" % (plugin, printable(line)) for line in lines]
    pinning = move.get("pinning")
    if pinning:
        out.append("  guest XML pinning, from %s's decision (%s's before it):"
                   % (move["dest"], move["source"]))
        dest, source = list(pinning["dest"]), list(pinning["source"])
        width = max(len(line) for line in dest + [""])
        for index in range(max(len(dest), len(source))):
            line = dest[index] if index < len(dest) else ""
            was = "(%s)" % source[index] if index < len(source) else ""
            out.append(("    %s   %s" % (line.ljust(width), was)).rstrip())
    consumers = move.get("consumers", {})
    if "to_confirm" in consumers:
        out.append("  Placement's consumers, %s (instance %s..., migration %s...):"
                   % ("to confirm" if kind == "resize" else "the destination claimed",
                      move["consumer"][:8], move["migration"][:8]))
        out += _consumers(consumers["to_confirm"])
    if "confirmed" in consumers:
        out.append("  %s (%s's agent freed the migration consumer):"
                   % ("confirmed" if kind == "resize"
                      else "confirmed by the migration itself", move["source"]))
        out += _consumers(consumers["confirmed"])
    return out


def _table(report: Mapping[str, Any]) -> list[str]:
    """Per host (its whole tree) and the shared storage: used/offered of
    every resource class."""
    usage = report["usage"]
    owners = [h["name"] for h in report["hosts"]] + [SHARED]
    classes: list[str] = []
    sums: dict[tuple[str, str], list[int]] = {}
    for name, doc in usage.items():
        owner = SHARED if name == SHARED else doc["host"]
        for rc, inv in doc["inventories"].items():
            if rc not in classes:
                classes.append(rc)
            used_offered = sums.setdefault((owner, rc), [0, 0])
            used_offered[0] += doc["usages"].get(rc, 0)
            used_offered[1] += inv["total"] - inv["reserved"]
    order = ["PCPU", "VCPU", "MEMORY_MB", "CUSTOM_MEMORY_PAGE_2048KB",
             "CUSTOM_MEMORY_PAGE_1048576KB", "DISK_GB", "VGPU", "SRIOV_NET_VF",
             "NET_BW_EGR_KILOBIT_PER_SEC", "NET_BW_IGR_KILOBIT_PER_SEC"]
    classes.sort(key=lambda rc: (order.index(rc) if rc in order else len(order), rc))
    rows = [["host"] + [_rc(rc) for rc in classes]]
    for owner in owners:
        rows.append([owner] + ["%d/%d" % tuple(sums[(owner, rc)])
                               if (owner, rc) in sums else "-" for rc in classes])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    # NOTE: wider than the output, the table is split into tables of the
    # columns that fit, each with the host column.
    parts: list[list[int]] = [[]]
    used = 2 + widths[0]
    for column in range(1, len(widths)):
        if parts[-1] and used + 2 + widths[column] > WIDTH:
            parts.append([])
            used = 2 + widths[0]
        parts[-1].append(column)
        used += 2 + widths[column]
    out: list[str] = []
    for part in parts:
        if out:
            out.append("")
        columns = [0] + part
        for index, row in enumerate(rows):
            out.append("  " + "  ".join(
                row[i].ljust(widths[i]) if i == 0 else row[i].rjust(widths[i])
                for i in columns).rstrip())
            if index == 0:
                out.append("  " + "  ".join("-" * widths[i] for i in columns))
    return out


def text(report: Mapping[str, Any]) -> str:
    requests = report["requests"]
    out = ["compute-plugins demo: %d hosts, %d requests, %s" % (
        len(report["hosts"]), len(requests),
        "state in %s" % printable(report["state_dir"]) if report["state_dir"]
        else "state in a temporary directory (removed)"), ""]
    out += _hosts(report)
    out += ["", "2. Booting the requests", ""]
    for request in requests:
        if request.get("expect", "any") is not None:
            out += _request(request) + [""]
    out += ["3. The request that fits nowhere", ""]
    for request in requests:
        if request.get("expect", "any") is None:
            out += _request(request) + [""]
    if report.get("moves"):
        out += ["4. Moving instances: a resize (confirmed) and a live migration", ""]
        for move in report["moves"]:
            out += _move(move) + [""]
    out += ["5. The final state: usage per provider (used/offered; offered = "
            "total - reserved)", ""]
    usage = report["usage"]
    for host in report["hosts"]:
        out += tree(usage, host["name"], usage=True)
    out += tree(usage, SHARED, usage=True) + [""]
    out.append("Summary (used/offered over each host's tree):")
    out += _table(report) + [""]
    out.append("Placement calls per step:")
    for host in report["hosts"]:
        out.append("  first periodic of %-15s %3d" % (host["name"], host["placement_calls"]))
    out.append("  operator (shared storage)         %3d" % (
        report["operator"]["placement_calls"]))
    for request in requests:
        out.append("  scheduling %-22s %3d  (%s)" % (
            request["name"], request["placement_calls"], _calls(request["calls"])))
    for move in report.get("moves", ()):
        out.append("  %-33s %3d  (%s)" % (
            "%s %s" % (move["kind"], move["name"]), move["placement_calls"],
            _calls(_grouped(move["calls"]))))
    out.append("  last periodic of every host       %3d" % report["final_periodic_calls"])
    out.append("")
    out.append("done in %.1f s" % report["seconds"])
    return wrap_lines("\n".join(out))



def checks(report: Mapping[str, Any]) -> list[str]:
    """What a correct run shows, each failure as one line: every request
    where it is expected, each move confirmed with nothing left of its
    migration consumer, the final periodic without Placement calls."""
    problems = []
    for request in report["requests"]:
        if not expectation_met(request):
            expect = request.get("expect", "any")
            problems.append("%s: expected %s, got %s" % (
                request["name"],
                {None: "nowhere", "any": "on any host"}.get(expect, "on %s" % expect),
                "host %s" % request["host"] if request["placed"] else "not placed"))
    for move in report.get("moves", ()):
        if move["status"] != "confirmed":
            problems.append("the %s of %s ended %s, expected confirmed"
                            % (move["kind"], move["name"], move["status"]))
        elif any("migration" in roles
                 for roles in move["consumers"]["confirmed"].values()):
            problems.append("the %s of %s: its migration consumer still holds an "
                            "allocation after confirm" % (move["kind"], move["name"]))
    if report["final_periodic_calls"] != 0:
        problems.append("the last periodic made %d Placement calls, expected 0"
                        % report["final_periodic_calls"])
    return problems
