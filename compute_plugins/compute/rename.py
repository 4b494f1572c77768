"""Renaming a compute node on purpose (``compute-plugins host rename OLD
NEW``): what an agent refuses to do on its own (a host whose name changed
under its state directory does not start, :mod:`.identity`).

With the node's agent stopped (its state directory's lock is taken for the
whole rename), one run moves everything the old name keys:

1. the host-state store: the host's decisions in force are re-addressed to
   the new name (their spec's decision too), its published rows and its
   lease dropped (the agent publishes again under the new name);
2. Placement: the node's providers keep their uuids (the guests'
   allocations stay on them) and are renamed: the root ``OLD`` (nova's
   root provider is named after the hypervisor host) becomes ``NEW``, each
   ``OLD_*`` child ``NEW_*``;
3. the claims ledger (``NEW.ledger.json``, its claims' decisions naming
   the new host) and the plugins' checkpoint of the tree;
4. last, the node's identity: the agent starts under the new name.

Each step is skipped when already done, so a rename that stopped half-way
is finished by running it again.
"""

from __future__ import annotations

import dataclasses
import json
import os
import urllib.parse
import uuid
from typing import Any, Optional

from compute_plugins import exception
from compute_plugins.compute import identity, ledger
from compute_plugins.hoststate import errors as store_errors
from compute_plugins.hoststate.agents import renamed_spec
from compute_plugins.tree import checkpoint
from compute_plugins.util import files, jsonload


class RenameError(exception.InputError):
    """The rename cannot be done as asked (exit 2; nothing after the step
    that refused was changed)."""


@dataclasses.dataclass
class RenameResult:
    """What a rename moved.

    :param old: the old name.
    :param new: the new name.
    :param node: the node's uuid.
    :param decisions: decisions in force re-addressed in the store.
    :param providers: Placement providers renamed, old name -> new name.
    :param claims: claims moved to the new name's ledger (None: no ledger).
    """

    old: str
    new: str
    node: str
    decisions: int = 0
    providers: dict[str, str] = dataclasses.field(default_factory=dict)
    claims: Optional[int] = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _renamed(name: Any, old: str, new: str) -> Any:
    """``new`` for ``old``, ``new_x`` for ``old_x``; anything else as is."""
    if name == old:
        return new
    if isinstance(name, str) and (name == new or name.startswith(new + "_")):
        return name  # NOTE: renamed by a run that stopped half-way
    if isinstance(name, str) and name.startswith(old + "_"):
        return new + name[len(old):]
    return name


def rename_node(state_dir: str, old: str, new: str, placement: Any,
                store: Any) -> RenameResult:
    """Rename the node of ``state_dir`` from ``old`` to ``new`` (see the
    module docstring); the caller holds the state directory's lock.

    :param placement: a PlacementClient.
    :param store: the host-state store.
    :raises RenameError: the state directory belongs to another node, or
        the new name is taken (in the store or in Placement).
    """
    if not old or not new or old == new:
        raise RenameError("host rename %r %r: expected two different host names"
                          % (old, new))
    current = identity.read(state_dir)
    if current is not None and current.host not in (old, new):
        raise RenameError("the state directory %s belongs to compute node %s "
                          "(%s), not %s" % (state_dir, current.host, current.path, old))
    if current is not None and current.renaming not in (None, new):
        raise RenameError("the rename of compute node %s to %s stopped half-way "
                          "(%s): finish it first (`compute-plugins host rename %s %s`)"
                          % (current.host, current.renaming, current.path,
                             current.host, current.renaming))
    result = RenameResult(old, new, current.uuid if current else str(uuid.uuid4()))
    # NOTE: every refusal before the first change (a store moved to the new
    # name while Placement refused it left an agent restarted under the old
    # name freeing its claims), then the identity says a rename is under
    # way: an agent does not start under either name until it is finished.
    roots = _placement_roots(placement, old, new)
    renamed_ledger = _renamed_ledger(state_dir, old, new)
    done = current is not None and current.host == new
    if not done:
        identity.write(state_dir, old, result.node, renaming=new)
    try:
        result.decisions = store.rename_host(old, new, result.node)
    except (ValueError, store_errors.HostStateError) as err:
        if not done and not isinstance(err, store_errors.StoreUnavailable):
            # NOTE: refused: nothing changed, the node keeps its name.
            identity.write(state_dir, old, result.node, renaming=(
                None if current is None else current.renaming))
        if isinstance(err, ValueError):
            raise RenameError("host rename: %s" % err) from None
        raise
    result.providers = _rename_providers(placement, roots, old, new)
    result.claims = _rename_ledger(state_dir, old, new, renamed_ledger)
    _rename_checkpoint(state_dir, old, new)
    identity.write(state_dir, new, result.node)
    return result


