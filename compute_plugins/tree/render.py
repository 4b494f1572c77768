"""Printable forms of a provider tree: the JSON document and a text drawing.

JSON (``compute-plugins inventory --format json``)::

    {"providers": [{"uuid", "name", "parent_provider_uuid",
                    "root_provider_uuid", "inventories": {RC: {...}},
                    "traits": [...], "aggregates": [...]}]}

with parents before children, and traits, aggregates and inventories sorted
so the output of two runs can be diffed.
"""

from __future__ import annotations

from typing import Any

from compute_plugins.tree.provider_tree import ProviderTree
from compute_plugins.util.text import printable, wrap

INVENTORY_FIELDS = ("total", "reserved", "min_unit", "max_unit", "step_size",
                    "allocation_ratio")
_DEFAULTS = {"reserved": 0, "min_unit": 1, "step_size": 1, "allocation_ratio": 1.0}


def tree_to_dict(tree: ProviderTree) -> dict[str, Any]:
    """The JSON document of every provider in ``tree``, parents first."""
    providers = []
    roots: dict[str, str] = {}
    for data in tree.snapshot():
        root = roots[data.parent_uuid] if data.parent_uuid else data.uuid
        roots[data.uuid] = root
        inventories = {}
        for rc in sorted(data.inventory):
            record = data.inventory[rc]
            full = {f: record.get(f, _DEFAULTS.get(f)) for f in INVENTORY_FIELDS}
            if full["max_unit"] is None:
                full["max_unit"] = full["total"]
            inventories[rc] = full
        providers.append({
            "uuid": data.uuid,
            "name": data.name,
            "parent_provider_uuid": data.parent_uuid,
            "root_provider_uuid": root,
            "inventories": inventories,
            "traits": sorted(data.traits),
            "aggregates": sorted(data.aggregates),
        })
    return {"providers": providers}


def render_text(document: dict[str, Any]) -> str:
    """Draw the providers of :func:`tree_to_dict` as an indented tree."""
    children: dict[Any, list[dict[str, Any]]] = {}
    for provider in document["providers"]:
        children.setdefault(provider["parent_provider_uuid"], []).append(provider)
    lines: list[str] = []

    def draw(provider: dict[str, Any], prefix: str, last: bool, top: bool) -> None:
        branch = "" if top else ("└── " if last else "├── ")
        # NOTE: a provider name is the host's name: Placement takes a
        # newline or an escape in it; printed escaped, on its own line.
        lines.append("%s%s%s (%s)" % (prefix, branch, printable(provider["name"]),
                                      provider["uuid"]))
        inner = prefix + ("" if top else ("    " if last else "│   "))
        kids = children.get(provider["uuid"], [])
        bar = "│   " if kids else "    "
        # NOTE: a line wider than the output wraps under its own text,
        # the tree's lines drawn on.
        hang = inner + bar + "    "
        for rc, inv in provider["inventories"].items():
            lines.extend(wrap(
                "%s: total=%s reserved=%s min_unit=%s max_unit=%s "
                "step_size=%s allocation_ratio=%s"
                % (rc, *(inv[f] for f in INVENTORY_FIELDS)), inner + bar, hang))
        if provider["traits"]:
            lines.extend(wrap("traits: " + ", ".join(provider["traits"]),
                              inner + bar, hang))
        if provider["aggregates"]:
            lines.extend(wrap("aggregates: " + ", ".join(provider["aggregates"]),
                              inner + bar, hang))
        for i, kid in enumerate(kids):
            draw(kid, inner, i == len(kids) - 1, False)

    for root in children.get(None, []):
        draw(root, "", True, True)
    return "\n".join(lines)
