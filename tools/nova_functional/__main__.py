"""``python -m tools.nova_functional run|one|report`` (see the package doc)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
import unittest
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Optional

from tools.nova_functional import expected
from tools.nova_functional.expected import cause

#: The test files of nova/tests/functional/libvirt/ issue 18 names.
FILES = ("test_numa_servers", "test_pci_sriov_servers", "test_pci_in_placement",
         "test_vgpu", "test_numa_live_migration", "test_vpmem", "test_amd_sev",
         "test_reshape")
MODES = ("stock", "plugins")
#: The order files start in (``-j``): the longest first, so that the two
#: big files do not end the run alone.
LONGEST_FIRST = ("test_pci_sriov_servers", "test_numa_servers", "test_vgpu",
                 "test_pci_in_placement", "test_numa_live_migration",
                 "test_reshape", "test_vpmem", "test_amd_sev")
PACKAGE = "nova.tests.functional.libvirt."


class Outcomes(unittest.TestResult):
    """Every test's outcome (passed, failed, error, skipped...) and time;
    ``noted`` is called after each (the runner writes its results then, so
    a file stopped at its time limit still says which tests ran)."""

    def __init__(self, boots: Any, noted: Callable[[], None] = lambda: None) -> None:
        super().__init__()
        self.boots = boots
        self.noted = noted
        self.outcomes: dict[str, dict[str, Any]] = {}
        self._started = 0.0
        self._cpu = 0.0
        self.current: Optional[dict[str, Any]] = None

    def startTest(self, test: unittest.TestCase) -> None:  # noqa: N802 - unittest's API
        super().startTest(test)
        self._started = time.monotonic()
        self._cpu = time.process_time()
        self.boots.test = test.id().rsplit(".", 2)[-2] + "." + test.id().rsplit(".", 1)[-1]
        print("  %s ..." % test.id(), file=sys.stderr, flush=True)
        # NOTE: the runner's parent kills a test that hangs past its limit.
        self.current = {"test": test.id(), "since": time.time()}
        self.noted()

    def _note(self, test: unittest.TestCase, outcome: str, detail: str = "") -> None:
        self.outcomes[test.id()] = {
            "outcome": outcome, "seconds": round(time.monotonic() - self._started, 2),
            # NOTE: the process's CPU time: what the test costs on a quiet
            # machine, whatever the load it ran under.
            "cpu": round(time.process_time() - self._cpu, 2),
            "detail": detail[-3000:]}
        print("  %s %s" % (test.id(), outcome), file=sys.stderr, flush=True)
        self.current = None
        self.noted()

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


def run_one(name: str, mode: str, out: Path, pattern: str,
            exclude: list[str], only: Optional[list[str]] = None) -> int:
    """Run one test file of nova's in this process (``only``: just these
    tests, ``Class.test``); write ``out`` after each test (``complete``
    once every test ran)."""
    from tools.nova_functional import hooks
    work = out.parent / (out.stem + ".work")
    boots = hooks.install(mode, work)
    started = time.monotonic()
    every = list(_flatten(unittest.defaultTestLoader.loadTestsFromName(PACKAGE + name)))
    suite = unittest.TestSuite(
        t for t in every if pattern in t.id()
        and not expected.excluded(name, expected.test_key(t.id())[1], exclude)
        and (not only or expected.test_key(t.id())[1] in only))

    def write(complete: bool = False) -> None:
        doc = {"file": name, "mode": mode, "complete": complete,
               "all_tests": sorted(t.id() for t in every),
               "seconds": round(time.monotonic() - started, 1),
               "cpu": round(time.process_time(), 1),
               "tests": result.outcomes, "boots": boots.boots,
               "current": result.current,
               "rejections": boots.rejections}
        partial = out.with_suffix(".partial")
        partial.write_text(json.dumps(doc, indent=1, sort_keys=True))
        partial.replace(out)

    result = Outcomes(boots, write)
    suite.run(result)
    write(complete=True)
    return 0


def _flatten(suite: Any) -> Any:
    for item in suite:
        if isinstance(item, unittest.TestSuite):
            yield from _flatten(item)
        else:
            yield item


def _run_file(name: str, mode: str, out: Path, pattern: str, exclude: list[str],
              file_timeout: float) -> str:
    """One file in one mode in its own process (its own session, so that
    what it started is stopped with it). A test still running
    ``OS_TEST_TIMEOUT`` + 60 s after it started (nova's own timeout did not
    stop it: a hang outside Python code) is recorded as failed, the process
    killed and the file's remaining tests run in a new one; a file past
    ``file_timeout`` seconds is stopped (its remaining tests: not run)."""
    target = out / mode / (name + ".json")
    if target.exists() and json.loads(target.read_text()).get("complete"):
        return "%s %s: kept from an earlier run" % (mode, name)
    target.unlink(missing_ok=True)
    started = time.monotonic()
    test_timeout = float(os.environ.get("OS_TEST_TIMEOUT", "180"))
    env = dict(os.environ, OS_TEST_TIMEOUT="%d" % test_timeout)
    merged: dict[str, Any] = {"file": name, "mode": mode, "complete": False,
                              "tests": {}, "boots": [], "rejections": []}
    state, hung = "done", []
    with open(out / mode / (name + ".log"), "w") as log:
        for attempt in range(1, 100):
            # NOTE: each process's own results, merged into ``target``
            # (a directory of its own: `report` reads the mode's *.json).
            part = out / mode / "parts" / ("%s.%d.json" % (name, attempt))
            part.parent.mkdir(exist_ok=True)
            done = ["%s.%s" % expected.test_key(t) for t in merged["tests"]]
            cmd = [sys.executable, "-m", "tools.nova_functional", "one", "--mode", mode,
                   "--out", str(part), "--pattern", pattern, name]
            cmd += ["--exclude=%s" % p for p in [*exclude, *done]]
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                    start_new_session=True)
            killed = _watch(proc, part, test_timeout + 60, file_timeout, started)
            doc = json.loads(part.read_text()) if part.exists() else {}
            merged["tests"].update(doc.get("tests", {}))
            merged["boots"] += doc.get("boots", [])
            merged["rejections"] += doc.get("rejections", [])
            merged["all_tests"] = doc.get("all_tests", merged.get("all_tests", []))
            merged["seconds"] = round(time.monotonic() - started, 1)
            merged["cpu"] = round(merged.get("cpu", 0) + doc.get("cpu", 0), 1)
            current = (doc.get("current") or {}).get("test")
            if killed == "test" and current:
                hung.append(current)
                merged["tests"][current] = {
                    "outcome": "error", "seconds": round(test_timeout + 60),
                    "cpu": 0.0, "detail": "killed: still running %d s after it started "
                    "(OS_TEST_TIMEOUT %d did not stop it)" % (test_timeout + 60, test_timeout)}
                continue
            if killed == "file":
                state = "stopped after %d s (--file-timeout)" % file_timeout
                merged["stopped"] = state
            elif proc.returncode != 0 or not doc.get("complete"):
                state = "runner failed (rc %d)" % proc.returncode
                merged["stopped"] = state
            else:
                merged["complete"] = True
            break
    target.write_text(json.dumps(merged, indent=1, sort_keys=True))
    return "%s %s: %s in %.0f s%s" % (mode, name, state, time.monotonic() - started,
                                      "; killed hung: %s" % ", ".join(hung) if hung else "")


def _watch(proc: subprocess.Popen[bytes], part: Path, test_limit: float,
           file_timeout: float, started: float) -> str:
    """Wait for a file's process; kill it when its current test has run
    ``test_limit`` seconds ("test") or the file ``file_timeout`` ("file")."""
    while True:
        try:
            proc.wait(timeout=5)
            return ""
        except subprocess.TimeoutExpired:
            pass
        if file_timeout and time.monotonic() - started > file_timeout:
            reason = "file"
        else:
            try:
                current = json.loads(part.read_text()).get("current") or {}
            except (OSError, ValueError):
                current = {}
            if not current or time.time() - current["since"] < test_limit:
                continue
            reason = "test"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        return reason


def run(files: list[str], modes: list[str], out: Path, pattern: str, jobs: int = 1,
        exclude: Optional[list[str]] = None, file_timeout: float = 0,
        expected_path: Optional[Path] = expected.PATH, retry: bool = False) -> int:
    """Each file in each mode in its own process, ``jobs`` at a time, the
    longest first; a file whose complete result is already in ``out`` is
    not run again (delete ``out`` for a fresh run). ``retry``: each plugins
    test that differs from the expectations is run once more, alone in a
    fresh process, and that second result counts
    (:func:`_rerun_differing`). Then :func:`report`."""
    exclude = exclude or []
    for mode in modes:
        (out / mode).mkdir(parents=True, exist_ok=True)
    # NOTE: the scope, for a later `report DIR` of this run.
    (out / "scope.json").write_text(json.dumps({"exclude": exclude, "pattern": pattern}))
    order = sorted(files, key=lambda f: LONGEST_FIRST.index(f)
                   if f in LONGEST_FIRST else len(LONGEST_FIRST))
    work = [(name, mode) for name in order for mode in modes]
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = [pool.submit(_run_file, name, mode, out, pattern, exclude, file_timeout)
                   for name, mode in work]
        for future in as_completed(futures):
            print(future.result(), flush=True)
    print("ran in %.0f s (%d at a time)" % (time.monotonic() - started, jobs), flush=True)
    if retry and expected_path and "plugins" in modes:
        _rerun_differing(out, expected.load(expected_path), exclude, pattern, jobs)
    return report(out, expected_path, exclude, pattern)


def _rerun_differing(out: Path, known: expected.Expected, exclude: list[str],
                     pattern: str, jobs: int) -> None:
    """Run each plugins test whose outcome (or boots' XML) differs from the
    expectations once more, alone in a fresh process, and keep that second
    result in the run's JSON (the first under ``reruns``): under load a
    test of nova's fails now and then for reasons of its own (a 500 from
    nova's API, a timeout), and CI must not go red for it. A difference the
    second run shows too is reported as before."""
    docs = load_docs(out)
    todo = expected.retried(known, docs, exclude, pattern)
    if not todo:
        return
    print("re-running %d test(s) that differ from the expectations, each once "
          "in a fresh process" % len(todo), flush=True)
    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        done = list(pool.map(lambda t: _rerun_one(out, *t), todo))
    for (name, key), second in zip(todo, done, strict=True):
        path = out / "plugins" / (name + ".json")
        doc = json.loads(path.read_text())
        test_id = PACKAGE + name + "." + key
        first = doc["tests"].get(test_id, {"outcome": "not run", "detail": ""})
        doc.setdefault("reruns", {})[test_id] = {
            "first": first["outcome"], "first_cause": cause(first.get("detail", "")),
            "first_xml": len(expected.mismatches(doc, key)),
            "second": second["result"]["outcome"],
            "second_xml": sum(1 for b in second["boots"] if not b["matched"])}
        doc["tests"][test_id] = second["result"]
        doc["boots"] = [b for b in doc["boots"] if b["test"] != key] + second["boots"]
        doc["rejections"] = [r for r in doc.get("rejections", ())
                             if r.get("test") != key] + second["rejections"]
        path.write_text(json.dumps(doc, indent=1, sort_keys=True))
    print("re-ran in %.0f s" % (time.monotonic() - started), flush=True)


def _rerun_one(out: Path, name: str, key: str) -> dict[str, Any]:
    """One plugins test alone in a new process (stopped as :func:`_run_file`
    stops a hung test): its result, boots and rejections."""
    part = out / "plugins" / "reruns" / ("%s.%s.json" % (name, key))
    part.parent.mkdir(parents=True, exist_ok=True)
    part.unlink(missing_ok=True)
    test_timeout = float(os.environ.get("OS_TEST_TIMEOUT", "180"))
    env = dict(os.environ, OS_TEST_TIMEOUT="%d" % test_timeout)
    cmd = [sys.executable, "-m", "tools.nova_functional", "one", "--mode", "plugins",
           "--out", str(part), "--only", key, name]
    with open(part.with_suffix(".log"), "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
        killed = _watch(proc, part, test_timeout + 60, 0, time.monotonic())
    doc = json.loads(part.read_text()) if part.exists() else {}
    test_id = PACKAGE + name + "." + key
    result = doc.get("tests", {}).get(test_id)
    if result is None:
        result = {"outcome": "error", "seconds": 0.0, "cpu": 0.0, "detail": (
            "killed: still running %d s after it started" % (test_timeout + 60)
            if killed else "the re-run's process ended without a result (rc %s)"
            % proc.returncode)}
    return {"result": result, "boots": doc.get("boots", []),
            "rejections": doc.get("rejections", [])}


def _counts(doc: dict[str, Any]) -> tuple[int, int]:
    tests = doc["tests"].values()
    ran = [t for t in tests if t["outcome"] != "skipped"]
    return sum(1 for t in ran if t["outcome"] == "passed"), len(ran)


def _recorded_counts(entries: dict[str, expected.Entry], keys: Any) -> tuple[int, int]:
    """The stock counts the expectations record for these tests."""
    stock = [entries[k].stock for k in keys if k in entries]
    ran = [s for s in stock if s != "skipped"]
    return sum(1 for s in ran if s == "passed"), len(ran)


def load_docs(out: Path) -> dict[str, dict[str, dict[str, Any]]]:
    """A run directory's results: mode -> file -> the file's JSON."""
    docs: dict[str, dict[str, dict[str, Any]]] = {m: {} for m in MODES}
    for mode in MODES:
        for path in sorted((out / mode).glob("*.json")) if (out / mode).is_dir() else ():
            doc = json.loads(path.read_text())
            docs[mode][doc["file"]] = doc
    return docs


def report(out: Path, expected_path: Optional[Path] = expected.PATH,
           exclude: Optional[list[str]] = None, pattern: str = "") -> int:
    """The differences from the expectations (one line each), one line per
    file and the decisions line; 1 when anything differs (a regression, a
    test fixed, a boot's XML, a stock outcome, a test not run)."""
    docs = load_docs(out)
    known = expected.load(expected_path) if expected_path else expected.Expected()
    if exclude is None and (out / "scope.json").exists():
        scope = json.loads((out / "scope.json").read_text())
        exclude, pattern = scope["exclude"], scope["pattern"]
    lines = expected.differences(known, docs, exclude or [], pattern)
    _write_differences(out, docs, known, lines)
    for name, ran_doc in sorted(docs["plugins"].items()):
        for test, again in sorted(ran_doc.get("reruns", {}).items()):
            print("re-run in a fresh process: %s.%s: %s, then %s%s" % (
                name, expected.test_key(test)[1], _shown(again, "first"),
                _shown(again, "second"), " (first: %s)" % again["first_cause"]
                if again["first_cause"] and again["first"] != "passed" else ""))
    for line in lines:
        print(line)
    if expected_path:
        print("%d differences from %s%s" % (
            len(lines), expected_path.name,
            " (see %s)" % (out / "differences.txt") if lines else ""))
    for name in sorted(set(docs["stock"]) | set(docs["plugins"])):
        parts = []
        for mode in MODES:
            doc = docs[mode].get(name)
            if doc is not None:
                passed, ran = _counts(doc)
                parts.append("%s %d/%d%s" % (mode, passed, ran, "" if doc.get(
                    "complete", True) else " (stopped: %s)" % doc.get("stopped", "")))
            elif mode == "stock" and name in known.tests:
                keys = [expected.test_key(t)[1] for t in docs["plugins"][name]["tests"]]
                parts.append("stock %d/%d (recorded)" % _recorded_counts(
                    known.tests[name], keys))
            else:
                parts.append("%s not run" % mode)
        print("%s: %s" % (name, ", ".join(parts)))
    boots = [b for doc in docs["plugins"].values() for b in doc["boots"]]
    matched = sum(1 for b in boots if b["matched"])
    print("decisions matched %d/%d boots" % (matched, len(boots)))
    if not expected_path:
        return 1 if matched != len(boots) else 0
    return 1 if lines else 0


def _shown(again: dict[str, Any], which: str) -> str:
    """A re-run test's first or second outcome, with its boots whose XML
    differed."""
    xml = again.get(which + "_xml", 0)
    return str(again[which]) + (" (%d boot(s)' XML differ)" % xml if xml else "")


def _write_differences(out: Path, docs: dict[str, dict[str, dict[str, Any]]],
                       known: expected.Expected, lines: list[str]) -> None:
    """``out/differences.txt``: the differences from the expectations, every
    test passing stock (this run's, else recorded) and not with the plugins
    with its cause, every request PluginFitFilter passed no host for, and
    every boot whose XML differs."""
    regressions = []
    for name, doc in sorted(docs["plugins"].items()):
        stock = docs["stock"].get(name)
        for test, result in sorted(doc["tests"].items()):
            key = expected.test_key(test)[1]
            entry = known.entry(name, key)
            if stock is not None:
                passed_stock = stock["tests"].get(test, {}).get("outcome") == "passed"
            else:
                passed_stock = entry is not None and entry.stock == "passed"
            if passed_stock and result["outcome"] != "passed":
                regressions.append("%s %s [%s]: %s" % (
                    test, result["outcome"], entry.cause if entry else "new",
                    cause(result["detail"])))
    text = ["# differences from the expectations: %d" % len(lines), *lines]
    text.append("# tests passing stock, not with the plugins [cause]: %d" % len(regressions))
    text += regressions
    text.append("# requests PluginFitFilter passed no host for (test: host: reasons)")
    text += ["%s %s: %s" % (r["test"], host, "; ".join(reasons))
             for doc in docs["plugins"].values() for r in doc.get("rejections", ())
             for host, reasons in sorted(r["hosts"].items())]
    text.append("# boots whose guest XML differs from the decision")
    text += ["%s %s %s: %s" % (b["test"], b["host"], b["instance"],
                               "; ".join(b["problems"]))
             for doc in docs["plugins"].values() for b in doc["boots"] if not b["matched"]]
    (out / "differences.txt").write_text("\n".join(text) + "\n")


def expect(out: Path, path: Path) -> int:
    """Rewrite the expectations file from a run's results (``out``)."""
    docs = load_docs(out)
    if not docs["stock"] and not docs["plugins"]:
        print("%s: no results to write the expectations from" % out, file=sys.stderr)
        return 2
    old = expected.load(path) if path.exists() else expected.Expected()
    new = expected.updated(old, docs)
    path.write_text(expected.dumps(new, expected.header_of(path)))
    opened = sum(1 for t in new.tests.values() for e in t.values()
                 if expected.OPEN in (e.cause, e.xml))
    print("wrote %s from %s" % (path, out))
    for line in expected.summary(new, new.ci_exclude):
        print(line)
    if opened:
        print("%d differences have no cause yet (%r): name one from [causes] or "
              "add one there and to doc/source/nova-compat.md" % (opened, expected.OPEN))
    return 0


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.nova_functional")
    sub = parser.add_subparsers(dest="command", required=True)
    one = sub.add_parser("one", help="one test file in this process")
    one.add_argument("--mode", choices=MODES, required=True)
    one.add_argument("--out", type=Path, required=True)
    one.add_argument("--pattern", default="")
    one.add_argument("--exclude", action="append", default=[])
    one.add_argument("--only", action="append", default=[],
                     help="only this test, Class.test (repeatable)")
    one.add_argument("file")
    many = sub.add_parser("run", help="test files, each in its own process, "
                          "compared with the expectations")
    many.add_argument("--modes", default=",".join(MODES))
    many.add_argument("--out", type=Path, required=True)
    many.add_argument("--pattern", default="",
                      help="only the tests whose id contains it")
    many.add_argument("-j", "--jobs", type=int, default=1,
                      help="files run at the same time (each its own process)")
    many.add_argument("--ci", action="store_true",
                      help="leave out the tests the expectations' [ci] exclude names, "
                      "and run each test that differs from them once more in a fresh process")
    many.add_argument("--exclude", action="append", default=[],
                      help="leave out FILE[.Class[.test]] (repeatable)")
    many.add_argument("--file-timeout", type=float, default=0,
                      help="stop a file's run after this many seconds (0: never)")
    many.add_argument("--expected", type=Path, default=expected.PATH)
    many.add_argument("files", nargs="*", default=list(FILES))
    rep = sub.add_parser("report", help="a run's directory against the expectations")
    rep.add_argument("--expected", type=Path, default=expected.PATH)
    rep.add_argument("out", type=Path)
    exp = sub.add_parser("expect", help="rewrite the expectations from a run's results")
    exp.add_argument("--expected", type=Path, default=expected.PATH)
    exp.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    try:
        if args.command == "one":
            return run_one(args.file, args.mode, args.out, args.pattern, args.exclude,
                           args.only)
        if args.command == "expect":
            return expect(args.out, args.expected)
        if args.command == "report":
            return report(args.out, args.expected)
        modes = [m for m in args.modes.split(",") if m]
        bad = [m for m in modes if m not in MODES] + [
            f for f in args.files if f not in FILES]
        if bad or not modes:
            print("unknown mode or test file: %s (modes: %s; files: %s)" % (
                ", ".join(bad) or "no mode", ", ".join(MODES), ", ".join(FILES)),
                file=sys.stderr)
            return 2
        exclude = list(args.exclude)
        if args.ci:
            exclude += expected.load(args.expected).ci_exclude
        else:
            expected.load(args.expected)  # refused now, not after the run
        return run(args.files, modes, args.out, args.pattern, args.jobs, exclude,
                   args.file_timeout, args.expected, retry=args.ci)
    except expected.ExpectedError as exc:
        print(exc, file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
