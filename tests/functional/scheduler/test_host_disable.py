"""``compute-plugins host disable|enable`` against real Placement
(embedded), a real host-state store and each host's real compute agent
running (:mod:`tests.functional.scheduler.cloud`): a disabled host gets no
new decision while another does, its instances stay and are released,
its agent keeps the ``COMPUTE_STATUS_DISABLED`` trait as the store says,
and enabling it restores it."""

from __future__ import annotations

import json
import re

import pytest

from compute_plugins.cmd import main
from compute_plugins.compute import disable
from compute_plugins.compute.release import request_release
from compute_plugins.scheduler import query
from tests.functional.request.hosts import HEADERS, cell
from tests.functional.scheduler.test_schedule import new_consumer, spec_of
from tests.output import flat

TRAIT = "COMPUTE_STATUS_DISABLED"

# NOTE: test_schedule's fixtures: one embedded Placement for the module,
# a cloud (store, hosts, agents) per test.


def root_traits(cloud, host) -> set[str]:
    resp = cloud.placement.session.request(
        cloud.placement.emb_url("/resource_providers/%s/traits" % host.root), "GET",
        headers=HEADERS)
    return set(resp.json()["traits"])


def drop_root_trait(cloud, host, trait) -> None:
    """Placement loses the trait (an operator's mistake, a restored
    database): what the agent must put right."""
    session, url = cloud.placement.session, cloud.placement.emb_url(
        "/resource_providers/%s/traits" % host.root)
    have = session.request(url, "GET", headers=HEADERS).json()
    session.request(url, "PUT", headers=HEADERS, json={
        "resource_provider_generation": have["resource_provider_generation"],
        "traits": sorted(set(have["traits"]) - {trait})})


@pytest.fixture
def cli(cloud, placement_url, tmp_path, capsys):
    """``compute-plugins ARGS`` on the cloud's Placement and store:
    (exit code, stdout, stderr)."""
    config = tmp_path / "compute-plugins.conf"
    config.write_text(cloud.host_state_config())

    def run(*args: str) -> tuple[int, str, str]:
        code = main.main(["--config-file", str(config), "--placement-url",
                          placement_url, *args])
        out = capsys.readouterr()
        # NOTE: the command's own lines; the embedded Placement and the
        # agents (threads of this process) log to stderr too.
        err = "".join(line for line in out.err.splitlines(keepends=True)
                      if line.startswith("compute-plugins"))
        return code, flat(out.out), err
    return run


def test_a_disabled_host_gets_no_decision_and_enabling_restores_it(cloud, cli):
    off = cloud.add_host("off", [cell(4, 4096)])
    on = cloud.add_host("on", [cell(4, 4096)])
    sched = cloud.scheduler()
    small = spec_of(sched, {}, 1, 512)
    # an instance on the host before it is disabled: it stays
    kept = new_consumer()
    first = sched.schedule(small, kept, "p", "u")
    assert first.placed and first.host == off.name  # spread: both empty, name order

    code, out, err = cli("host", "disable", off.name, "--reason", "firmware upgrade")
    assert (code, err) == (0, "")
    assert out == ("host %s disabled: firmware upgrade; its instances stay, no new one "
                   "goes to it; COMPUTE_STATUS_DISABLED set on its root provider %s"
                   % (off.name, off.root))
    assert TRAIT in root_traits(cloud, off)
    record = cloud.store.disabled_hosts()[off.name]
    assert record.reason == "firmware upgrade" and "@" in record.by

    # no new decision goes to it, while the other host takes every one
    for _ in range(3):
        result = sched.schedule(small, new_consumer(), "p", "u")
        assert result.placed and result.host == on.name
        assert [(r.plugin, r.reason) for r in result.verdicts[off.name]] == [
            ("", "host %s is disabled: firmware upgrade" % off.name)]
        # the root query asks which roots carry the trait, to exclude them
        assert any("required=%s" % TRAIT in q for q in result.queries)
    # the allocation-candidates query (validate's preview, nova's) forbids it
    alternatives = query.derive(small.groups).alternatives
    assert alternatives
    for alternative in alternatives:
        assert "!%s" % TRAIT in dict(alternative.to_params())["root_required"].split(",")

    # its instance stays, and is released as any other
    assert cloud.allocations(kept)
    assert cloud.store.active_decision(kept).host == off.name
    done = request_release(cloud.store, kept, timeout=10)
    assert done.outcome == "released", done
    assert cloud.store.active_decision(kept) is None
    assert cloud.allocations(kept) == {}

    # the agent's periodic keeps the trait, and puts it back when lost
    assert off.agent.run_once().ok
    assert TRAIT in root_traits(cloud, off)
    drop_root_trait(cloud, off, TRAIT)
    # NOTE: the agent sees Placement's change when it re-reads its tree
    # ([compute] resource_provider_association_refresh, or SIGHUP): now.
    off.agent.client.clear_cache()
    assert off.agent.run_once().ok
    assert TRAIT in root_traits(cloud, off)

    # disabling again: nothing changes, exit 0, the first record kept
    code, out, err = cli("host", "disable", off.name, "--reason", "something else")
    assert (code, err) == (0, "")
    assert re.fullmatch(
        r"host %s is already disabled since \S+ \S+ by \S+@\S+: firmware upgrade; "
        r"nothing changed" % re.escape(off.name), out), out
    assert cloud.store.disabled_hosts()[off.name] == record

    code, out, err = cli("host", "enable", off.name)
    assert (code, err) == (0, "")
    assert re.fullmatch(
        r"host %s enabled \(it was disabled since \S+ \S+ by \S+@\S+: firmware "
        r"upgrade\); COMPUTE_STATUS_DISABLED removed from its root provider %s"
        % (re.escape(off.name), off.root), out), out
    assert TRAIT not in root_traits(cloud, off)
    assert cloud.store.disabled_hosts() == {}
    result = sched.schedule(small, new_consumer(), "p", "u")
    assert result.placed and result.host == off.name  # the emptier host again
    assert off.agent.run_once().ok
    assert TRAIT not in root_traits(cloud, off)

    code, out, err = cli("host", "enable", off.name)
    assert (code, out, err) == (0, "host %s is already enabled; nothing changed"
                                % off.name, "")


