from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import redis
from redis.cluster import RedisCluster

from agentstate_testkit.savers import SyncAsAsync
from langgraph_checkpoint_plainredis import AsyncRedisSaver, RedisSaver


@pytest.fixture
def prefix() -> str:
    """A key prefix of this test's own: tests isolate by data, never by FLUSHALL."""
    return f"test:{uuid.uuid4().hex[:12]}"


@pytest.fixture
def client(redis_url: str, redis_kind: str) -> Iterator[Any]:
    """A plain client for inspecting keys: a `RedisCluster` on cluster kinds."""
    factory = RedisCluster if redis_kind.endswith("-cluster") else redis.Redis
    c = factory.from_url(redis_url, protocol=2)
    yield c
    c.close()


@pytest.fixture
def sync_saver(redis_url: str, prefix: str) -> Iterator[RedisSaver]:
    with RedisSaver(redis_url, prefix=prefix) as saver:
        yield saver


@pytest.fixture
async def async_saver(redis_url: str, prefix: str) -> AsyncIterator[AsyncRedisSaver]:
    async with AsyncRedisSaver(redis_url, prefix=prefix) as saver:
        yield saver


@pytest.fixture(params=["async", "sync"])
async def saver(request: pytest.FixtureRequest, redis_url: str, prefix: str) -> AsyncIterator[Any]:
    """An async-interface saver: AsyncRedisSaver itself, or RedisSaver run in threads."""
    if request.param == "async":
        async with AsyncRedisSaver(redis_url, prefix=prefix) as s:
            yield s
    else:
        with RedisSaver(redis_url, prefix=prefix) as s:
            yield SyncAsAsync(s)
