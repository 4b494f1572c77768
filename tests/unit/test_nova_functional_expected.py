"""``make nova-functional``'s expectations (tools/nova_functional/expected.py
and expected.toml): a run's results against every test's recorded stock
outcome and the plugins' expected one, the exit code of the report, and
the file rewritten from a run."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tools.nova_functional import expected

ROOT = Path(__file__).resolve().parents[2]
PREFIX = "nova.tests.functional.libvirt.test_numa_servers."

FILE = """# the header, kept
[causes]
replaced-filter = "the test asserts nova's NUMATopologyFilter ran"
sev-xml = "the test patches nova's memory encryption"

[ci]
exclude = ["test_numa_servers.Big"]

[tests.test_numa_servers]
"A.test_ok" = {stock = "passed", plugins = "passed"}
"A.test_filter" = {stock = "passed", plugins = "failed", cause = "replaced-filter"}
"A.test_nova_fails" = {stock = "failed", plugins = "failed"}
"A.test_varies" = {stock = "passed", plugins = "any", cause = "replaced-filter"}
"A.test_sev" = {stock = "passed", plugins = "passed", xml = "sev-xml"}
"Big.test_slow" = {stock = "passed", plugins = "passed"}
"""


def result(outcome, detail=""):
    return {"outcome": outcome, "seconds": 1.0, "detail": detail}


def boot(test, matched):
    return {"test": test, "instance": "i-1", "host": "compute1", "matched": matched,
            "problems": [] if matched else ["vCPU 0 on host CPU(s) [1], decision [2]"]}


def plugins_doc(**outcomes):
    """A plugins run of test_numa_servers as the runner writes it; every
    A.* test as expected unless given (name=outcome)."""
    tests = {"A.test_ok": "passed", "A.test_filter": "failed",
             "A.test_nova_fails": "error", "A.test_varies": "passed",
             "A.test_sev": "passed"}
    tests.update({k.replace("__", "."): v for k, v in outcomes.items()})
    return {"file": "test_numa_servers", "mode": "plugins", "complete": True,
            "tests": {PREFIX + k: result(v, "Traceback...\nAssertionError: nope")
                      for k, v in tests.items() if v},
            "boots": [boot("A.test_sev", False), boot("A.test_ok", True)],
            "rejections": []}


@pytest.fixture
def known(tmp_path):
    path = tmp_path / "expected.toml"
    path.write_text(FILE)
    return expected.load(path)


def diff(known, doc, scope=("test_numa_servers.Big",)):
    return expected.differences(known, {"plugins": {"test_numa_servers": doc}}, scope)


def test_a_run_as_expected_has_no_difference(known):
    assert diff(known, plugins_doc()) == []


def test_a_test_passing_stock_that_fails_with_the_plugins_is_a_regression(known):
    lines = diff(known, plugins_doc(A__test_ok="failed"))
    assert lines == ["regression: test_numa_servers.A.test_ok failed with the plugins, "
                     "expected passed: AssertionError: nope"]


def test_a_test_expected_to_fail_that_passes_is_reported_fixed(known):
    lines = diff(known, plugins_doc(A__test_filter="passed"))
    assert len(lines) == 1
    assert lines[0].startswith("fixed: test_numa_servers.A.test_filter passes with the "
                               "plugins, expected failed (replaced-filter)")
    assert lines[0].endswith("make nova-functional-expected")


def test_nova_s_own_failures_and_varying_tests_are_not_compared(known):
    assert diff(known, plugins_doc(A__test_nova_fails="passed",
                                   A__test_varies="failed")) == []


def test_a_boot_whose_xml_differs_needs_a_cause(known):
    doc = plugins_doc()
    doc["boots"].append(boot("A.test_ok", False))
    assert diff(known, doc) == [
        "XML differs from the decision: test_numa_servers.A.test_ok compute1 i-1: "
        "vCPU 0 on host CPU(s) [1], decision [2]"]


def test_an_expected_xml_difference_that_is_gone_is_reported_fixed(known):
    doc = plugins_doc()
    doc["boots"] = [boot("A.test_sev", True)]
    assert diff(known, doc) == [
        "fixed: test_numa_servers.A.test_sev: every boot's XML equals the decision, "
        "expected differences (sev-xml): make nova-functional-expected"]


def test_new_and_missing_tests_are_differences_outside_the_ci_scope_not(known):
    doc = plugins_doc(A__test_ok=None, A__test_new="passed")
    doc["complete"], doc["stopped"] = False, "stopped after 900 s (--file-timeout)"
    assert diff(known, doc) == [
        "new: test_numa_servers.A.test_new plugins passed: not in the expectations "
        "(make nova-functional-expected)",
        "not run: test_numa_servers.A.test_ok (expected passed) (the file's run was "
        "stopped: stopped after 900 s (--file-timeout))"]
    # NOTE: without the CI scope, Big.test_slow was expected and did not run.
    assert "not run: test_numa_servers.Big.test_slow (expected passed)" in diff(
        known, plugins_doc(), scope=())


def test_the_stock_run_is_compared_with_the_recorded_outcomes(known):
    stock = plugins_doc()
    stock["mode"], stock["boots"] = "stock", []
    stock["tests"][PREFIX + "A.test_filter"] = result("passed")
    stock["tests"][PREFIX + "A.test_nova_fails"] = result("passed")
    lines = expected.differences(known, {"stock": {"test_numa_servers": stock}},
                                 ("test_numa_servers.Big",))
    assert lines == ["stock: test_numa_servers.A.test_nova_fails passed, expected failed"]


def test_the_file_rewritten_from_a_run_keeps_causes_and_opens_new_ones(known, tmp_path):
    doc = plugins_doc(A__test_ok="failed", A__test_filter="failed", A__test_sev="passed")
    new = expected.updated(known, {"plugins": {"test_numa_servers": doc}})
    tests = new.tests["test_numa_servers"]
    assert tests["A.test_ok"] == expected.Entry("passed", "failed", cause="open")
    assert tests["A.test_filter"].cause == "replaced-filter"
    assert tests["A.test_varies"].plugins == "any"
    assert tests["A.test_sev"].xml == "sev-xml"
    assert tests["Big.test_slow"] == known.tests["test_numa_servers"]["Big.test_slow"]
    path = tmp_path / "again.toml"
    path.write_text(expected.dumps(new, "# the header, kept"))
    assert expected.load(path) == new
    assert path.read_text().startswith("# the header, kept\n")
    # NOTE: a fixed test loses its cause.
    fixed = expected.updated(known, {"plugins": {"test_numa_servers": plugins_doc(
        A__test_filter="passed")}})
    assert fixed.tests["test_numa_servers"]["A.test_filter"] == expected.Entry(
        "passed", "passed")


def test_tests_no_run_measured_are_written_unmeasured_and_replaced_when_measured(known):
    doc = plugins_doc()
    doc["all_tests"] = [PREFIX + "A.test_ok", PREFIX + "C.test_never_reached"]
    new = expected.updated(known, {"plugins": {"test_numa_servers": doc}})
    assert new.tests["test_numa_servers"]["C.test_never_reached"] == expected.Entry(
        "any", "any", cause="unmeasured")
    # NOTE: not compared until measured; then the run's outcomes replace it.
    assert expected.differences(new, {"plugins": {"test_numa_servers": doc}},
                                ("test_numa_servers.Big",)) == []
    stock = plugins_doc(C__test_never_reached="passed")
    stock["mode"], stock["boots"] = "stock", []
    doc["tests"][PREFIX + "C.test_never_reached"] = result("failed")
    again = expected.updated(new, {"stock": {"test_numa_servers": stock},
                                   "plugins": {"test_numa_servers": doc}})
    assert again.tests["test_numa_servers"]["C.test_never_reached"] == expected.Entry(
        "passed", "failed", cause="open")


@pytest.mark.parametrize("line, error", [
    ('"A.t" = {stock = "passed", plugins = "failed", cause = "nobody"}',
     "cause 'nobody' is not in [causes]"),
    ('"A.t" = {stock = "ok", plugins = "passed"}', "outcome 'ok' is not one of"),
    ('"A.t" = {stock = "passed", plugin = "passed"}', "unknown field"),
])
def test_a_wrong_expectations_file_is_refused_in_one_line(tmp_path, line, error):
    path = tmp_path / "expected.toml"
    path.write_text(FILE + line + "\n")
    with pytest.raises(expected.ExpectedError, match=re.escape(error)):
        expected.load(path)


def run_report(tmp_path, doc):
    (tmp_path / "out" / "plugins").mkdir(parents=True)
    (tmp_path / "out" / "plugins" / "test_numa_servers.json").write_text(json.dumps(doc))
    # NOTE: what `run --ci` writes for a later report.
    (tmp_path / "out" / "scope.json").write_text(json.dumps(
        {"exclude": ["test_numa_servers.Big"], "pattern": ""}))
    (tmp_path / "expected.toml").write_text(FILE)
    return subprocess.run(
        [sys.executable, "-m", "tools.nova_functional", "report", "--expected",
         str(tmp_path / "expected.toml"), str(tmp_path / "out")],
        cwd=ROOT, capture_output=True, text=True, check=False)


def test_the_report_exits_0_when_the_run_equals_the_expectations(tmp_path):
    done = run_report(tmp_path, plugins_doc())
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-3:] == [
        "0 differences from expected.toml",
        "test_numa_servers: stock 4/5 (recorded), plugins 3/5",
        "decisions matched 1/2 boots"]


def test_the_report_exits_1_with_one_line_per_difference(tmp_path):
    done = run_report(tmp_path, plugins_doc(A__test_ok="failed"))
    assert done.returncode == 1
    assert done.stdout.splitlines()[0].startswith("regression: test_numa_servers.A.test_ok")
    assert "1 differences from expected.toml" in done.stdout
    assert "Traceback" not in done.stderr


def test_the_project_s_expectations_load_and_every_cause_is_documented():
    known = expected.load()
    compat = (ROOT / "doc" / "source" / "nova-compat.md").read_text()
    for key in known.causes:
        assert "`cause: %s`" % key in compat, key
    assert sorted(known.tests) == sorted(
        ("test_numa_servers", "test_pci_sriov_servers", "test_pci_in_placement",
         "test_vgpu", "test_numa_live_migration", "test_vpmem", "test_amd_sev",
         "test_reshape"))


def test_ci_runs_again_only_the_tests_whose_outcome_or_xml_differs(known):
    doc = plugins_doc(A__test_ok="failed", A__test_filter="passed", A__test_new="failed")
    doc["boots"].append(boot("A.test_varies", False))
    doc["tests"].pop(PREFIX + "A.test_nova_fails")
    assert expected.retried(known, {"plugins": {"test_numa_servers": doc}},
                            ("test_numa_servers.Big",)) == [
        ("test_numa_servers", "A.test_filter"), ("test_numa_servers", "A.test_ok"),
        ("test_numa_servers", "A.test_varies")]
    # NOTE: a test the run did not reach is not run again (its file was stopped).
    doc = plugins_doc(A__test_ok=None)
    assert expected.retried(known, {"plugins": {"test_numa_servers": doc}}, ()) == []


def rerun_report(tmp_path, monkeypatch, first, second):
    """A CI run's report whose A.test_ok was ``first`` and, run once more
    in a fresh process, ``second``. The fresh process is replaced: it runs
    nova's test from nova's wheel, which is only in .venv-nova, not in the
    venv the unit tests run in."""
    from tools.nova_functional import __main__ as runner

    def again(out, name, key):
        assert (name, key) == ("test_numa_servers", "A.test_ok")
        return {"result": result(second), "boots": [boot("A.test_ok", True)],
                "rejections": []}

    monkeypatch.setattr(runner, "_rerun_one", again)
    out = tmp_path / "out"
    (out / "plugins").mkdir(parents=True)
    doc = plugins_doc(A__test_ok=first)
    doc["tests"][PREFIX + "A.test_ok"]["detail"] = (
        "Traceback...\nTypeError: Can't upgrade a READER transaction")
    (out / "plugins" / "test_numa_servers.json").write_text(json.dumps(doc))
    (tmp_path / "expected.toml").write_text(FILE)
    scope = ["test_numa_servers.Big"]
    runner._rerun_differing(out, expected.load(tmp_path / "expected.toml"), scope, "", 1)
    return runner.report(out, tmp_path / "expected.toml", scope, "")


def test_ci_passes_a_test_that_failed_once_and_passes_in_a_fresh_process(
        tmp_path, monkeypatch, capsys):
    assert rerun_report(tmp_path, monkeypatch, "failed", "passed") == 0
    out = capsys.readouterr().out
    assert ("re-run in a fresh process: test_numa_servers.A.test_ok: failed, then "
            "passed (first: TypeError: Can't upgrade a READER transaction)") in out
    assert "0 differences from expected.toml" in out


def test_ci_fails_on_a_difference_the_fresh_process_shows_again(
        tmp_path, monkeypatch, capsys):
    assert rerun_report(tmp_path, monkeypatch, "failed", "error") == 1
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("re-running 1 test(s) that differ from the expectations, each "
                      "once in a fresh process")
    assert out[2] == ("re-run in a fresh process: test_numa_servers.A.test_ok: failed, "
                      "then error (first: TypeError: Can't upgrade a READER transaction)")
    assert out[3].startswith("regression: test_numa_servers.A.test_ok failed with the "
                             "plugins, expected passed")
