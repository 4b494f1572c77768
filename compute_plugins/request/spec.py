"""The RequestSpec: a request parsed once, typed, versioned and immutable.

Built once (:meth:`RequestSpec.build`) from a flavor, image properties,
requested ports and scheduler hints: every loaded plugin parses the keys of
its namespace (its ``parse_request`` hook) into its typed request and turns
that into request groups (its ``request_groups`` hook); the framework parses
the generic keys (``resources[N]:``, ``trait[N]:``, ``member_of[N]``,
``group_policy``). All problems of all plugins are raised together as one
:class:`~compute_plugins.request.errors.RequestValidationError`; a plugin
that fails while parsing (anything but that error: a bug of the plugin) is
one problem naming the plugin and its entry point, and the others go on.

Every value is checked when it is built (:class:`RequestGroup`, each
plugin's request and assignment, the spec itself:
:func:`~compute_plugins.request.types.check`), by the rules the reader
applies, so a spec that exists always reads back from its JSON equal.

The scheduler asks Placement from the groups
(:mod:`compute_plugins.scheduler.providers`; ``validate`` previews the
allocation-candidates query they make: :mod:`compute_plugins.scheduler.query`).
The scheduler's decision is recorded copy-on-write
(:meth:`RequestSpec.with_decision`, :meth:`RequestSpec.with_assignment`).

Every field is immutable (frozen dataclasses, tuples, frozensets,
:class:`~compute_plugins.request.types.FrozenMap`), so one spec can be shared
between threads freely.

JSON (:meth:`to_json` / :meth:`from_json`)::

    {"format": "compute_plugins.RequestSpec", "version": "2.0",
     "plugins": {"numa": "1.0", ...},          # per-plugin data versions
     "flavor": {...}, "image": {"name": ..., "properties": {...}},
     "ports": [...], "hints": {...},
     "generic": {"group_policy": ..., "groups": [...]},
     "requests": {"numa": {...}, ...},          # each plugin's typed request
     "groups": [...],                           # all request groups
     "decision": null | {"host": ..., "nodename": ..., "allocations": {...},
                         "mappings": {...}, "assignments": {"numa": {...}}}}

A reader refuses a payload of a newer format version (same major, higher
minor, or another major), a plugin that is not loaded, or plugin data newer
than the loaded plugin's ``version``.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional

from oslo_log import log as logging

from compute_plugins.request import formats, generic
from compute_plugins.request.errors import (
    Problem,
    RequestFormatError,
    RequestInputError,
    RequestValidationError,
)
from compute_plugins.request.groups import (
    KIND_GENERIC,
    KIND_ROOT,
    Decision,
    PluginAssignment,
    PluginRequest,
    RequestGroup,
)
from compute_plugins.request.inputs import Flavor, Port, RequestInput
from compute_plugins.request.types import (
    VERSION_RE,
    CodecError,
    FrozenMap,
    build_decoded,
    built_by_decode,
    check,
    check_fields,
    checked_when_built,
    decode,
    encode,
    thaw_json,
)
from compute_plugins.runtime import PluginFailed, PluginSet
from compute_plugins.util import jsonload
from compute_plugins.util.text import ascii_int

__all__ = ["FORMAT", "FORMAT_VERSION", "Decision", "RequestGroup",
           "RequestSpec", "SpecReader", "build_request_spec"]

LOG = logging.getLogger(__name__)

FORMAT = "compute_plugins.RequestSpec"
#: Version of the JSON payload this reader reads (a writer writes the
#: lowest that carries a spec, :func:`formats.lowest`). Bump the minor for
#: additions an older reader may refuse, the major for incompatible
#: changes. 2.0: request groups name their topology generically (kind
#: ``guest_node``, ``node``); 2.1: a port's ``tunneled`` and
#: ``affinity_policy``.
FORMAT_VERSION = formats.CURRENT
#: A format or plugin data version: ``MAJOR.MINOR``.
_VERSION_RE = VERSION_RE


def _version(text: Any, what: str) -> tuple[int, int]:
    if type(text) is str and _VERSION_RE.match(text):
        # NOTE: the usual ``"1.2"`` (about ten a spec read): what the rules
        # below give it, without them.
        major, minor = text.split(".")
        return int(major), int(minor)
    try:
        major, minor = str(text).split(".")
        return ascii_int(major), ascii_int(minor)
    except ValueError:
        raise RequestFormatError("%s %r is not a MAJOR.MINOR version"
                                 % (what, text)) from None


def _newer(payload: tuple[int, int], reader: tuple[int, int]) -> bool:
    return payload[0] != reader[0] or payload[1] > reader[1]


@dataclasses.dataclass(frozen=True)
class RequestSpec:
    """A request parsed once by every plugin; see the module docstring.

    Build it with :meth:`build` (or :func:`build_request_spec`), not directly.
    """

    flavor: Flavor
    image_properties: FrozenMap[str, Any] = dataclasses.field(
        default_factory=FrozenMap)
    image_name: str = ""
    ports: tuple[Port, ...] = ()
    hints: FrozenMap[str, Any] = dataclasses.field(default_factory=FrozenMap)
    requests: FrozenMap[str, PluginRequest] = dataclasses.field(
        default_factory=FrozenMap)
    plugin_versions: FrozenMap[str, str] = dataclasses.field(
        default_factory=FrozenMap)
    generic: generic.GenericRequest = dataclasses.field(
        default_factory=generic.GenericRequest)
    groups: tuple[RequestGroup, ...] = ()
    decision: Optional[Decision] = None

    def __post_init__(self) -> None:
        """Check every field, so that a spec that exists reads back from its
        JSON equal (:func:`~compute_plugins.request.types.check`).

        :raises CodecError: (a ``ValueError``) naming the field and the rule.
        """
        # NOTE: :meth:`from_dict` builds it from fields it has just
        # decoded by the same rules (:func:`~compute_plugins.request.types.
        # build_decoded`): not checked again, its own rules below are.
        decoded = built_by_decode(self)
        if not decoded:
            check_fields(self, "RequestSpec")
        for name, version in self.plugin_versions.items():
            if not _VERSION_RE.match(version):
                raise CodecError("RequestSpec.plugin_versions.%s: %r is not "
                                 "a MAJOR.MINOR version" % (name, version))
        for name, req in self.requests.items():
            if name not in self.plugin_versions:
                raise CodecError("RequestSpec.requests.%s: the plugin has no "
                                 "version in plugin_versions" % name)
            if not isinstance(req, PluginRequest):
                raise CodecError("RequestSpec.requests.%s: a %s is not a "
                                 "PluginRequest" % (name, type(req).__name__))
        if self.decision is not None:
            for name, assignment in self.decision.assignments.items():
                if name not in self.plugin_versions:
                    raise CodecError(
                        "RequestSpec.decision.assignments.%s: the plugin has "
                        "no version in plugin_versions" % name)
                _check_assignment(name, assignment, decoded)

    # -- building -------------------------------------------------------------

    @classmethod
    def build(cls, plugins: PluginSet, request_input: RequestInput) -> RequestSpec:
        """Parse ``request_input`` with every plugin, once
        (:meth:`PluginSet.parse <compute_plugins.runtime.PluginSet.parse>`),
        and the generic keys.

        A plugin that raises anything but the validation error (or a
        :class:`~compute_plugins.exception.ConfigError`, raised as it is) in
        its ``parse_request`` or ``request_groups`` (a bug of that plugin), or
        that returns what the model cannot hold (a value out of range, a
        request or group of the wrong type), is one :class:`Problem` naming
        the plugin and its entry point; the other plugins go on, and every
        problem is raised together.

        :param plugins: the loaded plugins.
        :param request_input: the flavor, image, ports and hints.
        :raises RequestValidationError: every problem found, by every plugin.
        :raises RequestInputError: the input itself cannot be recorded in a
            spec (a value JSON cannot carry).
        """
        parsed = plugins.parse(request_input)
        problems: list[Problem] = list(parsed.problems)
        groups: list[RequestGroup] = list(parsed.groups)
        view = request_input.for_plugin("framework")
        generic_req = generic.parse(view, parsed.claimed)
        from compute_plugins.runtime.manager import installed_owned_keys
        disabled = {name: keys for name, keys in installed_owned_keys().items()
                    if name not in plugins}
        generic.unknown_keys(view, parsed.claimed | view.claimed, disabled)
        if not parsed.problems:
            generic.unprovided(view, parsed.claimed | view.claimed)
        problems.extend(view.problems)
        groups.extend(generic_req.groups)
        problems.extend(_check_groups(groups))
        if problems:
            raise RequestValidationError(problems)
        try:
            return cls(
                flavor=request_input.flavor,
                image_properties=request_input.image_properties,
                image_name=request_input.image_name,
                ports=request_input.ports,
                hints=request_input.hints,
                requests=parsed.requests,
                plugin_versions=parsed.versions,
                generic=generic_req,
                groups=tuple(groups),
            )
        except CodecError as err:
            raise RequestInputError("the request cannot be recorded in a "
                                    "RequestSpec: %s" % err) from None

    # -- reading ----------------------------------------------------------------

    def request(self, plugin: str) -> Optional[PluginRequest]:
        """``plugin``'s typed request (None when it had nothing to ask)."""
        return self.requests.get(plugin)

    # -- the scheduler's decision (copy-on-write) ----------------------------------

    def with_decision(self, decision: Optional[Decision]) -> RequestSpec:
        """A copy of this spec with ``decision`` recorded (None clears it).

        :raises ValueError: an assignment that is not a PluginAssignment
            with every field valid (the plugin's own type is checked where
            it is made, :meth:`PluginSet.fit
            <compute_plugins.runtime.PluginSet.fit>`, and read,
            :meth:`from_dict`).
        """
        if decision is not None:
            for name, assignment in decision.assignments.items():
                _check_assignment(name, assignment)
        decided = dataclasses.replace(self, decision=decision)
        # NOTE: every field but the decision is this spec's own (the same
        # objects): the request's encoding is this spec's (to_json), made
        # once for every decision recorded in a copy of it.
        object.__setattr__(decided, _REQUEST_OF, self.__dict__.get(_REQUEST_OF, self))
        return decided

    def with_assignment(self, plugin: str, assignment: PluginAssignment) -> RequestSpec:
        """A copy with ``plugin``'s assignment set in the recorded decision.

        :raises ValueError: no decision recorded yet, or a wrong type.
        """
        if self.decision is None:
            raise ValueError("record a decision (with_decision) before "
                             "assignments")
        _check_assignment(plugin, assignment)
        assignments = dict(self.decision.assignments)
        assignments[plugin] = assignment
        return dataclasses.replace(self, decision=dataclasses.replace(
            self.decision, assignments=FrozenMap(assignments)))

    # -- serialisation ------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The JSON payload, at the lowest format version that carries it."""
        doc = self._request_dict()
        doc["decision"] = self._decision_dict()
        return doc

    def _decision_dict(self) -> Optional[dict[str, Any]]:
        """The payload's ``decision``."""
        if self.decision is None:
            return None
        decision = encode(self.decision)
        decision["assignments"] = {name: encode(a) for name, a in
                                   self.decision.assignments.items()}
        return decision  # type: ignore[no-any-return]

    def _request_dict(self) -> dict[str, Any]:
        """The payload but its ``decision``: what the spec asks."""
        # NOTE: at the lowest version that carries the spec: an older
        # reader reads it if it needs nothing that reader lacks, else
        # refuses it as newer (see compute_plugins.request.formats).
        version, ports = formats.lowest(encode(self.ports))
        return {
            "format": FORMAT,
            "version": version,
            "plugins": dict(self.plugin_versions),
            "flavor": encode(self.flavor),
            "image": {"name": self.image_name,
                      "properties": thaw_json(self.image_properties)},
            "ports": ports,
            "hints": thaw_json(self.hints),
            "generic": encode(self.generic),
            "requests": {name: encode(req) for name, req in self.requests.items()},
            "groups": encode(self.groups),
        }

    def to_json(self, **kwargs: Any) -> str:
        """:meth:`to_dict` as JSON, keys sorted (``kwargs``: json.dumps's).

        Without ``kwargs`` the text of what the spec asks is made once per
        spec and kept with it (when every plugin's request is a frozen,
        checked value: then none of it can change), and
        shared with the specs :meth:`with_decision` makes of it (their
        other fields are the same objects); only the decision is encoded
        per call. A
        scheduler encodes the decided spec of each offer (issue 19: about
        1.5 ms a decision, the request's parts the same at every offer).
        The text is the same, byte for byte, as ``json.dumps(to_dict(),
        sort_keys=True)``: ``decision`` is the first key sorted.
        """
        if kwargs:
            return json.dumps(self.to_dict(), sort_keys=True, **kwargs)
        source = self.__dict__.get(_REQUEST_OF, self)
        request = source.__dict__.get(_REQUEST_JSON)
        if request is None:
            request = json.dumps(source._request_dict(), sort_keys=True)
            # NOTE: kept only when no plugin's request can change (a
            # plugin may give a request that is not a frozen dataclass:
            # its text is made anew at each call, as it is now).
            if all(checked_when_built(req) for req in source.requests.values()):
                object.__setattr__(source, _REQUEST_JSON, request)
        return '{"decision": %s, %s' % (
            json.dumps(self._decision_dict(), sort_keys=True), request[1:])

    @classmethod
    def from_dict(cls, doc: Any, plugins: PluginSet) -> RequestSpec:
        """Read a payload written by :meth:`to_dict`.

        The payload is validated strictly, never re-derived from the flavor:
        the compute host executes what the scheduler serialised. Every
        container must have its type, every key must be known, integers are
        0..2**31-1 and policy fields one of their values (see
        :func:`~compute_plugins.request.types.decode`).

        :param plugins: the loaded plugins.
        :raises RequestFormatError: not a RequestSpec payload, a newer format,
            a plugin not loaded or newer than the loaded one, a bad shape or
            value.
        """
        return cls._read(doc, plugins, None)

    @classmethod
    def _read(cls, doc: Any, plugins: PluginSet,
              parts: Optional[SpecReader]) -> RequestSpec:
        """:meth:`from_dict`, the request part kept in ``parts``: only for
        a document :func:`~compute_plugins.util.jsonload.loads` read (its
        key, the part's JSON text, is that of a Python document's tuple
        as of a list: a Python document is never read with it)."""
        try:
            return cls._from_dict(doc, plugins, parts)
        except (CodecError, KeyError, TypeError, ValueError) as err:
            if isinstance(err, RequestFormatError):
                raise
            raise RequestFormatError("bad RequestSpec payload: %s" % err) from None

    @classmethod
    def _from_dict(cls, doc: Any, loaded: PluginSet,
                   parts: Optional[SpecReader] = None) -> RequestSpec:
        _check_header(doc)
        doc = formats.upgraded(doc, _version(doc["version"], "format version"))
        payload_plugins = _check_plugins(doc["plugins"], loaded)
        image = _expect(doc["image"], Mapping, "image")
        unknown = set(image) - {"name", "properties"}
        if unknown:
            raise CodecError("image: unknown field(s) %s" % ", ".join(sorted(unknown)))
        flavor = decode(Flavor, doc["flavor"], "flavor")
        image_properties = decode(FrozenMap[str, Any], image.get("properties", {}),
                                  "image.properties")
        image_name = decode(str, image.get("name", ""), "image.name")
        ports = decode(tuple[Port, ...], doc["ports"], "ports")
        hints = decode(FrozenMap[str, Any], doc["hints"], "hints")
        # NOTE: a free-form value decodes as it is (``freeze_json``), but a
        # spec holds only what JSON can carry back (``1e400`` reads as inf):
        # the check build_decoded skips below, done here for these two.
        check(FrozenMap[str, Any], image_properties, "RequestSpec.image_properties")
        check(FrozenMap[str, Any], hints, "RequestSpec.hints")
        key = None if parts is None else parts.key(doc)
        part = None if key is None or parts is None else parts.part(loaded, key)
        if part is None:
            requests: FrozenMap[str, PluginRequest] = FrozenMap(
                _decode_requests(doc["requests"], payload_plugins, loaded))
            generic_req: generic.GenericRequest = decode(
                generic.GenericRequest, doc["generic"], "generic")
            groups: tuple[RequestGroup, ...] = decode(
                tuple[RequestGroup, ...], doc["groups"], "groups")
        else:
            requests, generic_req, groups = part
        spec = build_decoded(
            cls,
            flavor=flavor,
            image_properties=image_properties,
            image_name=image_name,
            ports=ports,
            hints=hints,
            requests=requests,
            plugin_versions=FrozenMap(payload_plugins),
            generic=generic_req,
            groups=groups,
            decision=_decode_decision(doc["decision"], payload_plugins, loaded),
        )
        if part is None:
            _check_derived_groups(spec, loaded)
            if key is not None and parts is not None:
                parts.keep(loaded, key, (requests, generic_req, groups))
        return spec

    @classmethod
    def from_json(cls, text: str, plugins: PluginSet,
                  parts: Optional[SpecReader] = None) -> RequestSpec:
        """Read a payload written by :meth:`to_json` (see :meth:`from_dict`)."""
        try:
            doc = jsonload.loads(text)
        except ValueError as err:
            raise RequestFormatError("RequestSpec payload is not JSON: %s" % err) from None
        return cls._read(doc, plugins, parts)


