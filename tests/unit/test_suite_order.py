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


def test_the_test_extra_asks_for_a_pytest_xdist_that_takes_make_tests_options():
    """``make test`` and tox pass ``--no-loadscope-reorder``, which
    pytest-xdist has had since 3.8.0: with an older one, which the test
    extra allowed (``>=3.5``), pytest refused the command line
    ("unrecognized arguments") and no test ran."""
    import configparser

    from packaging.requirements import Requirement

    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    wanted = [Requirement(line) for line in setup["extras"]["test"].splitlines()
              if line.strip().startswith("pytest-xdist")]
    assert len(wanted) == 1, wanted
    for command in ((ROOT / "Makefile").read_text(), (ROOT / "tox.ini").read_text()):
        assert "--no-loadscope-reorder" in command
    assert not wanted[0].specifier.contains("3.7.0"), wanted[0]
