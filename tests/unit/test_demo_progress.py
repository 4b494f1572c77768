"""The demo's progress on a terminal: a spinner line that never wraps.

A real pseudo-terminal (``os.openpty``) 40 columns wide: each redraw is
``\\r`` and one line, which must be shorter than the terminal, else it
wraps and ``\\r`` no longer returns to its start (the lines pile up).
"""

from __future__ import annotations

import fcntl
import os
import struct
import termios
import time

from compute_plugins.cmd.demo import Progress


def test_the_spinner_fits_a_narrow_terminal_and_is_wiped_at_the_end():
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 40, 0, 0))
    attrs = termios.tcgetattr(slave)
    attrs[1] &= ~termios.OPOST  # NOTE: no "\n" -> "\r\n" rewriting
    termios.tcsetattr(slave, termios.TCSANOW, attrs)
    stream = os.fdopen(slave, "w")
    try:
        progress = Progress(stream)
        assert progress.tty
        progress("host demo-numa8-01: first periodic (discover, provider tree, "
                 "Placement, host state)")
        time.sleep(0.35)
        progress.close()
        os.set_blocking(master, False)
        chunks = []
        while True:
            try:
                chunk = os.read(master, 65536)
            except BlockingIOError:
                break
            if not chunk:
                break
            chunks.append(chunk)
        written = b"".join(chunks).decode()
    finally:
        stream.close()
        os.close(master)
    frames = written.split("\r")
    assert any(frame.startswith(("| host", "/ host", "- host", "\\ host"))
               for frame in frames), written
    assert all(len(frame) <= 39 for frame in frames), [len(f) for f in frames]
    assert written.endswith("\r" + " " * 39 + "\r")
