"""The token of ``placement serve`` (:mod:`compute_plugins.placement.token`)."""

from __future__ import annotations

import pytest

from compute_plugins.placement import token as ptoken
from compute_plugins.util import files


@pytest.fixture
def state(tmp_path):
    ptoken.ensure(ptoken.path_for(str(tmp_path)))
    return str(tmp_path)


def test_ensure_writes_a_private_random_token_once(tmp_path):
    path = ptoken.path_for(str(tmp_path / "new"))
    first = ptoken.ensure(path)
    assert (tmp_path / "new" / "placement.token").stat().st_mode & 0o777 == 0o600
    assert ptoken.ensure(path) == first != ptoken.ensure(str(tmp_path / "other"))


@pytest.mark.parametrize("url", ["http://127.0.0.1:8778", "http://localhost:1/",
                                 "http://[::1]:8778", "http://127.0.0.2"])
def test_a_loopback_url_gets_the_state_directory_s_token(state, url):
    assert ptoken.for_url(url, state) == ptoken.read(ptoken.path_for(state))


@pytest.mark.parametrize("url", ["http://placement.example:8778",
                                 "http://10.0.0.1", "http://127.0.0.1.example"])
def test_any_other_url_gets_admin(state, url):
    assert ptoken.for_url(url, state) == "admin"


def test_no_token_file_gets_admin(tmp_path):
    assert ptoken.for_url("http://127.0.0.1:8778", str(tmp_path)) == "admin"


def test_a_symlink_as_token_file_is_refused(tmp_path):
    (tmp_path / "elsewhere").write_text("stolen\n")
    (tmp_path / "placement.token").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(files.UnreadableFile, match="symbolic link"):
        ptoken.ensure(ptoken.path_for(str(tmp_path)))
    with pytest.raises(files.UnreadableFile, match="symbolic link"):
        ptoken.for_url("http://127.0.0.1:8778", str(tmp_path))
