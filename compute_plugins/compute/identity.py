"""The compute node's identity and the agent's hold on its state directory.

As nova's stable compute node uuid (``compute_id`` in nova's state path,
``nova.virt.node.write_local_node_uuid``): on its first start the agent
records its node in ``<state_dir>/compute_node.json`` (the host name and a
uuid made then). On every later start the host name it discovers (the
OS's, or ``host.json`` of a snapshot) must be that one: a host renamed
under its state directory would otherwise register a second host over the
same CPUs and devices, ignore the claims in the old name's ledger and leave
the old host in the store as a ghost candidate. It refuses to start
instead (:class:`HostRenamed`, exit 2), and an operator who renames on
purpose runs ``compute-plugins host rename OLD NEW``
(:mod:`compute_plugins.compute.rename`).

The machine: the identity also records which machine the state
directory was made on (a hash of ``/etc/machine-id``, see
:func:`machine_id`). A state directory copied to another machine (a
cloned disk or VM image, a backup restored on new hardware) would
otherwise keep the node's uuid, and the two agents would take the host's
lease from each other in turn, each fenced by the other. An agent started
on another machine than the recorded one refuses to start instead
(:class:`MachineChanged`, exit 2).

One agent per state directory: the agent holds an exclusive ``flock`` on
``<state_dir>/agent.lock`` (its pid inside) for its whole life
(:class:`StateDirLock`); a second one exits 2 naming the first one's pid.
The kernel drops the lock when the process dies, however it dies.
"""

from __future__ import annotations

import dataclasses
import errno
import fcntl
import glob
import hashlib
import json
import os
import stat
import uuid
from typing import Any, Optional

from compute_plugins import exception
from compute_plugins.util import files, jsonload

#: The identity file in the state directory.
IDENTITY_FILE = "compute_node.json"
#: The lock file in the state directory.
LOCK_FILE = "agent.lock"
FORMAT = "compute-plugins-node"
FORMAT_VERSION = 1
_LEDGER_SUFFIX = ".ledger.json"
#: Where the machine's identity is read from when ``[compute]
#: machine_id_file`` is not set: the first of these that holds one.
#: systemd's machine id (``machine-id(5)``: made once at installation, the
#: same across reboots), its D-Bus copy, then the firmware's system uuid
#: (DMI, readable by root).
MACHINE_ID_FILES = ("/etc/machine-id", "/var/lib/dbus/machine-id",
                    "/sys/class/dmi/id/product_uuid")
#: What is recorded: a hash of the machine id with this prefix, never the id
#: itself (``machine-id(5)``: not to be exposed; as
#: ``sd_id128_get_machine_app_specific``).
_MACHINE_SALT = b"compute-plugins compute node\0"


class IdentityError(exception.InputError):
    """The identity file cannot be read or written (exit 2).

    :param path: the file.
    :param reason: what is wrong.
    """

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__("compute node identity %s: %s" % (path, reason))


class HostRenamed(exception.InputError):
    """The host's name is not the one its state directory belongs to
    (exit 2: nothing was registered under the new name).

    :param path: the identity file (or the old name's ledger).
    :param recorded: the name the state directory belongs to.
    :param found: the name discovered now.
    :param node: the node's uuid (None: a state directory from before the
        identity file, known by its ledger).
    """

    def __init__(self, path: str, recorded: str, found: str,
                 node: Optional[str]) -> None:
        self.path = path
        self.recorded = recorded
        self.found = found
        self.node = node
        super().__init__(
            "the host's name is now %s but its state directory belongs to "
            "compute node %s%s (%s): restore the old name, or rename the node "
            "on purpose with `compute-plugins host rename %s %s` (the agent "
            "stopped; it moves its Placement providers, claims ledger and "
            "host-state records)"
            % (found, recorded, "" if node is None else " (uuid %s)" % node, path,
               recorded, found))


class RenameUnfinished(exception.InputError):
    """A ``host rename`` of the node stopped half-way (exit 2): its
    records are partly under each name; the agent must not start under
    either until the rename is run again to its end.

    :param node: the identity, its ``renaming`` set.
    """

    def __init__(self, node: NodeIdentity) -> None:
        self.node = node
        super().__init__(
            "a rename of compute node %s to %s stopped half-way (%s): run "
            "`compute-plugins host rename %s %s` again to finish it, then "
            "start the agent under the new name"
            % (node.host, node.renaming, node.path, node.host, node.renaming))


class MachineChanged(exception.InputError):
    """The state directory was made on another machine (exit 2): copied
    from another host, its node's uuid would be that host's.

    :param node: the identity recorded (its ``machine``).
    :param found: the machine found now.
    """

    def __init__(self, node: NodeIdentity, found: Machine) -> None:
        self.node = node
        self.found = found
        state_dir = os.path.dirname(node.path) or "."
        super().__init__(
            "the state directory %s belongs to compute node %s (uuid %s) on "
            "another machine: this machine's id (%s) is not the one recorded in "
            "%s; a state directory copied from another host must not be used. "
            "Start this host on an empty state directory to register it as a new "
            "host; if it is the same host and only its machine id changed (an "
            "OS reinstall), remove %s to record this machine (the node and its "
            "claims are kept; `compute-plugins host rename` if its name changed "
            "too)" % (state_dir, node.host, node.uuid, found.source, node.path,
                      node.path))


