"""The claims ledger: durable, private, and never silently discarded.

The specs in it are real: the numa plugin decides a pinned guest on the
numa4 host snapshot (``PluginSet.fit``, no Placement), as the scheduler would.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from oslo_config import cfg

from compute_plugins import conf as conf_areas
from compute_plugins.compute.ledger import Ledger, LedgerError, path_for
from compute_plugins.host import discover_host
from compute_plugins.request.groups import Decision
from compute_plugins.request.spec import build_request_spec
from compute_plugins.runtime.manager import PluginManager

NUMA4 = Path(__file__).parents[2] / "fixtures" / "hosts" / "numa4"
HOST = "numa4"
CONSUMER = "7d0b5a4e-95a0-4c6b-9f3e-2a8f5a9d1c11"
OTHER = "0c9f14a2-3b55-4f4e-8e6e-5f0e8a6c2d22"


def manager(plugins=("numa",)) -> PluginManager:
    conf = cfg.ConfigOpts()
    conf_areas.register_all(conf)
    conf([], project="compute-plugins-tests", default_config_files=[],
         default_config_dirs=[])
    conf.set_override("enabled_plugins", list(plugins), "compute_plugins")
    conf.set_override("cpu_dedicated_set", "0-15", "compute")
    conf.set_override("reserved_host_memory_mb", 0, "compute")
    loaded = PluginManager(conf)
    loaded.discover(discover_host(host_snapshot=str(NUMA4)))
    return loaded


@pytest.fixture(scope="module")
def plugins():
    return manager()


def decided(plugins, usage=None) -> tuple:
    """A pinned guest decided on the host: (spec, its JSON)."""
    spec = build_request_spec(plugins.plugins, {
        "name": "pinned", "vcpus": 2, "memory_mb": 1024,
        "extra_specs": {"hw:cpu_policy": "dedicated", "hw:numa_nodes": "1",
                        "hw:mem_page_size": "2048"}})
    states, broken = plugins.host_states(HOST, usage or {})
    assert not broken
    fitted = plugins.plugins.fit(states, spec)
    assert fitted.fits, fitted.rejections
    spec = spec.with_decision(Decision(host=HOST, nodename=HOST,
                                       assignments=fitted.assignments))
    return spec, spec.to_json()


def test_a_missing_ledger_is_empty_and_not_written(tmp_path, plugins):
    ledger = Ledger.load(str(tmp_path / "state"), HOST, plugins.plugins)
    assert len(ledger) == 0 and ledger.assignments() == {}
    assert not (tmp_path / "state").exists()


def test_claims_are_kept_private_and_read_back(tmp_path, plugins):
    state = tmp_path / "state"
    ledger = Ledger.load(str(state), HOST, plugins.plugins)
    spec, text = decided(plugins)
    ledger.record(CONSUMER, 7, spec, text)
    second, second_text = decided(plugins, ledger.assignments())
    ledger.record(OTHER, 9, second, second_text)
    path = Path(path_for(str(state), HOST))
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    again = Ledger.load(str(state), HOST, plugins.plugins)
    assert set(again.entries()) == {CONSUMER, OTHER}
    assert again.get(CONSUMER).decision_id == 7
    assert again.get(CONSUMER).spec == spec
    # both guests' pinned CPUs are in force, and none twice
    pinned = [cpu for a in again.assignments()["numa"]
              for cell in a.cells for cpu in cell.pinning.values()]
    assert len(pinned) == 4 and len(set(pinned)) == 4
    again.remove(CONSUMER)
    assert set(Ledger.load(str(state), HOST, plugins.plugins).entries()) == {OTHER}
    # no temporary file left behind
    assert sorted(os.listdir(state)) == [path.name]


@pytest.mark.parametrize("content, reason", [
    (b"{\"format\": \"compute-plugins-ledger\", \"ver", "not JSON"),
    (b"[]", "not a claims ledger"),
    (b'{"format": "compute-plugins-ledger", "version": 2, "host": "numa4", '
     b'"claims": {}}', "version 2; this compute-plugins reads version 1"),
    (b'{"format": "compute-plugins-ledger", "version": 1, "host": "other", '
     b'"claims": {}}', "written for host 'other', this host is 'numa4'"),
    (b'{"format": "compute-plugins-ledger", "version": 1, "host": "numa4", '
     b'"claims": {"c": {"decision_id": "1", "spec": {}}}}',
     'claims.c: expected {"decision_id": integer, "spec": object}'),
    (b"\xff\xfe", "not JSON"),
])
def test_an_unreadable_ledger_is_one_clear_error(tmp_path, plugins, content, reason):
    path = Path(path_for(str(tmp_path), HOST))
    path.write_bytes(content)
    with pytest.raises(LedgerError) as info:
        Ledger.load(str(tmp_path), HOST, plugins.plugins)
    message = str(info.value)
    assert message.startswith("claims ledger %s: " % path)
    assert reason in message and "never discarded" in message
    assert "\n" not in message
    assert path.read_bytes() == content   # left as it was


def test_a_fifo_at_the_ledger_is_refused_without_blocking(tmp_path, plugins):
    path = path_for(str(tmp_path), HOST)
    os.mkfifo(path)
    with pytest.raises(LedgerError, match="a FIFO"):
        Ledger.load(str(tmp_path), HOST, plugins.plugins)


def test_a_claim_of_a_plugin_no_longer_enabled_stops_the_agent(tmp_path, plugins):
    """Dropping the claim would hand its CPUs out twice: the operator
    decides (re-enable the plugin, or release the consumer)."""
    ledger = Ledger.load(str(tmp_path), HOST, plugins.plugins)
    spec, text = decided(plugins)
    ledger.record(CONSUMER, 3, spec, text)
    without_numa = manager(("disk",))
    with pytest.raises(LedgerError) as info:
        Ledger.load(str(tmp_path), HOST, without_numa.plugins)
    assert "claims.%s" % CONSUMER in str(info.value)
    assert "numa" in str(info.value)
    assert json.loads(Path(ledger.path).read_text())["claims"][CONSUMER]["decision_id"] == 3


def test_a_symlink_planted_at_the_ledger_is_replaced_not_written_through(tmp_path, plugins):
    state = tmp_path / "state"
    ledger = Ledger.load(str(state), HOST, plugins.plugins)
    spec, text = decided(plugins)
    ledger.record(CONSUMER, 7, spec, text)
    outside = tmp_path / "outside"
    outside.write_text("untouched")
    path = Path(path_for(str(state), HOST))
    path.unlink()
    path.symlink_to(outside)
    ledger.record(OTHER, 9, *decided(plugins, ledger.assignments()))
    assert outside.read_text() == "untouched"
    assert not path.is_symlink() and stat.S_IMODE(path.stat().st_mode) == 0o600
    assert set(Ledger.load(str(state), HOST, plugins.plugins).entries()) == {CONSUMER, OTHER}


def test_a_claims_spec_is_written_as_recorded_a_claim_a_line(tmp_path, plugins):
    """issue 19: every write of the ledger decoded every claim's spec and
    encoded the whole file again with ``indent`` (Python's pure-Python
    encoder): the agent's CPU per claim grew with the host's claims. The
    file holds each claim on a line of its own, its spec the canonical
    text recorded, and reads back the same."""
    state = str(tmp_path / "state")
    ledger = Ledger.load(state, HOST, plugins.plugins)
    spec, text = decided(plugins)
    ledger.record(CONSUMER, 7, spec, text)
    second, second_text = decided(plugins, ledger.assignments())
    ledger.record(OTHER, 9, second, second_text)
    ledger.set_store("store-uuid")
    written = Path(path_for(state, HOST)).read_text()
    for consumer in (CONSUMER, OTHER):
        line = [entry for entry in written.splitlines() if consumer in entry]
        assert len(line) == 1 and ledger.get(consumer).spec_json in line[0], written
    document = json.loads(written)
    assert (document["store"], document["host"]) == ("store-uuid", HOST)
    assert document["claims"][OTHER]["decision_id"] == 9
    again = Ledger.load(state, HOST, plugins.plugins)
    assert again.entries() == ledger.entries() and again.store_id == "store-uuid"
    ledger.remove(CONSUMER)
    ledger.remove(OTHER)
    assert json.loads(Path(path_for(state, HOST)).read_text())["claims"] == {}
    assert len(Ledger.load(state, HOST, plugins.plugins)) == 0


def test_a_ledger_of_the_indented_format_reads_and_is_rewritten_a_claim_a_line(
        tmp_path, plugins):
    """A ledger written before claims were a line each (the whole document
    encoded with ``indent``) reads as before; the next write keeps its
    claims, a spec's text with a newline and non-ASCII characters in it
    intact (escaped: still one line)."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    spec, text = decided(plugins)
    document = json.loads(text)
    document["image"]["name"] = "pinned\nguest \u00e9\u4e2d \"q\""
    old = {"format": "compute-plugins-ledger", "version": 1, "host": HOST,
           "store": "store-uuid",
           "claims": {CONSUMER: {"decision_id": 7, "spec": document}}}
    path = Path(path_for(str(state), HOST))
    path.write_text(json.dumps(old, indent=1, sort_keys=True))
    path.chmod(0o600)
    ledger = Ledger.load(str(state), HOST, plugins.plugins)
    assert ledger.get(CONSUMER).decision_id == 7 and ledger.store_id == "store-uuid"
    second, second_text = decided(plugins, ledger.assignments())
    ledger.record(OTHER, 9, second, second_text)
    written = path.read_text()
    assert len([line for line in written.splitlines() if CONSUMER in line]) == 1
    assert json.loads(written)["claims"][CONSUMER]["spec"] == document
    again = Ledger.load(str(state), HOST, plugins.plugins)
    assert again.entries() == ledger.entries() and again.store_id == "store-uuid"
