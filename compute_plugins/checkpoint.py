"""What the plugins last contributed, kept on disk across restarts.

A plugin removes only what it contributed before (nova's rule). After an
agent restart the previous contributions would be unknown: a device removed
while the agent was down would leave its provider in Placement for good, and
a trait the plugin no longer contributes (an old ``CUSTOM_PHYSNET_*``) would
stay. So the manager writes the contributions that reached Placement to
``<state_dir>/<nodename>.contributions.json`` and reads them back at start,
as kubelet's device manager checkpoints its assignments.

A missing, unreadable or foreign checkpoint is not an error: the manager then
adopts what the provider tree holds (see
:func:`compute_plugins.contribution.adopt`).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from typing import Any, Optional

from oslo_log import log as logging

from compute_plugins.contribution import ProviderContribution

LOG = logging.getLogger(__name__)

FORMAT_VERSION = 1

Contributions = Mapping[str, tuple[ProviderContribution, ...]]


def path_for(checkpoint_dir: str, nodename: str) -> str:
    return os.path.join(checkpoint_dir, "%s.contributions.json" % nodename)


def _item_to_dict(item: ProviderContribution) -> dict[str, Any]:
    return {
        "name": item.name,
        "uuid": item.uuid,
        "parent": item.parent,
        "inventory": {rc: dict(rec) for rc, rec in sorted(item.inventory.items())},
        "traits": sorted(item.traits),
        "aggregates": sorted(item.aggregates),
    }


def _item_from_dict(data: Mapping[str, Any]) -> ProviderContribution:
    return ProviderContribution(
        name=data["name"], uuid=data.get("uuid"), parent=data.get("parent"),
        inventory=data.get("inventory", {}), traits=frozenset(data.get("traits", ())),
        aggregates=frozenset(data.get("aggregates", ())))


def save(checkpoint_dir: str, nodename: str, contributions: Contributions) -> None:
    """Write the checkpoint atomically (a crash leaves the old one or the new one)."""
    document = {
        "format_version": FORMAT_VERSION,
        "nodename": nodename,
        "plugins": {name: [_item_to_dict(i) for i in items]
                    for name, items in contributions.items()},
    }
    target = path_for(checkpoint_dir, nodename)
    try:
        os.makedirs(checkpoint_dir, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=checkpoint_dir, prefix=".contributions-")
        with os.fdopen(fd, "w") as handle:
            json.dump(document, handle, indent=1, sort_keys=True)
        os.replace(tmp, target)
    except OSError as err:
        # NOTE: not fatal: without it a restart adopts the tree instead.
        LOG.error("cannot write the plugin checkpoint %s: %s", target, err)


def load(
    checkpoint_dir: str, nodename: str
) -> Optional[dict[str, tuple[ProviderContribution, ...]]]:
    """The contributions saved for ``nodename``, or ``None`` when unusable."""
    source = path_for(checkpoint_dir, nodename)
    try:
        with open(source) as handle:
            document = json.load(handle)
        if document.get("format_version") != FORMAT_VERSION:
            raise ValueError("format_version %r is not %d"
                             % (document.get("format_version"), FORMAT_VERSION))
        if document.get("nodename") != nodename:
            raise ValueError("written for node %r" % document.get("nodename"))
        return {name: tuple(_item_from_dict(i) for i in items)
                for name, items in document["plugins"].items()}
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
        LOG.warning("ignoring the plugin checkpoint %s (%s): adopting the "
                    "provider tree instead", source, err)
        return None