#: A spec's request part, as :class:`SpecReader` keeps it: the plugins'
#: typed requests, the generic request and the request groups.
_RequestPart = tuple[FrozenMap[str, PluginRequest], generic.GenericRequest,
                     tuple[RequestGroup, ...]]


class SpecReader:
    """Reads the specs of one host's decisions (:meth:`read`), the request
    part of each decoded once per distinct text.

    Every instance of a flavor is decided with the same request part (the
    plugins' typed requests, the generic request and the request groups,
    and the plugins' data versions they were written with): what the
    scheduler derived from the flavor, its ports' requests included. Its
    decode and the check that its groups are those its requests give
    (the plugins' ``request_groups``) were a third of an agent's CPU per
    claim (``bench.scale.agent``). The part read earlier is kept, keyed by
    its exact JSON text (key order kept), and used again, so that only the
    rest (the flavor, image, ports, hints and the decision) is decoded per
    decision; a spec read so is equal to :meth:`RequestSpec.from_json`'s,
    and a payload that would be refused still is, with the same error.

    The parts are those of one :class:`~compute_plugins.runtime.PluginSet`
    (the loaded plugins' request types and versions): given another, the
    reader forgets them. At most ``size`` parts are kept (the most
    recently read). Thread-safe.

    :param size: how many request parts to keep.
    """

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self._plugins: Optional[PluginSet] = None
        self._parts: collections.OrderedDict[str, _RequestPart] = (
            collections.OrderedDict())
        self._lock = threading.Lock()

    def read(self, text: str, plugins: PluginSet) -> RequestSpec:
        """:meth:`RequestSpec.from_json` of ``text``, the request part kept.

        :raises RequestFormatError: as :meth:`RequestSpec.from_json`.
        """
        return RequestSpec.from_json(text, plugins, self)

    def __len__(self) -> int:
        """How many request parts are kept."""
        with self._lock:
            return len(self._parts)

    @staticmethod
    def key(doc: Mapping[str, Any]) -> Optional[str]:
        """The request part's key: its exact JSON text (None: the part is
        not a JSON document's; read, not kept)."""
        try:
            return json.dumps([doc["plugins"], doc["requests"], doc["generic"],
                               doc["groups"]], allow_nan=False)
        except (TypeError, ValueError):
            return None

    def part(self, plugins: PluginSet, key: str) -> Optional[_RequestPart]:
        """The request part kept under ``key`` for ``plugins`` (None: not
        kept, or kept for other plugins: all forgotten)."""
        with self._lock:
            if plugins is not self._plugins:
                self._parts.clear()
                self._plugins = plugins
                return None
            found = self._parts.get(key)
            if found is not None:
                self._parts.move_to_end(key)
            return found

    def keep(self, plugins: PluginSet, key: str, part: _RequestPart) -> None:
        """Keep ``part`` (read and checked for ``plugins``) under ``key``."""
        with self._lock:
            if plugins is not self._plugins:
                self._parts.clear()
                self._plugins = plugins
            self._parts[key] = part
            self._parts.move_to_end(key)
            while len(self._parts) > self.size:
                self._parts.popitem(last=False)


