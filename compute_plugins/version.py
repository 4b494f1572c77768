"""The installed package's version (from pbr/package metadata)."""

from __future__ import annotations

from importlib import metadata


def version_string() -> str:
    try:
        return metadata.version("compute-plugins")
    except metadata.PackageNotFoundError:
        return "unknown"
