"""What the plugin SDK is made of: the contract, the topology contract, and
the helpers every plugin shares (names, devices, CPU sets, a bounded
choice search). Plugins import these through :mod:`compute_plugins.api`."""