#: The keys of a payload, all required (``decision`` may be null).
PAYLOAD_KEYS = frozenset({"format", "version", "plugins", "flavor", "image",
                          "ports", "hints", "generic", "requests", "groups",
                          "decision"})


def _expect(value: Any, kind: type, where: str) -> Any:
    if not isinstance(value, kind):
        raise CodecError("%s: expected %s, got %s"
                         % (where, "an object" if kind is Mapping else kind.__name__,
                            type(value).__name__))
    return value


def _check_header(doc: Any) -> None:
    """A RequestSpec payload of a version this reader knows, with exactly
    the known keys."""
    if not isinstance(doc, Mapping) or doc.get("format") != FORMAT:
        raise RequestFormatError("not a %s payload" % FORMAT)
    if not isinstance(doc.get("version"), str):
        raise RequestFormatError("format version %r is not a MAJOR.MINOR "
                                 "version" % (doc.get("version"),))
    version = _version(doc["version"], "format version")
    ours = _version(FORMAT_VERSION, "format version")
    if version[0] < ours[0] and version not in formats.UPGRADES:
        raise RequestFormatError(
            "RequestSpec payload format %s is older than this reader "
            "supports (%s)" % (doc["version"], FORMAT_VERSION))
    if version not in formats.UPGRADES and _newer(version, ours):
        raise RequestFormatError(
            "RequestSpec payload format %s is newer than this reader "
            "supports (%s)" % (doc["version"], FORMAT_VERSION))
    missing, unknown = PAYLOAD_KEYS - set(doc), set(doc) - PAYLOAD_KEYS
    if missing or unknown:
        raise RequestFormatError(
            "RequestSpec payload: %s" % "; ".join(
                ["missing key(s) %s" % ", ".join(sorted(missing))] * bool(missing)
                + ["unknown key(s) %s" % ", ".join(sorted(map(str, unknown)))]
                * bool(unknown)))


