"""``python -m tools.nova_functional run|one|report`` (see the package doc)."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import unittest
from pathlib import Path
from typing import Any

#: The test files of nova/tests/functional/libvirt/ issue 18 names.
FILES = ("test_numa_servers", "test_pci_sriov_servers", "test_pci_in_placement",
         "test_vgpu", "test_numa_live_migration", "test_vpmem", "test_amd_sev",
         "test_reshape")
MODES = ("stock", "plugins")
PACKAGE = "nova.tests.functional.libvirt."


class Outcomes(unittest.TestResult):
    """Every test's outcome (passed, failed, error, skipped...) and time."""

    def __init__(self, boots: Any) -> None:
        super().__init__()
        self.boots = boots
        self.outcomes: dict[str, dict[str, Any]] = {}
        self._started = 0.0

    def startTest(self, test: unittest.TestCase) -> None:  # noqa: N802 - unittest's API
        super().startTest(test)
        self._started = time.monotonic()
        self.boots.test = test.id().rsplit(".", 2)[-2] + "." + test.id().rsplit(".", 1)[-1]
        print("  %s ..." % test.id(), file=sys.stderr, flush=True)

    def _note(self, test: unittest.TestCase, outcome: str, detail: str = "") -> None:
        self.outcomes[test.id()] = {
            "outcome": outcome, "seconds": round(time.monotonic() - self._started, 2),
            "detail": detail[-3000:]}
        print("  %s %s" % (test.id(), outcome), file=sys.stderr, flush=True)

    def addSuccess(self, test: unittest.TestCase) -> None:  # noqa: N802
        super().addSuccess(test)
        self._note(test, "passed")

    def addFailure(self, test: unittest.TestCase, err: Any) -> None:  # noqa: N802
        super().addFailure(test, err)
        self._note(test, "failed", self.failures[-1][1])

    def addError(self, test: unittest.TestCase, err: Any) -> None:  # noqa: N802
        super().addError(test, err)
        self._note(test, "error", self.errors[-1][1])

    def addSkip(self, test: unittest.TestCase, reason: str) -> None:  # noqa: N802
        super().addSkip(test, reason)
        self._note(test, "skipped", str(reason))

    def addExpectedFailure(self, test: unittest.TestCase, err: Any) -> None:  # noqa: N802
        super().addExpectedFailure(test, err)
        self._note(test, "passed", "expected failure")

    def addUnexpectedSuccess(self, test: unittest.TestCase) -> None:  # noqa: N802
        super().addUnexpectedSuccess(test)
        self._note(test, "failed", "unexpected success")


def run_one(name: str, mode: str, out: Path, pattern: str) -> int:
    """Run one test file of nova's in this process; write ``out``."""
    from tools.nova_functional import hooks
    work = out.parent / (out.stem + ".work")
    boots = hooks.install(mode, work)
    started = time.monotonic()
    suite = unittest.defaultTestLoader.loadTestsFromName(PACKAGE + name)
    if pattern:
        suite = unittest.TestSuite(t for t in _flatten(suite) if pattern in t.id())
    result = Outcomes(boots)
    suite.run(result)
    doc = {"file": name, "mode": mode,
           "seconds": round(time.monotonic() - started, 1),
           "tests": result.outcomes, "boots": boots.boots,
           "rejections": boots.rejections}
    out.write_text(json.dumps(doc, indent=1, sort_keys=True))
    return 0


def _flatten(suite: Any) -> Any:
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from _flatten(item)
        else:
            yield item


def run(files: list[str], modes: list[str], out: Path, pattern: str) -> int:
    """Each file in each mode in its own process, one at a time (a file's
    two runs one after the other); a file whose result is already in
    ``out`` is not run again (delete ``out`` for a fresh run)."""
    for name in files:
        for mode in modes:
            (out / mode).mkdir(parents=True, exist_ok=True)
            target = out / mode / (name + ".json")
            if target.exists():
                print("%s %s: kept from an earlier run" % (mode, name), flush=True)
                continue
            started = time.monotonic()
            cmd = [sys.executable, "-m", "tools.nova_functional", "one",
                   "--mode", mode, "--out", str(target), "--pattern", pattern, name]
            with open(out / mode / (name + ".log"), "w") as log:
                rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT,
                                     env=dict(os.environ, OS_TEST_TIMEOUT=os.environ.get(
                                         "OS_TEST_TIMEOUT", "180")))
            print("%s %s: %s in %.0f s" % (mode, name, "done" if rc == 0 else
                                          "runner failed (rc %d)" % rc,
                                          time.monotonic() - started), flush=True)
    return report(out)


