"""The ``compute-plugins`` command as a user runs it.

Most tests check what a command prints and its exit code: they run it
in-process (:mod:`tests.cli`, fd 1 and 2 captured, as a subprocess's pipes
would be; a subprocess costs most of a second of imports). The real entry
point runs in a subprocess where the process is what is tested: its exit
codes 0, 1 and 2 (``--version``, an unreachable libvirt, a missing
configuration file) and a reader that closed the pipe.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import libvirt
import pytest

from tests.cli import Result, run

COMMAND = [sys.executable, "-m", "compute_plugins.cmd.main"]


def process(*args: str, check_rc: int) -> subprocess.CompletedProcess:
    """``compute-plugins ARGS`` in a subprocess: the real entry point."""
    result = subprocess.run(COMMAND + list(args), capture_output=True, text=True,
                            timeout=120, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert result.returncode == check_rc, result.stderr
    return result


def cli(*args: str, check_rc: int | None = 0) -> Result:
    """``compute-plugins ARGS`` in this process (:func:`tests.cli.run`)."""
    result = run(*args)
    if check_rc is not None:
        assert result.returncode == check_rc, result.stderr
    return result


def test_version():
    result = process("--version", check_rc=0)
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
    assert "available plugins: disk, memenc, numa, pmem, sriov, vgpu" in result.stderr
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
    result = process("--config-file", str(tmp_path / "nope.conf"), "inventory",
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
    result = process("inventory", "--libvirt-uri", "test:///nonexistent/host.xml",
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


# ------------------------------------------- unusable configuration: one line


def _one_error_line(result: Result | subprocess.CompletedProcess) -> str:
    """The command's only stderr line, which is its error; no traceback."""
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize("section, option, value", [
    ("scheduler", "answer_timeout", "inf"),
    ("scheduler", "default_weigher_multiplier", "nan"),
    ("host_state", "lock_timeout", "nan"),
])
def test_a_non_finite_number_is_one_line(tmp_path, section, option, value):
    """oslo.config's FloatOpt takes ``nan`` and ``inf``; ours refuse them
    when the command starts, naming the group, option, value and rule."""
    config = tmp_path / "bad.conf"
    config.write_text("[%s]\n%s = %s\n" % (section, option, value))
    result = cli("--config-file", str(config), "inventory",
                 "--libvirt-uri", "test:///default", check_rc=2)
    line = _one_error_line(result)
    assert line.startswith("compute-plugins: configuration error: [%s] %s: "
                           % (section, option)), line
    assert "finite number" in line and repr(value) in line, line
    assert result.stdout == ""


def test_a_config_file_that_is_not_utf8_is_one_line(tmp_path):
    config = tmp_path / "latin1.conf"
    config.write_bytes(b"[compute]\n# caf\xe9\ncpu_allocation_ratio = 2\n")
    result = cli("--config-file", str(config), "inventory",
                 "--libvirt-uri", "test:///default", check_rc=2)
    assert _one_error_line(result) == (
        "compute-plugins: configuration error: --config-file %s: cannot "
        "read: not UTF-8 text (byte 0xe9 at offset 15)" % config)
    assert result.stdout == ""


def test_a_config_file_that_is_a_directory_is_one_line(tmp_path):
    result = cli("--config-file", str(tmp_path), "inventory",
                 "--libvirt-uri", "test:///default", check_rc=2)
    assert _one_error_line(result) == (
        "compute-plugins: configuration error: --config-file %s: cannot "
        "read: a directory, not a regular file" % tmp_path)


def test_a_config_file_that_is_a_fifo_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "pipe.conf"
    os.mkfifo(fifo)
    result = cli("--config-file", str(fifo), "inventory",
                 "--libvirt-uri", "test:///default", check_rc=2)
    assert "a FIFO, not a regular file" in _one_error_line(result)


def test_a_config_dir_with_a_file_that_is_not_utf8_names_the_file(tmp_path):
    (tmp_path / "10-ok.conf").write_text("[compute]\n")
    (tmp_path / "20-bad.conf").write_bytes(b"\xff\n")
    result = cli("--config-dir", str(tmp_path), "inventory",
                 "--libvirt-uri", "test:///default", check_rc=2)
    assert _one_error_line(result) == (
        "compute-plugins: configuration error: --config-dir %s: %s: cannot "
        "read: not UTF-8 text (byte 0xff at offset 0)"
        % (tmp_path, tmp_path / "20-bad.conf"))


def test_a_config_dir_that_is_a_file_is_one_line(tmp_path):
    config = tmp_path / "a.conf"
    config.write_text("[compute]\n")
    result = cli("--config-dir", str(config), "inventory",
                 "--libvirt-uri", "test:///default", check_rc=2)
    assert _one_error_line(result) == (
        "compute-plugins: configuration error: --config-dir %s: not a "
        "directory" % config)