def _check_plugins(payload_plugins: Any, loaded: PluginSet) -> dict[str, str]:
    """The payload's plugin versions; each plugin loaded and not newer."""
    _expect(payload_plugins, Mapping, "plugins")
    versions = {}
    for name, plugin_version in payload_plugins.items():
        if name not in loaded:
            raise RequestFormatError(
                "RequestSpec payload names plugin %r, which is not loaded "
                "(loaded: %s)" % (name, ", ".join(sorted(loaded)) or "none"))
        _expect(plugin_version, str, "plugins.%s" % name)
        ours = loaded.version(name)
        if _newer(_version(plugin_version, "plugin %s version" % name),
                  _version(ours, "plugin %s version" % name)):
            raise RequestFormatError(
                "RequestSpec payload has plugin %r data version %s, newer "
                "than the loaded plugin (%s)" % (name, plugin_version, ours))
        versions[name] = plugin_version
    return versions


def _decode_requests(doc: Any, payload_plugins: Mapping[str, str],
                     loaded: PluginSet) -> dict[str, PluginRequest]:
    """Each plugin's request, read with the request type it declares."""
    requests = {}
    for name, body in _expect(doc, Mapping, "requests").items():
        kind = loaded.request_type(name)
        if name not in payload_plugins or kind is None:
            raise RequestFormatError(
                "request of plugin %r, which the payload does not list or "
                "which declares no request type" % name)
        requests[name] = decode(kind, body, "requests.%s" % name)
    return requests


