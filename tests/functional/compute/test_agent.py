"""The compute agent: publish, claim, reject, release, restart.

Real parts throughout: the real plugins discover a host snapshot
(``tests/fixtures/hosts/numa4``: 4 NUMA cells of 4 CPUs with 2 MiB and
1 GiB pages), one embedded Placement per module, an SQLite host-state store
and a ledger in the test's temporary directory. The scheduler lands
separately, so each test decides the way it will: the spec is built once,
``PluginSet.fit`` runs on the state the agent published, the allocation is PUT to
Placement and the decision is submitted to the store.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from oslo_config import cfg

from compute_plugins import conf as conf_areas
from compute_plugins.compute.agent import ComputeAgent
from compute_plugins.compute.claims import RECORDED_EARLIER
from compute_plugins.compute.ledger import LedgerError
from compute_plugins.host import discover_host
from compute_plugins.hoststate import (
    DecisionStatus,
    HostSnapshot,
    HostStateStore,
    protocol,
)
from compute_plugins.placement import embedded
from compute_plugins.plugin.state import PluginState
from compute_plugins.request.groups import Decision
from compute_plugins.request.spec import build_request_spec
from compute_plugins.runtime.manager import PluginManager
from compute_plugins.scheduler import query
from compute_plugins.scheduler.query import preview
from tests import cli
from tests.functional.placement.conftest import CLI, cli_env
from tests.output import flat

HOSTS = Path(__file__).parents[2] / "fixtures" / "hosts"
NUMA4 = HOSTS / "numa4"

#: 2 dedicated CPUs on one guest node, in 2 MiB pages: one whole host
#: cell holds two.
SMALL = {"name": "small", "vcpus": 2, "memory_mb": 1024,
         "extra_specs": {"hw:cpu_policy": "dedicated", "hw:numa_nodes": "1",
                         "hw:mem_page_size": "2048"}}
#: 4 dedicated CPUs on one guest node, in 2 MiB pages: one whole host cell.
PINNED = {"name": "pinned", "vcpus": 4, "memory_mb": 1024,
          "extra_specs": {"hw:cpu_policy": "dedicated", "hw:numa_nodes": "1",
                          "hw:mem_page_size": "2048"}}


#: make_conf's options as a config file, for the command line.
AGENT_CONF = """[compute_plugins]
enabled_plugins = numa
[compute]
cpu_dedicated_set = 0-15
reserved_host_memory_mb = 0
"""


#: The mdev host (a pGPU offering 2 foo2 instances) with the vgpu plugin.
MDEV_OVERRIDES = (("enabled_plugins", ["numa", "vgpu"], "compute_plugins"),
                  ("cpu_dedicated_set", None, "compute"),
                  ("enabled_mdev_types", ["foo2"], "vgpu"))


def make_conf(state_dir: Path, overrides: tuple = ()) -> cfg.ConfigOpts:
    conf = cfg.ConfigOpts()
    conf_areas.register_all(conf)
    conf([], project="compute-plugins-tests", default_config_files=[],
         default_config_dirs=[])
    conf.set_override("enabled_plugins", ["numa"], "compute_plugins")
    conf.set_override("state_dir", str(state_dir), "compute_plugins")
    conf.set_override("cpu_dedicated_set", "0-15", "compute")
    conf.set_override("reserved_host_memory_mb", 0, "compute")
    # NOTE: the plugins' groups exist once a manager loaded them.
    for name, value, group in sorted(overrides, key=lambda o: o[2] != "compute_plugins"):
        if group not in conf:
            PluginManager(conf)
        conf.set_override(name, value, group)
    return conf


@pytest.fixture(scope="module")
def placement():
    emb = embedded.EmbeddedPlacement("sqlite://").start()
    yield emb
    emb.close()


class Host:
    """One compute host (a copy of numa4 under a fresh name) and its agent."""

    def __init__(self, tmp_path: Path, placement: embedded.EmbeddedPlacement,
                 source: Path = NUMA4, overrides: tuple = (),
                 store_url: str | None = None) -> None:
        self.name = "%s-%s" % (source.name, uuid.uuid4().hex[:8])
        self.snapshot = tmp_path / self.name
        self.overrides = overrides
        shutil.copytree(source, self.snapshot)
        self.state_dir = tmp_path / "state"
        self.store_url = store_url or "sqlite:///%s" % (tmp_path / "host_state.sqlite")
        self.store = HostStateStore(self.store_url)
        self.placement = placement
        self.scheduler_conf = make_conf(tmp_path / "scheduler", overrides)
        self.scheduler_plugins = PluginManager(self.scheduler_conf)
        self.agent = self.start_agent()

    def start_agent(self) -> ComputeAgent:
        """A new agent process, as after a restart: its own plugins, report
        client and ledger read from disk."""
        conf = make_conf(self.state_dir, self.overrides)
        return ComputeAgent.from_config(
            conf, self.placement.client(), self.store,
            lambda: discover_host(host_snapshot=str(self.snapshot)))

    def published(self, plugin: str = "numa"):
        """The state of ``plugin`` the agent published, decoded."""
        snapshot = self.store.get_host(self.name)
        assert snapshot is not None, "the agent never published"
        return self.scheduler_plugins.plugins.decode_state(
            plugin, snapshot.states[plugin])

    def decide(self, flavor: dict = PINNED, near: str | None = None,
               consumer: str | None = None) -> str:
        """What the scheduler does: spec once, fit on the published state,
        allocation PUT to Placement, decision submitted. Returns the consumer.

        :param near: a consumer whose providers are tried first (two
            schedulers that decided on the same state chose the same cell).
        """
        snapshot = self.store.get_host(self.name)
        assert snapshot is not None, "the agent never published"
        return self.decide_on(snapshot, flavor, near, consumer)

    def decide_on(self, snapshot: HostSnapshot, flavor: dict = PINNED,
                  near: str | None = None, consumer: str | None = None) -> str:
        """:meth:`decide` on the states of ``snapshot``."""
        consumer = consumer or str(uuid.uuid4())
        preferred = set(self.allocations(near)) if near else set()
        plugins = self.scheduler_plugins.plugins
        spec = build_request_spec(plugins, flavor)
        states = {name: plugins.decode_state(name, doc)
                  for name, doc in snapshot.states.items()}
        client = self.placement.client()
        for alternative in preview(spec).alternatives:
            answer = client.get("/allocation_candidates?"
                                + alternative.to_querystring())
            accepted = sorted(query.accepted(alternative, answer),
                              key=lambda r: not preferred & set(r["allocations"]))
            for request in accepted:
                if not set(request["allocations"]) <= set(snapshot.providers):
                    continue
                chosen = Decision.from_allocation_request(
                    self.name, request, nodename=snapshot.nodename)
                fitted = plugins.fit(states, spec, chosen.mappings)
                if not fitted.fits:
                    continue
                client.put("/allocations/%s" % consumer, {
                    "allocations": request["allocations"],
                    "project_id": str(uuid.UUID(int=1)),
                    "user_id": str(uuid.UUID(int=2)),
                    "consumer_generation": None, "consumer_type": "INSTANCE"})
                decided = spec.with_decision(Decision.from_allocation_request(
                    self.name, request, nodename=snapshot.nodename,
                    assignments=fitted.assignments))
                self.store.submit_decision(consumer, self.name, decided.to_json())
                return consumer
        raise AssertionError("no candidate of %s fits" % self.name)

    def allocations(self, consumer: str) -> dict:
        return self.placement.client().get(
            "/allocations/%s" % consumer)["allocations"]


@pytest.fixture
def host(tmp_path, placement):
    h = Host(tmp_path, placement)
    yield h
    h.store.close()


def pinned_cpus(state) -> set[int]:
    return {cpu for cell in state.cells for cpu in cell.pinned}


def used_2m_pages(state) -> int:
    return sum(p.used for cell in state.cells for p in cell.pages if p.size_kb == 2048)


def test_first_periodic_publishes_and_the_next_are_silent(host):
    first = host.agent.run_once()
    assert first.ok, (first.periodic.error, first.error)
    assert first.store_writes == 1
    assert first.periodic.total_calls > 0
    state = host.published()
    assert len(state.cells) == 4 and pinned_cpus(state) == set()
    # steady state: nothing sent to Placement, nothing written to the store
    second = host.agent.run_once()
    assert second.ok
    assert second.placement_calls == 0
    assert second.store_writes == 0
    assert second.claims == [] and second.releases == []
    generation = host.store.get_host(host.name).generation
    assert host.agent.poll().store_writes == 0
    assert host.store.get_host(host.name).generation == generation


def test_a_claim_uses_the_cpus_and_pages_in_the_next_published_state(host):
    host.agent.run_once()
    consumer = host.decide()
    result = host.agent.poll()
    (claim,) = result.claims
    assert claim.claimed and claim.consumer == consumer, claim.reasons
    assert result.claimed == [claim] and result.rejected == []
    # the store answered, the ledger holds it, the state shows it used
    assert host.store.active_decision(consumer).status == DecisionStatus.CLAIMED
    assert consumer in host.agent.ledger
    state = host.published()
    assignment = claim.spec.decision.assignments["numa"]
    assert len(pinned_cpus(state)) == 4
    assert used_2m_pages(state) == 1024 // 2
    # the guest XML pins the vCPUs to the claimed host CPUs
    assert "<vcpupin" in claim.guest_xml and consumer in claim.guest_xml
    assert str(assignment) and result.store_writes == 2  # claimed + republished
    # a second guest of the same shape goes elsewhere on the host
    other = host.decide()
    (second,) = host.agent.poll().claims
    assert second.claimed and second.consumer == other
    assert len(pinned_cpus(host.published())) == 8


def test_a_vgpu_claim_shows_the_device_used_and_its_release_frees_it(
        tmp_path, placement):
    host = Host(tmp_path, placement, HOSTS / "mdev", MDEV_OVERRIDES)
    try:
        host.agent.run_once()
        (gpu,) = host.published("vgpu").pgpus
        assert (gpu.total, gpu.used) == (2, 0)
        # NOTE: the capture has 8 MiB of small pages: the guest takes 2 MiB ones.
        consumer = host.decide({"name": "gpu", "vcpus": 1, "memory_mb": 256,
                                "extra_specs": {"resources:VGPU": "1",
                                                "hw:mem_page_size": "2048"}})
        (claim,) = host.agent.poll().claims
        assert claim.claimed, claim.reasons
        (gpu,) = host.published("vgpu").pgpus
        assert gpu.used == 1 and gpu.address == "0000:02:10.7"
        assert "<hostdev" in claim.guest_xml and "mdev" in claim.guest_xml
        protocol.request_release(host.store, consumer)
        assert host.agent.poll().releases[0].allocations_deleted
        (gpu,) = host.published("vgpu").pgpus
        assert gpu.used == 0
    finally:
        host.store.close()


def test_a_claim_encodes_again_only_the_states_it_changed(
        tmp_path, placement, monkeypatch):
    """A plugin's document is encoded again only when its state changed: a
    claim of small pages (numa's) leaves vgpu's document as encoded before
    (issue 19: encoding every plugin's state at every publish was a share
    of the agent's CPU per decision), and every document published is the
    state's."""
    host = Host(tmp_path, placement, HOSTS / "mdev", MDEV_OVERRIDES)
    try:
        host.agent.run_once()
        plugins = host.agent.manager.plugins
        encoded: list[str] = []
        real = type(plugins).encode_states

        def spy(self, states):
            encoded.extend(sorted(states))
            return real(self, states)

        monkeypatch.setattr(type(plugins), "encode_states", spy)
        consumer = host.decide({"name": "small", "vcpus": 1, "memory_mb": 256,
                                "extra_specs": {"hw:mem_page_size": "2048"}})
        (claim,) = host.agent.poll().claims
        assert claim.claimed, claim.reasons
        assert encoded == ["numa"]
        published = host.store.get_host(host.name).states
        states, _ = host.agent._claims_for_host().states()
        assert published == {name: plugins.encode_state(name, state)
                             for name, state in states.items()}
        # a vGPU's claim changes both
        encoded.clear()
        host.decide({"name": "gpu", "vcpus": 1, "memory_mb": 256,
                     "extra_specs": {"resources:VGPU": "1",
                                     "hw:mem_page_size": "2048"}})
        assert host.agent.poll().claims[0].claimed
        assert encoded == ["numa", "vgpu"]
        (gpu,) = host.published("vgpu").pgpus
        assert gpu.used == 1
        # the release frees the small pages: numa's again, vgpu's kept
        encoded.clear()
        protocol.request_release(host.store, consumer)
        assert host.agent.poll().releases[0].allocations_deleted
        assert encoded == ["numa"]
        assert host.published("vgpu").pgpus[0].used == 1
    finally:
        host.store.close()


@dataclasses.dataclass
class _CountedState(PluginState):
    """A plugin's state type without ``frozen=True`` (the codec reads such
    types too), which its plugin changes in place."""

    used: int = 0


@dataclasses.dataclass(frozen=True)
class _NotedState(PluginState):
    """A plugin's state with a published field its equality leaves out."""

    used: int = 0
    note: str = dataclasses.field(default="", compare=False)


def _count_one(state: _CountedState) -> _CountedState:
    state.used += 1
    return state


@pytest.mark.parametrize("first, then", [
    pytest.param(lambda: _CountedState(0), _count_one, id="changed-in-place"),
    pytest.param(lambda: _NotedState(0, "a"), lambda s: _NotedState(0, "b"),
                 id="compare-false-field"),
])
def test_a_state_changed_where_equality_cannot_see_it_is_published(
        host, monkeypatch, first, then):
    """The agent skips encoding a state equal to the one it encoded last,
    but not one whose equality cannot tell a change: a state object its
    plugin changed in place (the same object, so equal to itself), or one
    with a published field left out of its equality. The store gets the
    state as it is now."""
    host.agent.run_once()
    state = first()
    claims = host.agent._claims_for_host()
    monkeypatch.setattr(claims, "states", lambda: ({"numa": state}, []))
    assert host.agent.run_once().ok
    before = host.store.get_host(host.name).states["numa"]["state"]
    state = then(state)
    assert host.agent.run_once().ok
    after = host.store.get_host(host.name).states["numa"]["state"]
    assert after != before
    assert after == host.agent.manager.plugins.encode_state("numa", state)["state"]


def test_a_decision_for_another_host_is_rejected(host):
    host.agent.run_once()
    consumer = host.decide()
    decision = host.store.active_decision(consumer)
    doc = json.loads(decision.spec)
    doc["decision"]["host"] = "elsewhere"
    protocol.withdraw(host.store, decision.id)
    host.store.submit_decision(consumer, host.name, json.dumps(doc))
    (claim,) = host.agent.poll().claims
    assert not claim.claimed
    (reason,) = claim.reasons
    assert reason.plugin == "framework"
    assert reason.reason == ("the decision is for host 'elsewhere' node %r; "
                             "this is host %r node %r"
                             % (host.name, host.name, host.name))
    assert pinned_cpus(host.published()) == set()


def test_a_claim_released_behind_the_agents_back_is_freed(host):
    """The ledger holds a claim whose decision the store no longer has in
    force (released by another path): the next periodic frees it."""
    host.agent.run_once()
    consumer = host.decide()
    host.agent.poll()
    decision = host.store.active_decision(consumer)
    protocol.release(host.store, decision.id)
    result = host.agent.run_once()
    (freed,) = result.releases
    assert freed.consumer == consumer and freed.ledger
    assert freed.allocations_deleted and host.allocations(consumer) == {}
    assert consumer not in host.agent.ledger
    assert pinned_cpus(host.published()) == set()


def test_a_stale_decision_is_rejected_with_the_plugins_reasons(host):
    host.agent.run_once()
    # Two decisions made on the same published state, on the same cell:
    # Placement has room for both (4 PCPU, 2 + 2), but both chose the same
    # two host CPUs; once the first claim pinned them, the second's are
    # taken (the host changed under the scheduler).
    first = host.decide(SMALL)
    stale = host.decide(SMALL, near=first)
    chosen = [json.loads(host.store.active_decision(c).spec)["decision"]
              ["assignments"]["numa"] for c in (first, stale)]
    assert chosen[0] == chosen[1]
    result = host.agent.poll()
    by_consumer = {c.consumer: c for c in result.claims}
    assert by_consumer[first].claimed
    rejected = by_consumer[stale]
    assert not rejected.claimed
    decision = host.store.latest_decision(stale)
    assert decision.status == DecisionStatus.REJECTED
    assert decision.reasons == rejected.reasons
    (reason,) = decision.reasons
    assert reason.plugin == "numa"
    # the numbers: which CPUs of which cell are taken already
    pinning = chosen[1]["cells"][0]["pinning"]
    cpus = sorted(int(c) for c in pinning.values())
    cell = chosen[1]["cells"][0]["host_cell"]
    assert reason.reason == ("CPU(s) %d-%d of host cell %d are taken by other "
                             "guests" % (cpus[0], cpus[-1], cell)), reason.reason
    assert reason.provider == chosen[1]["cells"][0]["provider_uuid"]
    assert stale not in host.agent.ledger
    assert len(pinned_cpus(host.published())) == 2
    # the scheduler frees the allocation and tries again on the new state
    host.placement.client().delete("/allocations/%s" % stale)
    retried = host.decide(SMALL)
    (claim,) = host.agent.poll().claims
    assert claim.claimed and claim.consumer == retried
    assert len(pinned_cpus(host.published())) == 4


def test_restart_keeps_the_claims_and_never_executes_one_again(host):
    host.agent.run_once()
    consumer = host.decide()
    assert host.agent.poll().claimed
    before = host.store.get_host(host.name).generation
    restarted = host.start_agent()
    first = restarted.run_once()
    assert first.ok and first.claims == []
    assert first.store_writes == 0   # the state it implies is the one published
    assert host.store.get_host(host.name).generation == before
    assert consumer in restarted.ledger
    assert len(pinned_cpus(host.published())) == 4


def test_restart_between_record_and_answer_answers_without_executing(host):
    """The agent recorded the claim in its ledger and stopped before
    mark_claimed: the restarted agent answers it from the ledger."""
    host.agent.run_once()
    consumer = host.decide()
    pending = host.store.active_decision(consumer)
    from compute_plugins.request.spec import RequestSpec

    spec = RequestSpec.from_json(pending.spec, host.agent.manager.plugins)
    host.agent.ledger.record(consumer, pending.id, spec, pending.spec)
    restarted = host.start_agent()
    result = restarted.run_once()
    (claim,) = result.claims
    assert claim.claimed and claim.note == RECORDED_EARLIER
    assert host.store.active_decision(consumer).status == DecisionStatus.CLAIMED
    # verified once, against a state that already counted it: executing it
    # again would have found its own CPUs taken
    assert len(pinned_cpus(host.published())) == 4


def test_release_frees_the_ledger_and_the_placement_allocation(host):
    host.agent.run_once()
    consumer = host.decide()
    host.agent.poll()
    assert host.allocations(consumer)
    decision = protocol.request_release(host.store, consumer)
    assert decision.status == DecisionStatus.RELEASING
    result = host.agent.poll()
    (freed,) = result.releases
    assert freed.consumer == consumer and freed.ledger and freed.allocations_deleted
    assert result.calls == {"DELETE /allocations/{uuid}": 1}
    assert host.allocations(consumer) == {}
    assert consumer not in host.agent.ledger
    assert host.store.latest_decision(consumer).status == DecisionStatus.RELEASED
    assert pinned_cpus(host.published()) == set()
    # and the next periodic is silent again
    again = host.agent.run_once()
    assert again.placement_calls == 0 and again.store_writes == 0


def test_the_hosts_room_is_published_before_the_release_is_answered(host, monkeypatch):
    """Whoever waited for a release and schedules next must see the room:
    the agent publishes the freed state before it answers the decision
    released (it used to publish after, and a scheduler that read the host
    in between refused a request that fitted)."""
    from compute_plugins.compute import claims as claims_module

    host.agent.run_once()
    consumer = host.decide()
    host.agent.poll()
    assert pinned_cpus(host.published())
    seen = []
    answer = claims_module.protocol.release

    def release_seeing_the_published_state(store, decision_id):
        # observes what the store holds at the moment of the answer
        seen.append(pinned_cpus(host.published()))
        return answer(store, decision_id)

    monkeypatch.setattr(claims_module.protocol, "release", release_seeing_the_published_state)
    protocol.request_release(host.store, consumer)
    host.agent.poll()
    assert seen == [set()]


def test_release_command_waits_for_the_agent(host, tmp_path):
    """``compute-plugins release`` with an agent thread running."""
    import threading

    host.agent.run_once()
    consumer = host.decide()
    host.agent.poll()
    conf_file = tmp_path / "release.conf"
    conf_file.write_text("[host_state]\nconnection = %s\n[compute]\n"
                         "release_timeout = 30\n" % host.store_url)
    stop = threading.Event()
    host.agent.claim_poll_interval = 0.05
    runner = threading.Thread(target=host.agent.run, args=(stop, 3600.0))
    runner.start()
    try:
        proc = subprocess.run(
            CLI + ["--config-file", str(conf_file), "release", "--consumer", consumer],
            capture_output=True, text=True, timeout=120, env=cli_env())
    finally:
        stop.set()
        runner.join(timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert flat(proc.stdout) == (
        "consumer %s: released by host %s (decision %d): its resources and "
        "Placement allocations are free"
        % (consumer, host.name, host.store.latest_decision(consumer).id))
    assert host.allocations(consumer) == {}
    # nothing left in force: a second release says so, exit 0
    again = subprocess.run(
        CLI + ["--config-file", str(conf_file), "--format", "json", "release",
               "--consumer", consumer, "--no-wait"],
        capture_output=True, text=True, timeout=120, env=cli_env())
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["outcome"] == "nothing-in-force"


def test_a_corrupt_ledger_is_one_line_and_exit_2(host, tmp_path):
    host.agent.run_once()
    consumer = host.decide()
    host.agent.poll()
    path = Path(host.agent.ledger.path)
    text = path.read_text()
    path.write_text(text[: len(text) // 2])
    with pytest.raises(LedgerError, match="not JSON"):
        host.start_agent()
    state = tmp_path / "xdg"
    shutil.copytree(host.state_dir, state / "compute-plugins")
    conf_file = tmp_path / "agent.conf"
    conf_file.write_text(AGENT_CONF)
    proc = subprocess.run(
        CLI + ["--config-file", str(conf_file), "--host-snapshot",
               str(host.snapshot), "report", "--periodic", "1"],
        capture_output=True, text=True, timeout=120,
        env=cli_env(XDG_STATE_HOME=str(state)))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("compute-plugins: error: claims ledger %s"
                               % (state / "compute-plugins" / path.name))
    assert "not JSON" in lines[0] and "never discarded" in lines[0]
    # nothing was touched: the claim is still on disk as it was
    assert (state / "compute-plugins" / path.name).read_text() == text[: len(text) // 2]
    assert consumer in text


def test_a_decision_withdrawn_before_the_answer_is_not_kept(host):
    """The scheduler gave up waiting (withdraw) after the agent read the
    decision: the claim is undone, nothing stays in force."""
    from compute_plugins.compute.claims import Claims

    host.agent.run_once()
    consumer = host.decide()
    (decision,) = host.store.list_decisions(host.name)
    protocol.withdraw(host.store, decision.id)
    claims = Claims(host.name, host.name, host.agent.manager, host.agent.ledger,
                    host.store)
    result = claims.claim(decision)
    assert not result.claimed and result.note == "released before it was claimed"
    assert consumer not in host.agent.ledger
    assert host.store.latest_decision(consumer).status == DecisionStatus.RELEASED


def said(stderr: str) -> str:
    """The command's own lines on stderr (the in-process log shares it)."""
    return "".join(ln + "\n" for ln in stderr.splitlines()
                   if ln.startswith("compute-plugins:"))


def test_release_without_a_running_agent(host, tmp_path):
    """--no-wait returns once requested; a wait that times out is exit 1,
    one line, and the release stays requested for the agent."""
    host.agent.run_once()
    consumer = host.decide()
    host.agent.poll()
    conf_file = tmp_path / "release.conf"
    conf_file.write_text("[host_state]\nconnection = %s\n" % host.store_url)
    decision_id = host.store.active_decision(consumer).id
    base = ["--config-file", str(conf_file), "release", "--consumer", consumer]
    done = cli.run(*base, "--no-wait")
    assert done.returncode == 0
    assert flat(done.stdout) == ("consumer %s: release of decision %d requested; host %s's "
                         "agent frees it at its next poll"
                         % (consumer, decision_id, host.name))
    done = cli.run(*base, "--timeout", "0")
    assert done.returncode == 1
    assert done.stdout == ""
    assert said(done.stderr) == ("compute-plugins: error: consumer %s: host %s's agent did not "
                   "free decision %d within 0s; the release stays requested "
                   "(is the agent running?)\n" % (consumer, host.name, decision_id))
    assert host.store.active_decision(consumer).status == DecisionStatus.RELEASING
    assert host.agent.poll().releases[0].consumer == consumer
    # a pending decision is released at once (never claimed), with its
    # allocation (NOTE: the library call: the command would open its own
    # embedded Placement, and one runs in this process already)
    from compute_plugins.compute.release import request_release

    pending = host.decide()
    assert host.allocations(pending)
    done = request_release(host.store, pending, host.placement.client())
    assert (done.outcome, done.was) == ("released", DecisionStatus.PENDING)
    assert done.allocations_deleted and host.allocations(pending) == {}
    assert host.agent.poll().claims == []
    # a consumer the store never saw
    unknown = str(uuid.uuid4())
    done = cli.run("--config-file", str(conf_file), "release", "--consumer", unknown)
    assert done.returncode == 1
    assert said(done.stderr) == (
        "compute-plugins: error: consumer %s: no decision was ever made for it\n"
        % unknown)
    # not a uuid: usage error
    assert cli.run("release", "--consumer", "nope").returncode == 2


def test_release_on_a_down_host_is_recorded_for_its_return(host, tmp_path):
    """Issue 19, item 3: the host's agent is gone (its lease expired):
    ``release`` records the release (releasing) and returns at once, exit
    0, saying the host frees it when its agent comes back; it does."""
    import time

    host.agent.lease_duration = 0.3
    host.agent.run_once()
    consumer = host.decide()
    assert host.agent.poll().claimed[0].consumer == consumer
    decision = host.store.active_decision(consumer)
    time.sleep(0.4)   # the agent stopped: its lease lapses
    expired = host.store.get_lease(host.name).expires_at
    conf_file = tmp_path / "release.conf"
    conf_file.write_text("[host_state]\nconnection = %s\n" % host.store_url)
    start = time.monotonic()
    done = cli.run("--config-file", str(conf_file), "release", "--consumer", consumer,
                   "--timeout", "60")
    assert done.returncode == 0
    assert time.monotonic() - start < 10, "no wait for a host that is down"
    assert flat(done.stdout) == (
        "consumer %s: host %s is down (its agent's lease expired at %s UTC): the "
        "release of decision %d is recorded; the host frees it when its agent "
        "comes back" % (consumer, host.name,
                        expired.isoformat(sep=" ", timespec="seconds"), decision.id))
    assert host.store.active_decision(consumer).status == DecisionStatus.RELEASING
    # JSON says so too
    done = cli.run("--config-file", str(conf_file), "--format", "json", "release",
                   "--consumer", consumer)
    assert done.returncode == 0
    assert json.loads(done.stdout)["outcome"] == "host-down"
    # the agent comes back: it frees it
    back = host.start_agent()
    (freed,) = back.run_once().releases
    assert freed.consumer == consumer
    assert host.store.latest_decision(consumer).status == DecisionStatus.RELEASED
    assert host.allocations(consumer) == {}


def test_another_writer_bumps_the_generation_the_agent_reads_again(host):
    """Compare-and-swap: the agent keeps the generation in memory; when
    another writer moved it, the next publish reads it again and wins."""
    host.agent.run_once()
    snapshot = host.store.get_host(host.name)
    assert snapshot is not None
    host.store.publish(host.name, {}, snapshot.generation)   # a foreign write
    consumer = host.decide_on(snapshot)
    result = host.agent.poll()
    assert result.claimed[0].consumer == consumer
    after = host.store.get_host(host.name)
    assert after is not None and after.generation == snapshot.generation + 2
    assert len(pinned_cpus(host.published())) == 4


def test_a_stale_claim_never_frees_the_consumers_allocation_elsewhere(tmp_path, placement):
    """Agent A recorded a claim and stopped before answering; the scheduler
    gave up waiting (withdrawn, its allocation freed) and placed the
    consumer on host B. A's restart forgets its stale claim, and must leave
    the consumer's allocation alone: it is B's now."""
    a = Host(tmp_path / "a", placement)
    b = Host(tmp_path / "b", placement)
    # NOTE: one store for both hosts, as in a cloud.
    b.store.close()
    b.store = a.store
    b.agent = b.start_agent()
    a.agent.run_once()
    b.agent.run_once()
    consumer = a.decide()
    pending = a.store.active_decision(consumer)
    from compute_plugins.request.spec import RequestSpec

    spec = RequestSpec.from_json(pending.spec, a.agent.manager.plugins)
    a.agent.ledger.record(consumer, pending.id, spec, pending.spec)
    # the scheduler's answer timeout: withdrawn, freed, the next host
    protocol.withdraw(a.store, pending.id)
    placement.client().delete("/allocations/%s" % consumer)
    b.decide(consumer=consumer)
    (claim,) = b.agent.poll().claims
    assert claim.claimed
    on_b = b.allocations(consumer)
    assert set(on_b) <= set(b.store.get_host(b.name).providers)
    restarted = a.start_agent()
    result = restarted.run_once()
    (freed,) = result.releases
    assert freed.consumer == consumer and freed.ledger
    assert not freed.allocations_deleted
    assert consumer not in restarted.ledger
    assert b.allocations(consumer) == on_b
    assert pinned_cpus(a.published()) == set()
    a.store.close()


def test_a_plugin_failing_during_a_claim_rejects_it_and_the_agent_goes_on(host, monkeypatch):
    """A plugin's bug (its verify raises) is that plugin's rejection of the
    decision: the agent answers, holds nothing and keeps running; a
    pending decision that crashed the agent would crash it again at every
    restart. NOTE: the failure is injected (no real plugin has this bug)."""
    host.agent.run_once()
    consumer = host.decide()
    numa = host.agent.manager.plugins["numa"]

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(numa, "verify", broken)
    result = host.agent.poll()
    (claim,) = result.claims
    assert not claim.claimed
    (reason,) = claim.reasons
    assert reason.plugin == "numa" and "RuntimeError: boom" in reason.reason
    assert host.store.latest_decision(consumer).status == DecisionStatus.REJECTED
    assert consumer not in host.agent.ledger
    monkeypatch.undo()
    again = host.decide()
    (claim,) = host.agent.poll().claims
    assert claim.claimed and claim.consumer == again


def test_start_reports_placement_allocations_and_ledger_claims_that_disagree(host):
    """On start the agent compares Placement's allocations on its tree with
    its ledger, once, and reports each mismatch (documented rule: reported,
    never deleted: an allocation without a claim may be a schedule in
    flight or a consumer compute-plugins does not manage; a claim without
    an allocation still holds the host's resources)."""
    host.agent.run_once()
    claimed = host.decide()
    host.agent.poll()
    orphan = str(uuid.uuid4())
    snapshot = host.store.get_host(host.name)
    numa3 = next(rp for rp, name in sorted(snapshot.providers.items())
                 if "_NUMA" in name and rp not in host.allocations(claimed))
    client = host.placement.client()
    client.put("/allocations/%s" % orphan, {
        "allocations": {numa3: {"resources": {"PCPU": 1}}},
        "project_id": "p", "user_id": "u", "consumer_generation": None,
        "consumer_type": "INSTANCE"})
    # the claimed consumer's allocation lost behind the agent's back
    client.delete("/allocations/%s" % claimed)
    restarted = host.start_agent()
    first = restarted.run_once()
    assert first.ok
    by_consumer = {m.consumer: m for m in first.mismatches}
    assert set(by_consumer) == {orphan, claimed}
    assert "no claim on this host" in by_consumer[orphan].reason
    assert "no allocation in Placement" in by_consumer[claimed].reason
    # reported, not resolved by deleting anything
    assert host.allocations(orphan)[numa3]["resources"] == {"PCPU": 1}
    assert claimed in restarted.ledger
    # once per start: the next periodic is silent again
    second = restarted.run_once()
    assert second.mismatches == [] and second.placement_calls == 0
    client.delete("/allocations/%s" % orphan)


def test_a_ledger_that_cannot_be_written_stops_the_agent_loudly(host, caplog):
    """ComputeAgent.run (an agent in a thread): a ledger it cannot write
    stops it (the claims must not be lost), and says so: an error in the
    log naming the ledger, and ``failure`` for whoever runs the thread;
    the decision stays pending (the scheduler times out and moves on)."""
    import threading

    host.agent.run_once()
    ledger = Path(host.agent.ledger.path)
    ledger.unlink()   # written by the first periodic (the store's id)
    ledger.mkdir()
    (ledger / "in-the-way").write_text("")
    consumer = host.decide()
    stop = threading.Event()
    raised = []

    def agent_thread():
        try:
            host.agent.run(stop, 3600.0)
        except LedgerError as err:
            raised.append(err)

    thread = threading.Thread(target=agent_thread)
    host.agent.claim_poll_interval = 0.05
    with caplog.at_level("ERROR"):
        thread.start()
        thread.join(20)
    alive = thread.is_alive()
    stop.set()
    assert not alive
    assert raised == [host.agent.failure] and isinstance(raised[0], LedgerError)
    assert any("stopped" in r.getMessage() and str(ledger) in r.getMessage()
               for r in caplog.records)
    assert host.store.active_decision(consumer).status == DecisionStatus.PENDING


def test_a_new_decision_replaces_the_stale_claim_of_its_consumer(host):
    """The agent recorded decision 1 and could not answer it (the store
    was unreachable); the scheduler withdrew it, freed its allocation, and
    later decided the same consumer on this host again. Only one decision
    of a consumer is in force, so the held claim is stale: the new decision
    is claimed (not refused as "already holds a claim"), and its
    allocation stays."""
    host.agent.run_once()
    consumer = host.decide()
    first = host.store.active_decision(consumer)
    from compute_plugins.request.spec import RequestSpec

    spec = RequestSpec.from_json(first.spec, host.agent.manager.plugins)
    host.agent.ledger.record(consumer, first.id, spec, first.spec)
    protocol.withdraw(host.store, first.id)
    placement_client = host.placement.client()
    placement_client.delete("/allocations/%s" % consumer)
    host.decide(consumer=consumer)
    second = host.store.active_decision(consumer)
    (claim,) = host.agent.poll().claims
    assert claim.claimed, claim.reasons
    assert host.agent.ledger.get(consumer).decision_id == second.id
    assert host.store.active_decision(consumer).status == DecisionStatus.CLAIMED
    assert host.allocations(consumer)
    assert len(pinned_cpus(host.published())) == 4


def root_traits(host) -> set[str]:
    client = host.placement.client()
    [root] = client.get("/resource_providers?name=%s" % host.name)["resource_providers"]
    return set(client.get("/resource_providers/%s/traits" % root["uuid"])["traits"])


def test_a_disabled_host_keeps_the_trait_claims_and_releases(host):
    """``host disable``'s record in the store: the agent's periodic sets
    COMPUTE_STATUS_DISABLED on its root once, then is silent again; a
    decision addressed before the host was disabled is still executed (as
    nova builds an instance already scheduled) and released."""
    assert host.agent.run_once().ok
    consumer = host.decide()  # addressed before the operator disabled the host
    host.store.disable_host(host.name, "firmware upgrade", "ops@desk")
    first = host.agent.run_once()
    assert first.ok and first.claimed and first.claimed[0].consumer == consumer
    assert "COMPUTE_STATUS_DISABLED" in root_traits(host)
    assert first.periodic.calls == {"PUT /resource_providers/{uuid}/traits": 1}
    steady = host.agent.run_once()
    assert steady.ok and steady.placement_calls == 0 and steady.store_writes == 0
    assert "COMPUTE_STATUS_DISABLED" in root_traits(host)
    protocol.request_release(host.store, consumer)
    (released,) = host.agent.poll().releases
    assert released.consumer == consumer and host.allocations(consumer) == {}
    host.store.enable_host(host.name)
    assert host.agent.run_once().ok
    assert "COMPUTE_STATUS_DISABLED" not in root_traits(host)
    assert host.agent.run_once().placement_calls == 0