def test_a_log_file_in_a_missing_directory_is_one_line(tmp_path):
    log_file = tmp_path / "missing" / "cp.log"
    result = cli("--log-file", str(log_file), "inventory",
                 "--libvirt-uri", "test:///default", check_rc=2)
    assert _one_error_line(result) == (
        "compute-plugins: configuration error: --log-file %s: cannot open "
        "the log file: No such file or directory" % log_file)
    assert result.stdout == ""


# ------------------------ option values Placement or nova refuse: at start


@pytest.mark.parametrize("option, value, rule", [
    ("max_instances", "-1", "Should be greater than or equal to 1"),
    ("max_instances", "0", "Should be greater than or equal to 1"),
    ("mdev_class", "VCPU",
     "Value 'VCPU' doesn't match regex '^(VGPU|CUSTOM_[A-Z0-9_]+)$'"),
])
def test_a_bad_mdev_type_option_fails_at_start_naming_group_and_option(
        tmp_path, monkeypatch, option, value, rule):
    """``[mdev_<type>]`` groups exist only once ``[vgpu] enabled_mdev_types``
    is read; a bad value in them is still refused before anything runs
    (no degraded host, no traceback at every periodic, no Placement)."""
    config = tmp_path / "vgpu.conf"
    config.write_text("[vgpu]\nenabled_mdev_types = nvidia-35\n"
                      "[mdev_nvidia-35]\n%s = %s\n" % (option, value))
    state = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    result = cli("--config-file", str(config), "--libvirt-uri", "test:///default",
                 "report", "--periodic", "1", check_rc=2)
    assert _one_error_line(result) == (
        "compute-plugins: configuration error: [mdev_nvidia-35] %s: %s (in %s)"
        % (option, rule, config))
    assert result.stdout == ""
    assert not state.exists()  # no checkpoint, no embedded Placement


@pytest.mark.parametrize("value, rule", [
    ("abc", "invalid literal for int() with base 10: 'abc'"),
    ("0,-1", "Should be greater than or equal to 0"),
])
def test_a_bad_physnet_numa_nodes_fails_at_start_naming_group_and_option(
        tmp_path, value, rule):
    """``[neutron_physnet_<name>]`` groups exist only once ``[neutron]
    physnets`` is read (as in nova); a bad ``numa_nodes`` there is refused
    at start like any option, in one line naming group, option and file (it
    was the numa plugin failing to discover, its message naming no group)."""
    config = tmp_path / "physnet.conf"
    config.write_text("[neutron]\nphysnets = foo\n[neutron_physnet_foo]\n"
                      "numa_nodes = %s\n" % value)
    result = cli("--config-file", str(config), "inventory",
                 "--libvirt-uri", "test:///default", check_rc=2)
    assert _one_error_line(result) == (
        "compute-plugins: configuration error: [neutron_physnet_foo] numa_nodes: "
        "%s (in %s)" % (rule, config))
    assert result.stdout == ""


@pytest.mark.parametrize("option", ["cpu_allocation_ratio",
                                    "ram_allocation_ratio"])
def test_an_allocation_ratio_placement_refuses_fails_at_start(tmp_path, option):
    """Placement stores ratios as single-precision floats and refuses one
    above 3.40282e+38 (every inventory PUT would fail)."""
    config = tmp_path / "ratio.conf"
    config.write_text("[compute]\n%s = 1e308\n" % option)
    result = cli("--config-file", str(config), "inventory",
                 "--libvirt-uri", "test:///default", check_rc=2)
    assert _one_error_line(result) == (
        "compute-plugins: configuration error: [compute] %s: Should be less "
        "than or equal to 3.40282e+38 (in %s)" % (option, config))


def test_the_largest_ratio_placement_takes_is_accepted(tmp_path):
    config = tmp_path / "ratio.conf"
    config.write_text("[compute]\ncpu_allocation_ratio = 3.40282e+38\n")
    providers = json.loads(cli("--config-file", str(config), "inventory",
                               "--libvirt-uri", "test:///default",
                               "--format", "json").stdout)["providers"]
    ratios = {p["inventories"]["VCPU"]["allocation_ratio"]
              for p in providers if "VCPU" in p["inventories"]}
    assert ratios == {3.40282e38}


def test_a_host_name_with_a_newline_is_drawn_on_one_line(tmp_path):
    """Placement takes ``a\\nb`` as a provider name; the text tree shows it
    escaped, and the checkpoint-free inventory of the host is unchanged."""
    import shutil

    snap = tmp_path / "snap"
    shutil.copytree(FIXTURES / "sriov", snap)
    doc = json.loads((snap / "host.json").read_text())
    (snap / "host.json").write_text(json.dumps({**doc, "hostname": "evil\nroot \x1b[2J"}))
    result = cli("inventory", "--host-snapshot", str(snap))
    assert "\x1b" not in result.stdout
    assert result.stdout.splitlines()[0].startswith("evil\\nroot \\x1b[2J (")
    providers = json.loads(cli("inventory", "--host-snapshot", str(snap),
                               "--format", "json").stdout)["providers"]
    assert providers[0]["name"] == "evil\nroot \x1b[2J"


