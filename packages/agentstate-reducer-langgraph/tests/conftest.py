"""Fixtures of the durable-delivery tests: a prefix per test, clients for real servers."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

from agentstate_testkit import ServerPool


@pytest.fixture
def prefix() -> str:
    """A key prefix of this test's own: tests isolate by data, never by FLUSHALL."""
    return f"dd:{uuid.uuid4().hex[:12]}"


@pytest.fixture
def any_client(redis_url: str, redis_kind: str) -> Iterator[Any]:
    """A blocking client on every selected kind: a `RedisCluster` on cluster kinds."""
    factory = RedisCluster if redis_kind.endswith("-cluster") else redis.Redis
    c = factory.from_url(redis_url, protocol=2)
    yield c
    c.close()


@pytest.fixture(scope="session")
def server_url(server_pool: ServerPool) -> str:
    """One plain server for the tests about behaviour, not server kinds: Redis 5, the
    baseline, which the lowest-versions run (`tests-integration/tests/matrix`) also has."""
    return server_pool.get("redis-5")


@pytest.fixture
def client(server_url: str) -> Iterator[redis.Redis]:
    c = redis.Redis.from_url(server_url, protocol=2)
    yield c
    c.close()
