"""The shared input and state helpers: files, JSON, text (real files)."""

from __future__ import annotations

import os

import pytest

from compute_plugins.util import files, jsonload
from compute_plugins.util.text import ascii_int, printable

# ------------------------------------------------------------------- files


def test_atomic_write_replaces_a_symlink_and_never_follows_it(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "f").symlink_to(victim)
    fd = files.open_dir(str(tmp_path / "d"))
    try:
        files.write_atomic(fd, "f", "new", mode=0o600)
    finally:
        os.close(fd)
    assert victim.read_text() == "precious"
    assert not (tmp_path / "d" / "f").is_symlink()
    assert (tmp_path / "d" / "f").read_text() == "new"
    assert (tmp_path / "d" / "f").stat().st_mode & 0o777 == 0o600
    assert os.listdir(tmp_path / "d") == ["f"]


def test_a_failed_atomic_write_leaves_the_old_file_and_no_temporary(tmp_path):
    (tmp_path / "f").write_text("old")
    fd = files.open_dir(str(tmp_path))
    try:
        with pytest.raises(RuntimeError):
            with files.atomic_file(fd, "f") as out:
                out.write(b"half")
                raise RuntimeError("crash in the middle")
    finally:
        os.close(fd)
    assert (tmp_path / "f").read_text() == "old"
    assert os.listdir(tmp_path) == ["f"]


