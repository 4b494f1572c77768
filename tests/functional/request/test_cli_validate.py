"""``compute-plugins validate`` as a user runs it (subprocess): exit 0/1/2."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from compute_plugins.cmd.main import main

COMMAND = [sys.executable, "-m", "compute_plugins.cmd.main"]


def cli(*args):
    return subprocess.run(COMMAND + list(args), capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONWARNINGS": "ignore"})


def write(tmp_path, name, doc):
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return str(path)


FLAVOR = {"name": "pinned", "vcpus": 4, "memory_mb": 4096, "root_gb": 10,
          "extra_specs": {"hw:cpu_policy": "dedicated", "hw:numa_nodes": "2"}}


def test_valid_request_prints_the_query(tmp_path):
    flavor = write(tmp_path, "f.json", FLAVOR)
    port = write(tmp_path, "p.json", {"vnic_type": "direct", "physnet": "physnet1"})
    result = cli("validate", "--flavor", flavor, "--port", port)
    assert result.returncode == 0, result.stderr
    assert "GET /allocation_candidates\n" in result.stdout
    # decoded, one parameter per line
    assert "\n    resources_NUMA0=MEMORY_MB:2048,PCPU:2\n" in result.stdout
    assert "\n    same_subtree=_NUMA0,_PORT0\n" in result.stdout
    assert "%3A" not in result.stdout


def test_valid_request_json(tmp_path):
    flavor = write(tmp_path, "f.json", FLAVOR)
    image = write(tmp_path, "i.json", {"name": "img", "properties": {
        "hw_cpu_thread_policy": "require"}})
    result = cli("validate", "--flavor", flavor, "--image", image, "--format", "json")
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    assert set(doc) == {"request_spec", "placement_query"}
    assert doc["request_spec"]["version"] and doc["request_spec"]["plugins"]["numa"]
    alt = doc["placement_query"]["alternatives"][0]
    assert alt["params"]["group_policy"] == ["none"]
    assert alt["distinct"] == ["_NUMA0", "_NUMA1"]
    assert alt["params"]["root_required"] == [
        "HW_CPU_HYPERTHREADING,!COMPUTE_STATUS_DISABLED"]


def test_invalid_request_lists_every_problem(tmp_path):
    flavor = write(tmp_path, "f.json", {**FLAVOR, "extra_specs": {
        "hw:cpu_policy": "pinned", "hw:numa_nodes": "0", "hw:nope": "1"}})
    result = cli("validate", "--flavor", flavor)
    assert result.returncode == 1
    assert "3 problem(s)" in result.stdout
    assert "hw:cpu_policy='pinned': Validation failed; 'pinned' is not one of" in result.stdout
    assert "hw:nope" in result.stdout and "Traceback" not in result.stderr
    result = cli("--format", "json", "validate", "--flavor", flavor)
    assert result.returncode == 1
    problems = json.loads(result.stdout)["problems"]
    assert {p["key"] for p in problems} == {"hw:cpu_policy", "hw:numa_nodes", "hw:nope"}


def test_unusable_inputs_exit_2(tmp_path):
    for doc, text in [("{not json", "is not JSON"),
                      ({"vcpus": 1}, "lacks 'memory_mb'"),
                      ({"memory_mb": 1}, "lacks 'vcpus'")]:
        result = cli("validate", "--flavor", write(tmp_path, "bad.json", doc))
        assert result.returncode == 2, result
        assert text in result.stderr and "Traceback" not in result.stderr
    result = cli("validate", "--flavor", str(tmp_path / "missing.json"))
    assert result.returncode == 2 and "cannot read" in result.stderr


def test_bad_pci_alias_config_exits_2(tmp_path):
    conf = write(tmp_path, "c.conf", "[pci]\nalias = {\"name\": \"x\"}\n")
    flavor = write(tmp_path, "f.json", {**FLAVOR, "extra_specs": {
        "pci_passthrough:alias": "x:1"}})
    result = cli("validate", "--config-file", conf, "--flavor", flavor)
    assert result.returncode == 2
    assert "Invalid PCI alias definition" in result.stderr


BIG = "1" * 5000


@pytest.mark.parametrize("flavor,port,code", [
    ({"vcpus": 4, "memory_mb": 4096, "extra_specs": {"hw:numa_cpus." + BIG: "0"}},
     None, 1),
    ({"vcpus": 4, "memory_mb": 4096, "extra_specs": {"pci_passthrough:alias": "a:" + BIG}},
     None, 1),
    ({"vcpus": 4, "memory_mb": 4096, "extra_specs": {"hw:numa_nodes": BIG}}, None, 1),
    ({"vcpus": 2**31, "memory_mb": 4096}, None, 2),
    ({"vcpus": 100000000, "memory_mb": 4096}, None, 0),
    ({"vcpus": 2, "memory_mb": 513, "extra_specs": {"hw:mem_page_size": "large"}},
     None, 1),
    ({"vcpus": 2, "memory_mb": 512}, {"vnic_type": "direct", "physnet": "p",
                                      "min_kbps_egress": int(BIG[:30])}, 2),
    ({"vcpus": 2, "memory_mb": 512}, {"vnic_type": "bogus"}, 1),
    ({"vcpus": 2, "memory_mb": 512, "extra_specs": {"resources_NUMA0:CUSTOM_X": "1"}},
     None, 1),
])
def test_reviewer_cases_exit_codes_without_traceback(tmp_path, capsys, flavor, port,
                                                     code):
    args = ["validate", "--flavor", write(tmp_path, "f.json", flavor)]
    if port is not None:
        args += ["--port", write(tmp_path, "p.json", port)]
    assert main(args) == code
    out = capsys.readouterr()
    assert "Traceback" not in out.out + out.err
