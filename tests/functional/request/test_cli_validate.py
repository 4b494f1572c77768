"""``compute-plugins validate`` as a user runs it: exit 0/1/2.

In-process (:mod:`tests.cli`: the entry point's ``main`` with its own
stdout and stderr); ``tests/functional/test_cli.py`` runs the real entry
point's exit codes in a subprocess.
"""

from __future__ import annotations

import json
import os

import pytest

from compute_plugins.cmd.main import main
from tests.cli import run as cli
from tests.output import unwrap


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


def test_valid_request_says_each_plugins_request_in_words(tmp_path):
    result = cli("validate", "--flavor", write(tmp_path, "f.json", FLAVOR))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "valid request: flavor pinned, 4 vCPU(s), 4096 MiB"
    assert "  numa: cells[0]: id=0, cpus=[], pcpus=[0, 1], memory_mb=2048" in lines
    assert "  numa: cells[1]: id=1, cpus=[], pcpus=[2, 3], memory_mb=2048" in lines
    assert any(line.startswith("  numa: vcpus=4, memory_mb=4096, cpu_policy=dedicated, ")
               for line in lines), lines
    assert any(line.startswith("  disk: disk_gb=10, root_gb=10, ") for line in lines), lines
    # no Python reprs of the typed requests
    assert "NUMARequest(" not in result.stdout and "frozenset(" not in result.stdout


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


def test_an_invalid_policy_and_an_uneven_split_are_both_said_in_one_run(tmp_path):
    # NOTE: issue 22: the split problem showed only once the policy was
    # fixed; the guest nodes are checked whatever else is wrong.
    flavor = write(tmp_path, "f.json", {**FLAVOR, "extra_specs": {
        "hw:cpu_policy": "pinned", "hw:numa_nodes": "3"}})
    result = cli("validate", "--flavor", flavor)
    assert result.returncode == 1, result.stderr
    assert max(len(line) for line in result.stdout.splitlines()) <= 100
    lines = unwrap(result.stdout)
    assert lines[0] == "invalid request: 2 problem(s)"
    assert lines[1].startswith("  flavor hw:cpu_policy='pinned': Validation failed; "
                               "'pinned' is not one of: dedicated, shared, mixed")
    assert lines[2].startswith("  flavor hw:numa_nodes=3: Instance CPUs and/or memory "
                               "cannot be evenly distributed across instance NUMA nodes")


def test_an_invalid_node_count_does_not_also_blame_the_node_maps(tmp_path):
    # NOTE: a check whose input is invalid is skipped: hw:numa_nodes=x would
    # be read as one node, and the maps of two nodes blamed for it.
    flavor = write(tmp_path, "f.json", {**FLAVOR, "extra_specs": {
        "hw:cpu_policy": "dedicated", "hw:numa_nodes": "x",
        "hw:numa_cpus.0": "0,1", "hw:numa_cpus.1": "2,3",
        "hw:numa_mem.0": "2048", "hw:numa_mem.1": "2048"}})
    result = cli("--format", "json", "validate", "--flavor", flavor)
    assert result.returncode == 1, result.stderr
    problems = json.loads(result.stdout)["problems"]
    assert [(p["key"], p["value"]) for p in problems] == [("hw:numa_nodes", "x")]


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


# ------------------------------------------------ hostile input documents

FLAT = {"vcpus": 4, "memory_mb": 1024}


def _lines(result):
    assert "Traceback" not in result.stderr, result.stderr
    return result.stderr.splitlines()


@pytest.mark.parametrize("which", ["flavor", "image", "port", "hints"])
@pytest.mark.parametrize("depth", [500, 1200])
def test_deeply_nested_input_is_one_line_exit_2(tmp_path, which, depth):
    """500 nested lists decode but break every walk over them; 1200 raise
    RecursionError in the decoder: both are refused before decoding."""
    deep = write(tmp_path, "deep.json", "[" * depth + "]" * depth)
    args = ["validate", "--flavor", write(tmp_path, "f.json", FLAT)]
    args = (["validate", "--flavor", deep] if which == "flavor"
            else args + ["--" + which, deep])
    result = cli(*args)
    assert result.returncode == 2, result.stderr
    assert _lines(result) == [
        "compute-plugins: error: the %s file %s is not JSON: arrays and "
        "objects nested more than 32 deep (at character 32)" % (which, deep)]
    assert result.stdout == ""


def test_nan_is_not_json(tmp_path, capsys):
    flavor = write(tmp_path, "f.json", '{"vcpus": NaN, "memory_mb": 1}')
    assert main(["validate", "--flavor", flavor]) == 2
    assert "is not JSON: NaN is not a JSON number" in capsys.readouterr().err


