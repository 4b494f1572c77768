"""The core names no plugin: ``tools/count_core_identifiers.py`` finds no
identifier or string literal naming NUMA in the scheduler, the compute
side, the store, the request model, ``fit``, the RequestSpec, the manager
and the topology contract (comments and docstrings aside)."""

from __future__ import annotations

import importlib.util
import pathlib
import subprocess
import sys
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "count_core_identifiers.py"


def load() -> Any:
    spec = importlib.util.spec_from_file_location("count_core_identifiers", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_core_names_no_numa():
    result = subprocess.run([sys.executable, str(TOOL), "-v"], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 0, result.stdout
    assert result.stdout.strip() == "total: 0"


def test_identifiers_and_strings_count_comments_and_docstrings_do_not():
    source = '''"""numa docstring."""
# numa comment
NUMA_PLUGIN = "numa"


def f(numa_cell):
    """The numa cell."""
    return ("a" "numa" "b", 'x')  # numa
'''
    assert [text for _, text in load().occurrences(source)] == [
        "NUMA_PLUGIN", '"numa"', "numa_cell", '"numa"']
