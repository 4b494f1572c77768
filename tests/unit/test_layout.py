"""The package's layout shows its architecture: no import cycles (lazy
imports included), a handful of modules at the package root, the rest in
packages by flow (doc/source/architecture.md)."""

from __future__ import annotations

import importlib.util
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "compute_plugins"


def _tool():
    spec = importlib.util.spec_from_file_location(
        "import_cycles", ROOT / "tools" / "import_cycles.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_no_module_imports_one_that_imports_it_back():
    tool = _tool()
    graph = tool.import_graph([PACKAGE, ROOT / "resources"])
    assert tool.cycles(graph) == []


def test_the_cycle_finder_finds_a_lazy_cycle(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg import b\n")
    (package / "b.py").write_text("def later():\n    from pkg.a import x\n")
    tool = _tool()
    assert tool.cycles(tool.import_graph([package])) == [["pkg.a", "pkg.b"]]


def test_the_package_root_holds_a_handful_of_modules():
    modules = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert modules == ["__init__.py", "api.py", "exception.py", "version.py"]


def test_every_part_is_a_package_with_a_docstring():
    for init in sorted(PACKAGE.glob("*/__init__.py")):
        text = init.read_text().lstrip()
        assert text.startswith('"""'), "%s has no docstring" % init.relative_to(ROOT)