def _counts(doc: dict[str, Any]) -> tuple[int, int]:
    tests = doc["tests"].values()
    ran = [t for t in tests if t["outcome"] != "skipped"]
    return sum(1 for t in ran if t["outcome"] == "passed"), len(ran)


def report(out: Path) -> int:
    """One line per file and the decisions line; 1 when a test passing
    stock fails with the plugins or a boot's XML differs from the decision."""
    docs: dict[str, dict[str, dict[str, Any]]] = {m: {} for m in MODES}
    for mode in MODES:
        for path in sorted((out / mode).glob("*.json")) if (out / mode).is_dir() else ():
            doc = json.loads(path.read_text())
            docs[mode][doc["file"]] = doc
    regressions = []
    for name in sorted(set(docs["stock"]) | set(docs["plugins"])):
        parts = []
        for mode in MODES:
            doc = docs[mode].get(name)
            if doc is None:
                parts.append("%s not run" % mode)
            else:
                passed, ran = _counts(doc)
                parts.append("%s %d/%d" % (mode, passed, ran))
        print("%s: %s" % (name, ", ".join(parts)))
        stock, plugins = docs["stock"].get(name), docs["plugins"].get(name)
        if stock and plugins:
            regressions += [
                t for t, r in stock["tests"].items() if r["outcome"] == "passed"
                and plugins["tests"].get(t, {}).get("outcome") != "passed"]
    boots = [b for doc in docs["plugins"].values() for b in doc["boots"]]
    matched = sum(1 for b in boots if b["matched"])
    _write_differences(out, docs, regressions, boots)
    print("decisions matched %d/%d boots" % (matched, len(boots)))
    return 1 if regressions or matched != len(boots) else 0


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


def _write_differences(out: Path, docs: dict[str, dict[str, dict[str, Any]]],
                       regressions: list[str], boots: list[dict[str, Any]]) -> None:
    """``out/differences.txt``: every test passing stock and not with the
    plugins, with its cause, and every boot whose XML differs."""
    lines = ["# tests passing stock, not with the plugins: %d" % len(regressions)]
    for test in regressions:
        name = test.split(".")[4]
        result = docs["plugins"][name]["tests"].get(test, {"outcome": "not run",
                                                           "detail": ""})
        lines.append("%s %s: %s" % (test, result["outcome"], cause(result["detail"])))
    lines.append("# requests PluginFitFilter passed no host for (test: host: reasons)")
    lines += ["%s %s: %s" % (r["test"], host, "; ".join(reasons))
              for doc in docs["plugins"].values() for r in doc.get("rejections", ())
              for host, reasons in sorted(r["hosts"].items())]
    lines.append("# boots whose guest XML differs from the decision")
    lines += ["%s %s %s: %s" % (b["test"], b["host"], b["instance"],
                                "; ".join(b["problems"])) for b in boots if not b["matched"]]
    (out / "differences.txt").write_text("\n".join(lines) + "\n")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.nova_functional")
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("one", help="one test file in this process")
    one.add_argument("--mode", choices=MODES, required=True)
    one.add_argument("--out", type=Path, required=True)
    one.add_argument("--pattern", default="")
    one.add_argument("file")
    many = sub.add_parser("run", help="test files, each in its own process")
    many.add_argument("--modes", default=",".join(MODES))
    many.add_argument("--out", type=Path, required=True)
    many.add_argument("--pattern", default="",
                      help="only the tests whose id contains it")
    many.add_argument("files", nargs="*", default=list(FILES))
    rep = sub.add_parser("report", help="the summary of a run's directory")
    rep.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    if args.command == "one":
        return run_one(args.file, args.mode, args.out, args.pattern)
    if args.command == "run":
        modes = [m for m in args.modes.split(",") if m]
        bad = [m for m in modes if m not in MODES] + [
            f for f in args.files if not f.startswith("test_")]
        if bad:
            print("unknown mode or test file: %s" % ", ".join(bad), file=sys.stderr)
            return 2
        return run(args.files, modes, args.out, args.pattern)
    return report(args.out)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