class AgentRunning(exception.InputError):
    """Another process holds the state directory's lock (exit 2).

    :param state_dir: the state directory.
    :param pid: the holder's pid as it wrote it (None: unreadable).
    """

    def __init__(self, state_dir: str, pid: Optional[int]) -> None:
        self.state_dir = state_dir
        self.pid = pid
        super().__init__(
            "another compute agent (%s) runs on the state directory %s: stop "
            "it first (one agent per host; lock %s)"
            % ("pid %d" % pid if pid is not None else "pid unknown", state_dir,
               os.path.join(state_dir, LOCK_FILE)))


@dataclasses.dataclass(frozen=True)
class Machine:
    """The machine an agent runs on.

    :param id: a hash of its machine id (what the identity records).
    :param source: the file it was read from.
    """

    id: str
    source: str


def machine_id(path: Optional[str] = None) -> Optional[Machine]:
    """This machine's identity: ``path`` (``[compute] machine_id_file``),
    else the first of :data:`MACHINE_ID_FILES` that holds one (None: none
    does, e.g. a container without ``/etc/machine-id``: the machine is not
    checked).

    :param path: the file to read ("": none, the machine is not checked).
    :raises IdentityError: ``path`` cannot be read or is empty.
    """
    if path == "":
        return None
    for source in (path,) if path is not None else MACHINE_ID_FILES:
        try:
            with open(source, "rb") as f:
                raw = f.read(4096).strip().lower()
        except OSError as err:
            if path is not None:
                raise IdentityError(path, "cannot read the machine id: %s"
                                    % (err.strerror or err)) from None
            continue
        # NOTE: systemd writes "uninitialized" until the first boot is done.
        if raw and raw != b"uninitialized":
            digest = hashlib.sha256(_MACHINE_SALT + raw).hexdigest()[:32]
            return Machine(digest, source)
        if path is not None:
            raise IdentityError(path, "no machine id in it (empty)")
    return None


@dataclasses.dataclass(frozen=True)
class NodeIdentity:
    """The compute node a state directory belongs to.

    :param host: its host name (the node name, the root provider's name).
    :param uuid: made on the first start, never changed (the agent's lease
        holder in the host-state store).
    :param path: the identity file.
    :param renaming: the name a ``host rename`` that has not finished is
        moving the node to (None: none): the agent does not start until it
        is run again to its end.
    :param machine: the machine it was recorded on (:attr:`Machine.id`;
        None: not known, an identity from before it was recorded or a
        machine without an id).
    """

    host: str
    uuid: str
    path: str
    renaming: Optional[str] = None
    machine: Optional[str] = None


def path_for(state_dir: str) -> str:
    return os.path.join(state_dir, IDENTITY_FILE)


def read(state_dir: str) -> Optional[NodeIdentity]:
    """The identity recorded in ``state_dir`` (None: none yet).

    :raises IdentityError: the file exists but is not an identity.
    """
    path = path_for(state_dir)
    if not os.path.lexists(path):
        return None
    try:
        document = jsonload.loads(files.read_bytes(path))
    except files.UnreadableFile as err:
        raise IdentityError(path, err.reason) from None
    except ValueError as err:
        raise IdentityError(path, "not JSON: %s" % err) from None
    if (not isinstance(document, dict) or document.get("format") != FORMAT
            or document.get("version") != FORMAT_VERSION):
        raise IdentityError(path, "not a compute node identity (\"format\": %r, "
                            "\"version\": %d)" % (FORMAT, FORMAT_VERSION))
    host, node = document.get("host"), document.get("uuid")
    if not isinstance(host, str) or not host:
        raise IdentityError(path, "\"host\" is not a host name")
    try:
        node = str(uuid.UUID(str(node)))
    except ValueError:
        raise IdentityError(path, "\"uuid\" %r is not a uuid" % (node,)) from None
    renaming = document.get("renaming")
    if renaming is not None and (not isinstance(renaming, str) or not renaming):
        raise IdentityError(path, "\"renaming\" is not a host name")
    machine = document.get("machine")
    if machine is not None and (not isinstance(machine, str) or not machine):
        raise IdentityError(path, "\"machine\" is not a machine id")
    return NodeIdentity(host, node, path, renaming, machine)


#: :func:`write`'s ``machine`` default: the one recorded already.
KEEP = "keep"


