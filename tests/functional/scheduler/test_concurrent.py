"""One scheduler, several requests at once (issue 19): the scheduling cycle
(plan, choice, assume) one at a time, the bindings (allocation, decision,
the agent's answer) concurrent. Two requests of one scheduler never get
the same CPUs; a rejection un-assumes the host
(:meth:`compute_plugins.scheduler.selection.Scheduler._assume`)."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import pytest

from compute_plugins.scheduler import selection
from tests.functional.request.hosts import cell
from tests.functional.scheduler.cloud import FirstPutRaces, expected_allocation
from tests.functional.scheduler.test_schedule import pinned, spec_of

#: Races between schedulers: the agents answer as they did when the
#: races were found (polling), not sooner on a wake-up.
pytestmark = pytest.mark.polling


def new_consumer() -> str:
    return str(uuid.uuid4())


class SlowFirstPut:
    """The real Placement client, but its first ``PUT /allocations`` says
    so (``entered``) and then takes ``seconds``: another request of the
    same scheduler plans meanwhile."""

    def __init__(self, client: Any, seconds: float) -> None:
        self._client = client
        self.seconds = seconds
        self.entered = threading.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def put(self, path: str, body: Any = None, **kw: Any) -> Any:
        if not self.entered.is_set():
            self.entered.set()
            time.sleep(self.seconds)
        return self._client.put(path, body, **kw)


def cpus_of(result: Any) -> list[int]:
    return [cpu for c in result.decision.assignments["numa"].cells
            for cpu in c.pinning.values()]


def at_once(sched: Any, count: int) -> list[Any]:
    """``count`` threads start together, each scheduling a guest of 2
    pinned CPUs on the one scheduler ``sched``; their results."""
    results: list[Any] = []
    barrier = threading.Barrier(count)

    def run() -> None:
        spec = spec_of(sched, *pinned(1, 2, 1024))
        barrier.wait(30)
        results.append(sched.schedule(spec, new_consumer(), "p", "u"))

    threads = [threading.Thread(target=run) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return results


def test_two_requests_of_one_scheduler_at_once_never_get_the_same_cpus(cloud):
    """One host, room for two guests of 2 pinned CPUs. The second request
    plans while the first is between its plan and its allocation. Without
    the assume it fitted the same state, chose the same CPUs (0-1), and the
    agent rejected one of the two (a race with itself); with it, the
    second plan leaves the host in flight out, waits for the first's
    binding, and fits around the first's claim: no rejection."""
    host = cloud.add_host("two", [cell(4, 4096)], dedicated="0-3")
    sched = cloud.scheduler()
    slow = SlowFirstPut(sched.placement, 1.0)
    sched.placement = slow
    results: dict[str, Any] = {}

    def run(name: str) -> None:
        results[name] = sched.schedule(spec_of(sched, *pinned(1, 2, 1024)),
                                       new_consumer(), "p", "u")

    first = threading.Thread(target=run, args=("first",))
    first.start()
    assert slow.entered.wait(30)
    second = threading.Thread(target=run, args=("second",))
    second.start()
    for thread in (first, second):
        thread.join(60)
    assert set(results) == {"first", "second"}
    for result in results.values():
        assert result.placed and result.host == host.name
        # NOTE: never offered the other's CPUs: no rejection, no retry.
        assert [a.outcome for a in result.attempts] == ["claimed"], result.attempts
    assert sorted(cpus_of(results["first"]) + cpus_of(results["second"])) == [0, 1, 2, 3]
    assert cloud.usage(host) == cloud.ledger_usage(host)
    assert sched.in_flight() == {}


def test_many_requests_of_one_scheduler_at_once_fill_the_hosts_exactly(cloud):
    """Two hosts, 3 slots each; 8 requests of one scheduler at once: 6
    placed, each CPU once, none offered a CPU another of them took (no
    rejection by an agent), Placement equal to the ledgers; the 2 others
    refused for lack of room once the others' bindings ended, not
    because the hosts were in flight."""
    hosts = [cloud.add_host("h%d" % i, [cell(6, 6144)], dedicated="0-5")
             for i in range(2)]
    sched = cloud.scheduler(draw=True)
    results = at_once(sched, 8)
    assert len(results) == 8
    placed = [r for r in results if r.placed]
    assert len(placed) == 6
    assert not [a for r in results for a in r.attempts if a.outcome == "rejected"]
    for host in hosts:
        mine = [r for r in placed if r.host == host.name]
        assert sorted(c for r in mine for c in cpus_of(r)) == list(range(6))
        assert cloud.usage(host) == cloud.ledger_usage(host)
    for result in placed:
        assert cloud.allocations(result.consumer) == expected_allocation(result.decision)
    for result in results:
        if not result.placed:
            reasons = [r.reason for h in result.reasons for r in h.reasons]
            assert selection.IN_FLIGHT not in reasons, reasons
    assert sched.in_flight() == {}


