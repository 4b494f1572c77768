"""Placement calls and time per periodic: this report client and nova's.

Run ``python -m bench.report``; see ``bench/report/__main__.py``.
"""