def write(state_dir: str, host: str, node: str,
          renaming: Optional[str] = None,
          machine: Optional[str] = KEEP) -> NodeIdentity:
    """Record ``host`` and ``node`` in ``state_dir`` (atomically, 0600).

    :param renaming: a rename to this name is under way (``host rename``
        records it before it changes anything, and drops it last).
    :param machine: the machine's :attr:`Machine.id` (None: none;
        :data:`KEEP`: the one recorded, if any).
    :raises IdentityError: it cannot be written.
    """
    path = path_for(state_dir)
    if machine == KEEP:
        try:
            current = read(state_dir)
        except IdentityError:
            current = None
        machine = None if current is None else current.machine
    document: dict[str, Any] = {"format": FORMAT, "version": FORMAT_VERSION,
                                "host": host, "uuid": node}
    if renaming is not None:
        document["renaming"] = renaming
    if machine is not None:
        document["machine"] = machine
    text = json.dumps(document, indent=1, sort_keys=True)
    try:
        files.ensure_private_dir(state_dir)
        dir_fd = files.open_dir(state_dir)
        try:
            files.write_atomic(dir_fd, IDENTITY_FILE, text, mode=files.PRIVATE_FILE_MODE)
        finally:
            os.close(dir_fd)
    except OSError as err:
        raise IdentityError(path, "cannot write: %s" % (err.strerror or err)) from None
    return NodeIdentity(host, node, path, renaming, machine)


def ledger_hosts(state_dir: str) -> list[str]:
    """The hosts whose claims ledgers are in ``state_dir`` (by the host each
    ledger says it belongs to)."""
    found = []
    for path in sorted(glob.glob(os.path.join(glob.escape(state_dir),
                                              "*" + _LEDGER_SUFFIX))):
        try:
            document: Any = jsonload.loads(files.read_bytes(path))
        except (files.UnreadableFile, ValueError):
            continue
        if isinstance(document, dict) and isinstance(document.get("host"), str):
            found.append(document["host"])
    return found


def ensure(state_dir: str, hostname: str,
           machine: Optional[Machine] = None) -> NodeIdentity:
    """The node ``state_dir`` belongs to, checked against the machine and
    the host name found now; recorded on the first start.

    A state directory from before the identity file is recognised by its
    claims ledger: one of another host name is a rename too. An identity
    from before the machine was recorded gets this one's.

    :param machine: the machine the agent runs on (:func:`machine_id`;
        None: not checked, not recorded).
    :raises MachineChanged: the state directory was made on another
        machine.
    :raises HostRenamed: the name changed.
    :raises IdentityError: the file cannot be read or written.
    """
    current = read(state_dir)
    if current is not None:
        if (machine is not None and current.machine is not None
                and current.machine != machine.id):
            raise MachineChanged(current, machine)
        if current.renaming is not None:
            raise RenameUnfinished(current)
        if current.host != hostname:
            raise HostRenamed(current.path, current.host, hostname, current.uuid)
        if machine is not None and current.machine is None:
            return write(state_dir, current.host, current.uuid, machine=machine.id)
        return current
    others = [h for h in ledger_hosts(state_dir) if h != hostname]
    if others:
        from compute_plugins.compute import ledger

        raise HostRenamed(ledger.path_for(state_dir, others[0]), others[0], hostname,
                          None)
    return write(state_dir, hostname, str(uuid.uuid4()),
                 machine=None if machine is None else machine.id)


class StateDirLock:
    """An exclusive ``flock`` on ``<state_dir>/agent.lock`` while the block
    runs (the agent's life), its pid written inside.

    :raises AgentRunning: another process holds it (on enter).
    """

    def __init__(self, state_dir: str) -> None:
        self.state_dir = state_dir
        self.path = os.path.join(state_dir, LOCK_FILE)
        self._fd: Optional[int] = None

    def __enter__(self) -> StateDirLock:
        """:raises AgentRunning: another process holds it.
        :raises IdentityError: it cannot be opened (a symlink or a
            directory planted there, no permission)."""
        try:
            files.ensure_private_dir(self.state_dir)
            # NOTE: O_NOFOLLOW: a planted symlink fails (ELOOP), its
            # target is never created nor truncated.
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW
                         | os.O_CLOEXEC | os.O_NONBLOCK, files.PRIVATE_FILE_MODE)
        except OSError as err:
            raise IdentityError(self.path, "cannot open the agent's lock: %s%s" % (
                err.strerror or err, " (a symbolic link)" if err.errno == errno.ELOOP
                else "")) from None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise IdentityError(self.path, "the agent's lock is not a regular file")
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            os.close(fd)
            if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise IdentityError(self.path, "cannot lock: %s"
                                    % (err.strerror or err)) from None
            raise AgentRunning(self.state_dir, self._holder()) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.write(fd, b"%d\n" % os.getpid())
        self._fd = fd
        return self

    def _holder(self) -> Optional[int]:
        try:
            with open(self.path, "rb") as f:
                return int(f.read(32).strip() or b"x")
        except (OSError, ValueError):
            return None

    def __exit__(self, *exc_info: Any) -> None:
        # NOTE: the file stays: removing a lock file races with the next
        # taker (it would lock a file nobody else opens).
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


__all__ = ["IDENTITY_FILE", "KEEP", "LOCK_FILE", "MACHINE_ID_FILES", "AgentRunning",
           "HostRenamed", "IdentityError", "Machine", "MachineChanged", "NodeIdentity",
           "RenameUnfinished", "StateDirLock", "ensure", "ledger_hosts", "machine_id",
           "path_for", "read", "write"]
