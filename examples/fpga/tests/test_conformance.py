"""The plugin keeps the plugin contract: compute-plugins' conformance kit
runs it, with the ``numa`` plugin it runs after, on the demo's hosts (the
``gpu`` host has two FPGA cards) with its sample requests.

Run with the plugin installed next to compute-plugins: ``pytest tests``.
"""

from compute_plugins_fpga import FPGAPlugin

from compute_plugins.testing import assert_conformant


def test_the_fpga_plugin_keeps_the_plugin_contract():
    report = assert_conformant(FPGAPlugin)
    assert report.result("fit-verify").status == "PASS"
