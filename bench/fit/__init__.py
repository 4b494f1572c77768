"""Benchmark of the NUMA fit against nova's ``numa_fit_instance_to_host``."""
