"""The test session's own database servers (:mod:`tests.servers`): where
their binaries are missing, the tests that need them fail, naming the
Debian package to install, and never skip."""

from __future__ import annotations

import pytest

from tests import servers


@pytest.fixture
def nothing_installed(tmp_path, monkeypatch):
    """A machine without the server packages: empty PATH and system dirs."""
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(servers, "SYSTEM_DIRS", (str(tmp_path),))
    monkeypatch.setattr(servers, "PG_CTL_GLOB", str(tmp_path / "postgresql/*/bin/pg_ctl"))


@pytest.mark.parametrize(("server", "message"), [
    (servers.postgresql,
     "the PostgreSQL server is not installed (no pg_ctl on PATH or in %s): install "
     "the Debian package postgresql, listed in bindep.txt (tools/install-bindep.sh, "
     "run by `make test`, installs it)"),
    (servers.mariadb,
     "the MariaDB server is not installed (no mariadbd or mysqld on PATH or in %s): "
     "install the Debian package mariadb-server, listed in bindep.txt "
     "(tools/install-bindep.sh, run by `make test`, installs it)"),
])
def test_a_missing_server_fails_naming_its_package(nothing_installed, tmp_path, server,
                                                  message):
    where = tmp_path / "postgresql/*/bin" if server is servers.postgresql else tmp_path
    with pytest.raises(pytest.fail.Exception) as info:
        with server():
            pass
    assert str(info.value) == message % where
