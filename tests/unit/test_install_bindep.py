"""``tools/install-bindep.sh``: which Debian packages of ``bindep.txt`` the
set-up installs. ``make run`` installs what the project needs to run (no
database servers: a demo must not start a system PostgreSQL and MariaDB),
``make test`` (``install-bindep.sh test``) the test profile too.

NOTE: ``dpkg-query`` and ``apt-get`` are stand-ins on PATH (the real ones
would change this machine): every package is missing, and apt-get writes
what it was asked to install.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _bindep() -> dict[str, set[str]]:
    """Each package of bindep.txt and the profiles its selectors name."""
    found = {}
    for line in (ROOT / "bindep.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            m = re.fullmatch(r"(\S+)(?:\s+\[([^\]]*)\])?\s*", line)
            assert m, line
            found[m[1]] = {s for s in (m[2] or "").split() if not s.startswith("platform:")}
    return found


@pytest.fixture
def fake_apt(tmp_path: Path) -> tuple[dict[str, str], Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    asked = tmp_path / "installed"
    (bin_dir / "dpkg-query").write_text("#!/bin/sh\nexit 1\n")
    # NOTE: the words after "install" that are no options: the packages.
    (bin_dir / "apt-get").write_text(
        '#!/bin/sh\nafter=0\nfor a in "$@"; do\n'
        '  if [ $after = 1 ]; then case "$a" in -*) ;; *) echo "$a" >> %s;; esac; fi\n'
        '  [ "$a" = install ] && after=1\ndone\nexit 0\n' % asked)
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    env = {**os.environ, "PATH": "%s:%s" % (bin_dir, os.environ["PATH"])}
    return env, asked


def _install(env: dict[str, str], asked: Path, *profiles: str) -> set[str]:
    done = subprocess.run([str(ROOT / "tools" / "install-bindep.sh"), *profiles],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    names = set(asked.read_text().split()) if asked.exists() else set()
    asked.unlink(missing_ok=True)
    return names


def test_make_run_installs_no_test_package(fake_apt):
    packages = _bindep()
    runtime = {name for name, profiles in packages.items() if not profiles}
    assert {"postgresql", "mariadb-server"} <= set(packages) - runtime
    assert _install(*fake_apt) == runtime


def test_make_test_installs_the_test_profile_too(fake_apt):
    assert _install(*fake_apt, "test") == set(_bindep())