def _decode_decision(doc: Any, payload_plugins: Mapping[str, str],
                     loaded: PluginSet) -> Optional[Decision]:
    """The decision, each assignment read with the type its plugin declares."""
    if doc is None:
        return None
    body = dict(_expect(doc, Mapping, "decision"))
    assignments_doc = _expect(body.pop("assignments", {}), Mapping,
                              "decision.assignments")
    decision: Decision = decode(Decision, body, "decision")
    assignments = {}
    for name, adoc in assignments_doc.items():
        kind = loaded.assignment_type(name)
        if name not in payload_plugins or kind is None:
            raise RequestFormatError(
                "assignment of plugin %r, which is not loaded or declares no "
                "assignment type" % name)
        assignments[name] = decode(kind, adoc, "assignments.%s" % name)
    return build_decoded(Decision, host=decision.host, nodename=decision.nodename,
                         allocations=decision.allocations, mappings=decision.mappings,
                         assignments=FrozenMap(assignments))


def _check_derived_groups(spec: RequestSpec, loaded: PluginSet) -> None:
    """The payload's groups are what its typed requests give (the plugins'
    ``request_groups``; no flavor is parsed). Checked only when every
    plugin's data version is the loaded one: another version may derive
    groups differently, and its groups are then taken as written."""
    if any(loaded.version(name) != version
           for name, version in spec.plugin_versions.items()):
        return
    expected: list[RequestGroup] = []
    for name, req in spec.requests.items():
        try:
            expected.extend(loaded.request_groups(name, req))
        except PluginFailed as failed:
            raise RequestFormatError("bad RequestSpec payload: %s"
                                     % failed.reason()) from None
    expected.extend(spec.generic.groups)
    if collections.Counter(expected) != collections.Counter(spec.groups):
        raise RequestFormatError("bad RequestSpec payload: its request groups "
                                 "are not those of its plugins' requests")


