"""The expectations of ``make nova-functional``: every test's outcome.

``tools/nova_functional/expected.toml`` holds, per test of nova's eight
functional libvirt files, its outcome in the stock run (pinned nova
34.0.0: a fixed fact, measured once by the full ``make nova-functional``)
and what the plugins run is expected to do: pass, or fail for a cause
whose key names a paragraph of ``doc/source/nova-compat.md`` ("nova's own
functional tests"). A run is compared with it (:func:`differences`): any
difference is one line and makes the run's exit code 1, including a test
expected to fail that now passes ("fixed": the file is rewritten with
:func:`updated`, ``make nova-functional-expected``), so the file stays
true. Why not simply compare with this run's stock results: the stock run
of the eight files takes most of an hour on two cores; CI runs the plugins
side only (``make nova-functional-ci``) and takes the stock side from here.

The file's format (TOML, one line per test)::

    [causes]
    replaced-filter = "the test asserts that nova's NUMATopologyFilter ran"

    [ci]
    exclude = ["test_vgpu.VGPUTests"]   # left to the full run, see the doc

    [tests.test_numa_servers]
    "NUMAServersTest.test_x" = {stock = "passed", plugins = "passed"}
    "NUMAServersTest.test_y" = {stock = "passed", plugins = "failed", cause = "replaced-filter"}

``stock`` and ``plugins`` are ``passed``, ``failed`` (an error too),
``skipped``, or ``any`` (a test whose outcome varies under load: not
compared; it needs a cause). ``xml = "KEY"``: the test's boots may build a
guest XML that differs from the decision, for that cause.
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional

PATH = Path(__file__).resolve().parent / "expected.toml"
OUTCOMES = ("passed", "failed", "skipped", "any")
#: The cause of a new difference nobody has classified yet.
OPEN = "open"
#: The cause of an ``any`` entry written for a test no run measured yet
#: (the next run replaces it; every other ``any`` is kept).
UNMEASURED = "unmeasured"
#: What to run when the file no longer says what a run does.
UPDATE = "make nova-functional-expected"


class ExpectedError(Exception):
    """The expectations file cannot be read (one line saying why)."""


@dataclass(frozen=True)
class Entry:
    """One test's expected outcomes."""

    stock: str
    plugins: str
    cause: str = ""
    xml: str = ""


@dataclass
class Expected:
    """The whole file: causes, the CI scope and every test's entry."""

    causes: dict[str, str] = field(default_factory=dict)
    ci_exclude: list[str] = field(default_factory=list)
    #: file -> "Class.test" -> entry
    tests: dict[str, dict[str, Entry]] = field(default_factory=dict)

    def entry(self, file: str, key: str) -> Optional[Entry]:
        return self.tests.get(file, {}).get(key)


def test_key(test_id: str) -> tuple[str, str]:
    """``nova.tests.functional.libvirt.FILE.Class.test`` -> (FILE, "Class.test")."""
    parts = test_id.split(".")
    return parts[4], ".".join(parts[5:])


def excluded(file: str, key: str, prefixes: Iterable[str]) -> bool:
    """Whether a test is outside a scope given as ``FILE[.Class[.test]]``
    prefixes."""
    name = "%s.%s" % (file, key)
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def load(path: Path = PATH) -> Expected:
    """The expectations file, checked (every cause named is defined)."""
    try:
        doc = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise ExpectedError("%s: no such file (write it: %s)" % (path, UPDATE)) from None
    except tomllib.TOMLDecodeError as exc:
        raise ExpectedError("%s: not TOML: %s" % (path, exc)) from None
    causes = {str(k): str(v) for k, v in doc.get("causes", {}).items()}
    expected = Expected(causes=causes,
                        ci_exclude=[str(p) for p in doc.get("ci", {}).get("exclude", [])])
    for file, tests in doc.get("tests", {}).items():
        for key, raw in tests.items():
            try:
                entry = Entry(**raw)
            except TypeError:
                raise ExpectedError("%s: %s.%s: unknown field in %s" % (
                    path, file, key, sorted(raw))) from None
            for name in (entry.stock, entry.plugins):
                if name not in OUTCOMES:
                    raise ExpectedError("%s: %s.%s: outcome %r is not one of %s" % (
                        path, file, key, name, ", ".join(OUTCOMES)))
            for cause in (entry.cause, entry.xml):
                if cause and cause != OPEN and cause not in causes:
                    raise ExpectedError("%s: %s.%s: cause %r is not in [causes]" % (
                        path, file, key, cause))
            expected.tests.setdefault(file, {})[key] = entry
    return expected


def outcome(result: Optional[dict[str, Any]]) -> str:
    """A run's outcome of a test as the file writes it (None: not run)."""
    if result is None:
        return "not run"
    name = str(result["outcome"])
    return "failed" if name == "error" else name


def mismatches(doc: dict[str, Any], key: str) -> list[dict[str, Any]]:
    """The boots of a test (``Class.test``) whose XML differs from the decision."""
    return [b for b in doc.get("boots", ()) if b["test"] == key and not b["matched"]]


