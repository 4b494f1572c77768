"""A long soak of a small cloud with faults (``python -m bench soak``; see
``__main__``)."""