def test_a_fifo_as_input_file_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "flavor.json"
    os.mkfifo(fifo)
    result = cli("validate", "--flavor", str(fifo))
    assert result.returncode == 2
    assert _lines(result) == [
        "compute-plugins: error: cannot read the flavor file %s: a FIFO, not "
        "a regular file" % fifo]


def test_an_object_valued_image_property_gives_a_whole_json_document(tmp_path):
    flavor = write(tmp_path, "f.json", FLAT)
    image = write(tmp_path, "i.json", {"hw_cpu_thread_policy": {"a": 1}})
    result = cli("validate", "--flavor", flavor, "--image", image,
                 "--format", "json")
    assert result.returncode == 1, result.stderr
    assert result.stderr == ""
    (problem,) = json.loads(result.stdout)["problems"]
    assert problem["source"] == "image"
    assert problem["key"] == "hw_cpu_thread_policy"
    assert problem["value"] == {"a": 1}
    assert "given: '{'a': 1}'" in problem["rule"]
    text = cli("validate", "--flavor", flavor, "--image", image)
    assert text.returncode == 1
    assert unwrap(text.stdout)[1] == (
        "  image hw_cpu_thread_policy={'a': 1}: CPU thread policy requested "
        "from 'image properties' is invalid, given: '{'a': 1}', available: "
        "'('prefer', 'isolate', 'require')'.")


def test_a_lone_surrogate_in_a_value_is_escaped_in_text_and_json(tmp_path):
    flavor = write(tmp_path, "f.json", FLAT)
    image = write(tmp_path, "i.json", '{"hw_cpu_thread_policy": "\\ud800"}')
    text = cli("validate", "--flavor", flavor, "--image", image)
    assert text.returncode == 1, text.stderr
    assert text.stderr == ""
    assert unwrap(text.stdout)[1] == (
        "  image hw_cpu_thread_policy='\\ud800': CPU thread policy requested "
        "from 'image properties' is invalid, given: '\\ud800', available: "
        "'('prefer', 'isolate', 'require')'.")
    doc = cli("validate", "--flavor", flavor, "--image", image, "--format", "json")
    assert doc.returncode == 1, doc.stderr
    assert json.loads(doc.stdout)["problems"][0]["value"] == "\ud800"


def test_control_characters_in_keys_and_values_stay_on_their_line(tmp_path):
    """A newline or an escape sequence in a flavor key or value cannot
    forge a line or recolour a terminal: they are escaped in the rule."""
    flavor = write(tmp_path, "f.json", {**FLAT, "extra_specs": {
        "hw:cpu_policy": "dedicated\n  flavor hw:x=1: fine\u001b[2J",
        "hw:evil\nkey": "1"}})
    result = cli("validate", "--flavor", flavor)
    assert result.returncode == 1, result.stderr
    lines = unwrap(result.stdout)
    assert lines[0] == "invalid request: 2 problem(s)"
    assert len(lines) == 3, result.stdout
    assert "\x1b" not in result.stdout
    assert lines[1] == (
        "  flavor hw:cpu_policy='dedicated\\n  flavor hw:x=1: fine\\x1b[2J': "
        "Validation failed; 'dedicated\\n  flavor hw:x=1: fine\\x1b[2J' is "
        "not one of: dedicated, shared, mixed.")
    assert lines[2].startswith("  flavor hw:evil\\nkey='1': Validation "
                               "failed; extra spec 'hw:evil\\nkey' does not")


@pytest.mark.parametrize("doc, line", [
    ({"properties": "x"}, "image 'properties' must be a JSON object, got 'x'"),
    ({"name": {"a": 1}, "properties": {}},
     "image 'name' must be a string, got {'a': 1}"),
    ({"name": "img", "properties": None},
     "image 'properties' must be a JSON object, got None"),
])
def test_an_image_document_of_the_wrong_shape_is_refused(tmp_path, capsys, doc, line):
    flavor = write(tmp_path, "f.json", FLAT)
    assert main(["validate", "--flavor", flavor, "--image",
                 write(tmp_path, "i.json", doc)]) == 2
    assert capsys.readouterr().err == "compute-plugins: error: %s\n" % line


def test_a_flavor_name_that_is_not_a_string_is_refused(tmp_path, capsys):
    flavor = write(tmp_path, "f.json", {**FLAT, "name": ["x"]})
    assert main(["validate", "--flavor", flavor]) == 2
    assert capsys.readouterr().err == (
        "compute-plugins: error: flavor 'name' must be a string, got ['x']\n")


