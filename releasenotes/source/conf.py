"""Sphinx configuration of the compute-plugins release notes (reno).

Built by ``tox -e releasenotes``: ``sphinx-build -W -b html
releasenotes/source releasenotes/build/html``; the notes are
``releasenotes/notes/*.yaml`` (``reno new SLUG`` adds one).
"""

project = "compute-plugins release notes"
author = "compute-plugins developers"
copyright = "compute-plugins developers"  # noqa: A001 (Sphinx's name)
extensions = ["reno.sphinxext"]
master_doc = "index"
html_theme = "alabaster"
