"""Every documented command runs as written and prints what the docs show.

The runnable examples of the README and of ``doc/source`` are the fenced
blocks tagged ``console``: each line starting with ``$ `` is a command (a
line ending with ``\\`` continues on the next), the lines after it up to the
next command are what it prints. Each page's commands run, in order, in one
``bash`` session (variables and ``cd`` carry over, as in a reader's
terminal), in a scratch copy of the repository's tree whose files are
links, so the commands see the paths they name relative to the repository
root while whatever they write stays in the scratch tree.
``XDG_STATE_HOME`` points into it too, and the checkout's code wins imports
(``PYTHONPATH``), as in the other tests.

What is compared:

- a command whose output the page shows must print it: its stdout, or its
  stderr and stdout together (the docs show an error line where the reader
  sees it). ``...`` on a line of its own (possibly followed by a note in
  parentheses) stands for any number of lines,
  ``...`` inside a line for any text (uuids, timings);
- a command whose output the page does not show must exit 0, unless the
  next command is ``echo $?`` (which then shows the status);
- a command ending with ``&`` runs in the background, its output in a file
  of its own; when the page shows its output, the test waits (up to 60 s)
  for it before the next command, as a reader waits for the line. Whatever
  runs in the background is stopped when the page is done.

Blocks tagged otherwise (``sh``, ``ini``, ``text``...) are not run: they
install software, change a real host or need a real cloud.
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted(
    [ROOT / "README.md", *ROOT.glob("doc/source/**/*.md")],
    key=lambda p: str(p.relative_to(ROOT)),
)
FENCE = re.compile(r"^(?P<indent> *)```(?P<info>[^`]*)$")
MARK = "@@docs-test@@"
#: A line of its own standing for any number of lines: ``...``, possibly
#: followed by a note in parentheses (``...   (the other hosts' trees)``).
ELLIPSIS_LINE = re.compile(r"\s*\.\.\.(\s+\(.*\))?\s*")


@dataclass
class Command:
    """One ``$ `` command of a page and the output the page shows for it."""

    page: str
    line: int
    text: str
    expected: list[str] = field(default_factory=list)

    @property
    def background(self) -> bool:
        return self.text.rstrip().endswith("&") and not self.text.rstrip().endswith("&&")

    def where(self) -> str:
        return "%s:%d: $ %s" % (self.page, self.line, self.text)


def console_blocks(path: Path) -> list[tuple[int, list[str]]]:
    """The ``console`` fenced blocks of a Markdown page: (first line, lines)."""
    blocks: list[tuple[int, list[str]]] = []
    lines = path.read_text().split("\n")
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, info = len(m["indent"]), m["info"].strip()
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not re.match(r"^ {0,%d}```\s*$" % indent, lines[j]):
            body.append(lines[j][indent:] if lines[j][:indent].strip() == "" else lines[j])
            j += 1
        if info.split()[:1] == ["console"]:
            blocks.append((i + 2, body))
        i = j + 1
    return blocks


def page_commands(path: Path) -> list[Command]:
    """Every command of a page's ``console`` blocks, in order."""
    name = str(path.relative_to(ROOT))
    commands: list[Command] = []
    for first, body in console_blocks(path):
        k = 0
        current: Command | None = None
        while k < len(body):
            line = body[k]
            if line.startswith("$ "):
                text, start = line[2:], k
                while text.endswith("\\") and k + 1 < len(body):
                    k += 1
                    text += "\n" + body[k]
                current = Command(name, first + start, text)
                commands.append(current)
            elif current is not None:
                current.expected.append(line)
            k += 1
    for c in commands:
        while c.expected and not c.expected[-1].strip():
            c.expected.pop()
    return commands


def matches(expected: list[str], actual: str) -> bool:
    """Whether ``actual`` is what ``expected`` shows (``...`` placeholders)."""
    parts: list[str] = []
    for line in expected:
        if ELLIPSIS_LINE.fullmatch(line):
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            pieces = [re.escape(p) for p in line.rstrip().split("...")]
            parts.append("[^\\n]*?".join(pieces) + r"[ \t]*\n")
    pattern = "".join(parts)
    text = "\n".join(x.rstrip() for x in actual.strip("\n").split("\n")) + "\n"
    return re.fullmatch(pattern, text) is not None


