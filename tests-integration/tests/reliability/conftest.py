"""Fixtures of the reliability suite: a prefix per test, a plain client, the support module.

Tests isolate by data (a fresh key prefix each), never by FLUSHALL. Helpers live in
`reliability_support.py`, which the worker processes import too; this folder is put on
`sys.path` for that.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))


@pytest.fixture
def prefix() -> str:
    """A key prefix of this test's own."""
    return f"rel:{uuid.uuid4().hex[:12]}"


@pytest.fixture
def client(redis_url: str) -> Iterator[redis.Redis]:
    c = redis.Redis.from_url(redis_url, protocol=2)
    yield c
    c.close()