def test_a_rejection_unassumes_the_host_and_the_request_plans_again(cloud):
    """Another scheduler's claim lands on the only host between this one's
    plan and its allocation (same CPUs): the agent rejects this one's
    decision; the host is un-assumed at once, so the refit on its new
    state places the request there (an assumed host would have been left
    out, the request waiting for itself)."""
    host = cloud.add_host("one", [cell(4, 4096)], dedicated="0-3")
    two_cpus = pinned(1, 2, 1024)
    other = cloud.scheduler()
    first: dict[str, Any] = {}

    def another_claim_lands_first() -> None:
        first["result"] = other.schedule(spec_of(other, *two_cpus), new_consumer(),
                                         "p", "u")

    sched = cloud.scheduler()
    sched.placement = FirstPutRaces(sched.placement, another_claim_lands_first)
    start = time.monotonic()
    result = sched.schedule(spec_of(sched, *two_cpus), new_consumer(), "p", "u")
    assert time.monotonic() - start < 10
    assert first["result"].host == host.name
    assert [(a.host, a.outcome) for a in result.attempts] == [
        (host.name, "rejected"), (host.name, "claimed")]
    assert sorted(cpus_of(first["result"]) + cpus_of(result)) == [0, 1, 2, 3]
    assert sched.in_flight() == {}
    assert cloud.usage(host) == cloud.ledger_usage(host)


def test_a_placement_conflict_unassumes_the_host(cloud):
    """Placement refuses the allocation (409: another scheduler took the
    room first): the host is un-assumed, the next request of the same
    scheduler is not told it is in flight."""
    host = cloud.add_host("full", [cell(4, 4096)], dedicated="0-3")
    whole = pinned(1, 4, 1024)
    other = cloud.scheduler()

    def the_other_takes_it() -> None:
        assert other.schedule(spec_of(other, *whole), new_consumer(), "p", "u").placed

    sched = cloud.scheduler()
    sched.placement = FirstPutRaces(sched.placement, the_other_takes_it)
    result = sched.schedule(spec_of(sched, *whole), new_consumer(), "p", "u")
    assert not result.placed
    assert result.attempts[0].outcome == "conflict"
    assert sched.in_flight() == {}
    again = sched.schedule(spec_of(sched, *whole), new_consumer(), "p", "u")
    assert not again.placed
    reasons = [r.reason for r in again.verdicts[host.name]]
    assert selection.IN_FLIGHT not in reasons and reasons


def test_an_exception_in_the_binding_unassumes_the_host(cloud):
    """Placement unreachable during the allocation: the error reaches the
    caller, and the host is not left assumed (the next request is placed
    there)."""
    host = cloud.add_host("err", [cell(4, 4096)], dedicated="0-3")
    sched = cloud.scheduler()
    real = sched.placement

    class Broken:
        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def put(self, path: str, body: Any = None, **kw: Any) -> Any:
            raise RuntimeError("Placement unreachable")

    sched.placement = Broken()
    try:
        sched.schedule(spec_of(sched, *pinned(1, 2, 1024)), new_consumer(), "p", "u")
    except RuntimeError:
        pass
    else:
        raise AssertionError("the error was swallowed")
    assert sched.in_flight() == {}
    sched.placement = real
    result = sched.schedule(spec_of(sched, *pinned(1, 2, 1024)), new_consumer(), "p", "u")
    assert result.placed and result.host == host.name


def test_requests_at_once_ask_placement_about_a_shape_once(cloud):
    """Four requests of one scheduler start together with nothing kept in
    its view: Placement's answer is brought up to date before the
    scheduling cycle by one of them only (one ``GET /resource_providers``
    per group shape, as a lone request's); the others wait for it and are
    served the kept answer."""
    for i in range(3):
        cloud.add_host("k%d" % i, [cell(4, 4096)] * 2, dedicated="0-7")
    sched = cloud.scheduler(draw=True)
    results = at_once(sched, 4)
    assert len(results) == 4 and all(r.placed for r in results)
    asked = sum(r.placement_calls.get("GET /resource_providers", 0) for r in results)
    assert asked == 2, [r.placement_calls for r in results]


