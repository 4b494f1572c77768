"""The benchmark's provider tree, built through nova's ProviderTree API.

Kept free of compute_plugins imports: nova's side (``nova_side.py``) runs it
in nova's own virtual environment on nova's ``ProviderTree``.
"""

from __future__ import annotations

import uuid

NAMESPACE = uuid.UUID("6f0d3c1e-0b7a-4c39-9a53-0a4f3f8d2b11")


def provider_uuid(*parts: str) -> str:
    return str(uuid.uuid5(NAMESPACE, "/".join(parts)))


class Shape:
    """A root, up to 4 NUMA cells under it and devices under the cells,
    ``size`` providers in all; each with an inventory and traits.

    ``change()`` changes one device's inventory (one provider to write).
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self.bump = 0

    def layout(self, node: str) -> list[tuple[str, str | None]]:
        out: list[tuple[str, str | None]] = [(node, None)]
        cells = min(4, self.size - 1)
        for c in range(cells):
            out.append(("%s_NUMA%d" % (node, c), node))
        for d in range(self.size - 1 - cells):
            out.append(("%s_dev%d" % (node, d), "%s_NUMA%d" % (node, d % cells)))
        return out

    def change(self) -> None:
        self.bump += 1

    def __call__(self, tree, node: str, allocations=None) -> None:
        """nova's ``update_provider_tree(provider_tree, nodename)``."""
        layout = self.layout(node)
        changed = layout[-1][0]
        for name, parent in layout:
            if not tree.exists(name):
                if parent is None:
                    tree.new_root(name, provider_uuid(node))
                else:
                    tree.new_child(name, parent,
                                   uuid=provider_uuid(node, name))
            if parent is None:
                inv = {"VCPU": {"total": 64, "reserved": 0},
                       "DISK_GB": {"total": 1000, "reserved": 0}}
                traits = {"COMPUTE_NET_ATTACH_INTERFACE"}
            elif parent == node:
                inv = {"PCPU": {"total": 16, "reserved": 0},
                       "MEMORY_MB": {"total": 65536, "reserved": 0}}
                traits = {"HW_NUMA_ROOT"}
            else:
                inv = {"CUSTOM_BENCH_DEV": {"total": 8, "reserved": 0}}
                traits = {"CUSTOM_BENCH_TRAIT"}
            if name == changed:
                first = next(iter(inv))
                inv[first]["total"] += self.bump
            tree.update_inventory(name, inv)
            have = tree.data(name).traits
            tree.update_traits(name, set(have) | traits)
