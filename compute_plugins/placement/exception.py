"""Typed Placement errors, one per failure a caller handles differently.

Placement (microversion 1.23 and later) names each error with a ``code`` in
its JSON body; :func:`from_response` maps that code to a class. Every error
carries what a user needs: the request, the HTTP status, the code, the
provider and its generation where one is involved, and Placement's detail.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

from compute_plugins.exception import ComputePluginsError


class PlacementError(ComputePluginsError):
    """Base class of every Placement failure.

    :param message: the one-line message shown to users.
    :param method: HTTP method of the failed request.
    :param path: path (and query) of the failed request.
    :param status: HTTP status, or None when no response came back.
    :param code: Placement's error code (``placement.concurrent_update``...).
    :param detail: Placement's ``detail`` text.
    :param provider: uuid of the resource provider involved, if any.
    :param generation: the provider generation the request was based on.
    :param request_id: Placement's request id, for its logs.
    """

    def __init__(
        self,
        message: str,
        method: Optional[str] = None,
        path: Optional[str] = None,
        status: Optional[int] = None,
        code: Optional[str] = None,
        detail: Optional[str] = None,
        provider: Optional[str] = None,
        generation: Optional[int] = None,
        request_id: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.method = method
        self.path = path
        self.status = status
        self.code = code
        self.detail = detail
        self.provider = provider
        self.generation = generation
        self.request_id = request_id


class PlacementUnreachable(PlacementError):
    """No HTTP response: Placement is down, or the URL is wrong."""


class PlacementBadAnswer(PlacementError):
    """A success status with a body Placement never sends: none where
    Placement answers a JSON object (every 200), a body that is not JSON,
    or JSON that is not an object. A proxy or another service answered."""


class PlacementVersionTooOld(PlacementError):
    """Placement does not support the microversion the features need."""


class PlacementHTTPError(PlacementError):
    """Placement answered with an error status not handled more precisely."""


class NotFound(PlacementHTTPError):
    """404: the provider, resource class, trait or consumer does not exist."""


class Conflict(PlacementHTTPError):
    """409 with a code no more specific class handles."""


class GenerationConflict(Conflict):
    """409 ``placement.concurrent_update``: another writer moved the
    provider's (or consumer's) generation."""


class ConsumerAllocated(Conflict):
    """409 ``placement.concurrent_update`` on the allocations of a consumer
    written as new (``consumer_generation`` null): it exists in Placement
    with allocations already
    (:func:`compute_plugins.placement.client.allocate_new_consumer`).

    :param consumer: the consumer.
    :param providers: the providers it has allocations on.
    """

    def __init__(self, message: str, consumer: str, providers: Sequence[str],
                 **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.consumer = consumer
        self.providers = tuple(providers)


class ProviderGone(PlacementHTTPError):
    """400 on an allocation naming resource providers Placement does not
    have: deleted since they were read.

    :param providers: their uuids.
    """

    def __init__(self, message: str, providers: Sequence[str], **kwargs: Any) -> None:
        super().__init__(message, **kwargs)
        self.providers = tuple(providers)


class InventoryInUse(Conflict):
    """409 ``placement.inventory.inuse``: inventory removed or shrunk below
    what allocations use."""


class DuplicateName(Conflict):
    """409 ``placement.duplicate_name``: a provider with that name exists."""


class ProviderInUse(Conflict):
    """409 ``placement.resource_provider.inuse``: the provider has
    allocations and cannot be deleted."""


class ProviderHasChildren(Conflict):
    """409 ``placement.resource_provider.cannot_delete_parent``."""


#: Placement's error code of a generation race, on a provider or a consumer.
CONCURRENT_UPDATE = "placement.concurrent_update"

#: Placement error code to exception class.
CODES: dict[str, type[PlacementHTTPError]] = {
    CONCURRENT_UPDATE: GenerationConflict,
    "placement.inventory.inuse": InventoryInUse,
    "placement.duplicate_name": DuplicateName,
    "placement.resource_provider.inuse": ProviderInUse,
    "placement.resource_provider.cannot_delete_parent": ProviderHasChildren,
}


#: Placement's message for a generation race it did not map to a 409.
CONCURRENT_500 = "Another thread concurrently updated the resource provider data"


def from_response(
    method: str,
    path: str,
    status: int,
    body: Any,
    provider: Optional[str] = None,
    generation: Optional[int] = None,
) -> PlacementHTTPError:
    """Build the typed error for an error response.

    :param body: the decoded JSON body (or None when it was not JSON).
    """
    code = detail = request_id = None
    if isinstance(body, dict):
        errors = body.get("errors") or [{}]
        first = errors[0] if isinstance(errors[0], dict) else {}
        code = first.get("code")
        detail = first.get("detail") or first.get("title")
        request_id = first.get("request_id")
    if detail:
        # NOTE: placement's details repeat the title and status on several
        # lines; one line is what a log needs.
        detail = " ".join(str(detail).split())
    cls = CODES.get(code or "")
    if cls is None and status == 500 and CONCURRENT_500 in (detail or ""):
        # NOTE: Placement lets ResourceProviderConcurrentUpdateDetected out of
        # some handlers (traits, aggregates) as a 500 when two API workers
        # race on one provider (seen on PostgreSQL with two processes); it is
        # a generation conflict, retried like a 409.
        cls = GenerationConflict
    if cls is None:
        cls = {404: NotFound, 409: Conflict}.get(status, PlacementHTTPError)
    msg = "Placement %s %s failed: %s%s%s" % (
        method,
        path,
        status,
        " %s" % code if code else "",
        ": %s" % detail if detail else "",
    )
    return cls(
        msg,
        method=method,
        path=path,
        status=status,
        code=code,
        detail=detail,
        provider=provider,
        generation=generation,
        request_id=request_id,
    )
