"""The host's durable record of the claims in force.

Each claim the agent executed is kept here until it is released: the
consumer, the id of the store decision it answered and the RequestSpec
(with its decision) exactly as the scheduler serialised it. The plugins'
host states are built under the assignments it holds
(:meth:`Ledger.assignments`), so a restarted agent publishes what is really
used and never executes a claimed decision a second time.

The file is ``<state_dir>/<safe host name>.ledger.json`` (0600, in a 0700
directory), rewritten atomically (:func:`compute_plugins.util.files.write_atomic`)
on every change. Unlike the plugins' checkpoint, a ledger that cannot be
read is never ignored (it holds the claims: discarding it would hand their
CPUs and devices out twice): :class:`LedgerError`, one line naming the file
and what is wrong, and the agent does not start. The file also records the
uuid of the host-state store the claims were last reconciled with
(``"store"``): a store with another uuid was recreated, and gets the claims
back from the ledger. A missing or empty ledger while the store or
Placement still show claims is refused (:class:`LedgerMissing`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
from collections.abc import Mapping
from typing import Optional

from compute_plugins import exception
from compute_plugins.plugin import names
from compute_plugins.request.errors import RequestFormatError
from compute_plugins.request.groups import PluginAssignment
from compute_plugins.request.spec import RequestSpec
from compute_plugins.runtime import PluginSet
from compute_plugins.util import files, jsonload

FORMAT = "compute-plugins-ledger"
FORMAT_VERSION = 1


class LedgerError(exception.InputError):
    """The ledger file cannot be read or written (exit 2 on the command
    line: the operator must look at it; nothing is discarded).

    :param path: the ledger file.
    :param reason: what is wrong, in words.
    """

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__("claims ledger %s: %s (it holds the host's claims: "
                         "fix or move it by hand; it is never discarded)"
                         % (path, reason))


class LedgerMissing(exception.InputError):
    """The ledger is missing or empty while the host-state store or
    Placement still show claims on the host (exit 2): starting would hand
    the guests' CPUs and devices out again.

    :param path: the ledger file.
    :param missing: True: no file; False: a ledger without claims.
    :param where: what still shows claims, in words (the store, Placement).
    :param rebuildable: whether the store holds the claims (False: only
        Placement's allocations are left, ``--rebuild-ledger`` would
        rebuild nothing).
    """

    def __init__(self, path: str, missing: bool, where: str,
                 rebuildable: bool = True) -> None:
        self.path = path
        self.missing = missing
        self.where = where
        self.rebuildable = rebuildable
        what = ("rebuild the ledger from the store with `compute-plugins report "
                "--rebuild-ledger`, or release those consumers first" if rebuildable
                else "the host-state store holds no claim to rebuild it from: once "
                "those guests are gone, free their allocations (DELETE "
                "/allocations/{consumer}), then start the agent")
        super().__init__(
            "claims ledger %s is %s but %s: the guests may still run; %s"
            % (path, "missing" if missing else "empty", where, what))


@dataclasses.dataclass(frozen=True)
class LedgerEntry:
    """One claim in force.

    :param consumer: the consumer (instance) uuid.
    :param decision_id: the store decision the claim answered.
    :param spec: the RequestSpec with its decision, as read from the
        scheduler's JSON (never re-derived from a flavor).
    :param spec_json: that JSON, as the scheduler wrote it.
    """

    consumer: str
    decision_id: int
    spec: RequestSpec
    spec_json: str


def path_for(state_dir: str, host: str) -> str:
    """``<state_dir>/<safe file name of host>.ledger.json``
    (:func:`compute_plugins.plugin.names.safe_file_name`: no host name puts it
    outside the directory)."""
    return os.path.join(state_dir, "%s.ledger.json" % names.safe_file_name(host))


def _ledger_text(host: str, entries: Mapping[str, LedgerEntry],
                 store_id: Optional[str]) -> str:
    """The ledger file's JSON: a claim a line, its spec the canonical text
    :meth:`Ledger.record` kept (not decoded and encoded again at every
    write: Python's encoder with ``indent`` is its pure-Python one, the
    agent's CPU per claim growing with the claims the host holds)."""
    claims = ",\n".join(' %s: {"decision_id": %d, "spec": %s}'
                         % (json.dumps(consumer), int(entry.decision_id), entry.spec_json)
                         for consumer, entry in sorted(entries.items()))
    tail = {"format": FORMAT, "host": host, "version": FORMAT_VERSION}
    if store_id is not None:
        tail["store"] = store_id
    rest = json.dumps(tail, sort_keys=True)[1:]
    return '{"claims": {%s}, %s\n' % ("\n" + claims + "\n" if claims else "", rest)


class Ledger:
    """The claims in force on one host, kept in a file.

    Read with :meth:`load`; every change is written before it returns.
    Thread-safe.

    :param path: the ledger file.
    :param host: the host whose claims it holds.
    :param plugins: the loaded plugins, to read the specs back.
    """

    def __init__(self, path: str, host: str, plugins: PluginSet) -> None:
        self.path = path
        self.host = host
        self._plugins = plugins
        self._entries: dict[str, LedgerEntry] = {}
        self._lock = threading.Lock()
        #: Whether the file existed when it was read.
        self.existed = False
        #: The uuid of the host-state store the claims were last reconciled
        #: with (None: not yet, or a ledger from before it was recorded).
        self.store_id: Optional[str] = None

    @classmethod
    def load(cls, state_dir: str, host: str, plugins: PluginSet) -> Ledger:
        """The ledger of ``host`` in ``state_dir`` (empty when the file does
        not exist yet).

        :raises LedgerError: the file exists but cannot be read, is not a
            ledger of this format and host, or holds a spec the loaded
            plugins cannot read (a plugin not enabled any more).
        """
        ledger = cls(path_for(state_dir, host), host, plugins)
        ledger._read()
        return ledger

    def _read(self) -> None:
        if not os.path.lexists(self.path):
            return
        self.existed = True
        try:
            document = jsonload.loads(files.read_bytes(self.path))
        except files.UnreadableFile as err:
            raise LedgerError(self.path, err.reason) from None
        except ValueError as err:
            raise LedgerError(self.path, "not JSON: %s" % err) from None
        if not isinstance(document, dict) or document.get("format") != FORMAT:
            raise LedgerError(self.path, "not a claims ledger (no \"format\": %r)"
                              % FORMAT)
        if document.get("version") != FORMAT_VERSION:
            raise LedgerError(self.path, "version %r; this compute-plugins reads "
                              "version %d" % (document.get("version"), FORMAT_VERSION))
        if document.get("host") != self.host:
            raise LedgerError(self.path, "written for host %r, this host is %r"
                              % (document.get("host"), self.host))
        store = document.get("store")
        if store is not None and not isinstance(store, str):
            raise LedgerError(self.path, "\"store\" is not a store uuid")
        self.store_id = store
        claims = document.get("claims")
        if not isinstance(claims, dict):
            raise LedgerError(self.path, "\"claims\" is not an object")
        for consumer, item in sorted(claims.items()):
            where = "claims.%s" % consumer
            if (not isinstance(item, dict) or set(item) != {"decision_id", "spec"}
                    or not isinstance(item["decision_id"], int)
                    or isinstance(item["decision_id"], bool)
                    or not isinstance(item["spec"], dict)):
                raise LedgerError(self.path, "%s: expected {\"decision_id\": "
                                  "integer, \"spec\": object}" % where)
            text = json.dumps(item["spec"], sort_keys=True)
            try:
                spec = RequestSpec.from_dict(item["spec"], self._plugins)
            except RequestFormatError as err:
                raise LedgerError(self.path, "%s: %s" % (where, err)) from None
            if spec.decision is None:
                raise LedgerError(self.path, "%s: the spec carries no decision"
                                  % where)
            self._entries[consumer] = LedgerEntry(consumer, item["decision_id"],
                                                  spec, text)

    def _write_with_lock(self, entries: Mapping[str, LedgerEntry],
                         store_id: Optional[str] = None) -> None:
        store_id = store_id or self.store_id
        text = _ledger_text(self.host, entries, store_id)
        directory = os.path.dirname(self.path) or "."
        try:
            files.ensure_private_dir(directory)
            dir_fd = files.open_dir(directory)
            try:
                files.write_atomic(dir_fd, os.path.basename(self.path), text,
                                   mode=files.PRIVATE_FILE_MODE)
            finally:
                os.close(dir_fd)
        except OSError as err:
            raise LedgerError(self.path, "cannot write: %s"
                              % (err.strerror or err)) from None

    # -- reading ------------------------------------------------------------

    def entries(self) -> dict[str, LedgerEntry]:
        """consumer -> its claim (a copy)."""
        with self._lock:
            return dict(self._entries)

    def get(self, consumer: str) -> Optional[LedgerEntry]:
        with self._lock:
            return self._entries.get(consumer)

    def __contains__(self, consumer: object) -> bool:
        with self._lock:
            return consumer in self._entries

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def assignments(self) -> dict[str, list[PluginAssignment]]:
        """plugin -> the assignments in force on the host (oldest claim
        first): what each plugin's ``host_state`` is built under."""
        with self._lock:
            entries = sorted(self._entries.values(), key=lambda e: e.decision_id)
        result: dict[str, list[PluginAssignment]] = {}
        for entry in entries:
            assert entry.spec.decision is not None
            for plugin, assignment in entry.spec.decision.assignments.items():
                result.setdefault(plugin, []).append(assignment)
        return result

    # -- writing ------------------------------------------------------------

    def record(self, consumer: str, decision_id: int, spec: RequestSpec,
               spec_json: str) -> LedgerEntry:
        """Keep the claim of ``consumer`` (replacing one it had); written
        before it returns.

        :raises LedgerError: the file cannot be written (nothing recorded).
        """
        if spec.decision is None:
            raise ValueError("consumer %s: a claim needs a spec with a decision"
                             % consumer)
        canonical = json.dumps(json.loads(spec_json), sort_keys=True)
        entry = LedgerEntry(consumer, int(decision_id), spec, canonical)
        with self._lock:
            wanted = dict(self._entries)
            wanted[consumer] = entry
            self._write_with_lock(wanted)
            self._entries = wanted
            self.existed = True
        return entry

    def set_store(self, store_id: str) -> None:
        """Record that the claims are those of the host-state store
        ``store_id`` (written before it returns).

        :raises LedgerError: the file cannot be written.
        """
        with self._lock:
            if store_id == self.store_id and self.existed:
                return
            self._write_with_lock(self._entries, store_id)
            self.store_id = store_id
            self.existed = True

    def rekey(self, consumer: str, new: str) -> Optional[LedgerEntry]:
        """Give the claim of ``consumer`` to consumer ``new`` (a move's
        hand-over or revert: the same decision, now another consumer's);
        None when ``consumer`` has no claim. Written before it returns.

        :raises LedgerError: the file cannot be written (nothing changed).
        :raises ValueError: ``new`` has a claim already.
        """
        with self._lock:
            if consumer not in self._entries:
                return None
            if new in self._entries:
                raise ValueError("consumer %s: its claim cannot be given to %s, "
                                 "which has one" % (consumer, new))
            wanted = dict(self._entries)
            entry = dataclasses.replace(wanted.pop(consumer), consumer=new)
            wanted[new] = entry
            self._write_with_lock(wanted)
            self._entries = wanted
            self.existed = True
        return entry

    def remove(self, consumer: str) -> Optional[LedgerEntry]:
        """Forget the claim of ``consumer`` (None when it had none); written
        before it returns.

        :raises LedgerError: the file cannot be written (nothing removed).
        """
        with self._lock:
            if consumer not in self._entries:
                return None
            wanted = dict(self._entries)
            entry = wanted.pop(consumer)
            self._write_with_lock(wanted)
            self._entries = wanted
            self.existed = True
        return entry
