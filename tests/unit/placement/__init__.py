"""Unit tests of the Placement client pieces that need no Placement."""
