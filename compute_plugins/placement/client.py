"""A small keystoneauth1 client for the Placement API.

One :class:`PlacementClient` wraps a keystoneauth1 ``Adapter``: the same code
talks to the embedded Placement (a requests transport that calls the WSGI app
in-process), to ``compute-plugins placement serve`` or any ``noauth2``
Placement (``--placement-url``, token ``admin``) and to a real cloud
(``[placement]`` keystoneauth options).

The microversion is negotiated once from Placement's root document: the
highest the server offers up to :data:`WANTED`, refusing anything below
:data:`MINIMUM`. Error responses become the typed exceptions of
:mod:`compute_plugins.placement.exception`. Every request is counted by
method and path template (:class:`CallLog`), which is what ``compute-plugins
report`` prints and the benchmarks compare.
"""

from __future__ import annotations

import collections
import re
import threading
from collections.abc import Callable, Mapping
from typing import Any, Optional

from keystoneauth1 import adapter as ks_adapter
from keystoneauth1 import exceptions as ks_exc
from keystoneauth1 import loading as ks_loading
from keystoneauth1 import session as ks_session
from keystoneauth1 import token_endpoint
from oslo_config import cfg
from oslo_log import log as logging

from compute_plugins import exception
from compute_plugins.placement import exception as pexc
from compute_plugins.util import jsonload, urls
from compute_plugins.util.text import printable

LOG = logging.getLogger(__name__)

#: The microversion the report client is written for.
WANTED = (1, 39)
#: The lowest microversion the report client works with: ``POST /reshaper``
#: (1.30) and consumer generations (1.28), error codes (1.23), aggregates with
#: generations (1.19), ``in_tree`` (1.14), provider bodies on create (1.20).
MINIMUM = (1, 30)

#: The token ``placement serve`` and any ``auth_strategy=noauth2`` Placement
#: accept as admin.
NOAUTH_TOKEN = "admin"

_UUID = re.compile(
    r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?"
    r"[0-9a-fA-F]{12}$"
)
# Path segments that follow these collection names are names, not uuids.
_NAMED = {"resource_classes": "{name}", "traits": "{name}"}


def path_template(path: str) -> str:
    """``/resource_providers/<uuid>/traits?x=1`` ->
    ``/resource_providers/{uuid}/traits``; query keys are kept, values
    dropped (``/resource_providers?in_tree``)."""
    path, _, query = path.partition("?")
    parts = path.split("/")
    for i, part in enumerate(parts):
        if _UUID.match(part):
            parts[i] = "{uuid}"
        elif i and parts[i - 1] in _NAMED and part:
            parts[i] = _NAMED[parts[i - 1]]
    out = "/".join(parts) or "/"
    if query:
        keys = [q.partition("=")[0] for q in query.split("&") if q]
        out += "?" + "&".join(sorted(set(keys)))
    return out


