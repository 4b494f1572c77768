"""CPU set specs in nova's syntax, with nova's error messages."""

from __future__ import annotations

import pytest

from compute_plugins.plugin.cpuset import InvalidCPUSpec, format_cpu_spec, parse_cpu_spec


@pytest.mark.parametrize("spec, cpus", [
    ("0-3,^2,8", {0, 1, 3, 8}),
    ("1", {1}),
    ("0-7,^2-4", {0, 1, 5, 6, 7}),
    (" 4 , 5 ,, ", {4, 5}),
    ("", set()),
])
def test_parse(spec, cpus):
    assert parse_cpu_spec(spec) == cpus


@pytest.mark.parametrize("spec, message", [
    ("3-1", "Invalid range expression '3-1'"),
    ("a-2", "Invalid range expression 'a-2'"),
    ("^x", "Invalid exclusion expression '^x'"),
    ("one", "Invalid inclusion expression 'one'"),
])
def test_invalid_specs_use_novas_messages(spec, message):
    with pytest.raises(InvalidCPUSpec, match=message.replace("^", r"\^")):
        parse_cpu_spec(spec)


def test_format_round_trips():
    cpus = {0, 1, 2, 5, 7, 8}
    assert format_cpu_spec(cpus) == "0-2,5,7-8"
    assert parse_cpu_spec(format_cpu_spec(cpus)) == cpus