def script(commands: list[Command], logs: Path) -> str:
    """The bash script that runs a page's commands, marking each's output."""
    out = ["set +e", "__rc=0"]
    for i, c in enumerate(commands):
        out.append("printf '\\n%s start %d\\n'; (exit $__rc)" % (MARK, i))
        if c.background:
            body = c.text.rstrip()[:-1]
            log = logs / ("bg%d.log" % i)
            # A simple command replaces its subshell (exec), so that the job
            # is the command itself, as in an interactive shell (kill %1).
            simple = not re.search(r"[;&|]", body)
            out.append("{ %s%s\n} > %s 2>&1 &" % ("exec " if simple else "", body, log))
            out.append("__rc=0")
            if c.expected:
                # Wait for the line(s) the page shows, as the reader does.
                n = len([x for x in c.expected if not ELLIPSIS_LINE.fullmatch(x)])
                out.append(
                    "for __i in $(seq 600); do [ $(wc -l < %s) -ge %d ] && break; sleep 0.1; done"
                    % (log, n)
                )
        else:
            out.append("{ %s\n} 2> %s" % (c.text, logs / ("err%d.log" % i)))
            out.append("__rc=$?")
        out.append("printf '\\n%s end %d %%d\\n' $__rc" % (MARK, i))
    # What still runs in the background is stopped by run_page (the whole
    # process group), not waited for.
    return "\n".join(out) + "\n"


def split_output(stdout: str, count: int) -> dict[int, tuple[str, int]]:
    """Each command's stdout and exit status, from the marked stream."""
    found: dict[int, tuple[str, int]] = {}
    pattern = re.compile(
        r"%s start (\d+)\n(.*?)\n?%s end \1 (\d+)\n" % (MARK, MARK), re.DOTALL
    )
    for m in pattern.finditer(stdout):
        found[int(m[1])] = (m[2], int(m[3]))
    return found


SKIP_DIRS = {".git", ".venv", ".tox", "build", "__pycache__", ".mypy_cache",
             ".ruff_cache", ".pytest_cache", ".hypothesis", "e2e", "fpga-target"}


def scratch_dir(tmp_path: Path) -> Path:
    """The repository's tree, its directories real and its files links.

    The commands find every file they name where the docs say, relative to
    the repository root, and whatever they write (state directories,
    databases) lands in the scratch tree, never in the checkout.
    """
    work = tmp_path / "repo"
    for top, dirs, files in os.walk(ROOT):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.endswith(".egg-info")]
        here = work / Path(top).relative_to(ROOT)
        here.mkdir(parents=True, exist_ok=True)
        for name in files:
            (here / name).symlink_to(Path(top) / name)
    return work


def stop_group(proc: subprocess.Popen[str]) -> None:
    """Stop the page's shell and everything it started (its process group)."""
    for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)
    proc.wait(timeout=5)