class CallLog:
    """Counts requests by ``"METHOD /path/template"``; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: collections.Counter[str] = collections.Counter()

    def record(self, method: str, path: str) -> None:
        with self._lock:
            self._counts["%s %s" % (method, path_template(path))] += 1

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def take(self) -> dict[str, int]:
        """Return the counts so far and start again from zero."""
        with self._lock:
            out = dict(self._counts)
            self._counts.clear()
            return out

    @property
    def total(self) -> int:
        with self._lock:
            return sum(self._counts.values())


def _reason(err: Exception) -> str:
    """The short reason of a connection failure (``Connection refused``)."""
    text = str(err)
    found = re.search(r"\[Errno -?\d+\] ([^'\")\]]+)", text)
    if found:
        return found.group(1).strip()
    if "embedded Placement is stopped" in text:
        return "embedded Placement is stopped"
    return text.splitlines()[0] if text else type(err).__name__


def _version_tuple(text: str) -> tuple[int, int]:
    major, _, minor = text.partition(".")
    return int(major), int(minor)


#: Seconds a request to a ``--placement-url`` may take (``[placement]
#: timeout`` sets it for a cloud's Placement).
DEFAULT_TIMEOUT = 60.0


class PlacementClient:
    """Requests to Placement through a keystoneauth1 adapter.

    :param adapter: a keystoneauth1 ``Adapter`` for the placement service,
        built with ``raise_exc=False``.
    :param where: how to name this Placement in messages (its URL).
    :param wanted: the microversion to use when the server offers it.
    :param minimum: refuse servers whose maximum is below this.
    """

    def __init__(
        self,
        adapter: ks_adapter.Adapter,
        where: str,
        wanted: tuple[int, int] = WANTED,
        minimum: tuple[int, int] = MINIMUM,
    ) -> None:
        self.adapter = adapter
        # NOTE: shown in every error message: a password in the URL is not.
        self.where = urls.masked(where)
        self.wanted = wanted
        self.minimum = minimum
        self.calls = CallLog()
        self._version: Optional[tuple[int, int]] = None
        self._version_lock = threading.Lock()

    # -- construction -------------------------------------------------------

    @classmethod
    def for_url(cls, url: str, token: str = NOAUTH_TOKEN,
                timeout: float = DEFAULT_TIMEOUT) -> PlacementClient:
        """A client for a ``noauth2`` Placement at ``url``.

        :param timeout: seconds before a request that gets no answer fails
            the periodic (a hung Placement must not hang the agent).
        """
        url = url.rstrip("/")
        sess = ks_session.Session(auth=token_endpoint.Token(url, token),
                                  timeout=timeout)
        return cls(cls._adapter(sess), url)

    @classmethod
    def from_conf(cls, conf: cfg.ConfigOpts) -> PlacementClient:
        """A client built from the ``[placement]`` keystoneauth options."""
        group = "placement"
        auth_type = conf.placement.auth_type
        try:
            auth = ks_loading.load_auth_from_conf_options(conf, group)
            sess = ks_loading.load_session_from_conf_options(
                conf, group, auth=auth
            )
            adap = ks_loading.load_adapter_from_conf_options(
                conf, group, session=sess, auth=auth, raise_exc=False
            )
        except ks_exc.MissingRequiredOptions as e:
            missing = ", ".join(o.dest for o in e.options)
            raise exception.ConfigError(
                "[placement] auth_type = %s needs [placement] %s, which is "
                "not set" % (auth_type, missing)) from None
        except ks_exc.NoMatchingPlugin:
            raise exception.ConfigError(
                "[placement] auth_type = %s: no such keystoneauth plugin "
                "(e.g. password, v3password, token, v3applicationcredential)"
                % auth_type) from None
        where = conf.placement.endpoint_override or (
            "the placement service of %s" % (conf.placement.auth_url or "?")
            if hasattr(conf.placement, "auth_url")
            else "the configured placement service"
        )
        return cls(adap, where)

    @staticmethod
    def _adapter(sess: ks_session.Session) -> ks_adapter.Adapter:
        return ks_adapter.Adapter(
            sess, service_type="placement", raise_exc=False
        )

    # -- microversion -------------------------------------------------------

    @property
    def microversion(self) -> tuple[int, int]:
        """The negotiated microversion (negotiated on first use)."""
        if self._version is None:
            with self._version_lock:
                if self._version is None:
                    self._version = self._negotiate()
        return self._version

    def negotiate(self) -> tuple[int, int]:
        """Negotiate now (one ``GET /``) and return the microversion.

        :raises PlacementUnreachable: no answer from Placement.
        :raises PlacementVersionTooOld: below :data:`MINIMUM`.
        """
        return self.microversion

    @property
    def microversion_str(self) -> str:
        return "%d.%d" % self.microversion

    def _negotiate(self) -> tuple[int, int]:
        body = self._send("GET", "/", None, microversion=None)
        try:
            versions = body["versions"]
            top = max(_version_tuple(v["max_version"]) for v in versions)
        except (KeyError, TypeError, ValueError) as e:
            raise pexc.PlacementError(
                "%s does not look like Placement: no versions in its root "
                "document (%s)" % (self.where, e),
                method="GET",
                path="/",
            ) from None
        if top < self.minimum:
            raise pexc.PlacementVersionTooOld(
                "Placement at %s supports microversions up to %d.%d; "
                "compute-plugins needs at least %d.%d (reshaper, consumer "
                "generations)" % ((self.where,) + top + self.minimum),
                method="GET",
                path="/",
            )
        chosen = min(top, self.wanted)
        LOG.debug("Placement at %s: using microversion %d.%d", self.where,
                  *chosen)
        return chosen

    # -- requests -----------------------------------------------------------

    def _send(
        self,
        method: str,
        path: str,
        body: Any,
        microversion: Optional[str],
        provider: Optional[str] = None,
        generation: Optional[int] = None,
    ) -> Any:
        self.calls.record(method, path)
        kwargs: dict[str, Any] = {}
        if body is not None:
            kwargs["json"] = body
        if microversion:
            kwargs["microversion"] = microversion
        try:
            resp = self.adapter.request(path, method, **kwargs)
        except ks_exc.ClientException as e:
            raise pexc.PlacementUnreachable(
                "cannot reach Placement at %s (%s %s): %s"
                % (self.where, method, path_template(path), _reason(e)),
                method=method,
                path=path,
                provider=provider,
                generation=generation,
            ) from None
        if resp.status_code >= 400:
            try:
                data = resp.json()
            except ValueError:
                data = None
            raise pexc.from_response(
                method, path, resp.status_code, data, provider, generation
            )
        if resp.status_code == 204 or not resp.content:
            # NOTE: Placement answers 201 (PUT /traits/{name}...) and 204
            # (DELETE, allocations, reshaper) without a body, never 200 nor
            # a GET: the caller would subscript None.
            if method == "GET" or resp.status_code == 200:
                raise pexc.PlacementBadAnswer(
                    "%s answered %s %s with status %d and no body; a JSON "
                    "document was expected (is this Placement?)"
                    % (self.where, method, path_template(path),
                       resp.status_code),
                    method=method, path=path, status=resp.status_code,
                    provider=provider, generation=generation)
            return None
        try:
            data = jsonload.loads(resp.content)
        except ValueError as err:
            snippet = printable(resp.content[:80].decode("utf-8", "replace")
                                .replace("\n", " ").strip())
            raise pexc.PlacementBadAnswer(
                "%s answered %s %s with status %d and a body that is not "
                "JSON (%s: %r: %s); is this Placement?"
                % (self.where, method, path_template(path), resp.status_code,
                   resp.headers.get("Content-Type", "no content type"),
                   snippet, err),
                method=method, path=path, status=resp.status_code,
                provider=provider, generation=generation) from None
        if not isinstance(data, dict):
            raise pexc.PlacementBadAnswer(
                "%s answered %s %s with status %d and a JSON %s where "
                "Placement sends an object; is this Placement?"
                % (self.where, method, path_template(path), resp.status_code,
                   "null" if data is None else type(data).__name__),
                method=method, path=path, status=resp.status_code,
                provider=provider, generation=generation)
        return data

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        provider: Optional[str] = None,
        generation: Optional[int] = None,
    ) -> Any:
        """Send one request at the negotiated microversion.

        :returns: the decoded JSON body, or None for an empty response.
        :raises PlacementError: typed by the error code of the response.
        """
        return self._send(
            method, path, body, self.microversion_str, provider, generation
        )

    def get(self, path: str, **kw: Any) -> Any:
        return self.request("GET", path, **kw)

    def put(self, path: str, body: Any = None, **kw: Any) -> Any:
        return self.request("PUT", path, body, **kw)

    def post(self, path: str, body: Any = None, **kw: Any) -> Any:
        return self.request("POST", path, body, **kw)

    def delete(self, path: str, **kw: Any) -> Any:
        return self.request("DELETE", path, **kw)

    def delete_allocations(self, consumer: str) -> bool:
        """Free every allocation of ``consumer``; False when it had none
        (Placement's 404: freed already, which is no error)."""
        try:
            self.delete("/allocations/%s" % consumer)
        except pexc.NotFound:
            return False
        return True


def _fields(err: pexc.PlacementError) -> dict[str, Any]:
    """The request and response fields of ``err``, to raise it as another
    class."""
    return {"method": err.method, "path": err.path, "status": err.status,
            "code": err.code, "detail": err.detail, "provider": err.provider,
            "generation": err.generation, "request_id": err.request_id}


def allocate_new_consumer(client: PlacementClient, consumer: str,
                          allocations: Mapping[str, Mapping[str, int]],
                          project_id: str, user_id: str,
                          consumer_type: Optional[str] = None, *,
                          on_request: Optional[Callable[[str, str], None]] = None
                          ) -> None:
    """Write the first allocations of ``consumer``: ``PUT
    /allocations/{consumer}`` with ``consumer_generation`` null, recovering
    from a consumer-generation conflict.

    Placement answers 409 ``placement.concurrent_update`` both when the
    consumer exists already and when a provider changed under the write;
    which one is read from Placement (the consumer's allocations), never
    from the error's words:

    - the consumer has allocations: :class:`ConsumerAllocated`, and they
      are left alone (never overwritten);
    - it has none: Placement creates the consumer before it checks the
      providers, and a PUT refused after that (a provider deleted since the
      query: a 400) leaves it behind, empty, at generation 0, refusing
      every PUT that expects no consumer. An empty consumer is nobody's:
      written once more, with generation 0. Refused again with that code
      and still without allocations, the first refusal was a provider race:
      raised as it came.

    :param client: the Placement client (its ``get`` and ``put``).
    :param allocations: provider uuid -> resource class -> amount.
    :param consumer_type: ``INSTANCE``... (microversion 1.38), None: none.
    :param on_request: called with ``(method, path template)`` before each
        request (the scheduler counts its Placement calls).
    :raises ConsumerAllocated: the consumer has allocations already.
    :raises Conflict: Placement refused the allocation: no room (no code),
        a provider race (:class:`GenerationConflict`).
    :raises ProviderGone: a 400 for providers Placement does not have any
        more (each checked with ``GET /resource_providers/{uuid}``).
    """
    path = "/allocations/%s" % consumer

    def count(method: str, template: str) -> None:
        if on_request is not None:
            on_request(method, template)

    def put(generation: Optional[int]) -> None:
        body: dict[str, Any] = {
            "allocations": {rp: {"resources": dict(res)}
                            for rp, res in allocations.items()},
            "project_id": project_id, "user_id": user_id,
            "consumer_generation": generation}
        if consumer_type is not None:
            body["consumer_type"] = consumer_type
        count("PUT", "/allocations/{consumer}")
        try:
            client.put(path, body)
        except pexc.PlacementHTTPError as err:
            if err.status == 400:
                gone = missing_providers(sorted(allocations))
                if gone:
                    raise pexc.ProviderGone(str(err), gone, **_fields(err)) from None
            raise

    def missing_providers(uuids: list[str]) -> list[str]:
        gone = []
        for uuid in uuids:
            count("GET", "/resource_providers/{uuid}")
            try:
                client.get("/resource_providers/%s" % uuid)
            except pexc.NotFound:
                gone.append(uuid)
        return gone

    def allocated(err: pexc.PlacementError) -> pexc.ConsumerAllocated:
        count("GET", "/allocations/{consumer}")
        try:
            held = sorted(client.get(path).get("allocations") or {})
        except pexc.NotFound:
            held = []
        return pexc.ConsumerAllocated(
            "consumer %s has allocations in Placement already (on %s)"
            % (consumer, ", ".join(held)), consumer, held, **_fields(err))

    def concurrent(err: pexc.PlacementError) -> bool:
        return err.code == pexc.CONCURRENT_UPDATE

    try:
        put(None)
        return
    except pexc.Conflict as err:
        if not concurrent(err):
            raise
        first = err
    found = allocated(first)
    if found.providers:
        raise found from None
    try:
        put(0)
    except pexc.Conflict as err:
        if not concurrent(err):
            raise
        found = allocated(err)
        if found.providers:
            raise found from None
        raise first from None
