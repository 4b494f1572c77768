"""Benchmark of the resource plugins' periodic on a large synthetic host."""
