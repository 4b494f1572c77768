"""Functional tests of the Placement client, report client and commands."""
