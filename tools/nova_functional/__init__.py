"""nova 34's own functional libvirt tests, stock and with the plugins.

``python -m tools.nova_functional run --mode stock|plugins --out DIR FILE...``
runs each test file of ``nova/tests/functional/libvirt/`` (from nova's
wheel, in the separate ``.venv-nova``) in its own process and writes
``DIR/MODE/FILE.json`` (every test's outcome, the seconds it took, and in
the plugins run every boot's decision and guest XML);
``python -m tools.nova_functional report DIR`` prints one line per file,
``FILE: stock PASSED/RUN, plugins PASSED/RUN``, and
``decisions matched M/N boots``. See doc/source/nova-compat.md (nova's
own functional tests) for what the plugins run substitutes and why.
"""
