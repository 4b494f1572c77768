"""The plugin SDK (``compute_plugins.api``): one module a plugin imports."""

from __future__ import annotations

import ast
from pathlib import Path

from compute_plugins import api

ROOT = Path(__file__).resolve().parents[3]
#: What a third-party plugin may import of compute_plugins.
SDK = ("compute_plugins.api", "compute_plugins.testing")


def test_every_name_of_the_sdk_is_there_once():
    assert len(set(api.__all__)) == len(api.__all__)
    assert [name for name in api.__all__ if not hasattr(api, name)] == []


def test_the_plugin_contract_is_in_the_sdk():
    for name in ("ResourcePlugin", "Rejection", "GuestFragment", "GroupAllocation",
                 "ProviderContribution", "HostInfo", "RequestInput", "RequestGroup",
                 "PluginRequest", "PluginAssignment", "PluginState",
                 "AssignmentConflict", "FrozenMap", "Mappings", "Earlier", "rules",
                 "Providers"):
        assert name in api.__all__, name


def imports_of(package: Path) -> dict[str, set[str]]:
    """Module -> the compute_plugins modules it imports."""
    found: dict[str, set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = ([node.module] if node.module != "compute_plugins"
                         else ["compute_plugins.%s" % a.name for a in node.names])
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            else:
                continue
            for name in names:
                if name == "compute_plugins" or name.startswith("compute_plugins."):
                    found.setdefault(path.name, set()).add(name)
    return found


def test_the_example_plugin_imports_only_the_sdk():
    found = imports_of(ROOT / "examples" / "fpga" / "compute_plugins_fpga")
    assert found, "the example imports the SDK"
    assert {module: names - set(SDK) for module, names in found.items()
            if names - set(SDK)} == {}
