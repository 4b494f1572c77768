"""The `compute-plugins` command line."""