class CountingStore:
    """The real store, its reads of every host's liveness and of the
    disabled hosts counted."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.reads: dict[str, int] = {"host_statuses": 0, "host_status_changes": 0,
                                      "disabled_hosts": 0}

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._store, name)
        if name not in self.reads:
            return found

        def counted(*args: Any, **kw: Any) -> Any:
            self.reads[name] += 1
            return found(*args, **kw)
        return counted


def test_a_lone_request_reads_the_store_as_before(cloud):
    """One request at a time (``--concurrency 1``, every caller before
    issue 19), the view's kept answer standing: no prefetch, so each
    decision reads the hosts' liveness and the disabled hosts once (the
    plan's), as before; the prefetch read them a second time per
    decision, counted by the issue's decision budget."""
    cloud.add_host("lone", [cell(4, 4096)], dedicated="0-3")
    sched = cloud.scheduler()
    # NOTE: the first decision keeps Placement's answer (the prefetch asks).
    assert sched.schedule(spec_of(sched, *pinned(1, 1, 512)), new_consumer(),
                          "p", "u").placed
    counting = CountingStore(sched.store)
    sched.store = counting
    for _ in range(2):
        result = sched.schedule(spec_of(sched, *pinned(1, 1, 512)), new_consumer(),
                                "p", "u")
        assert result.placed and not result.placement_calls.get("GET /resource_providers")
    # NOTE: the liveness read by change (issue 19, item 2), never whole.
    assert counting.reads == {"host_statuses": 0, "host_status_changes": 2,
                              "disabled_hosts": 2}


def test_an_assume_forgotten_past_the_bound_leaves_older_plans_stale(cloud, monkeypatch):
    """More hosts assumed than :data:`~selection.MAX_ASSUMED_AT`: a plan
    made before the oldest forgotten assume does not offer the host whose
    assume was forgotten (its fit there may be stale); a plan made since
    does."""
    monkeypatch.setattr(selection, "MAX_ASSUMED_AT", 2)
    sched = cloud.scheduler()
    old_plan = sched._assumes
    for host in ("a", "b", "c"):
        assert sched._assume(host, new_consumer(), sched._assumes)
        sched._unassume(host)
    assert "a" not in sched._assumed_at
    assert not sched._assume("a", new_consumer(), old_plan)
    assert sched._assume("a", new_consumer(), sched._assumes)


def test_an_interrupt_as_the_cycle_ends_unassumes_the_host(cloud):
    """An interrupt (Ctrl-C) delivered as the scheduling cycle is released,
    the host just assumed: the host is un-assumed all the same (left
    assumed, every later plan of the scheduler would leave it out and
    wait for a binding that never ends)."""
    cloud.add_host("ctrl-c", [cell(4, 4096)], dedicated="0-3")
    sched = cloud.scheduler()
    real = sched._cycle.release
    fired: list[bool] = []

    def release() -> None:
        real()
        if sched._assumed and not fired:
            fired.append(True)
            raise KeyboardInterrupt

    sched._cycle.release = release  # type: ignore[method-assign]
    try:
        sched.schedule(spec_of(sched, *pinned(1, 2, 1024)), new_consumer(), "p", "u")
    except BaseException:  # noqa: BLE001 - the interrupt (or the second release's error)
        assert fired
    else:
        raise AssertionError("the interrupt was swallowed")
    assert sched.in_flight() == {}


def second_while_first_in_flight(sched: Any, shape: Any) -> tuple[Any, Any, list[str]]:
    """Two requests of ``shape`` on ``sched``: the second starts while the
    first is in its ``PUT /allocations`` (held 1 s, its host in flight).
    Their results, and the ``GET /resource_providers`` sent from the
    second's start (the first one is in its PUT by then; the view's asks
    by tree run on its own threads)."""
    slow: Any = SlowFirstPut(sched.placement, 1.0)
    asked: list[str] = []
    real_get = slow.get
    counting = threading.Event()

    def get(path: str, *args: Any, **kw: Any) -> Any:
        if path.startswith("/resource_providers") and counting.is_set():
            asked.append(path)
        return real_get(path, *args, **kw)

    slow.get = get
    sched.placement = slow
    results: dict[str, Any] = {}

    def run(name: str) -> None:
        results[name] = sched.schedule(spec_of(sched, *shape), new_consumer(), "p", "u")

    first = threading.Thread(target=run, args=("first",))
    first.start()
    assert slow.entered.wait(30)
    counting.set()
    run("second")
    first.join(60)
    return results["first"], results["second"], asked


def test_a_request_waiting_on_hosts_in_flight_asks_placement_again_once(cloud):
    """The only host with room is in flight (another request of the same
    scheduler is being placed there, the last room), another host is too
    small (Placement's kept answer excludes it). The request waits for
    the binding without asking Placement again about the excluded host
    (a re-ask under the scheduling cycle, on every binding's end); once
    none is in flight, it asks once, as a lone request refused would,
    and is refused."""
    host = cloud.add_host("room", [cell(4, 4096)], dedicated="0-3")
    cloud.add_host("small", [cell(2, 4096)], dedicated="0-1")
    first, second, asked = second_while_first_in_flight(cloud.scheduler(),
                                                        pinned(1, 4, 1024))
    assert first.placed and first.host == host.name
    assert not second.placed
    # NOTE: one re-ask of the excluded host: a GET per group shape.
    assert len(asked) == 2, asked
    assert second.placement_calls.get("GET /resource_providers") == 2, \
        second.placement_calls


