"""Benchmark of the command line's start-up (``--version``, ``--help``)."""
