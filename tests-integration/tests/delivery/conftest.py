"""Fixtures of the durable-delivery suite: a prefix per test, one Redis 7, a database.

Tests isolate by data (a fresh key prefix, a fresh database), never by FLUSHALL. Helpers
live in `delivery_support.py`, which the worker processes import too; this folder is
put on `sys.path` for that.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from redis.cluster import RedisCluster

from agentstate_testkit import ServerPool

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))


@pytest.fixture
def prefix() -> str:
    """A key prefix of this test's own."""
    return f"dlv:{uuid.uuid4().hex[:12]}"


@pytest.fixture(scope="session")
def redis7_url(server_pool: ServerPool) -> str:
    """One plain Redis 7 server: these tests are about processes, not server kinds."""
    return server_pool.get("redis-7")


@pytest.fixture
def any_client(redis_url: str, redis_kind: str) -> Iterator[Any]:
    """A blocking client on every selected kind: a `RedisCluster` on cluster kinds."""
    factory = RedisCluster if redis_kind.endswith("-cluster") else redis.Redis
    c = factory.from_url(redis_url, protocol=2)
    yield c
    c.close()


@pytest.fixture
def pg_url(postgres_url: str) -> Iterator[str]:
    """A database of this test's own on the harness's PostgreSQL."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    yield postgres_url.rsplit("/", 1)[0] + f"/{name}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
