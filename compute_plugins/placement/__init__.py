"""Placement client, report client and embedded Placement."""
