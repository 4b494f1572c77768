"""Compute side: claims and assignments."""
