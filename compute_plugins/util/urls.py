"""Connection URLs a user gives: checked before use, shown without passwords.

``[host_state] connection``, ``[placement] embedded_connection`` (SQLAlchemy
URLs) and ``--placement-url``/``[placement] endpoint_override`` (HTTP) are
checked when the command starts, so that a typo is one line naming the
option, the value and the rule (exit 2) instead of a driver's exception in
the middle of the command. Messages show a URL through :func:`masked`.

Light to import: SQLAlchemy is imported by :func:`check_database_url` only.
"""

from __future__ import annotations

import re
import urllib.parse

#: The databases the host-state store and the embedded Placement run on.
DATABASE_BACKENDS = ("sqlite", "postgresql", "mysql", "mariadb")

_USERINFO_PASSWORD = re.compile(r"(://[^:/@?#]*:)[^@/?#]*@")
_QUERY_PASSWORD = re.compile(r"([?&][^=&#]*passw[^=&#]*=)[^&#]*", re.IGNORECASE)


def masked(url: str) -> str:
    """``url`` with any password replaced by ``***``: the one after the user
    name and any ``?password=``-like query value. Works on text that is not
    a valid URL too (it is what an error message shows)."""
    url = _USERINFO_PASSWORD.sub(r"\1***@", url)
    return _QUERY_PASSWORD.sub(r"\1***", url)


def check_database_url(url: str) -> None:
    """Refuse ``url`` unless it is an SQLAlchemy URL of a supported
    database whose driver is installed.

    :raises ValueError: says which rule, with the URL masked.
    """
    import sqlalchemy as sa
    from sqlalchemy.exc import ArgumentError, NoSuchModuleError

    try:
        parsed = sa.engine.make_url(url)
    except (ArgumentError, ValueError):
        # NOTE: ValueError: a port that is not a number.
        raise ValueError(
            "%r is not an SQLAlchemy URL (e.g. sqlite:////var/lib/x.sqlite, "
            "postgresql+psycopg2://user:password@host/db, "
            "mysql+pymysql://user:password@host/db)" % masked(url)) from None
    backend = parsed.get_backend_name()
    if backend not in DATABASE_BACKENDS:
        raise ValueError("%r: expected an sqlite, postgresql or mysql URL, "
                         "not %s" % (masked(url), backend))
    try:
        dialect = parsed.get_dialect()
    except NoSuchModuleError:
        raise ValueError("%r: unknown driver %r for %s" % (
            masked(url), parsed.get_driver_name(), backend)) from None
    try:
        dialect.import_dbapi()
    except ImportError as err:
        raise ValueError("%r: the driver %s is not installed (%s)" % (
            masked(url), parsed.get_driver_name(), err)) from None


def check_http_url(url: str) -> str:
    """``url`` when it is an ``http://`` or ``https://`` URL with a host
    (and a numeric port, if any).

    :raises ValueError: says the rule, with the URL masked.
    """
    rule = ("%r: expected an http:// or https:// URL with a host, e.g. "
            "http://127.0.0.1:8778" % masked(url))
    try:
        parts = urllib.parse.urlsplit(url)
        _ = parts.port  # ValueError: not a number, or out of range
    except ValueError:
        raise ValueError(rule) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(rule)
    return url
