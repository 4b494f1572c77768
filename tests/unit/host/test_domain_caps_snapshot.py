"""Host facts for memory encryption and persistent memory in snapshots:
``domaincapabilities.xml`` and ``ndctl.json`` (optional, loaded and
recorded with the rest)."""

from __future__ import annotations

import os
import pathlib
import shutil

import pytest

from compute_plugins.host.errors import HostInputError
from compute_plugins.host.snapshot import load_snapshot, record_host

FIXTURES = pathlib.Path(__file__).parents[2] / "fixtures" / "hosts"


def copy(tmp_path, name):
    target = tmp_path / "snap"
    shutil.copytree(FIXTURES / name, target)
    return target


def test_a_snapshot_without_them_has_none():
    host = load_snapshot(str(FIXTURES / "numa4"))
    assert host.domain_caps is None and host.pmem_namespaces == ()


def test_a_malformed_domain_capabilities_file_is_the_users_error(tmp_path):
    snap = copy(tmp_path, "memenc/sev")
    (snap / "domaincapabilities.xml").write_text("<capabilities/>")
    with pytest.raises(HostInputError, match="domaincapabilities.xml.*expected a "
                       "<domainCapabilities> document"):
        load_snapshot(str(snap))


def test_a_malformed_ndctl_file_is_the_users_error(tmp_path):
    snap = copy(tmp_path, "pmem")
    (snap / "ndctl.json").write_text('{"name": "x", "size": -1, "daxregion": '
                                     '{"align": 4096, "devices": [{"chardev": "dax0.0"}]}}')
    with pytest.raises(HostInputError, match="ndctl.json.*size must be a non-negative"):
        load_snapshot(str(snap))


def test_recording_a_host_without_domain_capabilities_removes_a_stale_file(tmp_path):
    (tmp_path / "domaincapabilities.xml").write_text("<domainCapabilities/>")
    record_host("test:///default", str(tmp_path))
    assert "domaincapabilities.xml" not in os.listdir(tmp_path)
    assert load_snapshot(str(tmp_path)).domain_caps is None


def test_recording_a_host_removes_a_stale_ndctl_capture(tmp_path):
    # another host's namespaces would be this one's otherwise
    shutil.copy(FIXTURES / "pmem" / "ndctl.json", tmp_path / "ndctl.json")
    record_host("test:///default", str(tmp_path))
    assert "ndctl.json" not in os.listdir(tmp_path)
    assert load_snapshot(str(tmp_path)).pmem_namespaces == ()


def test_kvm_amd_sev_parameters_as_nova_reads_them(tmp_path):
    from compute_plugins.host.kernel import kvm_amd_sev

    (tmp_path / "sev").write_text("Y\n")
    (tmp_path / "sev_es").write_text("1\n")
    (tmp_path / "sev_snp").write_text("N\n")
    assert kvm_amd_sev(str(tmp_path)) == {"sev", "sev-es"}
    assert kvm_amd_sev(str(tmp_path / "missing")) == frozenset()


def test_kvm_amd_sev_in_host_json(tmp_path):
    snap = copy(tmp_path, "memenc/sev")
    assert load_snapshot(str(snap)).kvm_amd_sev == {"sev", "sev-es"}
    text = (snap / "host.json").read_text().replace('"sev-es"', '"sev-tdx"')
    (snap / "host.json").write_text(text)
    with pytest.raises(HostInputError, match="host.json.*kvm_amd_sev must be a list "
                       "of the SEV flavours"):
        load_snapshot(str(snap))