FIXTURES = __import__("pathlib").Path(__file__).parents[1] / "fixtures" / "hosts"


# ------------------------------------------------ bad connection URLs: one line


def _flavor(tmp_path) -> str:
    path = tmp_path / "f.json"
    path.write_text(json.dumps({"name": "f", "vcpus": 1, "memory_mb": 512}))
    return str(path)


@pytest.mark.parametrize("url, rule", [
    ("nonsense", "not an SQLAlchemy URL"),
    ("://u:secretpw@h/db", "not an SQLAlchemy URL"),
    ("foo://u:secretpw@h/db", "sqlite, postgresql or mysql"),
    ("postgresql+nodriver://u:secretpw@h/db", "unknown driver"),
    ("postgresql://u:secretpw@h:notaport/db", "not an SQLAlchemy URL"),
])
def test_a_bad_host_state_connection_is_one_line(tmp_path, url, rule):
    """Refused when the command starts (exit 2), before any store or
    Placement is opened: the option, the value (password masked), the rule."""
    config = tmp_path / "bad.conf"
    config.write_text("[compute_plugins]\nstate_dir = %s\n[host_state]\nconnection = %s\n"
                      % (tmp_path / "state", url))
    result = cli("--config-file", str(config), "schedule", "--flavor", _flavor(tmp_path),
                 check_rc=2)
    line = _one_error_line(result)
    assert line.startswith("compute-plugins: configuration error: [host_state] "
                           "connection: "), line
    assert rule in line, line
    assert "secretpw" not in line, line
    if "secretpw" in url:
        assert "***" in line, line
    assert result.stdout == ""


def test_an_sqlite_file_under_a_file_is_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    config = tmp_path / "bad.conf"
    config.write_text("[compute_plugins]\nstate_dir = %s\n[host_state]\n"
                      "connection = sqlite:///%s/x/y.sqlite\n" % (tmp_path / "state", blocker))
    result = cli("--config-file", str(config), "schedule", "--flavor", _flavor(tmp_path),
                 check_rc=1)
    line = _one_error_line_after_logs(result)
    assert "host-state database sqlite:///%s/x/y.sqlite is unavailable" % blocker in line, line
    assert "Not a directory" in line, line


def _one_error_line_after_logs(result: Result | subprocess.CompletedProcess) -> str:
    """The command's error line; the embedded Placement may log before it."""
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in result.stderr.splitlines()
              if line.startswith("compute-plugins: ")]
    assert len(errors) == 1, result.stderr
    return errors[0]


@pytest.mark.parametrize("url", [
    "notaurl", "http://[::1", "ftp://x", "http://h:notaport/", "http://",
    "http://u:secretpw@h:notaport/",
])
def test_a_bad_placement_url_is_one_line(tmp_path, url):
    result = cli("--placement-url", url, "schedule", "--flavor", _flavor(tmp_path),
                 check_rc=2)
    line = _one_error_line(result)
    assert line.startswith("compute-plugins: error: --placement-url "), line
    assert "expected an http:// or https:// URL" in line, line
    assert "secretpw" not in line, line
    assert result.stdout == ""


# ------------------------------------- a symlink planted in the state: refused


@pytest.mark.parametrize("command, planted, says, rc", [
    (["release", "--consumer", "6c1c7ef5-2d49-4b6e-9b5c-8a3fd2e6a0f1"],
     "state/host_state.sqlite", "host-state database", 1),
    (["schedule"], "placement/placement.sqlite", "embedded Placement database", 2),
])
def test_a_symlink_planted_at_a_database_is_refused(tmp_path, command, planted, says, rc):
    """SQLite would write its tables into whatever the link points at; the
    command refuses in one line and the outside file is unchanged."""
    outside = tmp_path / "outside"
    outside.write_bytes(b"")
    for name in ("state", "placement"):
        (tmp_path / name).mkdir()
    (tmp_path / planted).symlink_to(outside)
    config = tmp_path / "c.conf"
    config.write_text("[compute_plugins]\nstate_dir = %s\n[placement]\n"
                      "embedded_state_dir = %s\n" % (tmp_path / "state", tmp_path / "placement"))
    if command == ["schedule"]:
        command = command + ["--flavor", _flavor(tmp_path)]
    result = cli("--config-file", str(config), *command, check_rc=rc)
    line = _one_error_line_after_logs(result)
    assert says in line and "a symbolic link" in line, line
    assert outside.read_bytes() == b""
    assert (tmp_path / planted).is_symlink()
