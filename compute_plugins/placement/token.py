"""The token of ``compute-plugins placement serve``: random, in the state
directory, required of every request.

Placement behind ``auth_strategy=noauth2`` takes the token ``admin`` as the
cloud's administrator, from anyone who can connect: on a machine with other
users, any of them. ``placement serve`` therefore generates a random token on
its first start into ``placement.token`` in its state directory
(``[placement] embedded_state_dir``, default ``$XDG_STATE_HOME/compute-plugins``;
mode 0600, written with ``O_NOFOLLOW`` and an exclusive temporary file),
keeps it across restarts, and answers 401 to a request without it
(:class:`TokenMiddleware`; Placement's version document at ``/`` excepted,
as keystonemiddleware does). The clients of this project that target a
Placement on the loopback address read the token from the same state
directory (:func:`for_url`); any other URL gets ``admin``, the token
of a ``noauth2`` Placement elsewhere. ``placement serve --no-token`` takes
``admin`` again.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import os
import secrets
import stat
import urllib.parse
from collections.abc import Callable, Iterable
from typing import Any, Optional

from compute_plugins.placement.client import NOAUTH_TOKEN
from compute_plugins.util import files

#: The token file's name in the state directory (beside ``placement.sqlite``;
#: every Placement served from that directory shares it).
FILE_NAME = "placement.token"
#: Random bytes of a token (URL-safe base64: 43 characters).
TOKEN_BYTES = 32


def path_for(state_dir: str) -> str:
    """The token file of the Placements served from ``state_dir``."""
    return os.path.join(state_dir, FILE_NAME)


def read(path: str) -> Optional[str]:
    """The token in the file ``path``; None when there is none.

    :raises files.UnreadableFile: it exists but cannot be read, is not a
        regular file (a symbolic link is refused: planted, it would hand
        the server a token someone else knows) or belongs to another user.
    """
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise files.UnreadableFile(path, "cannot read: %s" % (err.strerror or err)) from None
    if stat.S_ISLNK(info.st_mode):
        raise files.UnreadableFile(path, "a symbolic link, not a regular file "
                                   "(refused: it is not followed)")
    if info.st_uid != os.getuid():
        raise files.UnreadableFile(path, "belongs to another user (uid %d): "
                                   "its token is not a secret" % info.st_uid)
    token = files.read_text(path, max_bytes=4096).strip()
    return token or None


def ensure(path: str) -> str:
    """The token in ``path``, generated and written (0600) if it has none.

    :raises OSError: the directory or the file cannot be written.
    :raises files.UnreadableFile: see :func:`read`.
    """
    token = read(path)
    if token is not None:
        files.tighten_private_file(path)
        return token
    token = secrets.token_urlsafe(TOKEN_BYTES)
    directory, name = os.path.split(path)
    files.ensure_private_dir(directory or ".")
    dir_fd = files.open_dir(directory or ".")
    try:
        files.write_atomic(dir_fd, name, token + "\n", mode=files.PRIVATE_FILE_MODE)
    finally:
        os.close(dir_fd)
    return token


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def for_url(url: str, state_dir: str) -> str:
    """The token to send to the Placement at ``url``: the one in
    ``state_dir``'s token file when ``url`` is on the loopback address and
    the file exists, else ``admin``.

    :raises files.UnreadableFile: the token file exists but cannot be read.
    """
    if not _loopback(urllib.parse.urlsplit(url).hostname or ""):
        return NOAUTH_TOKEN
    return read(path_for(state_dir)) or NOAUTH_TOKEN


class TokenMiddleware:
    """A WSGI app that passes on only requests carrying ``token`` (as
    ``X-Auth-Token``), with the token ``noauth2`` takes instead; others get
    401. ``GET /`` (the version document) needs no token."""

    def __init__(self, app: Callable[..., Iterable[bytes]], token: str) -> None:
        self.app = app
        self._token = token.encode("utf-8")

    def __call__(self, environ: dict[str, Any],
                 start_response: Callable[..., Any]) -> Iterable[bytes]:
        given = environ.get("HTTP_X_AUTH_TOKEN", "")
        if environ.get("PATH_INFO", "") in ("", "/"):
            return self.app(environ, start_response)
        # NOTE: WSGI headers are latin-1 strings; compared in constant time.
        if not hmac.compare_digest(given.encode("latin-1", "replace"), self._token):
            body = json.dumps({"errors": [{
                "status": 401, "title": "Unauthorized",
                "detail": "This server requires the token of its state "
                "directory (placement.token) as X-Auth-Token."}]}).encode()
            start_response("401 Unauthorized", [
                ("Content-Type", "application/json"),
                ("Content-Length", str(len(body))),
                ("WWW-Authenticate", 'Keystone uri="local"')])
            return [body]
        environ["HTTP_X_AUTH_TOKEN"] = NOAUTH_TOKEN
        return self.app(environ, start_response)
