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
:func:`compute_plugins.tree.contribution.adopt`). Unreadable includes a FIFO or a
directory at its name, JSON nested too deep (:mod:`compute_plugins.util.jsonload`)
and a checkpoint naming a provider the plugins could not own (not the node
or ``<nodename>_*``: another service's provider in the tree), which would
otherwise be deleted.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any, Optional

from oslo_log import log as logging

from compute_plugins import exception
from compute_plugins.plugin import names
from compute_plugins.tree import contribution
from compute_plugins.tree.contribution import Contributions, ProviderContribution
from compute_plugins.util import files, jsonload
from compute_plugins.util.text import printable

LOG = logging.getLogger(__name__)

FORMAT_VERSION = 1


def path_for(checkpoint_dir: str, nodename: str) -> str:
    """``<checkpoint_dir>/<safe file name>.contributions.json``: the node name
    mapped by :func:`compute_plugins.plugin.names.safe_file_name`, so that no host
    name (``../../x``, ``/etc/x``) puts the file outside the directory."""
    return os.path.join(checkpoint_dir, "%s.contributions.json"
                        % names.safe_file_name(nodename))


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


def dumps(nodename: str, root_uuid: str, contributions: Contributions) -> str:
    """The checkpoint document for ``contributions`` on the root ``root_uuid``."""
    return json.dumps({
        "format_version": FORMAT_VERSION,
        "nodename": nodename,
        "root_uuid": root_uuid,
        "plugins": {name: [_item_to_dict(i) for i in items]
                    for name, items in contributions.items()},
    }, indent=1, sort_keys=True)


def save(checkpoint_dir: str, nodename: str, text: str) -> bool:
    """Write ``text`` (from :func:`dumps`) atomically and durably.

    A crash leaves the old file or the new one, never a torn one: the data
    is fsynced before the rename and the directory after it
    (:func:`compute_plugins.util.files.write_atomic`: a symlink planted at the
    file's name is replaced, never written through). The directory is
    created mode 0700 and the file 0600: only the agent's user reads them.
    Returns False (and logs) when it cannot be written; the agent goes on,
    and a restart would adopt the tree instead.
    """
    target = path_for(checkpoint_dir, nodename)
    try:
        files.ensure_private_dir(checkpoint_dir)
        dir_fd = files.open_dir(checkpoint_dir)
        try:
            files.write_atomic(dir_fd, os.path.basename(target), text,
                               mode=files.PRIVATE_FILE_MODE)
        finally:
            os.close(dir_fd)
        return True
    except OSError as err:
        LOG.error("cannot write the plugin checkpoint %s: %s",
                  printable(target), printable(err.strerror or err))
        return False


def load(
    checkpoint_dir: str, nodename: str, root_uuid: str
) -> Optional[dict[str, tuple[ProviderContribution, ...]]]:
    """The contributions saved for ``nodename`` on ``root_uuid``, or ``None``.

    A checkpoint of another node or another root (e.g. written against the
    embedded Placement, now pointed at a cloud), of another format, or one
    whose contributions do not validate is ignored with a warning.
    """
    source = path_for(checkpoint_dir, nodename)
    try:
        document = jsonload.loads(files.read_bytes(source))
        if not isinstance(document, dict):
            raise ValueError("not a JSON object")
        if document.get("format_version") != FORMAT_VERSION:
            raise ValueError("format_version %r is not %d"
                             % (document.get("format_version"), FORMAT_VERSION))
        if document.get("nodename") != nodename:
            raise ValueError("written for node %r" % document.get("nodename"))
        if document.get("root_uuid") != root_uuid:
            raise ValueError("written for root provider %s, this tree's root is %s"
                             % (document.get("root_uuid"), root_uuid))
        loaded = {name: tuple(_item_from_dict(i) for i in items)
                  for name, items in document["plugins"].items()}
        contribution.check(nodename, loaded)
        return loaded
    except files.UnreadableFile as err:
        if not os.path.lexists(source):
            return None
        problem = err.reason
    except (ValueError, KeyError, TypeError, AttributeError,
            exception.ComputePluginsError) as err:
        problem = str(err)
    # NOTE: logged outside the except blocks: oslo.log would append the
    # exception a second time.
    LOG.warning("ignoring the plugin checkpoint %s (%s): adopting the "
                "provider tree instead", printable(source), printable(problem))
    return None