def test_open_dir_without_follow_refuses_a_symlink(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(OSError):
        files.open_dir(str(tmp_path / "link"), follow=False)


@pytest.mark.parametrize("kind, reason", [
    ("fifo", "a FIFO, not a regular file"),
    ("dir", "a directory, not a regular file"),
    ("big", "larger than 10 bytes"),
    ("missing", "No such file or directory"),
])
def test_read_refuses_what_is_not_a_small_regular_file(tmp_path, kind, reason):
    path = tmp_path / "x"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dir":
        path.mkdir()
    elif kind == "big":
        path.write_bytes(b"x" * 11)
    with pytest.raises(files.UnreadableFile) as err:
        files.read_bytes(str(path), max_bytes=10)
    assert str(err.value) == "%s: cannot read: %s" % (path, reason)


def test_read_text_names_the_first_byte_that_is_not_utf8(tmp_path):
    path = tmp_path / "x"
    path.write_bytes(b"ok\xc3(")
    with pytest.raises(files.UnreadableFile, match=r"not UTF-8 text \(byte 0xc3 at offset 2\)"):
        files.read_text(str(path))


def test_a_private_file_is_created_0600_and_never_loosened(tmp_path):
    path = tmp_path / "db"
    files.create_private_file(str(path))
    assert path.stat().st_mode & 0o777 == 0o600
    path.chmod(0o640)
    files.create_private_file(str(path))  # exists: left alone
    assert path.stat().st_mode & 0o777 == 0o640
    files.tighten_private_file(str(path))
    assert path.stat().st_mode & 0o777 == 0o600
    path.chmod(0o400)
    files.tighten_private_file(str(path))
    assert path.stat().st_mode & 0o777 == 0o400


# -------------------------------------------------------------------- json


def test_depth_32_is_read_33_is_refused():
    doc = jsonload.loads("[" * 32 + "]" * 32)
    for _ in range(31):
        (doc,) = doc
    assert doc == []
    with pytest.raises(jsonload.JSONInputError, match="nested more than 32 deep"):
        jsonload.loads("[" * 33 + "]" * 33)


def test_brackets_in_strings_do_not_count():
    text = '{"a": "%s", "b": "\\"[[["}' % ("[" * 100)
    assert jsonload.loads(text) == {"a": "[" * 100, "b": '"[[['}


def test_a_megabyte_of_escaped_quotes_is_read():
    """Many escaped quotes and backslashes cost no more than other
    characters."""
    text = '{"a": "%s", "b": ["\\\\", "[\\"]"]}' % ('\\"' * 500_000)
    assert jsonload.loads(text) == {"a": '"' * 500_000, "b": ["\\", '["]']}


@pytest.mark.parametrize("text", [
    '"' + '\\"' * 500_000,                 # a string never closed
    '{"a": ["' + 'x\\"[' * 250_000,        # with brackets in it
    '["\\\\' + '\\"' * 500_000 + ']',      # an escaped backslash first
])
def test_a_megabyte_of_unclosed_escaped_quotes_is_refused_promptly(text):
    """A truncated document: each escaped quote restarted the depth check's
    scan of the rest of the text (quadratic: 1 MB took about 50 minutes).
    No timing here: the test simply completes."""
    with pytest.raises(jsonload.JSONInputError):
        jsonload.loads(text)


DEEP = "[" * 33 + "]" * 33


@pytest.mark.parametrize("text", [
    '{"a": "\\\\", "b": %s}' % DEEP,           # an escaped backslash before
    '{"a": "\\"]]]]", "b": %s}' % DEEP,        # an escaped quote and brackets
    '{"a": "]]]]\\\\\\"", "b": %s}' % DEEP,    # three backslashes and a quote
    '["]", "", "}}", %s]' % ("[" * 32 + "]" * 32),
])
def test_depth_is_counted_outside_strings_only(text):
    with pytest.raises(jsonload.JSONInputError, match="nested more than 32 deep"):
        jsonload.loads(text)


@pytest.mark.parametrize("text", ['{"a": NaN}', "[Infinity]", "[-Infinity]"])
def test_nan_and_infinity_are_not_json(text):
    with pytest.raises(jsonload.JSONInputError, match="is not a JSON number"):
        jsonload.loads(text)


def test_bytes_that_are_not_utf8():
    with pytest.raises(jsonload.JSONInputError, match="not UTF-8 text"):
        jsonload.loads(b'{"a": "\xff"}')


# -------------------------------------------------------------------- text


def test_printable_escapes_controls_format_characters_and_surrogates():
    assert printable("a\nb\tc\x1b[0m\u202ed\ud800 \u00e9\U0001f600") == (
        "a\\nb\\tc\\x1b[0m\\u202ed\\ud800 \u00e9\U0001f600")
    assert printable("plain") == "plain"


@pytest.mark.parametrize("text, base, value", [
    ("12", 10, 12), (" 7 ", 10, 7), ("0x1f", 0, 31), ("010", 0, 10),
    ("0x8086", 16, 0x8086), ("8086", 16, 0x8086), ("-1", 10, -1),
])
def test_ascii_int(text, base, value):
    assert ascii_int(text, base) == value


@pytest.mark.parametrize("text", ["\u0663", "\uff11\uff10", "1_0", "", "0x",
                                  "1" * 50, "1.0", "\u00b2"])
def test_ascii_int_refuses_what_int_would_take_or_not(text):
    with pytest.raises(ValueError):
        ascii_int(text)


# ------------------------------------------------- symlinks planted in state


def test_a_private_file_refuses_a_symlink_planted_at_its_path(tmp_path):
    """A database the project creates (``host_state.sqlite``, the embedded
    Placement's) is never opened through a symlink: SQLite would write its
    tables into whatever the link points at."""
    outside = tmp_path / "outside"
    outside.write_bytes(b"")
    outside.chmod(0o644)
    link = tmp_path / "state.sqlite"
    link.symlink_to(outside)
    with pytest.raises(OSError, match="symbolic link"):
        files.create_private_file(str(link))
    files.tighten_private_file(str(link))
    assert outside.read_bytes() == b""
    assert outside.stat().st_mode & 0o777 == 0o644
    assert link.is_symlink()


def test_the_host_state_store_refuses_a_symlink_at_its_file(tmp_path):
    from compute_plugins.hoststate.errors import StoreUnavailable
    from compute_plugins.hoststate.store import HostStateStore

    outside = tmp_path / "outside"
    outside.write_bytes(b"")
    link = tmp_path / "host_state.sqlite"
    link.symlink_to(outside)
    with pytest.raises(StoreUnavailable, match="symbolic link"):
        HostStateStore("sqlite:///%s" % link)
    assert outside.read_bytes() == b""
    assert not (tmp_path / "outside-wal").exists()


def test_the_demo_s_instance_list_never_writes_through_a_symlink(tmp_path):
    import types

    from compute_plugins.demo import run

    outside = tmp_path / "outside"
    outside.write_text("untouched")
    state = tmp_path / "state"
    state.mkdir()
    for name in (run.INSTANCES_FILE, run.INSTANCES_FILE + ".tmp"):
        (state / name).symlink_to(outside)
    run._save_instances(types.SimpleNamespace(state_dir=str(state)), ["c1"])
    assert outside.read_text() == "untouched"
    written = state / run.INSTANCES_FILE
    assert not written.is_symlink()
    assert written.stat().st_mode & 0o777 == 0o600
    assert '"c1"' in written.read_text()


def test_a_symlink_planted_at_a_checkpoint_is_replaced_not_written_through(tmp_path):
    from compute_plugins.tree import checkpoint

    outside = tmp_path / "outside"
    outside.write_text("untouched")
    target = checkpoint.path_for(str(tmp_path / "ckpt"), "node1")
    os.makedirs(os.path.dirname(target))
    os.symlink(outside, target)
    assert checkpoint.save(str(tmp_path / "ckpt"), "node1", "{}\n")
    assert outside.read_text() == "untouched"
    assert not os.path.islink(target)
    assert os.stat(target).st_mode & 0o777 == 0o600