def build_request_spec(
    plugins: PluginSet,
    flavor: Any,
    image: Any = None,
    ports: Sequence[Any] = (),
    hints: Optional[Mapping[str, Any]] = None,
) -> RequestSpec:
    """:meth:`RequestSpec.build` from JSON-like documents.

    :raises RequestInputError: a document is unusable.
    :raises RequestValidationError: the request breaks rules.
    """
    return RequestSpec.build(
        plugins, RequestInput.from_dicts(flavor, image, ports, hints))


def _check_assignment(plugin: str, assignment: Any, decoded: bool = False) -> None:
    """A :class:`PluginAssignment` with every field valid (``decoded``:
    checked already, by :func:`~compute_plugins.request.types.decode`; a
    frozen one was checked when it was built: :func:`checked_when_built`)."""
    if not isinstance(assignment, PluginAssignment):
        raise ValueError("assignment of plugin %r must be a PluginAssignment, "
                         "not %s" % (plugin, type(assignment).__name__))
    if not decoded and not checked_when_built(assignment):
        check_fields(assignment, "assignments.%s" % plugin)


#: Where a spec keeps the JSON text of what it asks (:meth:`RequestSpec.to_json`):
#: an attribute of the instance, not a field (not compared, not encoded).
_REQUEST_JSON = "_request_json"
#: Where a spec made by :meth:`RequestSpec.with_decision` keeps the spec
#: whose request it has (the same field values but the decision): the
#: one that keeps the request's text for all of them.
_REQUEST_OF = "_request_of"