# ----------------------------- a problem names the key the value came from


@pytest.mark.parametrize("flavor_specs, image, key, source", [
    ({}, {"hw_numa_nodes": "3"}, "hw_numa_nodes", "image"),
    ({"hw:numa_nodes": "3"}, {}, "hw:numa_nodes", "flavor"),
    ({}, {"hw_numa_nodes": "2", "hw_numa_cpus.0": "0-2", "hw_numa_mem.0": "512",
          "hw_numa_cpus.1": "3", "hw_numa_mem.1": "256"},
     "hw_numa_mem.N", "image"),
    ({}, {"hw_numa_nodes": "2", "hw_numa_cpus.0": "0-1", "hw_numa_mem.0": "512",
          "hw_numa_cpus.1": "2", "hw_numa_mem.1": "512"},
     "hw_numa_cpus.N", "image"),
    ({"hw:mem_page_size": "large"}, {"hw_mem_page_size": "1048576",
                                      "hw_numa_nodes": "2"},
     "hw_mem_page_size", "image"),
    ({}, {"hw_cpu_thread_policy": "isolate"}, "hw_cpu_thread_policy", "image"),
    ({"hw:cpu_policy": "dedicated", "hw:cpu_realtime": "yes"},
     {"hw_cpu_realtime_mask": "^0-9"}, "hw_cpu_realtime_mask", "image"),
])
def test_a_problem_from_an_image_property_names_the_property(
        tmp_path, capsys, flavor_specs, image, key, source):
    flavor = write(tmp_path, "f.json", {**FLAT, "extra_specs": flavor_specs})
    assert main(["validate", "--format", "json", "--flavor", flavor, "--image",
                 write(tmp_path, "i.json", image)]) == 1
    problems = json.loads(capsys.readouterr().out)["problems"]
    assert {(p["key"], p["source"]) for p in problems} == {(key, source)}, problems


# --------------------------------------- digits of other scripts are refused


@pytest.mark.parametrize("specs, image, key", [
    ({"hw:numa_nodes": "\uff12"}, {}, "hw:numa_nodes"),
    ({"hw:numa_nodes": "2", "hw:numa_cpus.0": "\u0660-\u0661",
      "hw:numa_mem.0": "512", "hw:numa_cpus.1": "2-3", "hw:numa_mem.1": "512"},
     {}, "hw:numa_cpus.0"),
    ({"hw:mem_page_size": "\uff12\uff10\uff14\uff18"}, {}, "hw:mem_page_size"),
    ({"hw:mem_page_size": "large"}, {"hw_mem_page_size": "\uff12\uff10\uff14\uff18"},
     "hw_mem_page_size"),
    ({"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "\u0660"}, {},
     "hw:cpu_dedicated_mask"),
])
def test_non_ascii_digits_in_requests_are_refused(tmp_path, capsys, specs, image, key):
    """int() and str.isdigit() read "\\uff12" as 2 and "\\u0660-\\u0661" as
    0-1; nova's syntax is ASCII digits."""
    flavor = write(tmp_path, "f.json", {**FLAT, "extra_specs": specs})
    args = ["validate", "--format", "json", "--flavor", flavor]
    if image:
        args += ["--image", write(tmp_path, "i.json", image)]
    assert main(args) == 1
    problems = json.loads(capsys.readouterr().out)["problems"]
    assert key in [p["key"] for p in problems], problems


@pytest.mark.parametrize("conf_text, option", [
    ("[compute]\ncpu_dedicated_set = \u0660-\u0663\n", "cpu_dedicated_set"),
    ('[pci]\nalias = {"name": "a", "vendor_id": "\u0668\u0660\u0668\u0666", '
     '"product_id": "1234"}\n', "Invalid PCI alias definition"),
])
def test_non_ascii_digits_in_options_are_a_usage_error(tmp_path, conf_text, option):
    conf = tmp_path / "c.conf"
    conf.write_text(conf_text, encoding="utf-8")
    flavor = write(tmp_path, "f.json", {**FLAT, "extra_specs": {
        "pci_passthrough:alias": "a:1"} if "alias" in conf_text else {}})
    command = (["validate", "--flavor", flavor] if "alias" in conf_text else
               ["--host-snapshot", str(SNAPSHOTS / "numa4"), "inventory"])
    result = cli("--config-file", str(conf), *command)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    last = result.stderr.splitlines()[-1]
    assert last.startswith("compute-plugins: configuration error: ")
    assert option in last


SNAPSHOTS = __import__("pathlib").Path(__file__).parents[2] / "fixtures" / "hosts"
