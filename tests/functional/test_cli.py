"""The ``compute-plugins`` command as a user runs it (a real subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import libvirt
import pytest

COMMAND = [sys.executable, "-m", "compute_plugins.cmd.main"]


def cli(*args: str, check_rc: int | None = 0) -> subprocess.CompletedProcess:
    result = subprocess.run(COMMAND + list(args), capture_output=True, text=True,
                            timeout=120, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    if check_rc is not None:
        assert result.returncode == check_rc, result.stderr
    return result


def test_version():
    result = cli("--version")
    assert result.stdout.startswith("compute-plugins ")


def test_inventory_json_on_the_libvirt_test_driver():
    result = cli("inventory", "--libvirt-uri", "test:///default", "--format", "json")
    providers = json.loads(result.stdout)["providers"]
    root = providers[0]
    # NOTE: the test driver names the host as the machine it runs on.
    assert root["name"] == libvirt.openReadOnly("test:///default").getHostname()
    assert root["parent_provider_uuid"] is None
    assert root["root_provider_uuid"] == root["uuid"]
    names = [p["name"] for p in providers]
    numa = [p for p in providers if p["name"].startswith(root["name"] + "_NUMA")]
    assert numa, names
    for cell in numa:
        assert cell["parent_provider_uuid"] == root["uuid"]
        assert "HW_NUMA_ROOT" in cell["traits"]
        assert set(cell["inventories"]["VCPU"]) == {
            "total", "reserved", "min_unit", "max_unit", "step_size",
            "allocation_ratio"}
    # The same host gives the same uuids every time.
    again = json.loads(cli("inventory", "--libvirt-uri", "test:///default",
                           "--format", "json").stdout)["providers"]
    assert [p["uuid"] for p in again] == [p["uuid"] for p in providers]


def test_inventory_text_draws_the_tree():
    result = cli("inventory", "--libvirt-uri", "test:///default")
    lines = result.stdout.splitlines()
    assert "_NUMA0" in result.stdout
    assert any(line.startswith("└── ") or line.startswith("├── ") for line in lines)
    assert "VCPU: total=" in result.stdout


def test_unknown_plugin_is_a_usage_error(tmp_path):
    config = tmp_path / "bad.conf"
    config.write_text("[compute_plugins]\nenabled_plugins = numa,nosuch\n")
    result = cli("--config-file", str(config), "inventory",
                 "--libvirt-uri", "test:///default", check_rc=2)
    assert "nosuch" in result.stderr
    assert "available plugins: disk, numa, sriov, vgpu" in result.stderr
    assert "Traceback" not in result.stderr


def test_malformed_config_file_is_a_usage_error(tmp_path):
    config = tmp_path / "broken.conf"
    config.write_text("[compute\nthis is not ini\n")
    result = cli("--config-file", str(config), "inventory",
                 "--libvirt-uri", "test:///default", check_rc=2)
    assert str(config) in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_option_value_names_the_option(tmp_path):
    config = tmp_path / "value.conf"
    config.write_text("[compute]\ncpu_allocation_ratio = lots\n")
    result = cli("--config-file", str(config), "inventory",
                 "--libvirt-uri", "test:///default", check_rc=2)
    assert "cpu_allocation_ratio" in result.stderr
    assert "lots" in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_plugin_option_value_names_the_option(tmp_path):
    config = tmp_path / "value.conf"
    config.write_text("[disk]\nreserved_host_disk_mb = -5\n")
    result = cli("--config-file", str(config), "inventory",
                 "--libvirt-uri", "test:///default", check_rc=2)
    assert "reserved_host_disk_mb" in result.stderr
    assert "Traceback" not in result.stderr


def test_missing_config_file_is_a_usage_error(tmp_path):
    result = cli("--config-file", str(tmp_path / "nope.conf"), "inventory",
                 check_rc=2)
    assert "nope.conf" in result.stderr


def test_config_dir_and_log_file(tmp_path):
    confdir = tmp_path / "conf.d"
    confdir.mkdir()
    (confdir / "10-plugins.conf").write_text(
        "[compute_plugins]\nenabled_plugins = numa\n")
    log_file = tmp_path / "cp.log"
    result = cli("--config-dir", str(confdir), "--debug", "--log-file",
                 str(log_file), "inventory", "--libvirt-uri", "test:///default",
                 "--format", "json")
    providers = json.loads(result.stdout)["providers"]
    assert all("DISK_GB" not in p["inventories"] for p in providers)
    assert "DEBUG" in log_file.read_text()


def test_unreachable_libvirt_is_one_clear_line():
    result = cli("inventory", "--libvirt-uri", "test:///nonexistent/host.xml",
                 check_rc=1)
    assert "test:///nonexistent/host.xml" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("fmt", ["text", "json"])
def test_inventory_on_a_snapshot(fmt, tmp_path):
    recorded = tmp_path / "snap"
    cli("record-host", "--libvirt-uri", "test:///default", "--output", str(recorded))
    assert (recorded / "capabilities.xml").exists()
    live = cli("inventory", "--libvirt-uri", "test:///default", "--format", fmt)
    replayed = cli("inventory", "--host-snapshot", str(recorded), "--format", fmt)
    assert replayed.stdout == live.stdout


@pytest.mark.parametrize("section, option, value", [
    ("compute", "cpu_dedicated_set", "abc"),
    ("compute", "cpu_dedicated_set", "0-99999999999"),
    ("sriov", "bandwidth", "foo"),
    ("disk", "shared_storage_aggregate", "notauuid"),
    ("compute", "cpu_allocation_ratio", "nan"),
    ("disk", "disk_allocation_ratio", "inf"),
])
def test_bad_plugin_option_is_a_usage_error(tmp_path, section, option, value):
    config = tmp_path / "bad.conf"
    config.write_text("[%s]\n%s = %s\n" % (section, option, value))
    result = cli("--config-file", str(config), "inventory",
                 "--libvirt-uri", "test:///default", check_rc=2)
    assert option in result.stderr
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_output_to_a_closed_pipe_is_quiet():
    proc = subprocess.Popen(COMMAND + ["inventory", "--libvirt-uri", "test:///default"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    proc.stdout.close()
    proc.wait(timeout=120)
    assert "Traceback" not in proc.stderr.read()
