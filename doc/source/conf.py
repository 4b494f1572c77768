"""Sphinx configuration of the compute-plugins documentation.

Built by ``tox -e docs`` (or ``make docs``):
``sphinx-build -W -b html doc/source doc/build/html``. The pages are Markdown
(MyST) and reStructuredText; the configuration reference is generated from
the oslo.config options, the CLI reference from the argument parsers
(``_exts/cliref.py``), so neither can drift from the code.
"""

import os
import sys

sys.path.insert(0, os.path.abspath("_exts"))

project = "compute-plugins"
author = "compute-plugins developers"
copyright = "compute-plugins developers"  # noqa: A001 (Sphinx's name)

extensions = [
    "myst_parser",
    "oslo_config.sphinxext",
    "oslo_config.sphinxconfiggen",
    "cliref",
]

# oslo_config.sphinxconfiggen: the sample config, from the generator file
# that `make genconfig` uses, written next to the pages and linked from them.
config_generator_config_file = [
    (
        "../../etc/compute-plugins/compute-plugins-config-generator.conf",
        "_static/compute-plugins",
    ),
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
master_doc = "index"
exclude_patterns = ["_build"]
# Anchors for the Markdown headings, so pages link to each other's sections.
myst_heading_anchors = 4
myst_enable_extensions = ["deflist"]

html_theme = "alabaster"
html_static_path = ["_static"]
html_theme_options = {"description": "Plugin-based, Nova-compatible compute host resources"}