def _check_groups(groups: Iterable[RequestGroup]) -> list[Problem]:
    """Rules that hold only for all groups together (see each helper)."""
    groups = list(groups)
    return (_suffix_clashes(groups) + _resourceless_groups(groups)
            + _trait_conflicts(groups))


def _suffix_clashes(groups: list[RequestGroup]) -> list[Problem]:
    """Two plugins may not ask for the same (reserved) suffix."""
    problems = []
    owners: dict[str, RequestGroup] = {}
    for group in groups:
        if not group.requester_id or group.kind in (KIND_GENERIC, KIND_ROOT):
            continue
        other = owners.get(group.requester_id)
        if other is not None:
            problems.append(Problem(
                "request", "resources%s" % group.requester_id, None,
                "request group suffix %r is used by plugin %s and plugin %s; "
                "suffixes starting with '_' are reserved for plugins"
                % (group.requester_id, other.owner, group.owner)))
        else:
            owners[group.requester_id] = group
    return problems


def _by_suffix(groups: list[RequestGroup]) -> dict[str, RequestGroup]:
    """The groups merged as the query merges them: ``root`` groups and the
    unsuffixed group together under ``""`` (both become root traits)."""
    merged: dict[str, RequestGroup] = {}
    for group in groups:
        suffix = "" if group.kind == KIND_ROOT else group.requester_id
        group = dataclasses.replace(group, requester_id=suffix)
        current = merged.get(suffix)
        merged[suffix] = group if current is None else current.merged_with(group)
    return merged


def _resourceless_groups(groups: list[RequestGroup]) -> list[Problem]:
    """Placement (>= 1.36) refuses a numbered group without resources that is
    not in ``same_subtree``; a user's group never is."""
    return [Problem(
        "flavor", "resources%s" % suffix, None,
        "request group %r has traits or aggregates (trait%s:, member_of%s) "
        "but no resources: add resources%s:<CLASS>=<amount> with an amount "
        "above 0, or move them to the unsuffixed group"
        % (suffix, suffix, suffix, suffix))
        for suffix, group in _by_suffix(groups).items()
        if suffix and not group.resources and not group.choices]


def _trait_conflicts(groups: list[RequestGroup]) -> list[Problem]:
    """A trait both required and forbidden of one provider (one group, or
    the root: unsuffixed and root traits) can never be satisfied."""
    problems = []
    for suffix, group in _by_suffix(groups).items():
        for trait in sorted(group.required_traits & group.forbidden_traits):
            problems.append(Problem(
                "request", "trait%s:%s" % (suffix, trait), None,
                "trait %s is both required and forbidden in request group "
                "%s (flavor, image or a plugin's rule): remove one"
                % (trait, repr(suffix) if suffix else "'' (the host)")))
    return problems
