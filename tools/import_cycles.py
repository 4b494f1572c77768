"""Import cycles between the project's modules, lazy imports included.

Reads every module of the packages named on the command line (default:
``compute_plugins`` and ``resources``) with :mod:`ast`, takes every import
statement wherever it is (module level, inside a function, under
``TYPE_CHECKING``), resolves ``from package import name`` to the submodule
when ``name`` is one, and prints each strongly connected group of modules
that import each other (Tarjan). Exit 0 when there is none, 1 otherwise.

Usage: ``python tools/import_cycles.py [PACKAGE_DIR ...]``
"""

from __future__ import annotations

import ast
import pathlib
import sys
from collections.abc import Iterable, Iterator


def _modules(roots: Iterable[pathlib.Path]) -> dict[str, pathlib.Path]:
    found: dict[str, pathlib.Path] = {}
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            parts = list(path.relative_to(root.parent).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _package_of(module: str, path: pathlib.Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _imports(module: str, path: pathlib.Path, known: set[str]) -> Iterator[str]:
    """The project modules ``module`` imports (each once)."""
    tree = ast.parse(path.read_text(), str(path))
    package = _package_of(module, path)
    seen: set[str] = set()
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                sub = "%s.%s" % (base, alias.name)
                targets.append(sub if sub in known else base)
        for target in targets:
            # ``import a.b.c`` runs a.b.c; the closest known module is the edge.
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != module and target not in seen:
                seen.add(target)
                yield target


def cycles(graph: dict[str, list[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0

    def visit(node: str) -> None:
        nonlocal counter
        index[node] = low[node] = counter
        counter += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def import_graph(roots: Iterable[pathlib.Path]) -> dict[str, list[str]]:
    modules = _modules(roots)
    known = set(modules)
    return {name: sorted(_imports(name, path, known)) for name, path in modules.items()}


def main(argv: list[str]) -> int:
    here = pathlib.Path(__file__).resolve().parent.parent
    roots = [pathlib.Path(a).resolve() for a in argv] or [
        here / "compute_plugins", here / "resources"]
    graph = import_graph(roots)
    found = cycles(graph)
    for component in found:
        members = set(component)
        print("cycle: " + ", ".join(component))
        for name in component:
            inner = [t for t in graph[name] if t in members]
            print("    %s -> %s" % (name, ", ".join(inner)))
    print("%d import cycle(s) among %d modules" % (len(found), len(graph)))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
