"""The suite's own order (tests/conftest.py): the longest files first."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from tests import conftest

ROOT = Path(__file__).resolve().parents[2]


def test_the_longest_files_named_first_exist_once_each():
    """A file renamed or removed would silently fall back to the end of
    the run (xdist's workers then finish unevenly)."""
    missing = [p for p in conftest.LONGEST_FIRST if not (ROOT / p).is_file()]
    assert not missing, missing
    assert len(set(conftest.LONGEST_FIRST)) == len(conftest.LONGEST_FIRST)


def test_the_longest_files_go_first_and_each_files_tests_stay_together():
    """The named files first, in their order; the others after, as
    collected; each file's tests in their own order."""
    config = SimpleNamespace(rootpath=ROOT)
    items = [SimpleNamespace(path=ROOT / path, name=name) for path, name in [
        ("tests/unit/test_a.py", "a1"), ("tests/functional/test_bench_scale.py", "b1"),
        ("tests/unit/test_a.py", "a2"), ("tests/functional/test_soak.py", "s1"),
        ("tests/functional/test_bench_scale.py", "b2"), ("tests/unit/test_c.py", "c1")]]
    conftest.pytest_collection_modifyitems(config, items)  # type: ignore[arg-type]
    assert [i.name for i in items] == ["s1", "b1", "b2", "a1", "a2", "c1"]