def run_page(path: Path, tmp_path: Path) -> list[str]:
    """Run a page's commands; the list of mismatches (empty: all as shown)."""
    commands = page_commands(path)
    logs = tmp_path / "logs"
    logs.mkdir()
    work = scratch_dir(tmp_path)
    env = dict(os.environ)
    env.update(
        PATH="%s:%s" % (Path(sys.executable).parent, env.get("PATH", "/usr/bin:/bin")),
        PYTHONPATH=str(ROOT),
        XDG_STATE_HOME=str(tmp_path / "state"),
    )
    # NOTE: the commands' bytecode goes where the suite's subprocesses
    # keep theirs (tests/conftest.py), never into the checkout.
    env.setdefault("PYTHONPYCACHEPREFIX", str(tmp_path / "pycache"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    proc = subprocess.Popen(
        ["bash", "-c", script(commands, logs)],
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group: stopped as one below
    )
    try:
        stdout, _ = proc.communicate(timeout=240)
    finally:
        stop_group(proc)
    results = split_output(stdout, len(commands))
    problems: list[str] = []
    for i, c in enumerate(commands):
        if i not in results:
            problems.append(
                "%s\n  did not run to the end; output:\n%s" % (c.where(), stdout[-3000:])
            )
            break
        out, rc = results[i]
        if c.background:
            out = (logs / ("bg%d.log" % i)).read_text()
            err = ""
        else:
            err = (logs / ("err%d.log" % i)).read_text()
        if c.expected:
            candidates = [out, err + out, out + err]
            if not any(matches(c.expected, x) for x in candidates):
                problems.append(
                    "%s\n  the page shows:\n%s\n  it printed (stderr, then stdout):\n%s%s"
                    % (
                        c.where(),
                        textwrap.indent("\n".join(c.expected), "    "),
                        textwrap.indent(err, "    "),
                        textwrap.indent(out, "    "),
                    )
                )
        elif rc != 0 and not (i + 1 < len(commands) and commands[i + 1].text.strip() == "echo $?"):
            problems.append(
                "%s\n  exited %d, and the page shows no output or status; it printed:\n%s%s"
                % (c.where(), rc, textwrap.indent(err, "    "), textwrap.indent(out, "    "))
            )
    return problems


RUNNABLE = [p for p in PAGES if page_commands(p)]


def test_the_docs_have_runnable_examples() -> None:
    """The pages that show commands mark them runnable (``console``)."""
    names = {str(p.relative_to(ROOT)) for p in RUNNABLE}
    for page in ("README.md", "doc/source/usage.md", "doc/source/end-to-end.md",
                 "doc/source/demo.md", "doc/source/plugin-guide.md"):
        assert page in names, "%s has no console block" % page


def test_no_unmarked_shell_sessions() -> None:
    """A block showing ``$ `` commands is a ``console`` block, so it is run."""
    unmarked = []
    for path in PAGES:
        lines = path.read_text().split("\n")
        inside, info, start = False, "", 0
        for n, line in enumerate(lines, 1):
            m = FENCE.match(line)
            if m and not inside:
                inside, info, start = True, m["info"].strip(), n
            elif inside and line.strip() == "```":
                inside = False
            elif inside and line.lstrip().startswith("$ ") and not info.startswith("console"):
                unmarked.append("%s:%d (```%s)" % (path.relative_to(ROOT), start, info))
                inside = False
    assert not unmarked, "blocks with $ commands not tagged console: %s" % unmarked


@pytest.mark.parametrize("page", RUNNABLE, ids=lambda p: str(p.relative_to(ROOT)))
def test_documented_commands_work_as_written(page: Path, tmp_path: Path) -> None:
    """Each page's commands run from the repository root as written."""
    if shutil.which("bash") is None:
        pytest.fail("bash is needed to run the documented commands")
    problems = run_page(page, tmp_path)
    assert not problems, "\n\n".join(problems)


#: A Markdown link or image: ``[text](target)`` (``target`` without spaces).
LINK = re.compile(r"!?\[[^\]]*\]\((?P<target>[^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(?P<title>.+?)\s*#*\s*$")
#: An explicit MyST target, ``(name)=`` on a line of its own.
MYST_TARGET = re.compile(r"^\((?P<name>[^)]+)\)=\s*$")


def _prose(path: Path) -> list[tuple[int, str]]:
    """The lines of a Markdown page outside its fenced blocks: (number, line)."""
    out, inside = [], False
    for n, line in enumerate(path.read_text().split("\n"), 1):
        if FENCE.match(line) and (not inside or line.strip() == "```"):
            inside = not inside
            continue
        if not inside:
            out.append((n, line))
    return out


def _anchors(path: Path) -> set[str]:
    """The anchors of a Markdown page's headings, as GitHub and MyST
    (``myst_heading_anchors``) make them, and its explicit targets."""
    found = set()
    for _, line in _prose(path):
        if m := HEADING.match(line):
            title = re.sub(r"[^\w\- ]", "", m["title"].strip().lower())
            found.add(title.replace(" ", "-"))
        elif m := MYST_TARGET.match(line):
            found.add(m["name"])
    return found


def test_relative_links_resolve() -> None:
    """Every relative link of the README and of ``doc/source`` names a file
    of the repository (relative to the page, as GitHub and Sphinx read it)
    and, with ``#anchor``, a heading of that page."""
    broken = []
    for page in PAGES:
        for n, line in _prose(page):
            for m in LINK.finditer(line):
                target = m["target"]
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, mailto:...
                    continue
                path_part, _, anchor = target.partition("#")
                linked = (page.parent / path_part).resolve() if path_part else page
                where = "%s:%d: %s" % (page.relative_to(ROOT), n, target)
                if not linked.exists():
                    broken.append(where + " (no such file)")
                elif not linked.is_relative_to(ROOT):
                    broken.append(where + " (outside the repository)")
                elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                    broken.append(where + " (no such heading in %s)" % linked.name)
    assert not broken, "broken links:\n" + "\n".join(broken)


def _known_options() -> dict[str, set[str]]:
    """Every option this project registers, by group: the config
    generator's namespaces (``compute_plugins``, ``oslo.log``), the nova
    adapters' ``[compute_plugins] config_file`` (nova.conf) and the example
    plugin's ``[fpga]``."""
    from oslo_config import generator

    from compute_plugins.nova.conf import GROUP, NOVA_OPTS

    known: dict[str, set[str]] = {}
    for _, groups in generator._list_opts(["compute_plugins", "oslo.log"]):
        for group, opts in groups:
            name = getattr(group, "name", group) or "DEFAULT"
            known.setdefault(name, set()).update(o.dest for o in opts)
    known[GROUP].update(o.dest for o in NOVA_OPTS)
    sys.path.insert(0, str(ROOT / "examples" / "fpga"))
    try:
        fpga_view = importlib.import_module("compute_plugins_fpga.view")
    finally:
        sys.path.remove(str(ROOT / "examples" / "fpga"))
    known[fpga_view.GROUP] = {o.dest for o in fpga_view.OPTS}
    return known


def _ini_blocks() -> list[tuple[str, list[tuple[int, str]]]]:
    """The ``ini`` fenced blocks of the pages: (where, [(line number, line)])."""
    blocks = []
    for page in PAGES:
        inside: str | None = None
        start = 0
        lines: list[tuple[int, str]] = []
        for n, line in enumerate(page.read_text().split("\n"), 1):
            m = FENCE.match(line)
            if m and inside is None:
                inside, start, lines = m["info"].strip(), n, []
            elif m and line.strip() == "```":
                if inside == "ini":
                    blocks.append(("%s:%d" % (page.relative_to(ROOT), start), lines))
                inside = None
            elif inside == "ini":
                lines.append((n, line.strip()))
    return blocks


def test_config_examples_name_real_options_with_comments_on_their_own_lines() -> None:
    """Every option of an ``ini`` block in one of this project's groups is
    an option it registers, and no value carries an inline comment
    (oslo.config keeps ``value  # comment`` as the value)."""
    known = _known_options()
    problems = []
    blocks = _ini_blocks()
    assert blocks, "no ini block found"
    for where, lines in blocks:
        group = "DEFAULT"
        for n, line in lines:
            if not line or line.startswith(("#", ";")):
                continue
            if m := re.fullmatch(r"\[(?P<group>[^\]]+)\]", line):
                group = m["group"]
                continue
            name, sep, value = line.partition("=")
            if not sep:
                problems.append("%s: line %d is no option: %r" % (where, n, line))
                continue
            if re.search(r"\s[#;]", value):
                problems.append("%s: line %d: inline comment in the value of %s"
                                % (where, n, name.strip()))
            if group in known and name.strip() not in known[group]:
                problems.append("%s: line %d: [%s] %s is no option of compute-plugins"
                                % (where, n, group, name.strip()))
    assert not problems, "\n".join(problems)
