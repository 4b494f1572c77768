"""Writing a new consumer's allocations, and its recovery from Placement's
generation conflicts, keyed on Placement's error code and on what Placement
holds, never on its words: every refusal here carries a detail no rule
could match. (Against real Placement: the orphaned allocation and the
deleted provider of ``tests/functional/scheduler/test_schedule.py``.)"""

from __future__ import annotations

import pytest

from compute_plugins.placement import client as pclient
from compute_plugins.placement import exception as pexc

CONSUMER = "5c4b2f2e-0b8a-4c8e-9c55-1f0b9f3f1a01"
RP1 = "0e7d9a4c-6f0e-4e5b-9d0a-5b1f0b9f3f11"
RP2 = "0e7d9a4c-6f0e-4e5b-9d0a-5b1f0b9f3f22"
ALLOCATIONS = {RP1: {"PCPU": 2}, RP2: {"MEMORY_MB": 1024}}


def refusal(method, path, status, code=None):
    error = {"status": status, "title": "refused", "detail": "words that change"}
    if code:
        error["code"] = code
    return pexc.from_response(method, path, status, {"errors": [error]})


CONCURRENT = (409, pexc.CONCURRENT_UPDATE)
NO_ROOM = (409, "placement.undefined_code")
BAD = (400, None)


class Scripted:
    """A Placement client answering from a script: ``puts`` is the answer to
    each PUT in turn (None: 204, or ``(status, code)``); ``held`` the
    consumer's allocations at each GET of them in turn; ``providers`` those
    that exist."""

    def __init__(self, puts, held=(), providers=(RP1, RP2)):
        self.puts = list(puts)
        self.held = list(held)
        self.providers = set(providers)
        self.sent: list[tuple[str, str, object]] = []

    def put(self, path, body=None):
        self.sent.append(("PUT", path, body))
        answer = self.puts.pop(0)
        if answer is not None:
            raise refusal("PUT", path, *answer)

    def get(self, path):
        self.sent.append(("GET", path, None))
        if path.startswith("/resource_providers/"):
            if path.rpartition("/")[2] not in self.providers:
                raise refusal("GET", path, 404)
            return {"uuid": path.rpartition("/")[2]}
        held = self.held.pop(0)
        if held is None:
            raise refusal("GET", path, 404)
        return {"allocations": {rp: {"resources": res} for rp, res in held.items()}}


def allocate(client, consumer_type="INSTANCE"):
    counted: list[str] = []
    pclient.allocate_new_consumer(
        client, CONSUMER, ALLOCATIONS, "p", "u", consumer_type,
        on_request=lambda method, path: counted.append("%s %s" % (method, path)))
    return counted


def generations(client):
    return [body["consumer_generation"] for method, _, body in client.sent
            if method == "PUT"]


def test_a_new_consumer_is_one_put():
    client = Scripted([None])
    assert allocate(client) == ["PUT /allocations/{consumer}"]
    [(method, path, body)] = client.sent
    assert (method, path) == ("PUT", "/allocations/%s" % CONSUMER)
    assert body == {"allocations": {RP1: {"resources": {"PCPU": 2}},
                                    RP2: {"resources": {"MEMORY_MB": 1024}}},
                    "project_id": "p", "user_id": "u", "consumer_generation": None,
                    "consumer_type": "INSTANCE"}


def test_no_consumer_type_before_its_microversion():
    client = Scripted([None])
    allocate(client, consumer_type=None)
    assert "consumer_type" not in client.sent[0][2]


def test_a_consumer_with_allocations_is_left_alone():
    client = Scripted([CONCURRENT], held=[{RP1: {"MEMORY_MB": 512}}])
    with pytest.raises(pexc.ConsumerAllocated) as info:
        allocate(client)
    err = info.value
    assert (err.consumer, err.providers, err.status) == (CONSUMER, (RP1,), 409)
    assert err.code == pexc.CONCURRENT_UPDATE and RP1 in str(err)
    assert generations(client) == [None], "never overwritten"


def test_an_empty_consumer_left_behind_is_written_with_generation_0():
    """A PUT Placement refused after creating the consumer (a provider
    deleted since the query) leaves it behind, empty, at generation 0."""
    client = Scripted([CONCURRENT, None], held=[None])
    assert allocate(client) == ["PUT /allocations/{consumer}",
                                "GET /allocations/{consumer}",
                                "PUT /allocations/{consumer}"]
    assert generations(client) == [None, 0]


def test_a_provider_race_is_raised_as_it_came():
    """The same code for a provider that changed under the write: the
    consumer does not exist (Placement removed it with the refused write),
    so the retry is refused too, and the first refusal is what happened."""
    client = Scripted([CONCURRENT, CONCURRENT], held=[None, None])
    with pytest.raises(pexc.GenerationConflict) as info:
        allocate(client)
    assert not isinstance(info.value, pexc.ConsumerAllocated)
    assert generations(client) == [None, 0]
    assert info.value.code == pexc.CONCURRENT_UPDATE


def test_another_writer_between_the_two_puts():
    client = Scripted([CONCURRENT, CONCURRENT], held=[{}, {RP2: {"VCPU": 1}}])
    with pytest.raises(pexc.ConsumerAllocated) as info:
        allocate(client)
    assert info.value.providers == (RP2,)


def test_no_room_is_refused_at_once():
    client = Scripted([NO_ROOM])
    with pytest.raises(pexc.Conflict) as info:
        allocate(client)
    assert type(info.value) is pexc.Conflict
    assert len(client.sent) == 1


def test_a_provider_deleted_since_the_query():
    client = Scripted([BAD], providers=(RP1,))
    with pytest.raises(pexc.ProviderGone) as info:
        allocate(client)
    assert info.value.providers == (RP2,) and info.value.status == 400
    assert "words that change" in str(info.value)
    assert [m for m, _, _ in client.sent] == ["PUT", "GET", "GET"]


def test_a_bad_request_for_another_reason_is_raised_as_it_came():
    client = Scripted([BAD])
    with pytest.raises(pexc.PlacementHTTPError) as info:
        allocate(client)
    assert type(info.value) is pexc.PlacementHTTPError and info.value.status == 400


def test_every_request_is_counted():
    client = Scripted([CONCURRENT, BAD], held=[None], providers=(RP2,))
    counted: list[str] = []
    with pytest.raises(pexc.ProviderGone):
        pclient.allocate_new_consumer(
            client, CONSUMER, ALLOCATIONS, "p", "u",
            on_request=lambda method, path: counted.append(method))
    assert counted == [m for m, _, _ in client.sent] == ["PUT", "GET", "PUT", "GET", "GET"]
