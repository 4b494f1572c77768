"""The compute node's identity in its state directory (issue 20, item 1)."""

from __future__ import annotations

import json
import os
import stat

import pytest

from compute_plugins import exception
from compute_plugins.compute import identity


def test_the_first_start_records_the_node_and_later_ones_check_it(tmp_path):
    first = identity.ensure(str(tmp_path), "compute-1")
    assert first.host == "compute-1" and first.path == str(tmp_path / "compute_node.json")
    assert stat.S_IMODE(os.stat(first.path).st_mode) == 0o600
    assert identity.ensure(str(tmp_path), "compute-1") == first
    with pytest.raises(identity.HostRenamed) as info:
        identity.ensure(str(tmp_path), "compute-2")
    err = info.value
    assert isinstance(err, exception.InputError)   # exit 2
    assert (err.recorded, err.found, err.node) == ("compute-1", "compute-2", first.uuid)
    assert "`compute-plugins host rename compute-1 compute-2`" in str(err)
    assert "\n" not in str(err)
    # nothing changed: the old name still starts
    assert identity.read(str(tmp_path)) == first


def test_a_state_dir_from_before_the_identity_is_known_by_its_ledger(tmp_path):
    (tmp_path / "old-name.ledger.json").write_text(json.dumps(
        {"format": "compute-plugins-ledger", "version": 1, "host": "old-name",
         "claims": {}}))
    with pytest.raises(identity.HostRenamed, match="host rename old-name new-name"):
        identity.ensure(str(tmp_path), "new-name")
    assert not (tmp_path / "compute_node.json").exists()
    assert identity.ensure(str(tmp_path), "old-name").host == "old-name"


@pytest.mark.parametrize("text, reason", [
    ("{", "not JSON"),
    ('{"format": "x"}', "not a compute node identity"),
    ('{"format": "compute-plugins-node", "version": 1, "host": "h", "uuid": "nope"}',
     "is not a uuid"),
])
def test_a_broken_identity_is_one_line_naming_the_file(tmp_path, text, reason):
    (tmp_path / "compute_node.json").write_text(text)
    with pytest.raises(identity.IdentityError) as info:
        identity.ensure(str(tmp_path), "h")
    message = str(info.value)
    assert str(tmp_path / "compute_node.json") in message and reason in message
    assert isinstance(info.value, exception.InputError) and "\n" not in message


@pytest.mark.parametrize("plant", ["symlink", "dangling", "directory"])
def test_a_planted_lock_file_is_one_line_not_a_traceback(tmp_path, plant):
    """review: agent.lock a symlink (O_NOFOLLOW: ELOOP) or a directory was
    an OSError out of the lock: "unexpected error (a bug)"; and the
    symlink's target is never written."""
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    lock = tmp_path / "state" / identity.LOCK_FILE
    lock.parent.mkdir()
    if plant == "symlink":
        lock.symlink_to(target)
    elif plant == "dangling":
        lock.symlink_to(tmp_path / "nowhere")
    else:
        lock.mkdir()
    with pytest.raises(identity.IdentityError) as info:
        identity.StateDirLock(str(lock.parent)).__enter__()
    message = str(info.value)
    assert str(lock) in message and "\n" not in message
    assert isinstance(info.value, exception.InputError)
    assert target.read_text() == "keep" and not (tmp_path / "nowhere").exists()


def test_a_symlinked_identity_is_replaced_not_written_through(tmp_path):
    """The identity is written with a new file renamed over the path
    (0600): a planted symlink is replaced, its target never written."""
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    state = tmp_path / "state"
    state.mkdir()
    identity.write(str(state), "h", "11111111-1111-4111-8111-111111111111")
    (state / "compute_node.json").unlink()
    (state / "compute_node.json").symlink_to(target)
    identity.write(str(state), "h", "11111111-1111-4111-8111-111111111111")
    assert target.read_text() == "keep"
    path = state / "compute_node.json"
    assert not path.is_symlink() and stat.S_IMODE(path.stat().st_mode) == 0o600
