"""The options and the committed sample config."""

from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest
from oslo_config import cfg

from compute_plugins.conf import opts, register_all

ROOT = pathlib.Path(__file__).resolve().parents[2]
GENERATOR_CONF = ROOT / "etc/compute-plugins/compute-plugins-config-generator.conf"
SAMPLE = ROOT / "etc/compute-plugins/compute-plugins.conf.sample"


def test_sample_config_is_current(tmp_path):
    """Regenerate with ``tox -e genconfig`` (or ``make genconfig``) when this fails."""
    out = tmp_path / "sample.conf"
    subprocess.run(
        [sys.executable, "-m", "oslo_config.generator", "--config-file",
         str(GENERATOR_CONF), "--output-file", str(out)],
        check=True, cwd=ROOT, capture_output=True)
    assert out.read_text() == SAMPLE.read_text(), (
        "etc/compute-plugins/compute-plugins.conf.sample is stale: run "
        "`make genconfig` and commit it")


def test_every_plugin_has_its_own_group():
    groups = {str(getattr(g, "name", g)) for g, _ in opts.list_opts()}
    assert {"compute_plugins", "compute", "libvirt", "placement", "pci", "host_state",
            "vgpu", "sriov", "disk"} <= groups


def test_register_all_on_a_private_config():
    conf = cfg.ConfigOpts()
    register_all(conf)
    conf([], default_config_files=[], default_config_dirs=[])
    assert conf.compute_plugins.enabled_plugins == ["numa", "vgpu", "sriov", "disk"]
    assert conf.compute.resource_provider_association_refresh == 300


def test_two_configs_do_not_share_overrides():
    first, second = cfg.ConfigOpts(), cfg.ConfigOpts()
    for conf in (first, second):
        register_all(conf)
        conf([], default_config_files=[], default_config_dirs=[])
    first.set_override("cpu_allocation_ratio", 9.0, "compute")
    first.set_override("enabled_plugins", ["numa"], "compute_plugins")
    assert second.compute.cpu_allocation_ratio == 4.0
    assert second.compute_plugins.enabled_plugins == ["numa", "vgpu", "sriov", "disk"]


def test_registering_again_keeps_the_options_and_overrides_and_a_new_config_gets_them():
    """register_all runs once per ConfigOpts (the plugin manager and each
    plugin call it on the same one: six times per manager, most of a
    simulated agent's start in bench.scale): a second call keeps what is
    set, and another ConfigOpts (even one at a reused id) is registered."""
    conf = register_all(cfg.ConfigOpts())
    conf([], default_config_files=[], default_config_dirs=[])
    conf.set_override("cpu_allocation_ratio", 9.0, "compute")
    assert register_all(conf) is conf
    assert conf.compute.cpu_allocation_ratio == 9.0
    for _ in range(3):
        other = register_all(cfg.ConfigOpts())
        other([], default_config_files=[], default_config_dirs=[])
        assert other.compute.cpu_allocation_ratio == 4.0
        del other


def test_the_ratio_limit_is_placements():
    from placement.db import constants

    from compute_plugins.conf import MAX_ALLOCATION_RATIO

    assert MAX_ALLOCATION_RATIO == constants.SQL_SP_FLOAT_MAX


def test_an_empty_ratio_is_a_bad_value_not_a_crash(tmp_path):
    """``cpu_allocation_ratio =`` in a file: oslo's Float reads it as None,
    which used to reach ``float(None)`` (a TypeError, i.e. a traceback)."""
    path = tmp_path / "empty.conf"
    path.write_text("[compute]\ncpu_allocation_ratio =\n")
    conf = cfg.ConfigOpts()
    register_all(conf)
    conf(["--config-file", str(path)], default_config_files=[], default_config_dirs=[])
    with pytest.raises(cfg.ConfigFileValueError, match="cpu_allocation_ratio.*finite number"):
        _ = conf.compute.cpu_allocation_ratio


def _float_options():
    """Every float option the framework and the installed plugins offer."""
    from oslo_config import types

    found = []
    for group, options in opts.list_opts():
        for opt in options:
            if isinstance(opt.type, types.Float):
                found.append((str(getattr(group, "name", group)), opt.dest))
    return found


def test_there_are_float_options_to_check():
    found = _float_options()
    assert ("scheduler", "answer_timeout") in found
    assert ("host_state", "lock_timeout") in found
    assert ("scheduler", "default_weigher_multiplier") in found


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN", "1e999"])
@pytest.mark.parametrize("group, option", _float_options())
def test_no_float_option_accepts_a_non_finite_value(tmp_path, group, option, value):
    """oslo.config's Float reads ``nan`` and ``inf`` as floats, and ``min``
    does not stop them (``nan < 0`` is false): a timeout of ``inf`` would
    wait forever, ``nan`` compares false with everything. The check the
    command runs at start refuses them, by group, option, value and rule."""
    from compute_plugins import exception
    from compute_plugins.cmd.common import check_values

    path = tmp_path / "bad.conf"
    path.write_text("[%s]\n%s = %s\n" % (group, option, value))
    conf = cfg.ConfigOpts()
    register_all(conf)
    for plugin_group, options in opts.list_opts():
        name = str(getattr(plugin_group, "name", plugin_group))
        if name not in conf:
            conf.register_opts(options, group=name)
    conf(["--config-file", str(path)], default_config_files=[], default_config_dirs=[])
    with pytest.raises(exception.ConfigError) as caught:
        check_values(conf)
    message = str(caught.value)
    assert message.startswith("[%s] %s: " % (group, option)), message
    assert str(path) in message, message
    # NOTE: a ratio's ``inf`` is refused by its maximum first: either rule.
    assert ("finite number" in message or "less than or equal" in message
            or "greater than or equal" in message), message


@pytest.mark.parametrize("url, shown", [
    ("postgresql://u:secretpw@h/db", "postgresql://u:***@h/db"),
    ("mysql+pymysql://u@h/db?passwd=secretpw&charset=utf8mb4",
     "mysql+pymysql://u@h/db?passwd=***&charset=utf8mb4"),
    ("http://u:secretpw@h:notaport/", "http://u:***@h:notaport/"),
    ("nonsense", "nonsense"),
])
def test_a_url_in_a_message_never_shows_its_password(url, shown):
    from compute_plugins.util import urls

    assert urls.masked(url) == shown