def differences(expected: Expected, docs: dict[str, dict[str, dict[str, Any]]],
                scope: Iterable[str] = (), pattern: str = "") -> list[str]:
    """One line per way a run's results (``docs[mode][file]``, the JSON of
    each file run) differ from the expectations; [] when they agree.

    Only the files run are compared, only their tests inside ``scope`` (the
    prefixes excluded) and containing ``pattern``. The plugins' outcome is
    compared only for tests passing stock: a test nova's own run fails or
    skips says nothing about the plugins.
    """
    return [line for _file, _key, line in _differences(expected, docs, scope, pattern)]


def retried(expected: Expected, docs: dict[str, dict[str, dict[str, Any]]],
            scope: Iterable[str] = (), pattern: str = "") -> list[tuple[str, str]]:
    """The plugins run's tests (file, ``Class.test``) worth running once
    more: those whose outcome or boots differ from the expectations (not a
    test the run did not reach, nor a stock or new one)."""
    found = []
    for file, key, line in _differences(expected, {"plugins": docs.get("plugins", {})},
                                        scope, pattern):
        if key and not line.startswith("not run: ") and (file, key) not in found:
            found.append((file, key))
    return found


def _differences(expected: Expected, docs: dict[str, dict[str, dict[str, Any]]],
                 scope: Iterable[str], pattern: str) -> list[tuple[str, str, str]]:
    """:func:`differences`' lines, each with its test's file and key
    (the key empty for a test the expectations do not list)."""
    scope = list(scope)
    lines: list[tuple[str, str, str]] = []
    for mode in ("stock", "plugins"):
        for file, doc in sorted(docs.get(mode, {}).items()):
            observed = {test_key(t)[1]: r for t, r in doc["tests"].items()}
            wanted = {k: e for k, e in expected.tests.get(file, {}).items()
                      if not excluded(file, k, scope) and pattern in "%s.%s.%s" % (
                          "nova.tests.functional.libvirt", file, k)}
            stopped = "" if doc.get("complete", True) else (
                " (the file's run was stopped: %s)" % doc.get("stopped", "unfinished"))
            for key in sorted(set(observed) - set(wanted)):
                if not excluded(file, key, scope):
                    lines.append((file, "", "new: %s.%s %s %s: not in the expectations (%s)" % (
                        file, key, mode, outcome(observed[key]), UPDATE)))
            for key, entry in sorted(wanted.items()):
                lines += [(file, key, line) for line in _compare(
                    mode, file, key, entry, observed.get(key), doc, stopped)]
    return lines


def _compare(mode: str, file: str, key: str, entry: Entry,
             result: Optional[dict[str, Any]], doc: dict[str, Any],
             stopped: str) -> list[str]:
    got = outcome(result)
    name = "%s.%s" % (file, key)
    if mode == "stock":
        if entry.stock in ("any", got):
            return []
        return ["stock: %s %s, expected %s%s" % (name, got, entry.stock,
                                                  stopped if result is None else "")]
    if entry.stock != "passed":
        return []
    lines = []
    if result is None:
        lines.append("not run: %s (expected %s)%s" % (name, entry.plugins, stopped))
    elif entry.plugins == "any":
        pass
    elif got != entry.plugins:
        if got == "passed":
            lines.append("fixed: %s passes with the plugins, expected %s (%s): %s" % (
                name, entry.plugins, entry.cause, UPDATE))
        else:
            lines.append("regression: %s %s with the plugins, expected %s: %s" % (
                name, got, entry.plugins, cause(result.get("detail", ""))))
    if result is not None:
        boots = mismatches(doc, key)
        if boots and not entry.xml:
            lines += ["XML differs from the decision: %s %s %s: %s" % (
                name, b["host"], b["instance"], "; ".join(b["problems"])) for b in boots]
        elif entry.xml and not boots and got == "passed" and entry.plugins != "any":
            lines.append("fixed: %s: every boot's XML equals the decision, expected "
                         "differences (%s): %s" % (name, entry.xml, UPDATE))
    return lines


