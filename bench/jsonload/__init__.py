"""Benchmark of the JSON loader of every input (its depth check)."""
