"""``python -m bench.scale``: N simulated hosts, real agents' claim path, real Placement and store."""
