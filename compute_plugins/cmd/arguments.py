"""Argument types the commands share (light: imported when the command
line is built, before any command runs)."""

from __future__ import annotations

import argparse
import math


def seconds(text: str) -> float:
    """An argparse ``type``: a finite number of seconds >= 0 (``inf`` and
    ``nan`` would wait forever or never)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            "invalid value %r: must be a number of seconds" % text) from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(
            "invalid value %r: must be a finite number of seconds >= 0" % text)
    return value
