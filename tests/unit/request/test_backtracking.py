"""nova's validator patterns nest quantifiers and backtrack exponentially on
a value that almost matches; the plugins match the same languages with
linear patterns (the messages still name nova's), so a flavor cannot hang
the parser."""

from __future__ import annotations

import itertools
import re
import time

import pytest

from resources.numa import request as numa_request
from resources.pmem import request as pmem_request
from resources.sriov import request as sriov_request
from tests.unit.request.conftest import problems

PAIRS = [
    (numa_request.CPU_MASK_PATTERN, numa_request.CPU_MASK_MATCH, "1^-,x"),
    (numa_request.REALTIME_MASK_PATTERN, numa_request.CPU_MASK_MATCH, "1^-,"),
    (sriov_request.ALIAS_PATTERN, sriov_request.ALIAS_MATCH, "a1:, "),
    (pmem_request.PATTERN, pmem_request.MATCH, "a,_ "),
]


@pytest.mark.parametrize("novas, ours, alphabet", PAIRS)
def test_the_linear_patterns_match_novas_language(novas, ours, alphabet):
    for length in range(7):
        for chars in itertools.product(alphabet, repeat=length):
            text = "".join(chars)
            assert bool(re.fullmatch(ours, text, re.ASCII)) == bool(
                re.fullmatch(novas, text, re.ASCII)), text


@pytest.mark.parametrize("specs, key", [
    # ~0.6 s at 14 repetitions with nova's pattern, x2 per repetition
    ({"hw:cpu_policy": "mixed", "hw:cpu_dedicated_mask": "1-2," * 60 + "x"},
     "hw:cpu_dedicated_mask"),
    ({"hw:cpu_policy": "dedicated", "hw:cpu_realtime": "yes",
      "hw:cpu_realtime_mask": "^0-1," * 60 + "x"}, "hw:cpu_realtime_mask"),
    ({"hw:numa_nodes": "1", "hw:numa_cpus.0": "0-1," * 60 + "x",
      "hw:numa_mem.0": "4096"}, "hw:numa_cpus.0"),
    # hangs from ~25 repetitions with nova's pattern
    ({"pci_passthrough:alias": "qat:1 , " * 60 + ":"}, "pci_passthrough:alias"),
])
def test_an_almost_valid_value_is_refused_at_once(manager, specs, key):
    start = time.monotonic()
    found = problems(manager, specs)
    assert time.monotonic() - start < 2
    assert any(p.key == key and "is not of the format" in p.rule for p in found), found
