"""Reading inputs and writing state without being tricked by the file system.

One helper per rule, used by every path that reads or writes a file:

* :func:`read_text`: only a regular file is read (a FIFO would block the
  agent forever, a device or ``/dev/zero`` would never end), at most
  :data:`MAX_READ_BYTES`, as UTF-8; the reason it cannot is a one-line
  :class:`UnreadableFile`;
* :func:`write_atomic` / :func:`atomic_file`: a file is written under a
  temporary name in its directory and renamed over the target, so a reader
  sees the old file or the new one, never a torn one, and a symlink planted
  at the target (or at the temporary name) is replaced, never followed;
* :func:`open_dir`: a directory as a file descriptor, optionally refusing a
  symlink, so that the writes above stay inside it;
* :func:`ensure_private_dir` / :func:`create_private_file` /
  :func:`tighten_private_file`: the agent's state (checkpoints, the embedded
  Placement's database) is created readable by its owner only (0700
  directories, 0600 files).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator
from typing import IO, Optional

from oslo_log import log as logging

from compute_plugins import exception
from compute_plugins.util.text import printable

LOG = logging.getLogger(__name__)

#: Largest input file read (a capabilities document of a 448-CPU host is
#: under 1 MiB; a checkpoint of a host with 2048 VFs a few MiB).
MAX_READ_BYTES = 64 * 1024 * 1024

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600


class UnreadableFile(exception.InputError):
    """A file cannot be used as input.

    :param path: the file.
    :param reason: why, in words (``not a regular file (a FIFO)``...).
    """

    def __init__(self, path: str, reason: str) -> None:
        self.path = str(path)
        self.reason = reason
        super().__init__("%s: %s" % (self.path, reason))


_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
)


def _kind(mode: int) -> str:
    for test, name in _KINDS:
        if test(mode):
            return name
    return "not a regular file"


def read_bytes(path: str, max_bytes: int = MAX_READ_BYTES) -> bytes:
    """The content of the regular file ``path`` (symlinks are followed).

    The file is opened non-blocking and checked with ``fstat`` before any
    read, so a FIFO is never waited on and a device never read.

    :raises UnreadableFile: missing, not a regular file, unreadable, or
        larger than ``max_bytes``.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        raise UnreadableFile(path, "cannot read: %s" % (err.strerror or err)) from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise UnreadableFile(path, "cannot read: %s, not a regular file"
                                 % _kind(mode))
        chunks = []
        size = 0
        while True:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > max_bytes:
                raise UnreadableFile(path, "cannot read: larger than %d bytes"
                                     % max_bytes)
        return b"".join(chunks)
    except OSError as err:
        raise UnreadableFile(path, "cannot read: %s" % (err.strerror or err)) from None
    finally:
        os.close(fd)


