"""Every line the command prints stays one line, whatever a value holds."""

from __future__ import annotations

import json

from compute_plugins.cmd import report as report_cmd
from compute_plugins.placement import report
from compute_plugins.request.errors import Problem, RequestValidationError
from compute_plugins.request.types import FrozenMap


def test_a_failed_periodic_is_one_line():
    result = report.PeriodicResult(
        3, {}, ["create a\nb"], error="Placement said:\nline two\x1b[0m")
    text = report_cmd.format_text(result)
    assert text == ("periodic 3: 0 Placement calls, changed: create a\\nb, "
                    "FAILED: Placement said:\\nline two\\x1b[0m")


def test_a_problem_is_one_line_and_its_dict_is_json():
    import json

    problem = Problem("image", "hw_x\n", FrozenMap({"a": (1, FrozenMap({"b": 2}))}),
                      "bad value '\u202e'", "numa")
    assert str(problem) == ("image hw_x\\n={'a': [1, {'b': 2}]}: bad value "
                            "'\\u202e'")
    assert json.loads(json.dumps(problem.to_dict())) == {
        "source": "image", "key": "hw_x\n", "value": {"a": [1, {"b": 2}]},
        "rule": "bad value '\\u202e'", "plugin": "numa"}
    error = RequestValidationError([problem])
    assert str(error).splitlines() == [
        "invalid request: 1 problem(s):",
        "- image hw_x\\n={'a': [1, {'b': 2}]}: bad value '\\u202e'"]


def test_the_claims_line_names_each_consumer_and_stays_one_line():
    from compute_plugins.compute.agent import AgentResult
    from compute_plugins.compute.claims import ClaimResult, ReleaseResult
    from compute_plugins.plugin.contract import Rejection

    result = AgentResult(
        periodic=report.PeriodicResult(4, {}, []),
        store_writes=3,
        claims=[ClaimResult(1, "c1", True),
                ClaimResult(2, "c2", False, (Rejection(
                    "CPU(s) 12-13 of host cell 3\nare taken", plugin="numa"),))],
        releases=[ReleaseResult("c3", 3, True, True)])
    assert report_cmd.format_text(result).splitlines() == [
        "periodic 4: 0 Placement calls",
        "  claims: 1 claimed (c1), 1 rejected (c2: numa: CPU(s) 12-13 of host "
        "cell 3\\nare taken), 1 released (c3); 3 host-state writes"]
    poll = AgentResult(store_writes=1, releases=[ReleaseResult("c3", 3, True, False)])
    assert report_cmd.format_text(poll) == (
        "claims between periodics: 0 claimed, 0 rejected, 1 released (c3); "
        "1 host-state write")
    assert json.loads(report_cmd.format_json(poll)) == {"claims": {
        "claimed": [], "rejected": [], "released": ["c3"], "store_writes": 1}}
