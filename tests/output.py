"""Reading the commands' human output back in tests."""

from __future__ import annotations


def unwrap(stdout: str) -> list[str]:
    """The lines of the text output, each wrapped line (its continuation
    lines four columns further in than it: :func:`compute_plugins.util.text.
    wrap`) joined back into one. Lines without an indent are left alone
    (what follows them four columns in is theirs, not a continuation):
    :func:`flat` reads a one-line message back."""
    lines: list[tuple[list[str], str]] = []
    for line in stdout.splitlines():
        if lines and lines[-1][1] and line.startswith(lines[-1][1] + "    "):
            lines[-1][0].append(line[len(lines[-1][1]) + 4:])
        else:
            lines.append(([line], line[:len(line) - len(line.lstrip(" "))]))
    return [" ".join(parts) for parts, _ in lines]


def flat(text: str) -> str:
    """``text`` with every run of white space, line breaks included, one
    space: a message as one line, however it was wrapped."""
    return " ".join(text.split())


def records(stdout: str) -> list[str]:
    """The records of an output whose every record starts at column 0
    (``conformance``: one per check and plugin): each line with the lines
    four columns in that follow it (its wrapped rest) joined back."""
    joined: list[str] = []
    for line in stdout.splitlines():
        if joined and line.startswith("    "):
            joined[-1] += " " + line[4:]
        else:
            joined.append(line)
    return joined