def test_a_request_waiting_on_hosts_in_flight_counts_every_placement_ask(cloud):
    """The only host with room is in flight (another request of the same
    scheduler is being placed there; room is left for this one too), and
    the scheduler keeps no view (``placement_view_seconds`` 0: each plan
    asks Placement). The request plans, waits for that binding, then
    plans again: every ``GET /resource_providers`` sent for it, the
    first round's included, is counted in its ``placement_calls`` (the
    earlier rounds' asks were lost: only the last round's were counted)."""
    host = cloud.add_host("room", [cell(4, 4096)], dedicated="0-3")
    cloud.add_host("small", [cell(1, 4096)], dedicated="0")
    first, second, asked = second_while_first_in_flight(
        cloud.scheduler(placement_view_seconds=0), pinned(1, 2, 1024))
    assert first.placed and first.host == host.name
    assert second.placed and second.host == host.name
    assert second.placement_calls.get("GET /resource_providers") == len(asked), \
        (second.placement_calls, asked)


def test_a_request_waits_for_a_binding_as_long_as_its_callers_timeout(cloud, monkeypatch):
    """A request waiting on a host in flight waits as long as that host's
    binding may last by its own request's ``timeout`` (the caller's), not
    by ``[scheduler] answer_timeout``: the first request is given 30 s for
    its answer and its allocation takes 3 s; the second, planning
    meanwhile, waits for it and is placed beside it (room for two). With
    the waiter's deadline at ``answer_timeout`` (1 s here) + the slack,
    set at its first wait, it was refused with "in flight" while the
    binding it waited for was still within its caller's timeout."""
    monkeypatch.setattr(selection, "BINDING_SLACK", 0.5)
    host = cloud.add_host("both", [cell(4, 4096)], dedicated="0-3")
    sched = cloud.scheduler(answer_timeout=1.0)
    slow = SlowFirstPut(sched.placement, 3.0)
    sched.placement = slow
    results: dict[str, Any] = {}

    def first() -> None:
        results["first"] = sched.schedule(spec_of(sched, *pinned(1, 2, 1024)),
                                          new_consumer(), "p", "u", timeout=30.0)

    thread = threading.Thread(target=first)
    thread.start()
    assert slow.entered.wait(30)
    second = sched.schedule(spec_of(sched, *pinned(1, 2, 1024)), new_consumer(),
                            "p", "u", timeout=30.0)
    thread.join(60)
    assert results["first"].placed and results["first"].host == host.name
    reasons = [r.reason for h in second.reasons for r in h.reasons]
    assert second.placed and second.host == host.name, reasons
    assert sorted(cpus_of(results["first"]) + cpus_of(second)) == [0, 1, 2, 3]
    assert sched.in_flight() == {}


def test_a_request_kept_waiting_by_other_bindings_gives_up_at_its_own_timeout(
        cloud, monkeypatch):
    """The only host with room is taken again by another request of the
    same scheduler each time a binding there ends (condition wake-ups are
    not FIFO: the others' plans may win every time), each binding within
    its bound. The waiting request gives up once it has waited its own
    timeout + :data:`~selection.BINDING_SLACK` and is refused with the
    host "in flight"; it waited without bound before (its deadline taken
    again each round from the bindings in flight, always in the future)."""
    monkeypatch.setattr(selection, "BINDING_SLACK", 0.5)
    host = cloud.add_host("taken", [cell(4, 4096)], dedicated="0-3")
    sched = cloud.scheduler()
    stop = threading.Event()

    def others_keep_taking_it() -> None:
        with sched._cycle:
            assert sched._assume(host.name, new_consumer(), sched._assumes, 1.0)
        while not stop.wait(0.2):
            # NOTE: one binding ends and another request's begins at once.
            with sched._cycle:
                sched._unassume(host.name)
                assert sched._assume(host.name, new_consumer(), sched._assumes, 1.0)
        sched._unassume(host.name)

    results: list[Any] = []

    def waiter() -> None:
        results.append(sched.schedule(spec_of(sched, *pinned(1, 2, 1024)),
                                      new_consumer(), "p", "u", timeout=1.0))

    churn = threading.Thread(target=others_keep_taking_it, daemon=True)
    churn.start()
    waiting = threading.Thread(target=waiter, daemon=True)
    try:
        waiting.start()
        waiting.join(20)
        assert results, "the request still waits for the hosts in flight"
    finally:
        stop.set()
        churn.join(10)
        waiting.join(30)
    result = results[0]
    assert not result.placed and not result.attempts
    assert [r.reason for r in result.verdicts[host.name]] == [selection.IN_FLIGHT]
    assert sched.in_flight() == {}
