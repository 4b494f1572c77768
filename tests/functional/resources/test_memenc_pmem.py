"""The memenc and pmem plugins through the command line, as an operator
enables them (``[compute_plugins] enabled_plugins``), on host snapshots
with libvirt's SEV domain capabilities and an ``ndctl list -X`` capture.

In-process ``main()``; the plugins load through their entry points (the
project must be installed: ``pip install -e .``).
"""

from __future__ import annotations

import json
import pathlib
import xml.etree.ElementTree as ET

import pytest

from compute_plugins.cmd.main import main
from tests.output import flat

HOSTS = pathlib.Path(__file__).parents[2] / "fixtures" / "hosts"
UEFI = {"name": "uefi", "properties": {"hw_firmware_type": "uefi",
                                       "hw_machine_type": "q35"}}


@pytest.fixture
def enabled(tmp_path):
    conf = tmp_path / "plugins.conf"
    conf.write_text("[compute_plugins]\nenabled_plugins = numa,disk,memenc,pmem\n")
    return str(conf)


def write(tmp_path, name, doc):
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


def run(capsys, *args, code=0):
    assert main(list(args)) == code
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    return out


def test_inventory_of_the_sev_host(capsys, enabled):
    out = run(capsys, "--config-file", enabled, "inventory", "--host-snapshot",
              str(HOSTS / "memenc" / "sev")).out
    assert "memenc-sev-01_amd_sev (" in out
    assert ("MEM_ENCRYPTION_CONTEXT: total=59 reserved=0 min_unit=1 max_unit=1 "
            "step_size=1 allocation_ratio=1.0") in flat(out.replace("│", ""))
    assert "traits: HW_CPU_X86_AMD_SEV_ES" in out  # the kernel enables sev_es


def test_fit_a_sev_guest_and_its_launch_security(capsys, tmp_path, enabled):
    flavor = write(tmp_path, "f.json", {"name": "sev", "vcpus": 2, "memory_mb": 2048,
                                        "root_gb": 10,
                                        "extra_specs": {"hw:mem_encryption": "true"}})
    image = write(tmp_path, "i.json", UEFI)
    out = run(capsys, "--config-file", enabled, "--format", "json", "fit",
              "--host-snapshot", str(HOSTS / "memenc" / "sev"), "--flavor", flavor,
              "--image", image).out
    doc = json.loads(out)
    assert doc["fits"] and doc["assignments"]["memenc"]["model"] == "amd-sev"
    domain = ET.fromstring(doc["guest_xml"])
    assert domain.find("launchSecurity").get("type") == "sev"
    assert domain.find("launchSecurity/policy").text == "0x0033"
    assert domain.find("memoryBacking/locked") is not None


def test_sev_without_a_uefi_image_is_refused_in_one_line(capsys, tmp_path, enabled):
    flavor = write(tmp_path, "f.json", {"name": "sev", "vcpus": 2, "memory_mb": 2048,
                                        "extra_specs": {"hw:mem_encryption": "true"}})
    err = run(capsys, "--config-file", enabled, "validate", "--flavor", flavor,
              code=1).out
    assert ("flavor hw:mem_encryption='true': Memory encryption is requested by "
            "hw:mem_encryption extra spec in sev flavor but the image metadata "
            "doesn't have the 'hw_firmware_type' property set to 'uefi'") in flat(err)


def test_fit_pmem_namespaces_then_none_left(capsys, tmp_path, enabled):
    host = HOSTS / "pmem"
    flavor = write(tmp_path, "f.json", {"name": "pm", "vcpus": 2, "memory_mb": 2048,
                                        "extra_specs": {"hw:pmem": "SMALL,SMALL"}})
    common = ("--config-file", enabled, "--config-file", str(host / "compute-plugins.conf"))
    out = run(capsys, *common, "--format", "json", "fit", "--host-snapshot", str(host),
              "--flavor", flavor).out
    doc = json.loads(out)
    names = [n["name"] for n in doc["assignments"]["pmem"]["namespaces"]]
    assert names == ["ns_1", "ns_2"]
    devices = ET.fromstring(doc["guest_xml"]).findall("devices/memory[@model='nvdimm']")
    assert [d.find("source/path").text for d in devices] == ["/dev/dax0.1", "/dev/dax0.2"]
    usage = write(tmp_path, "usage.json", [doc["assignments"]])
    refused = run(capsys, *common, "fit", "--host-snapshot", str(host), "--flavor",
                  flavor, "--usage", usage, code=1).out
    assert ("pmem: no free CUSTOM_PMEM_NAMESPACE_SMALL namespace for label SMALL: "
            "2 of 2 in use") in refused


def test_a_bad_pmem_option_is_exit_2(capsys, tmp_path, enabled):
    bad = tmp_path / "bad.conf"
    bad.write_text("[libvirt]\npmem_namespaces = 4GB\n")
    err = run(capsys, "--config-file", enabled, "--config-file", str(bad), "inventory",
              "--host-snapshot", str(HOSTS / "pmem"), code=2).err
    assert "[libvirt] pmem_namespaces" in err and "$LABEL:$NSNAME" in err