def _placement_roots(placement: Any, old: str, new: str) -> list[dict[str, Any]]:
    """The root providers named ``old`` (none: renamed already).

    :raises RenameError: Placement has a provider named ``new`` too.
    """
    def named(name: str) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = placement.get(
            "/resource_providers?name=%s" % urllib.parse.quote(name, safe="")
        ).get("resource_providers") or []
        return found

    roots = named(old)
    if roots and named(new):
        raise RenameError("Placement already has a provider named %s (an agent "
                          "started under the new name?): delete that compute "
                          "node's providers first" % new)
    return roots


def _rename_providers(placement: Any, roots: list[dict[str, Any]], old: str,
                      new: str) -> dict[str, str]:
    if not roots:
        return {}
    tree = placement.get("/resource_providers?in_tree=%s" % roots[0]["uuid"]
                         ).get("resource_providers") or []
    moved = {}
    # NOTE: children first: a rename that stops half-way leaves the root
    # under its old name, and running it again finds the tree.
    for rp in sorted(tree, key=lambda r: r["name"] == old):
        target = _renamed(rp["name"], old, new)
        if target == rp["name"]:
            continue
        body: dict[str, Any] = {"name": target}
        if rp.get("parent_provider_uuid"):
            body["parent_provider_uuid"] = rp["parent_provider_uuid"]
        placement.put("/resource_providers/%s" % rp["uuid"], body)
        moved[rp["name"]] = target
    return moved


def _write(state_dir: str, name: str, text: str) -> None:
    dir_fd = files.open_dir(state_dir)
    try:
        files.write_atomic(dir_fd, name, text, mode=files.PRIVATE_FILE_MODE)
    finally:
        os.close(dir_fd)


def _read_json(path: str, what: str) -> Any:
    try:
        return jsonload.loads(files.read_bytes(path))
    except files.UnreadableFile as err:
        raise RenameError("%s %s: %s" % (what, path, err.reason)) from None
    except ValueError as err:
        raise RenameError("%s %s: not JSON: %s" % (what, path, err)) from None


def _renamed_ledger(state_dir: str, old: str, new: str) -> Optional[dict[str, Any]]:
    """``old``'s claims ledger as ``new``'s (None: no ledger of ``old``:
    moved already, or none).

    :raises RenameError: it is not a ledger of ``old``, or another ledger
        has the new name already.
    """
    source, target = ledger.path_for(state_dir, old), ledger.path_for(state_dir, new)
    if not os.path.lexists(source):
        return None
    document = _read_json(source, "claims ledger")
    if (not isinstance(document, dict) or document.get("format") != ledger.FORMAT
            or document.get("host") != old
            or not isinstance(document.get("claims"), dict)):
        raise RenameError("claims ledger %s: not a ledger of host %s" % (source, old))
    document["host"] = new
    for item in document["claims"].values():
        if isinstance(item, dict) and isinstance(item.get("spec"), dict):
            item["spec"] = json.loads(renamed_spec(json.dumps(item["spec"]), old, new))
    # NOTE: the same document: a rename that stopped between writing the
    # new ledger and removing the old one.
    if os.path.lexists(target) and _read_json(target, "claims ledger") != document:
        raise RenameError("claims ledgers %s and %s both exist: move one aside "
                          "by hand (neither is discarded)" % (source, target))
    return document


def _rename_ledger(state_dir: str, old: str, new: str,
                   document: Optional[dict[str, Any]]) -> Optional[int]:
    if document is None:
        return None
    source, target = ledger.path_for(state_dir, old), ledger.path_for(state_dir, new)
    _write(state_dir, os.path.basename(target),
           json.dumps(document, indent=1, sort_keys=True))
    os.unlink(source)
    return len(document["claims"])


def _rename_checkpoint(state_dir: str, old: str, new: str) -> None:
    source = checkpoint.path_for(state_dir, old)
    if not os.path.lexists(source):
        return
    document = _read_json(source, "provider checkpoint")
    if isinstance(document, dict) and document.get("nodename") == old:
        document["nodename"] = new
        for items in (document.get("plugins") or {}).values():
            for item in items if isinstance(items, list) else ():
                if isinstance(item, dict):
                    for key in ("name", "parent"):
                        if key in item:
                            item[key] = _renamed(item[key], old, new)
        _write(state_dir, os.path.basename(checkpoint.path_for(state_dir, new)),
               json.dumps(document, indent=1, sort_keys=True))
    os.unlink(source)


__all__ = ["RenameError", "RenameResult", "rename_node"]
