"""``python -m bench.scale``: N simulated hosts (the real agents' claim path,
real Placement and store) and K schedulers."""