def updated(old: Expected, docs: dict[str, dict[str, dict[str, Any]]]) -> Expected:
    """The expectations rewritten from a run's results: the outcomes the run
    observed (stock from the file where the run had no stock side), causes
    kept where a test still differs, ``open`` for a new difference, ``any``
    kept (a varying test stays one until someone decides otherwise) except
    for a test ``unmeasured`` before."""
    new = Expected(causes=dict(old.causes), ci_exclude=list(old.ci_exclude),
                   tests={f: dict(t) for f, t in old.tests.items()})
    files = set(docs.get("stock", {})) | set(docs.get("plugins", {}))
    for file in sorted(files):
        stock_doc = docs.get("stock", {}).get(file)
        plugins_doc = docs.get("plugins", {}).get(file)
        observed: dict[str, dict[str, Any]] = {}
        for mode, doc in (("stock", stock_doc), ("plugins", plugins_doc)):
            for test_id, result in (doc or {}).get("tests", {}).items():
                observed.setdefault(test_key(test_id)[1], {})[mode] = result
        tests = new.tests.setdefault(file, {})
        # NOTE: a file's tests no run measured yet (its run was stopped, or
        # they were outside its scope): written, to be measured.
        for doc in (stock_doc, plugins_doc):
            for test_id in (doc or {}).get("all_tests", ()):
                key = test_key(test_id)[1]
                if key not in tests and key not in observed:
                    tests[key] = Entry("any", "any", cause=UNMEASURED)
        for key, results in sorted(observed.items()):
            before = tests.get(key)
            if before and before.cause == UNMEASURED:
                before = None
            stock = outcome(results["stock"]) if "stock" in results else (
                before.stock if before else "any")
            if before and before.stock == "any":
                stock = "any"
            plugins = outcome(results["plugins"]) if "plugins" in results else (
                before.plugins if before else "any")
            if before and before.plugins == "any":
                plugins = "any"
            cause = ""
            if "stock" not in results and before is None or (
                    "plugins" not in results and before is None):
                cause = UNMEASURED
            elif stock == "passed" and plugins != "passed" or "any" in (stock, plugins):
                cause = before.cause if before and before.cause else OPEN
            xml = ""
            if plugins_doc is not None and mismatches(plugins_doc, key):
                xml = before.xml if before and before.xml else OPEN
            elif plugins_doc is None and before:
                xml = before.xml
            tests[key] = replace(Entry(stock=stock, plugins=plugins), cause=cause, xml=xml)
    return new


def dumps(expected: Expected, header: str) -> str:
    """The file's text: ``header`` (comment lines), [causes], [ci], one line
    per test, files and tests sorted."""
    out = [header.rstrip("\n"), "", "[causes]"]
    out += ["%s = %s" % (key, json.dumps(text)) for key, text in sorted(expected.causes.items())]
    out += ["", "[ci]", "exclude = [" + "".join(
        "\n    %s," % json.dumps(p) for p in expected.ci_exclude) + "\n]"]
    for file in sorted(expected.tests):
        out += ["", "[tests.%s]" % file]
        for key, entry in sorted(expected.tests[file].items()):
            fields = ["stock = %s" % json.dumps(entry.stock),
                      "plugins = %s" % json.dumps(entry.plugins)]
            if entry.cause:
                fields.append("cause = %s" % json.dumps(entry.cause))
            if entry.xml:
                fields.append("xml = %s" % json.dumps(entry.xml))
            out.append("%s = {%s}" % (json.dumps(key), ", ".join(fields)))
    return "\n".join(out) + "\n"


def header_of(path: Path) -> str:
    """The comment lines the file starts with (kept when it is rewritten)."""
    if not path.exists():
        return "# The expectations of make nova-functional (tools/nova_functional/expected.py)."
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        lines.append(line)
    return "\n".join(lines)


def summary(expected: Expected, scope: Iterable[str] = ()) -> list[str]:
    """Counts: tests, stock outcomes, plugins passing, differences per cause."""
    scope = list(scope)
    entries = [(f, k, e) for f, tests in expected.tests.items() for k, e in tests.items()]
    stock: dict[str, int] = {}
    causes: dict[str, int] = {}
    for _f, _k, e in entries:
        stock[e.stock] = stock.get(e.stock, 0) + 1
        if e.cause:
            causes[e.cause] = causes.get(e.cause, 0) + 1
        if e.xml:
            causes["xml:" + e.xml] = causes.get("xml:" + e.xml, 0) + 1
    both = sum(1 for _f, _k, e in entries if e.stock == "passed" and e.plugins == "passed")
    in_ci = sum(1 for f, k, _e in entries if not excluded(f, k, scope))
    return ["%d tests (%d in CI's scope); stock: %s" % (
                len(entries), in_ci, ", ".join("%s %d" % kv for kv in sorted(stock.items()))),
            "passing stock and with the plugins: %d" % both,
            "by cause: " + ", ".join("%s %d" % kv for kv in sorted(causes.items()))]


def cause(detail: str) -> str:
    """A failure's cause: the test's last frame and the exception line."""
    lines = [line.strip() for line in detail.splitlines() if line.strip()]
    frames = [i for i, line in enumerate(lines) if line.startswith("File ")
              and "/nova/tests/" in line]
    where = ""
    if frames:
        frame = lines[frames[-1]]
        where = frame[frame.index("/nova/tests/") + 1:] + ": "
        if frames[-1] + 1 < len(lines):
            where += lines[frames[-1] + 1] + " -> "
    last = lines[-1] if lines else ""
    # NOTE: a server in ERROR: nova's fault (an escaped traceback) is inside
    # the test's message; its last exception line is the cause.
    fault = last.replace("\\n", "\n")
    faults = re.findall(r"((?:[a-z_]+\.)+[A-Z]\w+: [^\n'\"]{0,200})", fault)
    if faults:
        raised = re.findall(r"/(nova/[\w/]+\.py)\", line (\d+), in (\w+)", fault)
        last = "server fault: %s%s" % (
            faults[-1], " (raised at %s:%s %s)" % raised[-1] if raised else "")
    return where + last[:400]
