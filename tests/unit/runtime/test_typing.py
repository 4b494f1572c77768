"""No signature in compute_plugins/ types a plugin or a set of plugins as
``Any``: the runtime's :data:`~compute_plugins.runtime.AnyPlugin` and
:class:`~compute_plugins.runtime.PluginSet` are real types."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[3] / "compute_plugins"

#: Names that hold a plugin, a set of plugins or the manager that loads them.
PLUGIN_NAMES = frozenset({"plugin", "plugins", "manager", "loaded", "plugin_set"})
#: Annotations that say nothing.
UNTYPED = frozenset({"Any", "Optional[Any]", "Any | None", "Mapping[str, Any]",
                     "dict[str, Any]"})


def _annotated(tree: ast.AST):
    """``(line, name, annotation)`` of every parameter, return value and
    annotated assignment."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            for arg in (args.posonlyargs + args.args + args.kwonlyargs
                        + [a for a in (args.vararg, args.kwarg) if a]):
                if arg.annotation is not None:
                    yield arg.lineno, arg.arg, ast.unparse(arg.annotation)
            if node.returns is not None:
                yield node.lineno, "return of %s" % node.name, ast.unparse(node.returns)
        elif isinstance(node, ast.AnnAssign):
            name = (node.target.id if isinstance(node.target, ast.Name)
                    else node.target.attr if isinstance(node.target, ast.Attribute)
                    else "")
            yield node.lineno, name, ast.unparse(node.annotation)
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Subscript):
            # NOTE: a type alias (``AnyPlugin = ResourcePlugin[...]``).
            for assigned in node.targets:
                if isinstance(assigned, ast.Name):
                    yield node.lineno, assigned.id, ast.unparse(node.value)


def any_typed_plugins() -> list[str]:
    """Every place in compute_plugins/ that types a plugin or plugin set
    as ``Any``: ``path:line name: annotation``."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for line, name, annotation in _annotated(tree):
            text = annotation.replace(" ", "")
            if ("ResourcePlugin[Any" in text
                    or (name in PLUGIN_NAMES and annotation in UNTYPED)):
                found.append("%s:%d %s: %s" % (path.relative_to(PACKAGE.parent),
                                               line, name, annotation))
    return found


def test_no_plugin_is_typed_any():
    assert any_typed_plugins() == []


def test_the_check_finds_what_it_looks_for(tmp_path):
    tree = ast.parse("def f(plugins: Any, x: ResourcePlugin[Any, Any, Any, Any]"
                     ") -> None: ...\nmanager: Any = None\n")
    found = [(name, annotation) for _, name, annotation in _annotated(tree)]
    assert ("plugins", "Any") in found and ("manager", "Any") in found
    assert ("x", "ResourcePlugin[Any, Any, Any, Any]") in found
