"""Where the benchmarks write: `bench/results/`, or `$BENCH_RESULTS` when it is set.

The smoke test of `make bench` sets it to a temporary folder, so a test run never
replaces the results of a real one.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["RESULTS"]

RESULTS = Path(os.environ.get("BENCH_RESULTS") or Path(__file__).resolve().parent / "results")