def test_the_store_record_alone_excludes_the_host_and_the_agent_sets_the_trait(cloud):
    # the command stopped after the store's write (or Placement was down)
    host = cloud.add_host("half", [cell(4, 4096)])
    other = cloud.add_host("other", [cell(4, 4096)])
    cloud.store.disable_host(host.name, "", "ops@desk")
    assert TRAIT not in root_traits(cloud, host)
    sched = cloud.scheduler()
    result = sched.schedule(spec_of(sched, {}, 1, 512), new_consumer(), "p", "u")
    assert result.placed and result.host == other.name
    assert [r.reason for r in result.verdicts[host.name]] == [
        "host %s is disabled (no reason given)" % host.name]
    assert host.agent.run_once().ok
    assert TRAIT in root_traits(cloud, host)
    # a restarted agent (new plugins, new report client) keeps it
    assert cloud.restart(host).ok
    assert TRAIT in root_traits(cloud, host)
    # enabled in the store only: the agent removes the trait
    cloud.store.enable_host(host.name)
    assert host.agent.run_once().ok
    assert TRAIT not in root_traits(cloud, host)


def test_an_operators_other_root_traits_are_kept(cloud, placement):
    host = cloud.add_host("traits", [cell(4, 4096)])
    cloud.set_root_traits(host, "HW_CPU_X86_AVX2")
    done = disable.disable_host(cloud.store, placement.emb.client(), host.name,
                                "power work", by="ops@desk")
    assert done.changed and done.trait_changed and done.root == host.root
    assert root_traits(cloud, host) >= {"HW_CPU_X86_AVX2", TRAIT}
    done = disable.enable_host(cloud.store, placement.emb.client(), host.name)
    assert done.changed and done.record.reason == "power work"
    assert "HW_CPU_X86_AVX2" in root_traits(cloud, host)
    assert TRAIT not in root_traits(cloud, host)


def test_unknown_host_and_bad_reason_are_one_line_exit_2(cloud, cli):
    host = cloud.add_host("known", [cell(4, 4096)], start=False)
    for args in (("host", "disable", "nope"), ("host", "enable", "nope")):
        code, out, err = cli(*args)
        assert (code, out) == (2, "")
        assert err == ("compute-plugins: error: host nope: unknown to the host-state "
                       "store (no compute agent ever published it)\n")
    code, out, err = cli("host", "disable", host.name, "--reason", "x" * 256)
    assert (code, out) == (2, "")
    assert err.count("\n") == 1 and "reason 'xxx" in err and "at most 255 characters" in err
    assert cloud.store.disabled_hosts() == {}
    assert TRAIT not in root_traits(cloud, host)


def test_json_output(cloud, cli):
    host = cloud.add_host("json", [cell(4, 4096)], start=False)
    code, out, _ = cli("host", "disable", host.name, "--format", "json")
    doc = json.loads(out)
    assert code == 0
    assert (doc["host"], doc["disabled"], doc["changed"], doc["root_provider"],
            doc["trait_changed"], doc["placement_error"]) == (
        host.name, True, True, host.root, True, None)
    assert doc["record"]["reason"] == "" and doc["record"]["at"].endswith("Z")
    code, out, _ = cli("host", "enable", host.name, "--format", "json")
    doc = json.loads(out)
    assert (code, doc["disabled"], doc["changed"]) == (0, False, True)
