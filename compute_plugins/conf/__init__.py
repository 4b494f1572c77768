"""oslo.config options, one module per area."""
