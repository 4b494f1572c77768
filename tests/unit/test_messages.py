"""Every line the command prints stays one line, whatever a value holds."""

from __future__ import annotations

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