def decode_utf8(data: bytes, path: str) -> str:
    """``data`` as UTF-8; :class:`UnreadableFile` naming the first bad byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise UnreadableFile(
            path, "cannot read: not UTF-8 text (byte 0x%02x at offset %d)"
            % (data[err.start], err.start)) from None


def read_text(path: str, max_bytes: int = MAX_READ_BYTES) -> str:
    """:func:`read_bytes`, decoded as UTF-8 (see :func:`decode_utf8`)."""
    return decode_utf8(read_bytes(path, max_bytes), path)


def open_dir(path: str, dir_fd: Optional[int] = None, follow: bool = True) -> int:
    """A file descriptor of the directory ``path`` (close it).

    :param dir_fd: ``path`` is relative to this directory.
    :param follow: when False, a symlink at ``path`` is refused (``ELOOP``).
    :raises OSError: not a directory, a refused symlink, missing.
    """
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
    if not follow:
        flags |= os.O_NOFOLLOW
    return os.open(path, flags, dir_fd=dir_fd)


def _fsync_dir(dir_fd: int) -> None:
    # NOTE: makes the rename durable; some file systems refuse it (EINVAL).
    with contextlib.suppress(OSError):
        os.fsync(dir_fd)


@contextlib.contextmanager
def atomic_file(dir_fd: int, name: str, mode: int = 0o666) -> Iterator[IO[bytes]]:
    """Write ``name`` in the directory ``dir_fd`` all at once.

    Yields a binary file open on a new temporary file of that directory
    (``O_EXCL | O_NOFOLLOW``: a planted file or symlink there makes it fail,
    never write elsewhere); when the block ends it is flushed, fsynced and
    renamed over ``name`` (a rename replaces a symlink, never follows it).
    If the block raises, the temporary file is removed and ``name`` is left
    as it was.

    :param mode: permissions of the new file (less the umask).
    """
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise ValueError("not a file name: %r" % (name,))
    tmp = ".%s.%s.tmp" % (name[:100], secrets.token_hex(6))
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                 | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    done = False
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        done = True
        _fsync_dir(dir_fd)
    finally:
        if not done:
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)


def write_atomic(dir_fd: int, name: str, data: bytes | str, mode: int = 0o666) -> None:
    """Write ``data`` (str as UTF-8) to ``name`` with :func:`atomic_file`."""
    payload = data.encode("utf-8") if isinstance(data, str) else data
    with atomic_file(dir_fd, name, mode) as handle:
        handle.write(payload)


def remove(dir_fd: int, name: str) -> bool:
    """Remove ``name`` from the directory ``dir_fd`` without following it.

    A directory is removed with everything in it (``shutil.rmtree`` on a
    descriptor: symlinks inside are removed, not followed), anything else
    (a file, a symlink, a FIFO) is unlinked.

    :returns: whether something was removed.
    """
    import shutil

    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    if stat.S_ISDIR(info.st_mode):
        shutil.rmtree(name, dir_fd=dir_fd)
    else:
        os.unlink(name, dir_fd=dir_fd)
    return True


def ensure_private_dir(path: str) -> None:
    """Create the directory ``path`` (and its parents) if missing, mode 0700.

    NOTE: an existing directory is left as it is: it may be shared
    (``[placement] embedded_state_dir = /var/lib/x``) and its mode is its
    owner's choice. Parents that are created get the default mode
    (``~/.local/state`` is the XDG base directory, not ours).

    :raises OSError: it cannot be created, or is not a directory.
    """
    os.makedirs(path, mode=PRIVATE_DIR_MODE, exist_ok=True)


def create_private_file(path: str) -> None:
    """Create the file ``path`` empty, mode 0600, unless it exists.

    Used for the SQLite databases (the host-state store's, the embedded
    Placement's) before SQLite opens them (SQLite gives its journal the
    database's mode). An existing file is left as it is here (see
    :func:`tighten_private_file`).

    :raises OSError: it cannot be created, or exists and is not a regular
        file: a FIFO would block SQLite, and a symbolic link (planted in the
        state directory) would have SQLite write its tables wherever it
        points. A symlinked directory above ``path`` is the operator's
        choice and is followed.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                     | os.O_CLOEXEC, PRIVATE_FILE_MODE)
    except FileExistsError:
        info = os.stat(path, follow_symlinks=False)
        if stat.S_ISLNK(info.st_mode):
            raise OSError(errno.ELOOP, "a symbolic link, not a regular file "
                          "(refused: it is not followed)", path) from None
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "%s, not a regular file"
                          % _kind(info.st_mode), path) from None
        return
    # NOTE: os.open applies the umask, which can only remove bits; fchmod
    # makes it 0600 whatever the umask.
    try:
        os.fchmod(fd, PRIVATE_FILE_MODE)
    finally:
        os.close(fd)


def tighten_private_file(path: str) -> None:
    """Remove group and others' access to the file ``path``, if they have
    any (never adds a permission). A file that cannot be changed (another
    owner) is left with a warning; a symbolic link is left alone (chmod
    would change the file it points at)."""
    try:
        info = os.stat(path, follow_symlinks=False)
        if stat.S_ISLNK(info.st_mode):
            return
        mode = stat.S_IMODE(info.st_mode)
        if mode & 0o077:
            os.chmod(path, mode & ~0o077)
            LOG.info("%s: access for group and others removed (mode %03o)",
                     printable(path), mode & ~0o077)
    except OSError as err:
        LOG.warning("%s: cannot make it private: %s", printable(path),
                    err.strerror or err)
