"""Benchmarks: run with ``python -m bench`` (all) or ``python -m bench.<name>``.

Figures are reported as ratios against a baseline measured in the same run,
because these machines are shared and noisy.
"""
