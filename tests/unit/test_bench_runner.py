"""``python -m bench [NAME ...] [OPTIONS]``, as doc/source/benchmarks.md and ``tox -e
bench`` document it: names choose benchmarks, options go to each one."""

from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)


def test_a_named_benchmark_runs_with_its_options():
    result = bench("discovery", "-n", "1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("== bench.discovery\n")
    assert "median of 1 interleaved samples" in result.stdout


def test_an_unknown_benchmark_is_a_usage_error():
    result = bench("nosuch")
    assert result.returncode == 2
    assert "unknown benchmark(s): nosuch; available: decode, discovery," in result.stderr
